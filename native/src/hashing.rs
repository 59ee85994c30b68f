//! The hasher of the tables a placement touches (event ids, streams, dirty streams, the
//! step's tallies): foldhash, seeded at random per process. std's SipHash took about a
//! tenth of a placement; the keys are producer-chosen strings, so the seed stays random.

use std::collections::{HashMap, HashSet};

pub(crate) type Hasher = foldhash::fast::RandomState;
pub(crate) type FastMap<K, V> = HashMap<K, V, Hasher>;
pub(crate) type FastSet<K> = HashSet<K, Hasher>;
