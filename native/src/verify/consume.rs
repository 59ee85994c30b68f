//! The consumer services' per-batch step, native: a batch's ordinary TurnEvents read in
//! place (scanned as `VerifyStep` scans them, no record built), placed by the service's
//! own stream tracker, checked against contracts 1-4 (`ContractCheck`, the one rule) and
//! the key, then given to the service's sink by the step's outlet, with no Python
//! bytecode run per message: `TALLY`, tallied by the metrics service's labels; `LINES`,
//! rendered as the log sink's canonical line (`line.rs`) into its batch's buffer; `OTLP`,
//! as the OTel sink's encoded log records (`otlp.rs`) into its buffer;
//! `TURNS`, for a batching sink (the HTIR feeder): a turn with a task handed over as a
//! `ConsumedTurn` decoded natively or, by the traces outlet, added to its trace in the
//! feeder's store (`crate::htir`; its steps made by `htir_steps.rs`, no event decoded), one
//! without counted as handed only. An ordinary message: single-object framing of a scanned schema, no
//! headers (so not redriven), the fields the outlet reads of the kinds it reads, a new
//! turn at its stream's next position (no gap, no chain break), its key the session id,
//! no breach found or recorded.
//!
//! Every other message goes back to the Python path at once and in order, at one of
//! two points: before anything about it was kept (`FEED`: the service's `examine` and
//! the hand-over run whole, for it and the run of such messages after it) or after the
//! tracker placed it (`FINISH`, `NOT_A_TURN`: the validation concludes from the
//! placement). Before returning, the step adds its tallies to the sink's (new keys in
//! the order first seen, as `take` would), its lines to the sink's buffer, and its next
//! offsets to the batch's.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use super::contracts::{ContractCheck, BREACHES};
use super::htir_steps::{task_turn, Redact};
use super::line::{all_slot, LineFormat, Read, ALL_SLOTS, MODEL, RESPONSE_ID, RUNTIME, TASK, TOOL_STEPS, TRACE_CONTEXT};
use super::otlp::{scanned_records as otlp_records, Read as OtlpRead};
use super::scanned::{position, track_fields, Plans, Shipped, ShippedPlan};
use super::tally::{labels, Labels, Tallies};
use crate::constants::SINGLE_OBJECT_HEADER as HEADER;
use crate::decode::scan::{scan, V};
use crate::htir::{TraceStore, TurnIn};
use crate::track::{chain_digest, NativeStreamTracker, Placed, Prev, NEW};

const DONE: u8 = 0;
const FEED: u8 = 1;
const FINISH: u8 = 2;
const NOT_A_TURN: u8 = 3;

/// What one message came to.
enum Step {
    Taken,
    Feed,
    Finish(Py<PyAny>, Py<PyAny>),
    NotATurn(Py<PyAny>),
}

const TALLY: u8 = 0;
const LINES: u8 = 1;
const TURNS: u8 = 2;
const OTLP: u8 = 3;

/// How the step gives an ordinary turn to the sink (see the module comment).
enum Outlet {
    Tally,
    Lines(LineFormat),
    Turns(Py<PyAny>, Py<PyAny>), // `tuple.__new__` and `ConsumedTurn`
    /// The HTIR trace store and the surface policy: a task turn's steps added to its trace.
    Traces(Py<TraceStore>, Redact),
    Otlp,
}

