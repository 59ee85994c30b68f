//! The native stream tracker: `turnaudit.stream_tracking.StreamTracker`'s state and
//! per-message step, message for message what the Python reference
//! (`ReferenceStreamTracker`) decides, in compact native tables.
//!
//! The Python module owns the meaning (the docstrings there); this file only
//! mirrors it. What differs is the representation: chain hashes as 32 raw
//! bytes, event ids and stream ids as Rust strings, an LRU of streams, and,
//! for a tracker with a store of forgotten ids, a Bloom filter of the ids it
//! handed to that store, so a new id (most of them) is not asked for there.
//!
//! Counters live outside the lock (atomics): a metrics scrape on another
//! thread reads them while a message is being placed. The tables sit behind
//! a mutex taken with `try_lock`: a second thread using the tracker at the
//! same time (possible only through a callback into Python) gets an error,
//! never a deadlock.

mod chain;
mod checkpoint;
mod codec;
mod event;
pub(crate) mod follow;
mod methods;
mod pickle;
mod place;
mod state;
mod stream;
mod stream_spill;
mod tracker;

pub(crate) use chain::{chain_digest, chain_hash_hex};
pub(crate) use stream::Prev;
pub(crate) use tracker::{NativeStreamTracker, Placed, NEW};

#[cfg(test)]
mod tests;
