//! The consumer services' per-batch step, native: a batch's ordinary TurnEvents read in
//! place (scanned as `VerifyStep` scans them, no record built), placed by the service's
//! own stream tracker, checked against contracts 1-4 (`ContractCheck`, the one rule) and
//! the key, and tallied by the metrics service's labels, with no Python bytecode run per
//! message. An ordinary message: single-object framing of a scanned schema, no headers
//! (so not redriven), the labels of the kinds the sink tallies, a new turn at its
//! stream's next position (no gap, no chain break), its key the session id, no breach
//! found or recorded.
//!
//! Every other message goes back to the Python path at once and in order, at one of
//! two points: before anything about it was kept (`FEED`: the service's `examine` and
//! the hand-over run whole, for it and the run of such messages after it) or after the
//! tracker placed it (`FINISH`, `NOT_A_TURN`: the validation concludes from the
//! placement). Before returning, the step adds its tallies to the sink's (new keys in
//! the order first seen, as `take` would) and its next offsets to the batch's.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use super::contracts::{ContractCheck, ACTION, BREACHES, DOMAIN, OCCURRED_AT, PACK_ID, PATH, VERDICTS};
use super::scanned::{scan_message, track_fields, Interned, Plans, ShippedPlan};
use crate::decode::scan::V;
use crate::hashing::FastMap;
use crate::track::{chain_digest, NativeStreamTracker, Placed, Prev, NEW};

const DONE: u8 = 0;
const FEED: u8 = 1;
const FINISH: u8 = 2;
const NOT_A_TURN: u8 = 3;

/// (pack, domain, path, writer version, refused, hedged): the sink's turn tally key,
/// the texts as their index in `Interned`.
type TurnKey = (u32, u32, u32, i64, bool, bool);
/// (output policy, risk tier, action-risk verdict): the sink's action tally key.
type ActionKey = (u32, u32, u32);

/// Counts by key in the order keys were first seen (the sink's dicts keep that order,
/// and its label bounds give labels in it).
struct Ordered<K> {
    index: FastMap<K, usize>,
    counts: Vec<(K, u64)>,
}

impl<K: std::hash::Hash + Eq + Copy> Ordered<K> {
    fn new() -> Self {
        Ordered { index: FastMap::default(), counts: Vec::new() }
    }

    fn add(&mut self, key: K) {
        match self.index.get(&key) {
            Some(i) => self.counts[*i].1 += 1,
            None => {
                self.index.insert(key, self.counts.len());
                self.counts.push((key, 1));
            }
        }
    }

    fn drain(&mut self) -> std::vec::Drain<'_, (K, u64)> {
        self.index.clear();
        self.counts.drain(..)
    }
}

/// What one message came to.
enum Step {
    Tallied,
    Feed,
    Finish(Py<PyAny>, Py<PyAny>),
    NotATurn(Py<PyAny>),
}

/// A scanned message's labels, of the kinds the sink tallies.
struct Labels<'a> {
    pack: &'a str,
    domain: &'a str,
    path: &'a str,
    refused: bool,
    hedged: bool,
    action: Option<(&'a str, &'a str, &'a str)>,
    occurred_ms: i64,
}

fn labels<'a>(f: &'a [Option<V<'a>>]) -> Option<Labels<'a>> {
    let text = |v: Option<&'a V<'a>>| match v {
        Some(V::Str(s)) => Some(*s),
        _ => None,
    };
    let flag = |v: Option<&V<'a>>| match v {
        Some(V::Bool(b)) => Some(*b),
        _ => None,
    };
    let bundle = f[VERDICTS].as_ref()?;
    let action = match f[ACTION].as_ref()? {
        V::Null => None,
        a @ V::Fields(_) => Some((text(a.field("output_policy"))?, text(a.field("risk_tier"))?, text(a.field("action_risk_verdict"))?)),
        _ => return None,
    };
    let Some(V::Int(occurred_ms)) = f[OCCURRED_AT] else { return None };
    Some(Labels {
        pack: text(f[PACK_ID].as_ref())?,
        domain: text(f[DOMAIN].as_ref())?,
        path: text(f[PATH].as_ref())?,
        refused: flag(bundle.field("refusal_emitted"))?,
        hedged: flag(bundle.field("hedge_injected"))?,
        action,
        occurred_ms,
    })
}