/// What the outlet read of a message before it was placed.
enum Kept<'a, 'py> {
    Labels(Labels<'a>),
    Line,
    NoTask,
    Task,
    /// A task turn as the trace store takes it, but where it was read.
    Trace(TurnIn<'a, 'py>),
}

/// The consumer services' ordinary messages, validated and given to the sink natively
/// (see the module comment).
#[pyclass(module = "turnaudit._native")]
pub(crate) struct ConsumeStep {
    decode: Py<PyAny>,
    shipped: Plans,
    /// Per scanned schema (by its plan's address), which root fields fill which of the
    /// step's slots (`ALL_SLOTS`).
    wanted: Vec<(usize, Vec<Option<usize>>)>,
    tracker: Py<NativeStreamTracker>,
    check: Py<ContractCheck>,
    outlet: Outlet,
    tallies: Tallies,
    /// The lines (or OTLP records) made since the last hand-back, and the run's
    /// timestamp (JSON; the records' observed time, `observed_ns`).
    lines: Vec<u8>,
    stamp: Vec<u8>,
    observed_ns: u64,
    /// The traces outlet's clock: when the run's turns were seen (`TraceStore`'s `now`).
    now: f64,
    /// The OTLP outlet's scratch: a turn's attributes every record carries.
    common: Vec<u8>,
    /// (partition, next offset) of the messages taken, partitions in first-seen order.
    next_offsets: Vec<(i64, i64)>,
    taken: u64,
}

impl ConsumeStep {
    /// The slots of a scanned schema's root fields, found once per schema.
    fn wanted_of(&mut self, shipped: &Shipped) -> usize {
        let id = std::ptr::from_ref(shipped) as usize;
        if let Some(i) = self.wanted.iter().position(|(at, _)| *at == id) {
            return i;
        }
        let top = shipped.scan.names.top(&shipped.decoder.get().plan);
        // Only the steps outlet reads the tool steps and the runtime.
        let (steps, otlp) = (matches!(self.outlet, Outlet::Traces(..)), matches!(self.outlet, Outlet::Otlp));
        let slot = |n: &str| all_slot(n).filter(|s| (steps || ![TOOL_STEPS, RUNTIME].contains(s)) && (otlp || ![TRACE_CONTEXT, RESPONSE_ID, MODEL].contains(s)));
        self.wanted.push((id, top.iter().map(|n| slot(n)).collect()));
        self.wanted.len() - 1
    }

