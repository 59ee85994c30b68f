//! `NativeStreamTracker`'s Python methods: construction, `observe`, and the readings
//! (missing positions, heads, remembered ids), hand-overs between trackers.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use lru::LruCache;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::chain::{fingerprint_arg, hex_of, Hash32};
use super::checkpoint::CheckpointOut;
use super::state::{seen_tuple, State};
use super::event::int_obj;
use super::stream::{Stream, StreamKey};
use super::stream_spill::StreamSpill;
use super::tracker::{stream_tuple, Bounds, NativeStreamTracker};
use crate::hashing::{FastMap, FastSet, Hasher};

#[pymethods]
impl NativeStreamTracker {
    #[new]
    #[pyo3(signature = (outcomes, result_type, *, max_event_ids = 500_000, max_streams = 100_000,
                        max_missing = 1_000, log_start_offsets = None, start_gaps = true,
                        forgotten = None, forget_batch = 1, stream_spill = None,
                        stream_batch = 4096))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        outcomes: Vec<Py<PyAny>>,
        result_type: Py<PyAny>,
        max_event_ids: i128,
        max_streams: i128,
        max_missing: i128,
        log_start_offsets: Option<HashMap<i64, i64>>,
        start_gaps: bool,
        forgotten: Option<Py<PyAny>>,
        forget_batch: i128,
        stream_spill: Option<Py<PyAny>>,
        stream_batch: i128,
    ) -> PyResult<Self> {
        if forget_batch < 1 {
            return Err(PyValueError::new_err(format!("ids are forgotten 1 or more at a time, not {forget_batch}")));
        }
        if outcomes.len() != 6 {
            return Err(PyValueError::new_err("six outcomes: new, late, redelivery, duplicate, content changed, position reused"));
        }
        let clamp = |v: i128| v.clamp(0, usize::MAX as i128) as usize;
        let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?.unbind();
        Ok(NativeStreamTracker {
            state: Mutex::new(State {
                seen: FastMap::default(),
                order: VecDeque::new(),
                streams: LruCache::unbounded_with_hasher(Hasher::default()),
                first_offset: FastMap::default(),
                log_start: FastMap::default(),
                dirty: None,
                filter: None,
                spill: stream_spill.filter(|f| !f.is_none(py)).map(|f| StreamSpill::new(f, clamp(stream_batch))),
            }),
            bounds: Bounds {
                max_event_ids: clamp(max_event_ids),
                max_streams: clamp(max_streams),
                max_missing,
                log_start: log_start_offsets.unwrap_or_default(),
                start_gaps,
                forget_batch: clamp(forget_batch),
            },
            forgotten: forgotten.filter(|f| !f.is_none(py)),
            outcomes,
            result_type,
            tuple_new,
            currently_missing: AtomicI64::new(0),
            new_turns: AtomicI64::new(0),
            forgotten_event_ids: AtomicI64::new(0),
        })
    }

    /// Places one consumed event in its stream; see `StreamTracker.observe`.
    #[pyo3(signature = (event, value, *, partition = None, offset = None, fingerprint = None))]
    fn observe(
        &self,
        py: Python<'_>,
        event: &Bound<'_, PyAny>,
        value: &[u8],
        partition: Option<i64>,
        offset: Option<i64>,
        fingerprint: Option<&[u8]>,
    ) -> PyResult<Py<PyAny>> {
        let fingerprint = fingerprint_arg(fingerprint)?;
        let (stream, sequence, placed) =
            self.place_event(py, event, value, partition, offset, fingerprint.as_ref())?;
        self.result(py, &stream, sequence, placed)
    }

    /// Forgets the streams read from these partitions (another consumer reads them now).
    fn forget_partitions(&self, partitions: HashSet<i64>) -> PyResult<()> {
        let mut st = self.lock()?;
        let gone: Vec<StreamKey> = st
            .streams
            .iter()
            .filter(|(_, s)| s.partition.is_some_and(|p| partitions.contains(&p)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some(s) = st.streams.pop(&k) {
                st.unload(&k, &s);
                self.currently_missing.fetch_sub(s.missing.len() as i64, Ordering::Relaxed);
            }
        }
        if let Some(spill) = st.spill.as_mut() {
            let dropped = spill.forget_partitions(&partitions)?;
            self.currently_missing.fetch_sub(dropped, Ordering::Relaxed);
        }
        for p in partitions {
            st.first_offset.remove(&p);
        }
        Ok(())
    }

    /// Positions still missing, per stream (tracked ones), sorted.
    fn missing<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(true, &mut |k, s| {
            if !s.missing.is_empty() {
                let mut positions: Vec<i128> = s.missing.iter().copied().collect();
                positions.sort_unstable();
                out.set_item(stream_tuple(py, k)?, PyList::new(py, positions)?)?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn untracked_missing(&self) -> PyResult<i128> {
        let st = self.lock()?;
        let mut total = 0;
        st.each_stream(true, &mut |_, s| {
            total += s.untracked_missing;
            Ok(())
        })?;
        Ok(total)
    }

    /// Each stream's highest position and its chain hash (where still kept).
    fn heads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(false, &mut |k, s| {
            if let Some((position, h)) = s.head() {
                out.set_item(stream_tuple(py, k)?, (position, hex_of(h)))?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// How many streams are held: (chained, v1/v2 legacy), counted natively.
    fn stream_counts(&self) -> PyResult<(usize, usize)> {
        let st = self.lock()?;
        let legacy = st.streams.iter().filter(|(k, _)| k.1.is_empty()).count();
        let (spilled_chained, spilled_legacy) = st.spill.as_ref().map_or((0, 0), StreamSpill::counts);
        Ok((st.streams.len() - legacy + spilled_chained as usize, legacy + spilled_legacy as usize))
    }

    /// One stream's entry of `heads()` (its highest position and that position's chain
    /// hash), or None: what a check of a few anchored streams needs, without the table.
    fn head(&self, session_id: &str, producer_id: &str) -> PyResult<Option<(i128, String)>> {
        Ok(self.lock()?.peek_with(session_id, producer_id, |s| s.head().map(|(p, h)| (p, hex_of(h))))?.flatten())
    }

    /// The chained streams' heads (v1/v2 legacy streams left out) as
    /// `(session_id, producer_id, position, hash)`, sorted by stream: what `heads()`
    /// gives, without the table built first. A page of up to `limit` after the stream
    /// `after` (all of them from the first by default): a report of millions of streams
    /// goes through them a page at a time.
    #[pyo3(signature = (after = None, limit = None))]
    fn chained_heads<'py>(
        &self,
        py: Python<'py>,
        after: Option<(String, String)>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let st = self.lock()?;
        let limit = limit.unwrap_or(usize::MAX);
        let mut held: Vec<(&StreamKey, i128, &Hash32)> = st
            .streams
            .iter()
            .filter(|(k, _)| !k.1.is_empty() && after.as_ref().is_none_or(|a| *k > a))
            .filter_map(|(k, s)| s.head().map(|(p, h)| (k, p, h)))
            .collect();
        if held.len() > limit {
            // Only the page's first `limit` of memory's streams can be on it.
            held.select_nth_unstable_by(limit, |a, b| a.0.cmp(b.0));
            held.truncate(limit);
        }
        let mut heads: Vec<(StreamKey, i128, Hash32)> = held.into_iter().map(|(k, p, h)| (k.clone(), p, *h)).collect();
        if let Some(spill) = &st.spill {
            for row in spill.chained_page(after.as_ref(), limit)? {
                if let Some((p, h)) = row.stream.head() {
                    heads.push((row.key, p, *h));
                }
            }
        }
        // UTF-8 byte order is code point order: the order Python's sort gives the keys.
        heads.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        heads.truncate(limit);
        let out = PyList::empty(py);
        for (k, position, h) in heads {
            out.append((k.0.as_str(), k.1.as_str(), int_obj(py, position)?, hex_of(&h)))?;
        }
        Ok(out)
    }

    /// One stream's highest position seen (None: not seen, or not past position -1).
    fn last_position(&self, session_id: &str, producer_id: &str) -> PyResult<Option<i128>> {
        Ok(self.lock()?.peek_with(session_id, producer_id, Stream::last_position)?.flatten())
    }

    /// Each stream's highest position seen.
    fn last_positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(false, &mut |k, s| {
            if let Some(last) = s.last_position() {
                out.set_item(stream_tuple(py, k)?, last)?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The streams held in memory (the rest spilled): at most `max_streams`.
    fn streams_in_memory(&self) -> PyResult<usize> {
        Ok(self.lock()?.streams.len())
    }

    /// Every stream held, the spilled ones too, into an SQLite file at `destination`
    /// for another process's `absorb_streams` (none held here after). False, with no
    /// file made, when there was none.
    fn export_streams(&self, py: Python<'_>, destination: PathBuf) -> PyResult<bool> {
        let mut st = self.lock()?;
        let Some(mut spill) = st.spill.take() else {
            return Err(PyValueError::new_err("only a tracker with a stream spill exports its streams"));
        };
        let result = (|| {
            while let Some((key, stream)) = st.streams.pop_lru() {
                st.unload(&key, &stream);
                spill.put(py, key, stream)?;
            }
            spill.export(py, &destination)
        })();
        st.spill = Some(spill);
        result
    }

    /// The streams of a file `export_streams` wrote (another tracker's, other
    /// partitions), each merged in as `absorb` merges a stream both hold.
    fn absorb_streams(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let mut st = self.lock()?;
        let st = &mut *st;
        let Some(spill) = st.spill.as_mut() else {
            return Err(PyValueError::new_err("only a tracker with a stream spill absorbs exported streams"));
        };
        // Everything of this tracker's on disk first, so SQLite finds which streams both
        // hold and copies the others file to file.
        while let Some((key, stream)) = st.streams.pop_lru() {
            if stream.dirty {
                if let Some(dirty) = st.dirty.as_mut() {
                    dirty.insert(key.clone());
                }
            }
            spill.put(py, key, stream)?;
        }
        let (missing, both) = spill.absorb_file(py, &path)?;
        self.currently_missing.fetch_add(missing, Ordering::Relaxed);
        for row in both {
            let added = self.merge_stream(st, &row.key, &row.stream)?;
            self.currently_missing.fetch_add(added, Ordering::Relaxed);
            self.evict_over_bound(py, st)?;
        }
        Ok(())
    }

    /// The counted event ids in memory, in arrival order: a new dict (a copy).
    fn remembered_items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        for id in &st.order {
            out.set_item(&**id, seen_tuple(py, &st.seen[id])?)?;
        }
        Ok(out)
    }

    fn remembered_get<'py>(&self, py: Python<'py>, event_id: &str) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let st = self.lock()?;
        st.seen.get(event_id).map(|s| seen_tuple(py, s)).transpose()
    }

    fn remembered_len(&self) -> PyResult<usize> {
        Ok(self.lock()?.seen.len())
    }

    fn remembered_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let st = self.lock()?;
        PyList::new(py, st.order.iter().map(|id| &**id))
    }

    /// The ids in memory, forgotten here.
    fn hand_over_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = self.remembered_items(py)?;
        let mut st = self.lock()?;
        st.seen = FastMap::default();
        st.order = VecDeque::new();
        Ok(out)
    }

    /// The streams of a tracker that read other partitions; see `StreamTracker.absorb`.
    fn absorb(&self, other: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
        let theirs_tracker = other.get();
        if std::ptr::eq(theirs_tracker, self) {
            return Err(PyValueError::new_err("a tracker cannot absorb itself"));
        }
        let theirs = theirs_tracker.lock()?;
        let mut st = self.lock()?;
        if theirs.spill.as_ref().is_some_and(|s| s.len() > 0) {
            return Err(PyValueError::new_err("a tracker with spilled streams hands them over by export_streams"));
        }
        let mut added: i64 = 0;
        for (k, t) in theirs.streams.iter().rev() {
            added += self.merge_stream(&mut st, k, t)?;
        }
        self.evict_over_bound(other.py(), &mut st)?;
        for (p, o) in &theirs.first_offset {
            st.first_offset.entry(*p).or_insert(*o);
        }
        self.currently_missing.fetch_add(added, Ordering::Relaxed);
        self.new_turns.fetch_add(theirs_tracker.new_turns.load(Ordering::Relaxed), Ordering::Relaxed);
        self.forgotten_event_ids
            .fetch_add(theirs_tracker.forgotten_event_ids.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(())
    }

    /// `verify --follow`'s checkpoint of the streams placed into since the last one and
    /// of `extra`, sorted: their state records, and the streams in `gapped` (open gaps,
    /// whose record the follower writes) as (index, stream, partition, state), their
    /// record a placeholder (see `checkpoint`).
    fn checkpoint_streams<'py>(
        &self,
        py: Python<'py>,
        extra: Vec<StreamKey>,
        gapped: Vec<StreamKey>,
    ) -> PyResult<CheckpointOut<'py>> {
        let gapped: FastSet<StreamKey> = gapped.into_iter().collect();
        self.checkpoint_records(py, extra, &gapped)
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.lock()?.streams_held())
    }

    #[getter]
    fn currently_missing(&self) -> i64 {
        self.currently_missing.load(Ordering::Relaxed)
    }

    #[getter]
    fn new_turns(&self) -> i64 {
        self.new_turns.load(Ordering::Relaxed)
    }

    #[getter]
    fn forgotten_event_ids(&self) -> i64 {
        self.forgotten_event_ids.load(Ordering::Relaxed)
    }

    /// The construction arguments but the two the Python class supplies (pickle).
    fn _settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let b = &self.bounds;
        out.set_item("max_event_ids", b.max_event_ids)?;
        out.set_item("max_streams", b.max_streams)?;
        out.set_item("max_missing", b.max_missing)?;
        out.set_item("log_start_offsets", b.log_start.clone())?;
        out.set_item("start_gaps", b.start_gaps)?;
        out.set_item("forget_batch", b.forget_batch)?;
        out.set_item("forgotten", self.forgotten.as_ref().map(|f| f.clone_ref(py)))?;
        Ok(out)
    }

    /// The tables as bytes, for pickling (see `pickle`).
    fn _state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.state_bytes(py)
    }

    fn _restore(&self, state: &[u8]) -> PyResult<()> {
        self.restore_bytes(state)
    }
}
