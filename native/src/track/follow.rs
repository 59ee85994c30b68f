//! `verify --follow`'s hold on the shared stream tracker: a partition taken over, one
//! stream's state checkpointed to the follower's state topic and restored from it, a
//! closed stream dropped. The stream's state is the tracker's own format (the spill's
//! rows and the pickled tracker use it too): one place for what a stream is.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::state::State;
use super::stream::{Positions, Stream, StreamKey};
use super::tracker::NativeStreamTracker;
use crate::hashing::FastSet;

/// `tracker.start_partition`: a partition taken over at `first_offset`, its log start.
#[pyfunction]
pub(crate) fn start_partition(
    tracker: &Bound<'_, NativeStreamTracker>,
    partition: i64,
    log_start: i64,
    first_offset: i64,
) -> PyResult<()> {
    tracker.get().start_partition(partition, log_start, first_offset)
}

/// One stream's partition and its state as bytes, or None when the tracker holds no
/// such stream.
#[pyfunction]
pub(crate) fn stream_state<'py>(
    py: Python<'py>,
    tracker: &Bound<'py, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<Option<(Option<i64>, Bound<'py, PyBytes>)>> {
    let key = (session_id.to_owned(), producer_id.to_owned());
    Ok(tracker.get().stream_bytes(&key)?.map(|(partition, bytes)| (partition, PyBytes::new(py, &bytes))))
}

