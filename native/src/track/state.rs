//! The tracker's tables behind its lock: event ids with where each was read, the streams
//! (in memory, an LRU, and in the spill), first offsets and log starts per partition.

use std::collections::VecDeque;
use std::sync::Arc;

use lru::LruCache;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::chain::SEEN_DIGITS;
use super::stream::{Stream, StreamKey, StreamKeyView};
use super::stream_spill::StreamSpill;
use crate::bloom::BloomFilter;
use crate::hashing::{FastMap, FastSet, Hasher};
use crate::spill::Seen;

/// The bits of the filter of ids handed to a Python store of forgotten ids.
pub(crate) const FILTER_BITS: u64 = 1 << 28;

#[derive(Clone)]
pub(crate) struct SeenEntry {
    pub(crate) hash16: [u8; SEEN_DIGITS],
    pub(crate) partition: Option<i64>,
    pub(crate) offset: Option<i64>,
}

pub(crate) struct State {
    // One allocation per id, shared by the table and the arrival order.
    pub(crate) seen: FastMap<Arc<str>, SeenEntry>,
    pub(crate) order: VecDeque<Arc<str>>,
    pub(crate) streams: LruCache<StreamKey, Stream, Hasher>,
    pub(crate) first_offset: FastMap<i64, i64>,
    // Log starts learnt when a partition is taken over (the follower's), over `Bounds`'.
    pub(crate) log_start: FastMap<i64, i64>,
    // The streams placed into since last taken (the follower's checkpoint), when asked for:
    // those that left memory since; the ones in memory carry `Stream::dirty` instead.
    pub(crate) dirty: Option<FastSet<StreamKey>>,
    pub(crate) filter: Option<BloomFilter>, // made when the first id is handed to the forgotten store
    // Where streams pushed out by `max_streams` go (verify's); none: they are forgotten.
    pub(crate) spill: Option<StreamSpill>,
}

impl State {
    /// The stream, brought back into memory from the spill if it is there; whether it
    /// is in memory now.
    pub(crate) fn revive(&mut self, key: &StreamKey) -> PyResult<bool> {
        if self.streams.contains(key) {
            return Ok(true);
        }
        let Some(spill) = self.spill.as_mut() else { return Ok(false) };
        match spill.take(key)? {
            Some(stream) => {
                self.streams.push(key.clone(), stream);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The stream wherever it is, left there (a copy when spilled).
    pub(crate) fn peek(&self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.streams.peek(key) {
            return Ok(Some(s.clone()));
        }
        match &self.spill {
            Some(spill) => spill.peek(key),
            None => Ok(None),
        }
    }

    /// `f` of the stream, left where it is, or None when not held: no copy of the stream,
    /// and the key allocated only to ask the spill's file (the heads judge asks a stream's
    /// partition and last position per announcement; most are in memory).
    pub(crate) fn peek_with<R>(&self, session: &str, producer: &str, f: impl FnOnce(&Stream) -> R) -> PyResult<Option<R>> {
        let view: &dyn StreamKeyView = &(session, producer);
        if let Some(s) = self.streams.peek(view) {
            return Ok(Some(f(s)));
        }
        match &self.spill {
            Some(spill) => spill.peek_with(view, f),
            None => Ok(None),
        }
    }

    /// Every stream, in memory then spilled (or only those with missing positions).
    pub(crate) fn each_stream(&self, gappy_only: bool, f: &mut dyn FnMut(&StreamKey, &Stream) -> PyResult<()>) -> PyResult<()> {
        for (k, s) in self.streams.iter().rev() {
            if !gappy_only || s.is_gappy() {
                f(k, s)?;
            }
        }
        match &self.spill {
            Some(spill) => spill.each(gappy_only, f),
            None => Ok(()),
        }
    }

    /// A stream leaving memory (spilled, dropped, handed over): placed into since the last
    /// checkpoint, its key is kept with the dirty ones.
    pub(crate) fn unload(&mut self, key: &StreamKey, stream: &Stream) {
        if stream.dirty {
            if let Some(dirty) = self.dirty.as_mut() {
                dirty.insert(key.clone());
            }
        }
    }

    /// The streams placed into since the last call, taken (the flags cleared, the set
    /// emptied); none unless dirty streams are tracked.
    pub(crate) fn take_dirty(&mut self) -> Vec<StreamKey> {
        let Some(dirty) = self.dirty.as_mut() else { return Vec::new() };
        let mut out: Vec<StreamKey> = dirty.drain().collect();
        for (key, stream) in self.streams.iter_mut() {
            if std::mem::take(&mut stream.dirty) {
                out.push(key.clone());
            }
        }
        out
    }

    pub(crate) fn streams_held(&self) -> usize {
        self.streams.len() + self.spill.as_ref().map_or(0, |s| s.len() as usize)
    }
}

impl State {
    pub(crate) fn filter_add(&mut self, text: &str) {
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(FILTER_BITS)).insert(text);
    }

    pub(crate) fn filter_might_hold(&self, text: &str) -> bool {
        self.filter.as_ref().is_some_and(|f| f.holds(text))
    }
}

/// A recalled id's entry: a stored hash of another length than 16 hex digits never
/// equals one.
pub(crate) fn entry_of(hash: &str, partition: Option<i64>, offset: Option<i64>) -> SeenEntry {
    let bytes = hash.as_bytes();
    let mut hash16 = [b'?'; SEEN_DIGITS];
    if bytes.len() == SEEN_DIGITS {
        hash16.copy_from_slice(bytes);
    }
    SeenEntry { hash16, partition, offset }
}

pub(crate) fn spilled_seen(seen: &SeenEntry) -> Seen {
    let hash = std::str::from_utf8(&seen.hash16).expect("hex digits").to_owned();
    Seen { hash, partition: seen.partition, offset: seen.offset }
}

pub(crate) fn seen_tuple<'py>(py: Python<'py>, seen: &SeenEntry) -> PyResult<Bound<'py, PyTuple>> {
    let hash = std::str::from_utf8(&seen.hash16).expect("hex digits");
    (hash, seen.partition, seen.offset).into_pyobject(py)
}
