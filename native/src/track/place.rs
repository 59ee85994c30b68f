//! Placing one turn in its stream: the fast path (a known stream's next position), the
//! general placement (a new stream, a gap, a late arrival, a reuse), the chain's check
//! and the bookkeeping after (ids remembered, forgotten over the bound, streams evicted).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyString, PyTuple};

use super::chain::{chain_digest, head16, hex_is, Hash32};
use super::state::{entry_of, seen_tuple, spilled_seen, SeenEntry, State};
use super::event::{get, int_obj, item, opt_i64, prev_of, sequence_of, text};
use super::stream::{Prev, Stream, StreamKey, StreamKeyView};
use super::tracker::{busy, describe_stream, NativeStreamTracker, Placed};
use super::tracker::{CONTENT_CHANGED, DUPLICATE, LATE, NEW, POSITION_REUSED, REDELIVERY};
use crate::constants::GENESIS_HEX;
use crate::spill::{Seen, SortedRunStore};

impl NativeStreamTracker {
    /// `observe` without its `TrackResult`: the stream, the position and what placing
    /// concluded (verify's native step builds a result only for a message with a finding).
    pub(crate) fn place_event<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'py, PyAny>,
        value: &[u8],
        partition: Option<i64>,
        offset: Option<i64>,
        fingerprint: Option<&[u8; 8]>,
    ) -> PyResult<(Bound<'py, PyTuple>, i128, Placed)> {
        let content = chain_digest(value, fingerprint);
        let session = text(&item(event, intern!(py, "session_id"))?, "session_id")?;
        let producer = match get(event, intern!(py, "producer_id"))? {
            Some(p) if p.is_truthy()? => text(&p, "producer_id")?,
            _ => PyString::new(py, ""),
        };
        let sequence = sequence_of(event)?;
        let event_id_obj = item(event, intern!(py, "event_id"))?;
        let event_id_text = text(&event_id_obj, "event_id")?;
        let event_id: &str = event_id_text.to_str()?;
        let stream = PyTuple::new(py, [session.clone(), producer.clone()])?;
        let placed = self.place_fields(
            py,
            session.to_str()?,
            producer.to_str()?,
            sequence,
            event_id,
            None,
            &|| prev_of(event),
            &content,
            partition,
            offset,
            None,
        )?;
        Ok((stream, sequence, placed))
    }

    /// `place_event` with the event's fields already read (`prev` is asked for only when
    /// the chain is checked; `prev_text`, its text when the caller has it, serves the
    /// common case without building a `Prev`). `opened_stream`, when given, is set to
    /// whether the streams held changed (verify's step asks; under the one lock taken).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place_fields(
        &self,
        py: Python<'_>,
        session: &str,
        producer: &str,
        sequence: i128,
        event_id: &str,
        prev_text: Option<&str>,
        prev: &dyn Fn() -> PyResult<Prev>,
        content: &Hash32,
        partition: Option<i64>,
        offset: Option<i64>,
        opened_stream: Option<&mut bool>,
    ) -> PyResult<Placed> {
        let content = *content;
        let mut st = self.lock()?;
        let held = st.streams_held();
        let mut seen = st.seen.get(event_id).cloned();
        if seen.is_none() && self.forgotten_event_ids.load(Ordering::Relaxed) != 0 {
            if let Some(store) = &self.forgotten {
                let store = store.bind(py);
                if let Ok(runs) = store.cast::<SortedRunStore>() {
                    // Verify's own store: its filter answers first, natively.
                    seen = runs.try_borrow()?.recall_native(event_id)?.map(|found| entry_of(&found.hash, found.partition, found.offset));
                } else if st.filter_might_hold(event_id) {
                    let got = store.call_method1(intern!(py, "recall"), (event_id,))?;
                    if !got.is_none() {
                        let (hash, p, o): (String, Option<Bound<'_, PyAny>>, Option<Bound<'_, PyAny>>) = got.extract()?;
                        seen = Some(entry_of(&hash, opt_i64(p.as_ref())?, opt_i64(o.as_ref())?));
                    }
                }
            }
        }
        if let Some(seen) = seen {
            let placed = if seen.hash16 != head16(&content) {
                Placed::plain(CONTENT_CHANGED)
            } else if seen.offset.is_none() || (seen.partition, seen.offset) == (partition, offset) {
                Placed::plain(REDELIVERY)
            } else {
                Placed::plain(DUPLICATE)
            };
            drop(st);
            return Ok(placed);
        }
        if let (Some(p), Some(o)) = (partition, offset) {
            st.first_offset.entry(p).or_insert(o);
        }
        let tracks_dirty = st.dirty.is_some();
        let view = (session, producer);
        let borrowed: &dyn StreamKeyView = &view;
        let legacy = producer.is_empty();
        let mut fast = false;
        if let Some(s) = st.streams.get_mut(borrowed) {
            // The common case, a known stream's next position: only the link to the
            // predecessor is checked (no gap opens or closes, nothing claimed it).
            if sequence == s.next {
                fast = true;
                if !legacy {
                    if let Some(expected) = s.own.remove(&(sequence - 1)) {
                        let linked = match prev_text {
                            Some(t) => hex_is(&expected, t),
                            None => prev()?.is_hash(&expected),
                        };
                        if !linked {
                            s.own.insert(sequence - 1, expected); // the general path reports it
                            fast = false;
                        }
                    }
                    if fast {
                        s.own.insert(sequence, content);
                    }
                }
                if fast {
                    s.next = sequence + 1;
                    s.dirty |= tracks_dirty;
                }
            }
        }
        let placed = if fast {
            Placed::plain(NEW)
        } else {
            let key: StreamKey = (session.to_owned(), producer.to_owned());
            let placed = self.place(&mut st, prev, &content, &key, sequence, partition)?;
            if tracks_dirty {
                st.streams.get_mut(borrowed).expect("placed in memory").dirty = true;
            }
            placed
        };
        self.placed(py, &mut st, event_id, partition, offset, placed.outcome, &content)?;
        if let Some(opened) = opened_stream {
            *opened = st.streams_held() != held;
        }
        drop(st);
        Ok(placed)
    }

    /// The ids in memory, taken out (forgotten here, nothing counted): verify's hand-over
    /// of a job's ids, native to native.
    pub(crate) fn drain_remembered(&self) -> PyResult<Vec<(String, Seen)>> {
        let mut st = self.lock()?;
        let order = std::mem::take(&mut st.order);
        let seen = std::mem::take(&mut st.seen);
        Ok(order.iter().map(|id| (id.to_string(), spilled_seen(&seen[id]))).collect())
    }

    pub(crate) fn result_of(&self, py: Python<'_>, stream: &Bound<'_, PyTuple>, sequence: i128, placed: Placed) -> PyResult<Py<PyAny>> {
        self.result(py, stream, sequence, placed)
    }

    pub(crate) fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state.try_lock().map_err(|_| busy())
    }

    pub(crate) fn result(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyTuple>,
        sequence: i128,
        placed: Placed,
    ) -> PyResult<Py<PyAny>> {
        let fields = PyTuple::new(
            py,
            [
                self.outcomes[placed.outcome].bind(py).clone(),
                stream.clone().into_any(),
                int_obj(py, sequence)?,
                int_obj(py, placed.opened)?,
                PyBool::new(py, placed.gap_closed).to_owned().into_any(),
                match placed.chain_break {
                    None => py.None().into_bound(py),
                    Some(t) => PyString::new(py, &t).into_any(),
                },
            ],
        )?;
        Ok(self.tuple_new.bind(py).call1((self.result_type.bind(py), fields))?.unbind())
    }

    pub(crate) fn read_from_log_start(&self, st: &State, partition: Option<i64>) -> bool {
        let Some(p) = partition else { return false };
        if !self.bounds.start_gaps {
            return false;
        }
        let log_start = st.log_start.get(&p).or_else(|| self.bounds.log_start.get(&p));
        match st.first_offset.get(&p) {
            Some(first) => *first == log_start.copied().unwrap_or(0),
            None => false,
        }
    }

    /// Positions `start..end` missing (within the per-stream bound); returns how many.
    pub(crate) fn open_gap(&self, stream: &mut Stream, start: i128, end: i128) -> i128 {
        let (skipped, tracked) = stream.open_gap(start, end, self.bounds.max_missing);
        self.currently_missing.fetch_add(tracked as i64, Ordering::Relaxed);
        skipped
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check_chain(
        stream: &mut Stream,
        key: &StreamKey,
        prev: &Prev,
        content: &Hash32,
        sequence: i128,
    ) -> Option<String> {
        let mut problems: Vec<String> = Vec::new();
        if sequence == 0 {
            if !matches!(prev, Prev::Text(t) if t == GENESIS_HEX) {
                problems.push("position 0 does not start the chain (prev_hash is not genesis)".into());
            }
        } else if let Some(expected) = stream.own.get(&(sequence - 1)) {
            if !prev.is_hash(expected) {
                problems.push(format!("prev_hash does not match position {}'s hash", sequence - 1));
            }
        }
        if sequence > stream.next || stream.missing.contains(&(sequence - 1)) {
            stream.claimed.insert(sequence - 1, prev.clone());
        }
        if let Some(claimed) = stream.claimed.remove(&sequence) {
            let same = match &claimed {
                Prev::Text(t) => hex_is(content, t),
                Prev::Other => false,
            };
            if !same {
                problems.push(format!("position {} names another predecessor hash", sequence + 1));
            }
        }
        if problems.is_empty() {
            return None;
        }
        Some(format!("{}, position {sequence}: {}", describe_stream(&key.0, &key.1), problems.join("; ")))
    }

    /// `_place`: the general placement (a new stream, a gap, a late arrival, a reuse).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place(
        &self,
        st: &mut State,
        prev: &dyn Fn() -> PyResult<Prev>,
        content: &Hash32,
        key: &StreamKey,
        sequence: i128,
        partition: Option<i64>,
    ) -> PyResult<Placed> {
        let legacy = key.1.is_empty();
        let mut opened = 0;
        if !st.revive(key)? {
            let mut stream = Stream { partition, ..Stream::default() };
            if sequence > 0 && self.read_from_log_start(st, partition) {
                opened = self.open_gap(&mut stream, 0, sequence);
            }
            stream.next = sequence;
            st.streams.push(key.clone(), stream);
        }
        let forgotten_any = self.forgotten_event_ids.load(Ordering::Relaxed) != 0;
        let no_store = self.forgotten.is_none();
        let stream = st.streams.get_mut(key).expect("placed above");
        let chain_break = if legacy {
            None
        } else {
            let prev = prev()?;
            Self::check_chain(stream, key, &prev, content, sequence)
        };
        if sequence >= stream.next {
            let next = stream.next;
            opened += self.open_gap(stream, next, sequence);
            if !legacy {
                stream.own.remove(&(sequence - 1));
                stream.own.insert(sequence, *content);
            }
            stream.next = sequence + 1;
            return Ok(Placed { outcome: NEW, opened, gap_closed: false, chain_break });
        }
        if stream.missing.remove(&sequence) {
            self.currently_missing.fetch_sub(1, Ordering::Relaxed);
            if !legacy {
                stream.own.remove(&(sequence - 1));
                if stream.missing.contains(&(sequence + 1)) {
                    stream.own.insert(sequence, *content);
                }
            }
            return Ok(Placed { outcome: LATE, opened: 0, gap_closed: true, chain_break });
        }
        if legacy {
            return Ok(Placed::plain(NEW));
        }
        if forgotten_any && no_store && stream.own.get(&sequence).is_none_or(|h| h == content) {
            return Ok(Placed::plain(REDELIVERY));
        }
        Ok(Placed {
            outcome: POSITION_REUSED,
            opened: 0,
            gap_closed: false,
            chain_break: Some(format!(
                "position {sequence} of {} is already taken by another event",
                describe_stream(&key.0, &key.1)
            )),
        })
    }

    #[allow(clippy::too_many_arguments)]
    /// `_placed`: counts a new or late turn, remembers its id, keeps the bounds.
    pub(crate) fn placed(
        &self,
        py: Python<'_>,
        st: &mut State,
        event_id: &str,
        partition: Option<i64>,
        offset: Option<i64>,
        outcome: usize,
        content: &Hash32,
    ) -> PyResult<()> {
        if outcome == NEW || outcome == LATE {
            self.new_turns.fetch_add(1, Ordering::Relaxed);
            let id: Arc<str> = Arc::from(event_id);
            st.order.push_back(id.clone());
            st.seen.insert(id, SeenEntry { hash16: head16(content), partition, offset });
            if st.seen.len() > self.bounds.max_event_ids.saturating_add(self.bounds.forget_batch - 1) {
                let mut dropped: Vec<(Arc<str>, SeenEntry)> = Vec::new();
                while st.seen.len() > self.bounds.max_event_ids {
                    let oldest = st.order.pop_front().expect("in step with seen");
                    let entry = st.seen.remove(&oldest).expect("in step with order");
                    dropped.push((oldest, entry));
                }
                self.forgotten_event_ids.fetch_add(dropped.len() as i64, Ordering::Relaxed);
                if let Some(store) = &self.forgotten {
                    let store = store.bind(py);
                    if let Ok(runs) = store.cast::<SortedRunStore>() {
                        // Verify's own store: handed over natively, no Python tuple per id,
                        // and its Bloom filter is the only one.
                        runs.try_borrow_mut()?.keep_native(py, dropped.iter().map(|(id, entry)| {
                            (id.to_string(), spilled_seen(entry))
                        }))?;
                    } else {
                        for (id, _) in &dropped {
                            st.filter_add(id);
                        }
                        let handed = PyList::empty(py);
                        for (id, entry) in &dropped {
                            handed.append((&**id, seen_tuple(py, entry)?))?;
                        }
                        store.call_method1(intern!(py, "keep_many"), (handed,))?;
                    }
                }
            }
        }
        self.evict_over_bound(py, st)
    }
}