/// One stream's partition, or None when the tracker holds no such stream or it was read
/// from no partition: `stream_state`'s first item without encoding the state.
#[pyfunction]
pub(crate) fn stream_partition(
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<Option<i64>> {
    Ok(tracker.get().lock()?.peek_with(session_id, producer_id, |s| s.partition)?.flatten())
}

/// One stream's (partition, highest position seen) in one lookup, or None when the
/// tracker holds no such stream: `stream_partition` and the tracker's `last_position`
/// (None: no position past -1) together, what the heads judge asks of each announcement.
#[pyfunction]
pub(crate) fn stream_head(
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<Option<(Option<i64>, Option<i128>)>> {
    tracker.get().lock()?.peek_with(session_id, producer_id, |s| (s.partition, s.last_position()))
}

/// A stream restored from `stream_state`'s bytes (in place of any copy held).
#[pyfunction]
pub(crate) fn restore_stream(
    py: Python<'_>,
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
    state: &[u8],
) -> PyResult<()> {
    tracker.get().restore_stream(py, (session_id.to_owned(), producer_id.to_owned()), state)
}

/// The stream forgotten wherever it is held; whether it was.
#[pyfunction]
pub(crate) fn drop_stream(
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<bool> {
    tracker.get().drop_stream(&(session_id.to_owned(), producer_id.to_owned()))
}

/// The tracker remembers, from now on, each stream it places a turn into.
#[pyfunction]
pub(crate) fn track_dirty(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
    tracker.get().track_dirty()
}

/// The streams placed into since the last call (session, producer), forgotten here.
#[pyfunction]
pub(crate) fn take_dirty(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<Vec<(String, String)>> {
    tracker.get().take_dirty()
}

impl NativeStreamTracker {
    /// Another tracker's stream `t` merged into this one's (brought into memory); the
    /// missing positions it adds.
    pub(crate) fn merge_stream(&self, st: &mut State, k: &StreamKey, t: &Stream) -> PyResult<i64> {
        if !st.revive(k)? {
            // Another tracker's: not placed into here.
            st.streams.push(k.clone(), Stream { dirty: false, ..t.clone() });
            return Ok(t.missing.len() as i64);
        }
        let mine = st.streams.get_mut(k).expect("revived above");
        let mut missing: HashSet<i128> =
            mine.missing.iter().copied().filter(|p| *p >= t.next || t.missing.contains(p)).collect();
        missing.extend(t.missing.iter().copied().filter(|p| *p >= mine.next || mine.missing.contains(p)));
        let added = missing.len() as i64 - mine.missing.len() as i64;
        mine.missing = Positions::of(missing);
        mine.untracked_missing += t.untracked_missing;
        let (high, low) = if mine.next >= t.next { (mine.clone(), t.clone()) } else { (t.clone(), mine.clone()) };
        let mut own = low.own;
        own.extend(high.own);
        let mut claimed = low.claimed;
        claimed.extend(high.claimed);
        mine.own = own;
        mine.claimed = claimed;
        mine.next = high.next;
        Ok(added)
    }

    /// A partition taken over: where reading it begins and where its log starts (a stream
    /// first seen past position 0 opens a gap at its start only when the two agree).
    pub(crate) fn start_partition(&self, partition: i64, log_start: i64, first_offset: i64) -> PyResult<()> {
        let mut st = self.lock()?;
        st.log_start.insert(partition, log_start);
        st.first_offset.insert(partition, first_offset);
        Ok(())
    }

    /// From now on, remember the streams placed into until `take_dirty` (the follower
    /// checkpoints those).
    pub(crate) fn track_dirty(&self) -> PyResult<()> {
        self.lock()?.dirty.get_or_insert_with(FastSet::default);
        Ok(())
    }

    /// The streams placed into since the last call (none unless `track_dirty` was asked).
    pub(crate) fn take_dirty(&self) -> PyResult<Vec<StreamKey>> {
        Ok(self.lock()?.take_dirty())
    }

    /// One stream's partition and state in the tracker's own format, wherever it is
    /// (memory, the pending batch or the spill file), left there; None when not held.
    pub(crate) fn stream_bytes(&self, key: &StreamKey) -> PyResult<Option<(Option<i64>, Vec<u8>)>> {
        let st = self.lock()?;
        Ok(st.peek(key)?.map(|stream| {
            let mut out = Vec::new();
            stream.write_into(&mut out);
            (stream.partition, out)
        }))
    }

    /// A stream as `stream_bytes` gave it, in place of any copy held, brought into memory
    /// (the least recently seen pushed out over the bound).
    pub(crate) fn restore_stream(&self, py: Python<'_>, key: StreamKey, bytes: &[u8]) -> PyResult<()> {
        let stream = Stream::from_bytes(bytes)?;
        let mut st = self.lock()?;
        self.take_out(&mut st, &key)?;
        self.currently_missing.fetch_add(stream.missing.len() as i64, Ordering::Relaxed);
        st.streams.push(key, stream);
        self.evict_over_bound(py, &mut st)
    }

    /// The stream forgotten wherever it is (its missing positions no longer counted);
    /// whether it was held.
    pub(crate) fn drop_stream(&self, key: &StreamKey) -> PyResult<bool> {
        let mut st = self.lock()?;
        self.take_out(&mut st, key)
    }

    pub(crate) fn take_out(&self, st: &mut State, key: &StreamKey) -> PyResult<bool> {
        let held = match st.streams.pop(key) {
            Some(s) => {
                st.unload(key, &s);
                Some(s)
            }
            None => match st.spill.as_mut() {
                Some(spill) => spill.take(key)?,
                None => None,
            },
        };
        if let Some(s) = &held {
            self.currently_missing.fetch_sub(s.missing.len() as i64, Ordering::Relaxed);
        }
        Ok(held.is_some())
    }

    /// The least recently seen streams past `max_streams` spilled (still counted) or,
    /// without a spill, forgotten.
    pub(crate) fn evict_over_bound(&self, py: Python<'_>, st: &mut State) -> PyResult<()> {
        while st.streams.len() > self.bounds.max_streams {
            let Some((key, stream)) = st.streams.pop_lru() else { break };
            st.unload(&key, &stream);
            match st.spill.as_mut() {
                Some(spill) => spill.put(py, key, stream)?,
                None => {
                    self.currently_missing.fetch_sub(stream.missing.len() as i64, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}