/// A message's partition and offset, when the step may take it: it has a topic and a
/// position (librdkafka's error events have neither) and no headers (a redriven turn, or
/// anything else a header may mean, is the Python path's to read).
fn position(py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<Option<(i64, i64)>> {
    if msg.call_method0(intern!(py, "topic"))?.is_none() || !msg.call_method0(intern!(py, "headers"))?.is_none() {
        return Ok(None);
    }
    let partition = msg.call_method0(intern!(py, "partition"))?.extract::<Option<i64>>()?;
    let offset = msg.call_method0(intern!(py, "offset"))?.extract::<Option<i64>>()?;
    Ok(partition.zip(offset))
}

/// The consumer services' ordinary messages, validated and tallied natively (see the
/// module comment).
#[pyclass(module = "turnaudit._native")]
pub(crate) struct ConsumeStep {
    decode: Py<PyAny>,
    shipped: Plans,
    tracker: Py<NativeStreamTracker>,
    check: Py<ContractCheck>,
    turns: Ordered<TurnKey>,
    actions: Ordered<ActionKey>,
    occurred: Vec<i64>,
    texts: Interned,
    /// (partition, next offset) of the tallied messages, partitions in first-seen order.
    next_offsets: Vec<(i64, i64)>,
    tallied: u64,
}

impl ConsumeStep {
    /// One message placed, checked and tallied, or why the Python path takes it.
    fn step(&mut self, py: Python<'_>, msg: &Bound<'_, PyAny>, tracker: &NativeStreamTracker, check: &ContractCheck) -> PyResult<Step> {
        // The value's framing first: a message of a schema the step does not scan (v1/v2,
        // Confluent framing) costs one call.
        let value = msg.call_method0(intern!(py, "value"))?;
        let Ok(bytes) = value.cast::<PyBytes>() else { return Ok(Step::Feed) };
        let payload = bytes.as_bytes();
        let Some(shipped) = self.shipped.of(payload) else { return Ok(Step::Feed) };
        let Some((partition, offset)) = position(py, msg)? else { return Ok(Step::Feed) };
        let Some(f) = scan_message(&shipped, payload) else { return Ok(Step::Feed) };
        let Some((session, event_id, sequence, producer, prev)) = track_fields(&f) else { return Ok(Step::Feed) };
        let Some(labels) = labels(&f) else { return Ok(Step::Feed) };
        let content = chain_digest(payload, None); // single-object: the header's fingerprint
        let placed: Placed = match tracker.place_fields(py, session, producer, sequence, event_id, Some(prev), &|| Ok(Prev::Text(prev.to_owned())), &content, Some(partition), Some(offset), None) {
            Ok(placed) => placed,
            // The Python path rejects the message whatever placing it raised.
            Err(err) => return Ok(Step::NotATurn(err.into_value(py).into_any())),
        };
        let key = msg.call_method0(intern!(py, "key"))?;
        let key_is_session = key.cast::<PyBytes>().is_ok_and(|k| k.as_bytes() == session.as_bytes());
        let ordinary = placed.outcome == NEW
            && placed.opened == 0
            && !placed.gap_closed
            && placed.chain_break.is_none()
            && key_is_session
            && !f[BREACHES].as_ref().is_some_and(V::truthy)
            && !check.breaks_scanned(&f);
        if !ordinary {
            let stream = PyTuple::new(py, [PyString::new(py, session), PyString::new(py, producer)])?;
            let result = tracker.result_of(py, &stream, sequence, placed)?;
            let decoded = self.decode.bind(py).call1((bytes,))?;
            return Ok(Step::Finish(decoded.unbind(), result));
        }
        self.tally(&labels, shipped.scan.version);
        match self.next_offsets.iter_mut().find(|(p, _)| *p == partition) {
            Some(next) => next.1 = offset + 1,
            None => self.next_offsets.push((partition, offset + 1)),
        }
        self.tallied += 1;
        Ok(Step::Tallied)
    }

    fn tally(&mut self, l: &Labels<'_>, version: i64) {
        let t = &mut self.texts;
        let key = (t.of(l.pack), t.of(l.domain), t.of(l.path), version, l.refused, l.hedged);
        self.turns.add(key);
        if let Some((policy, tier, verdict)) = l.action {
            let key = (t.of(policy), t.of(tier), t.of(verdict));
            self.actions.add(key);
        }
        self.occurred.push(l.occurred_ms);
    }

    /// The tallies into the sink's, the next offsets into the batch's.
    fn flush(&mut self, py: Python<'_>, turns: &Bound<'_, PyDict>, actions: &Bound<'_, PyDict>, occurred: &Bound<'_, PyList>, next_offsets: &Bound<'_, PyDict>) -> PyResult<()> {
        let texts = &self.texts;
        let s = |i: u32| PyString::new(py, texts.text(i)).into_any();
        let add = |tally: &Bound<'_, PyDict>, key: Bound<'_, PyTuple>, n: u64| -> PyResult<()> {
            let before: u64 = match tally.get_item(&key)? {
                Some(count) => count.extract()?,
                None => 0,
            };
            tally.set_item(key, before + n)
        };
        for ((pack, domain, path, version, refused, hedged), n) in self.turns.drain() {
            let key = PyTuple::new(
                py,
                [
                    s(pack),
                    s(domain),
                    s(path),
                    version.into_pyobject(py)?.into_any(),
                    PyBool::new(py, refused).to_owned().into_any(),
                    PyBool::new(py, hedged).to_owned().into_any(),
                ],
            )?;
            add(turns, key, n)?;
        }
        for ((policy, tier, verdict), n) in self.actions.drain() {
            add(actions, PyTuple::new(py, [s(policy), s(tier), s(verdict)])?, n)?;
        }
        for ms in self.occurred.drain(..) {
            occurred.append(ms)?;
        }
        for (partition, next) in self.next_offsets.drain(..) {
            next_offsets.set_item(partition, next)?;
        }
        self.texts.clear();
        Ok(())
    }
}

type Stop = (usize, u8, Py<PyAny>, Py<PyAny>, usize, u64);

#[pymethods]
impl ConsumeStep {
    /// `decode`: the service's decoder (a message the step hands back after placing it
    /// comes decoded); `shipped`: `TurnEventDeserializer.native_plans()`.
    #[new]
    fn new(py: Python<'_>, decode: Py<PyAny>, tracker: Py<NativeStreamTracker>, check: Py<ContractCheck>, shipped: Vec<ShippedPlan>) -> PyResult<Self> {
        Ok(ConsumeStep {
            decode,
            shipped: Plans::new(py, shipped)?,
            tracker,
            check,
            turns: Ordered::new(),
            actions: Ordered::new(),
            occurred: Vec::new(),
            texts: Interned::default(),
            next_offsets: Vec::new(),
            tallied: 0,
        })
    }

    /// The batch's messages from `start` on, until one is the Python path's: (its index,
    /// why, its decoded event, its `TrackResult` or what placing it raised, the end of the
    /// run of `FEED` messages from it, the messages tallied). `(len(batch), DONE, None,
    /// None, len(batch), n)` at the end. The tallies went into `turns`, `actions` and
    /// `occurred` (the sink's), the tallied messages' next offsets into `next_offsets`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        py: Python<'_>,
        batch: &Bound<'_, PyList>,
        start: usize,
        turns: &Bound<'_, PyDict>,
        actions: &Bound<'_, PyDict>,
        occurred: &Bound<'_, PyList>,
        next_offsets: &Bound<'_, PyDict>,
    ) -> PyResult<Stop> {
        let tracker = self.tracker.clone_ref(py);
        let check = self.check.clone_ref(py);
        let none = || py.None();
        let end = batch.len();
        let mut stop = (end, DONE, none(), none(), end, 0);
        for index in start..end {
            let msg = batch.get_item(index)?;
            match self.step(py, &msg, tracker.get(), check.get()) {
                Ok(Step::Tallied) => continue,
                Ok(Step::Feed) => {
                    // The messages after it that the Python path takes whole too
                    // (decided before placing, so looking ahead changes nothing).
                    let mut until = index + 1;
                    while until < end && self.feeds(py, &batch.get_item(until)?)? {
                        until += 1;
                    }
                    stop = (index, FEED, none(), none(), until, 0);
                }
                Ok(Step::Finish(decoded, result)) => stop = (index, FINISH, decoded, result, index + 1, 0),
                Ok(Step::NotATurn(err)) => stop = (index, NOT_A_TURN, none(), err, index + 1, 0),
                Err(err) => {
                    self.flush(py, turns, actions, occurred, next_offsets)?;
                    return Err(err);
                }
            }
            break;
        }
        self.flush(py, turns, actions, occurred, next_offsets)?;
        stop.5 = std::mem::take(&mut self.tallied);
        Ok(stop)
    }

    #[classattr]
    fn kinds() -> (u8, u8, u8, u8) {
        (DONE, FEED, FINISH, NOT_A_TURN)
    }

    /// Writer versions this step scans without building records.
    fn scanned_versions(&self) -> Vec<i64> {
        self.shipped.versions()
    }
}

impl ConsumeStep {
    /// Whether `step` would hand the message back before placing it.
    fn feeds(&self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<bool> {
        let value = msg.call_method0(intern!(py, "value"))?;
        let Ok(bytes) = value.cast::<PyBytes>() else { return Ok(true) };
        let payload = bytes.as_bytes();
        let Some(shipped) = self.shipped.of(payload) else { return Ok(true) };
        if position(py, msg)?.is_none() {
            return Ok(true);
        }
        let Some(f) = scan_message(&shipped, payload) else { return Ok(true) };
        Ok(track_fields(&f).is_none() || labels(&f).is_none())
    }
}
