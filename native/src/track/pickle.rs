//! A tracker pickled: its tables as one bytes object (`StateWriter`'s format), not
//! Python objects by the million (verify's jobs send their trackers back).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lru::LruCache;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::chain::SEEN_DIGITS;
use super::codec::{StateReader, StateWriter};
use super::state::{SeenEntry, FILTER_BITS};
use super::stream::Stream;
use super::tracker::NativeStreamTracker;
use crate::bloom::BloomFilter;
use crate::hashing::{FastMap, Hasher};

impl NativeStreamTracker {
    /// Everything placed so far, as plain Python values (pickle).
    /// The tables as bytes (`StateWriter`'s format), for pickling: one bytes object, not
    /// Python objects by the million (verify's jobs send their trackers back).
    pub(crate) fn state_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let st = self.lock()?;
        if st.spill.as_ref().is_some_and(|s| s.len() > 0) {
            return Err(PyValueError::new_err("a tracker with spilled streams hands them over by export_streams"));
        }
        let mut w = StateWriter(Vec::new());
        w.u64(st.streams.len() as u64);
        for (k, s) in st.streams.iter().rev() {
            w.text(&k.0);
            w.text(&k.1);
            s.write(&mut w);
        }
        w.u64(st.order.len() as u64);
        for id in &st.order {
            let e = &st.seen[id];
            w.text(id);
            w.0.extend_from_slice(&e.hash16);
            w.opt(e.partition);
            w.opt(e.offset);
        }
        w.u64(st.first_offset.len() as u64);
        for (p, o) in &st.first_offset {
            w.0.extend_from_slice(&p.to_le_bytes());
            w.0.extend_from_slice(&o.to_le_bytes());
        }
        let words: &[u64] = st.filter.as_ref().map_or(&[], |f| &f.words);
        w.u64(words.len() as u64);
        words.iter().for_each(|word| w.0.extend_from_slice(&word.to_le_bytes()));
        for counter in [&self.currently_missing, &self.new_turns, &self.forgotten_event_ids] {
            w.0.extend_from_slice(&counter.load(Ordering::Relaxed).to_le_bytes());
        }
        Ok(PyBytes::new(py, &w.0))
    }

    pub(crate) fn restore_bytes(&self, state: &[u8]) -> PyResult<()> {
        let mut r = StateReader { buf: state, pos: 0 };
        let mut st = self.lock()?;
        st.streams = LruCache::unbounded_with_hasher(Hasher::default());
        for _ in 0..r.u64()? {
            let session = r.text()?;
            let producer = r.text()?;
            let stream = Stream::read(&mut r)?;
            st.streams.push((session, producer), stream);
        }
        st.seen = FastMap::default();
        st.order = VecDeque::new();
        for _ in 0..r.u64()? {
            let id: Arc<str> = Arc::from(r.text()?);
            let hash16: [u8; SEEN_DIGITS] = r.take(SEEN_DIGITS)?.try_into().expect("16 bytes");
            let partition = r.opt()?;
            let offset = r.opt()?;
            st.order.push_back(id.clone());
            st.seen.insert(id, SeenEntry { hash16, partition, offset });
        }
        st.first_offset = FastMap::default();
        for _ in 0..r.u64()? {
            let p = r.i64()?;
            let o = r.i64()?;
            st.first_offset.insert(p, o);
        }
        let words = r.u64()?;
        st.filter = if words == 0 {
            None
        } else {
            let mut restored = BloomFilter::with_bits(FILTER_BITS);
            if words != restored.words.len() as u64 {
                return Err(PyValueError::new_err("a filter of the tracker's size"));
            }
            for word in restored.words.iter_mut() {
                *word = r.i64()? as u64;
            }
            Some(restored)
        };
        let (missing, turns, forgotten) = (r.i64()?, r.i64()?, r.i64()?);
        if r.pos != state.len() {
            return Err(PyValueError::new_err("bytes after a tracker's state"));
        }
        self.currently_missing.store(missing, Ordering::Relaxed);
        self.new_turns.store(turns, Ordering::Relaxed);
        self.forgotten_event_ids.store(forgotten, Ordering::Relaxed);
        Ok(())
    }
}