    /// One message placed, checked and given to the sink, or why the Python path takes it.
    fn step<'py>(&mut self, py: Python<'py>, msg: &Bound<'py, PyAny>, tracker: &NativeStreamTracker, check: &ContractCheck, pending: Option<&Bound<'_, PyList>>) -> PyResult<Step> {
        // The value's framing first: a message of a schema the step does not scan (v1/v2,
        // Confluent framing) costs one call.
        let value = msg.call_method0(intern!(py, "value"))?;
        let Ok(bytes) = value.cast::<PyBytes>() else { return Ok(Step::Feed) };
        let payload = bytes.as_bytes();
        let Some(shipped) = self.shipped.of(payload) else { return Ok(Step::Feed) };
        let Some((topic, partition, offset)) = position(py, msg)? else { return Ok(Step::Feed) };
        let wanted = self.wanted_of(&shipped);
        let plan = &shipped.decoder.get().plan;
        let Some(f) = scan::<ALL_SLOTS>(plan, &shipped.scan.names, &self.wanted[wanted].1, payload, HEADER) else { return Ok(Step::Feed) };
        let Some((session, event_id, sequence, producer, prev)) = track_fields(&f) else { return Ok(Step::Feed) };
        let version = shipped.scan.version;
        // What the outlet reads, read before anything is kept.
        let mark = self.lines.len();
        let kept = match &self.outlet {
            Outlet::Tally => match labels(&f) {
                Some(l) => Kept::Labels(l),
                None => return Ok(Step::Feed),
            },
            Outlet::Lines(format) => {
                let Ok(topic) = topic.cast::<PyString>() else { return Ok(Step::Feed) };
                let read = Read { topic: topic.to_str()?, partition, offset, stamp: &self.stamp };
                if format.render(&mut self.lines, &f, version, &read).is_none() {
                    return Ok(Step::Feed);
                }
                Kept::Line
            }
            Outlet::Otlp => {
                let read = OtlpRead { millis: 0, version, redelivered: false, redriven: false, observed_ns: self.observed_ns };
                if !otlp_records(py, &f, read, &mut self.lines, &mut self.common) {
                    return Ok(Step::Feed);
                }
                Kept::Line
            }
            Outlet::Turns(..) => match f[TASK] {
                Some(V::Null) => Kept::NoTask,
                Some(V::Fields(_)) => Kept::Task,
                _ => return Ok(Step::Feed),
            },
            Outlet::Traces(_, redact) => match f[TASK] {
                Some(V::Null) => Kept::NoTask,
                // A turn whose steps the rule does not make goes the Python path, which
                // makes them (or fails) the same way.
                Some(V::Fields(_)) => match (task_turn(py, &f, redact), topic.cast::<PyString>()) {
                    (Ok(Some(turn)), Ok(_)) => Kept::Trace(turn),
                    _ => return Ok(Step::Feed),
                },
                _ => return Ok(Step::Feed),
            },
        };
        let content = chain_digest(payload, None); // single-object: the header's fingerprint
        let placed: Placed = match tracker.place_fields(py, session, producer, sequence, event_id, Some(prev), &|| Ok(Prev::Text(prev.to_owned())), &content, Some(partition), Some(offset), None) {
            Ok(placed) => placed,
            // The Python path rejects the message whatever placing it raised.
            Err(err) => {
                self.lines.truncate(mark);
                return Ok(Step::NotATurn(err.into_value(py).into_any()));
            }
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
        let stream = || PyTuple::new(py, [PyString::new(py, session), PyString::new(py, producer)]);
        if !ordinary {
            self.lines.truncate(mark);
            let result = tracker.result_of(py, &stream()?, sequence, placed)?;
            let decoded = self.decode.bind(py).call1((bytes,))?;
            return Ok(Step::Finish(decoded.unbind(), result));
        }
        match kept {
            Kept::Labels(l) => self.tallies.add(&l, version),
            Kept::Line | Kept::NoTask => {}
            Kept::Task => {
                let (Outlet::Turns(tuple_new, turn_type), Some(pending)) = (&self.outlet, pending) else {
                    return Err(PyValueError::new_err("a handing step runs with a pending list"));
                };
                let result = tracker.result_of(py, &stream()?, sequence, placed)?;
                let decoded = self.decode.bind(py).call1((bytes,))?;
                let fields = (decoded, result, topic, partition, offset, PyTuple::empty(py), false).into_pyobject(py)?;
                pending.append(tuple_new.bind(py).call1((turn_type.bind(py), fields))?)?;
            }
            Kept::Trace(mut turn) => {
                let (Outlet::Traces(store, _), Some(closed)) = (&self.outlet, pending) else {
                    return Err(PyValueError::new_err("a handing step runs with a pending list"));
                };
                (turn.topic, turn.partition, turn.offset) = (topic.cast::<PyString>()?.to_str()?, partition, offset);
                if let Some(trace) = store.bind(py).try_borrow_mut()?.add_turn(py, &turn, self.now)? {
                    closed.append(trace)?;
                }
            }
        }
        match self.next_offsets.iter_mut().find(|(p, _)| *p == partition) {
            Some(next) => next.1 = offset + 1,
            None => self.next_offsets.push((partition, offset + 1)),
        }
        self.taken += 1;
        Ok(Step::Taken)
    }

    /// The lines onto the end of the sink's buffer.
    fn flush_lines(&mut self, rendered: &Bound<'_, PyByteArray>) -> PyResult<()> {
        if self.lines.is_empty() {
            return Ok(());
        }
        let old = rendered.len();
        rendered.resize(old + self.lines.len())?;
        // SAFETY: the GIL is held and nothing else touches the bytearray while it is
        // written; it was just resized to hold the lines after its `old` bytes.
        unsafe { rendered.as_bytes_mut()[old..].copy_from_slice(&self.lines) };
        self.lines.clear();
        Ok(())
    }

    /// The next offsets into the batch's; the messages taken since the last hand-back.
    fn flush_offsets(&mut self, next_offsets: &Bound<'_, PyDict>) -> PyResult<u64> {
        for (partition, next) in self.next_offsets.drain(..) {
            next_offsets.set_item(partition, next)?;
        }
        Ok(std::mem::take(&mut self.taken))
    }

    /// The batch's messages from `start` on, until one is the Python path's (see `run`).
    fn drive(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize, pending: Option<&Bound<'_, PyList>>) -> PyResult<Stop> {
        let tracker = self.tracker.clone_ref(py);
        let check = self.check.clone_ref(py);
        let none = || py.None();
        let end = batch.len();
        for index in start..end {
            let msg = batch.get_item(index)?;
            return Ok(match self.step(py, &msg, tracker.get(), check.get(), pending)? {
                Step::Taken => continue,
                Step::Feed => {
                    // The messages after it that the Python path takes whole too
                    // (decided before placing, so looking ahead changes nothing).
                    let mut until = index + 1;
                    while until < end && self.feeds(py, &batch.get_item(until)?)? {
                        until += 1;
                    }
                    (index, FEED, none(), none(), until, 0)
                }
                Step::Finish(decoded, result) => (index, FINISH, decoded, result, index + 1, 0),
                Step::NotATurn(err) => (index, NOT_A_TURN, none(), err, index + 1, 0),
            });
        }
        Ok((end, DONE, none(), none(), end, 0))
    }

    fn outlet_is(&self, mode: u8) -> PyResult<()> {
        let is = match self.outlet {
            Outlet::Tally => TALLY,
            Outlet::Lines(_) => LINES,
            Outlet::Otlp => OTLP,
            Outlet::Turns(..) | Outlet::Traces(..) => TURNS,
        };
        if is == mode {
            Ok(())
        } else {
            Err(PyValueError::new_err(format!("this step's outlet is {is}, not {mode}")))
        }
    }
}

type Stop = (usize, u8, Py<PyAny>, Py<PyAny>, usize, u64);

/// The stop with the messages taken before it.
fn taken(stop: PyResult<Stop>, taken: u64) -> PyResult<Stop> {
    stop.map(|mut stop| {
        stop.5 = taken;
        stop
    })
}

#[pymethods]
impl ConsumeStep {
    /// `decode`: the service's decoder (a message the step hands back after placing it
    /// comes decoded); `shipped`: `TurnEventDeserializer.native_plans()`. The outlet:
    /// tallies (none of the others given); `line`, the log line's keys in order and
    /// the fixed texts of some of them; `turn`, `(tuple.__new__, ConsumedTurn)`; `steps`,
    /// `traces`, `(the feeder's TraceStore, the surface policy's value, Redaction.text)`;
    /// `otlp`, true.
    #[new]
    #[pyo3(signature = (decode, tracker, check, shipped, *, line=None, turn=None, traces=None, otlp=false))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        decode: Py<PyAny>,
        tracker: Py<NativeStreamTracker>,
        check: Py<ContractCheck>,
        shipped: Vec<ShippedPlan>,
        line: Option<(Vec<String>, Vec<(String, String)>)>,
        turn: Option<(Py<PyAny>, Py<PyAny>)>,
        traces: Option<(Py<TraceStore>, String, Py<PyAny>)>,
        otlp: bool,
    ) -> PyResult<Self> {
        let outlet = match (line, turn, traces, otlp) {
            (None, None, None, false) => Outlet::Tally,
            (Some((keys, constants)), None, None, false) => Outlet::Lines(LineFormat::new(keys, constants)?),
            (None, Some((tuple_new, turn_type)), None, false) => Outlet::Turns(tuple_new, turn_type),
            (None, None, Some((store, policy, text)), false) => Outlet::Traces(store, Redact::new(&policy, text)?),
            (None, None, None, true) => Outlet::Otlp,
            _ => return Err(PyValueError::new_err("one outlet: line, turn, traces or otlp")),
        };
        Ok(ConsumeStep {
            decode,
            shipped: Plans::new(py, shipped)?,
            wanted: Vec::new(),
            tracker,
            check,
            outlet,
            tallies: Tallies::new(),
            lines: Vec::new(),
            stamp: Vec::new(),
            observed_ns: 0,
            now: 0.0,
            common: Vec::new(),
            next_offsets: Vec::new(),
            taken: 0,
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
        self.outlet_is(TALLY)?;
        let stop = self.drive(py, batch, start, None);
        self.tallies.flush(py, turns, actions, occurred)?;
        let n = self.flush_offsets(next_offsets)?;
        taken(stop, n)
    }

    /// `run` for the log sink: each ordinary turn's line (stamped `stamp`, a JSON text)
    /// onto the end of `rendered`; the count is of lines.
    fn run_lines(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize, rendered: &Bound<'_, PyByteArray>, stamp: &[u8], next_offsets: &Bound<'_, PyDict>) -> PyResult<Stop> {
        self.outlet_is(LINES)?;
        self.stamp.clear();
        self.stamp.extend_from_slice(stamp);
        let stop = self.drive(py, batch, start, None);
        self.flush_lines(rendered)?;
        let n = self.flush_offsets(next_offsets)?;
        taken(stop, n)
    }

    /// `run` for the OTel sink: each ordinary turn's OTLP log records (observed at
    /// `observed_ns`) onto the end of `records`; the count is of turns.
    fn run_otlp(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize, records: &Bound<'_, PyByteArray>, observed_ns: u64, next_offsets: &Bound<'_, PyDict>) -> PyResult<Stop> {
        self.outlet_is(OTLP)?;
        self.observed_ns = observed_ns;
        let stop = self.drive(py, batch, start, None);
        self.flush_lines(records)?;
        let n = self.flush_offsets(next_offsets)?;
        taken(stop, n)
    }

    /// `run` for a batching sink: each ordinary turn with a task appended to `pending` as a
    /// `ConsumedTurn`, or (traces outlet) added to its trace in the store, seen at `now`, the
    /// traces closed (`EncodedTrace`s) appended to `pending`; the count is of every ordinary turn.
    #[pyo3(signature = (batch, start, pending, next_offsets, now=0.0))]
    fn run_turns(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize, pending: &Bound<'_, PyList>, next_offsets: &Bound<'_, PyDict>, now: f64) -> PyResult<Stop> {
        self.outlet_is(TURNS)?;
        self.now = now;
        let stop = self.drive(py, batch, start, Some(pending));
        let n = self.flush_offsets(next_offsets)?;
        taken(stop, n)
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
    fn feeds(&mut self, py: Python<'_>, msg: &Bound<'_, PyAny>) -> PyResult<bool> {
        let value = msg.call_method0(intern!(py, "value"))?;
        let Ok(bytes) = value.cast::<PyBytes>() else { return Ok(true) };
        let payload = bytes.as_bytes();
        let Some(shipped) = self.shipped.of(payload) else { return Ok(true) };
        let Some((topic, partition, offset)) = position(py, msg)? else { return Ok(true) };
        let wanted = self.wanted_of(&shipped);
        let plan = &shipped.decoder.get().plan;
        let Some(f) = scan::<ALL_SLOTS>(plan, &shipped.scan.names, &self.wanted[wanted].1, payload, HEADER) else { return Ok(true) };
        if track_fields(&f).is_none() {
            return Ok(true);
        }
        Ok(match &self.outlet {
            Outlet::Tally => labels(&f).is_none(),
            Outlet::Lines(format) => {
                let Ok(topic) = topic.cast::<PyString>() else { return Ok(true) };
                let read = Read { topic: topic.to_str()?, partition, offset, stamp: &self.stamp };
                format.render(&mut Vec::new(), &f, shipped.scan.version, &read).is_none()
            }
            Outlet::Otlp => {
                let read = OtlpRead { millis: 0, version: shipped.scan.version, redelivered: false, redriven: false, observed_ns: 0 };
                !otlp_records(py, &f, read, &mut Vec::new(), &mut self.common)
            }
            Outlet::Turns(..) => !matches!(f[TASK], Some(V::Null | V::Fields(_))),
            Outlet::Traces(_, redact) => match f[TASK] {
                Some(V::Null) => false,
                Some(V::Fields(_)) => !matches!(task_turn(py, &f, redact), Ok(Some(_))) || topic.cast::<PyString>().is_err(),
                _ => true,
            },
        })
    }
}
