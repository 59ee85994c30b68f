//! Verify's per-message step, native: a batch of consumed messages read in place (v3 and
//! v4 bodies scanned, no record built), placed in their streams, checked against
//! contracts 1-4 and 6 and tallied, with no Python bytecode run for an ordinary message
//! (a new turn at its stream's next position, its key the session id, no breach found
//! or recorded).
//!
//! The Python `Verifier` owns the meaning; this file only takes its common case. Every
//! other message goes back to it at once, in stream order, at one of two points: before
//! anything about it was kept (`FEED`: the Verifier's whole `feed` runs) or after the
//! tracker placed it (`FINISH`, `NOT_A_TURN`: the Verifier concludes from the placement).
//! A message of a schema the step does not scan (v1/v2, or one learned at run time) goes
//! to the Verifier whole. Contracts 1-4 are `contracts::ContractCheck`, the rule
//! `turnaudit.contracts.check_event` calls too: on a scanned record it says "no breach"
//! only where the values it read settle that, and any turn it is unsure of goes to the
//! Verifier, whose `check_event` runs the same rule over the decoded event.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::decode::scan::V;
use crate::hashing::{FastMap, FastSet};
use crate::track::{chain_digest, NativeStreamTracker, Placed, Prev, NEW};

mod admit;
mod consume;
mod contract_values;
mod contracts;
mod htir_steps;
mod line;
mod otlp;
mod otlp_envelope;
mod rule_input;
mod scanned;
mod tally;

pub(crate) use consume::ConsumeStep;
pub(crate) use contracts::ContractCheck;
pub(crate) use htir_steps::{htir_turn_steps, SURFACE_LIMIT};
pub(crate) use otlp::{otlp_turn_records, MAX_EXPLANATION, MAX_IDS, MAX_TEXT};
pub(crate) use otlp_envelope::otlp_requests;
use contracts::*;
use scanned::{is_not_a_turn, scan_message, track_fields, Interned, Plans, Shipped, ShippedPlan};

/// Where `VerifyStep.run` stopped: the batch is done, or the message at the index is the
/// Verifier's to handle (see the module comment).
const DONE: u8 = 0;
const FEED: u8 = 1;
const FINISH: u8 = 2;
const NOT_A_TURN: u8 = 3;


/// One range's ordinary messages, verified natively (see the module comment).
#[pyclass(module = "turnaudit._native")]
pub(crate) struct VerifyStep {
    decode: Py<PyAny>,
    shipped: Plans,
    tracker: Py<NativeStreamTracker>,
    check: Py<ContractCheck>,
    tally: Py<PyDict>,
    /// Kinds tallied by the scanning path, added to `tally` before `run` returns.
    scanned_tally: FastMap<TallyKey, u64>,
    /// The pack and policy texts of `scanned_tally`'s keys, each once (a turn looks its
    /// texts up here, by borrowed `&str`, instead of copying them into its key).
    tally_texts: Interned,
    fed_partitions: FastSet<i64>,
    /// The list `admit_for_run` returned and what it read of each of its messages: `run`
    /// over that list asks a message its partition, offset and timestamp no second time.
    admitted: Option<(Py<PyList>, Vec<admit::Read>)>,
    /// The list `positions` returned and what it read of each message, for `admit_for_run`.
    positioned: Option<(Py<PyList>, Vec<admit::Read>)>,
    messages: u64,
    first_timestamp: Option<i64>,
    last_timestamp: Option<i64>,
}

/// `TurnCounts`' tally key: (pack, stub, refused, hedged, writer version, policy), the
/// texts as their index in `Interned`.
type TallyKey = (u32, bool, bool, bool, i64, Option<u32>);

type Stop = (usize, u8, Py<PyAny>, Py<PyAny>, bool);

/// What one message came to.
enum Step {
    Tallied,
    Feed,
    Finish(Py<PyAny>, Py<PyAny>, bool),
    NotATurn(Py<PyAny>),
}

impl VerifyStep {
    fn stamp(&mut self, timestamp: Option<i64>) {
        let Some(timestamp) = timestamp.filter(|t| *t > 0) else { return };
        self.first_timestamp = Some(self.first_timestamp.map_or(timestamp, |t| t.min(timestamp)));
        self.last_timestamp = Some(self.last_timestamp.map_or(timestamp, |t| t.max(timestamp)));
    }

    fn counted(&mut self, msg: &Bound<'_, PyAny>, read: Option<admit::Read>) -> PyResult<i64> {
        let py = msg.py();
        let (offset, timestamp) = match read {
            Some(read) => (read.offset, Some(read.timestamp)),
            None => (
                msg.call_method0(intern!(py, "offset"))?.extract::<Option<i64>>()?.unwrap_or(0),
                msg.call_method0(intern!(py, "timestamp"))?.get_item(1)?.extract()?,
            ),
        };
        self.messages += 1;
        self.stamp(timestamp);
        Ok(offset)
    }

    /// A message of a scanned schema: no Python object built unless it is not ordinary.
    #[allow(clippy::too_many_arguments)]
    fn by_scan(
        &mut self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        read: Option<admit::Read>,
        shipped: &Shipped,
        bytes: &Bound<'_, PyBytes>,
        partition: i64,
        tracker: &NativeStreamTracker,
        check: &ContractCheck,
    ) -> PyResult<Step> {
        let payload = bytes.as_bytes();
        let Some(f) = scan_message(shipped, payload) else {
            return Ok(Step::Feed);
        };
        // The fields the tracker reads, of the kinds it takes; any other: the Verifier's.
        let Some((session, event_id, sequence, producer, prev)) = track_fields(&f) else {
            return Ok(Step::Feed);
        };
        let offset = self.counted(msg, read)?;
        let mut opened = false;
        let content = chain_digest(payload, None); // single-object: the header's fingerprint
        let placed: Placed = match tracker.place_fields(py, session, producer, sequence, event_id, Some(prev), &|| Ok(Prev::Text(prev.to_owned())), &content, Some(partition), Some(offset), Some(&mut opened)) {
            Ok(placed) => placed,
            // As the Python path: a field of the wrong kind is not a turn; anything else
            // (the stream spill's disk full) ends verify.
            Err(err) if is_not_a_turn(py, &err) => return Ok(Step::NotATurn(err.into_value(py).into_any())),
            Err(err) => return Err(err),
        };
        let key = msg.call_method0(intern!(py, "key"))?;
        let key_is_session = key.cast::<PyBytes>().is_ok_and(|k| k.as_bytes() == session.as_bytes());
        let recorded = f[BREACHES].as_ref().is_some_and(V::truthy);
        // A gap it opens comes back too: the follower keeps when each gap opened.
        let ordinary = placed.outcome == NEW
            && placed.opened == 0
            && placed.chain_break.is_none()
            && !(opened && sequence > 0)
            && key_is_session
            && !recorded
            && !check.breaks_scanned(&f);
        if !ordinary {
            let stream = PyTuple::new(py, [PyString::new(py, session), PyString::new(py, producer)])?;
            let result = tracker.result_of(py, &stream, sequence, placed)?;
            let decoded = self.decode.bind(py).call1((bytes,))?;
            return Ok(Step::Finish(decoded.unbind(), result, opened));
        }
        self.tally_scanned(&check.texts, &f, shipped.scan.version);
        Ok(Step::Tallied)
    }

    fn tally_scanned<'a>(&mut self, texts: &Texts, f: &[Option<V<'a>>], version: i64) {
        let text = |v: Option<&V<'a>>| match v {
            Some(V::Str(s)) => Some(*s),
            _ => None,
        };
        let bundle = f[VERDICTS].as_ref();
        let field = |name: &str| bundle.and_then(|b| b.field(name)).is_some_and(V::truthy);
        let policy = match &f[ACTION] {
            Some(action @ V::Fields(_)) => text(action.field("output_policy")),
            _ => None,
        };
        let pack = text(f[PACK_ID].as_ref()).unwrap_or_default();
        let key: TallyKey = (
            self.tally_texts.of(pack),
            f[PATH].as_ref().is_some_and(|p| p.is_text(&texts.stub_path.text)),
            field("refusal_emitted"),
            field("hedge_injected"),
            version,
            policy.map(|p| self.tally_texts.of(p)),
        );
        *self.scanned_tally.entry(key).or_insert(0) += 1;
    }

    /// The scanning path's tally into the Verifier's (the same keys `TurnCounts.add` makes).
    fn flush_tally(&mut self, py: Python<'_>) -> PyResult<()> {
        let tally = self.tally.bind(py);
        for ((pack, stub, refused, hedged, version, policy), n) in self.scanned_tally.drain() {
            let kind = PyTuple::new(
                py,
                [
                    PyString::new(py, self.tally_texts.text(pack)).into_any(),
                    PyBool::new(py, stub).to_owned().into_any(),
                    PyBool::new(py, refused).to_owned().into_any(),
                    PyBool::new(py, hedged).to_owned().into_any(),
                    version.into_pyobject(py)?.into_any(),
                    match policy {
                        Some(p) => PyString::new(py, self.tally_texts.text(p)).into_any(),
                        None => py.None().into_bound(py),
                    },
                ],
            )?;
            let before: u64 = match tally.get_item(&kind)? {
                Some(count) => count.extract()?,
                None => 0,
            };
            tally.set_item(kind, before + n)?;
        }
        self.tally_texts.clear();
        Ok(())
    }

    fn step(
        &mut self,
        py: Python<'_>,
        msg: &Bound<'_, PyAny>,
        read: Option<admit::Read>,
        tracker: &NativeStreamTracker,
        check: &ContractCheck,
    ) -> PyResult<Step> {
        let partition: i64 = match read {
            Some(read) => read.partition,
            None => msg.call_method0(intern!(py, "partition"))?.extract::<Option<i64>>()?.unwrap_or(0),
        };
        if !self.fed_partitions.contains(&partition) {
            self.fed_partitions.insert(partition);
            return Ok(Step::Feed); // its partition's first message
        }
        let value = msg.call_method0(intern!(py, "value"))?;
        let Ok(bytes) = value.cast::<PyBytes>() else {
            return Ok(Step::Feed); // no value: the Verifier says why
        };
        // A schema the step does not scan (v1/v2, or one learned at run time): the
        // Verifier's own decoding.
        let Some(shipped) = self.shipped.of(bytes.as_bytes()) else { return Ok(Step::Feed) };
        self.by_scan(py, msg, read, &shipped, bytes, partition, tracker, check)
    }
}

#[pymethods]
impl VerifyStep {
    /// `shipped`: (fingerprint, decoder, version, shared defaults, copied defaults) of the
    /// shipped writer schemas; those the step can scan are read here, any other message
    /// goes to the Verifier (which decodes with `decode`).
    #[new]
    #[pyo3(signature = (decode, tracker, check, tally, shipped = Vec::new()))]
    fn new(
        py: Python<'_>,
        decode: Py<PyAny>,
        tracker: Py<NativeStreamTracker>,
        check: Py<ContractCheck>,
        tally: Py<PyDict>,
        shipped: Vec<ShippedPlan>,
    ) -> PyResult<Self> {
        let plans = Plans::new(py, shipped)?;
        Ok(VerifyStep {
            decode,
            shipped: plans,
            tracker,
            check,
            tally,
            scanned_tally: FastMap::default(),
            tally_texts: Interned::default(),
            fed_partitions: FastSet::default(),
            admitted: None,
            positioned: None,
            messages: 0,
            first_timestamp: None,
            last_timestamp: None,
        })
    }

    /// The batch's messages from `start` on, until one is the Verifier's: (its index, why,
    /// its decoded event, its `TrackResult` or the error placing it raised, whether it
    /// opened a stream). `(len(batch), DONE, None, None, False)` at the end.
    fn run(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize) -> PyResult<Stop> {
        let tracker = self.tracker.clone_ref(py);
        let check = self.check.clone_ref(py);
        let none = || py.None();
        let mut stop = (batch.len(), DONE, none(), none(), false);
        // What admitting read, for the list it returned only; a message is taken for the
        // one read only while it is the same object.
        let admitted = self.admitted.take().filter(|(list, read)| list.bind(py).is(batch) && read.len() == batch.len());
        for index in start..batch.len() {
            let msg = batch.get_item(index)?;
            let read = admitted.as_ref().map(|(_, read)| read[index]).filter(|r| r.message == msg.as_ptr() as usize);
            match self.step(py, &msg, read, tracker.get(), check.get()) {
                Ok(Step::Tallied) => continue,
                Ok(Step::Feed) => stop = (index, FEED, none(), none(), false),
                Ok(Step::Finish(decoded, result, opened)) => stop = (index, FINISH, decoded, result, opened),
                Ok(Step::NotATurn(err)) => stop = (index, NOT_A_TURN, none(), err, false),
                Err(err) => {
                    self.flush_tally(py)?;
                    return Err(err);
                }
            }
            break;
        }
        if stop.1 != DONE {
            self.admitted = admitted; // `run` goes on from the next index
        }
        self.flush_tally(py)?;
        Ok(stop)
    }

    /// Messages counted here since the last call (the Verifier adds them to its own).
    fn take_messages(&mut self) -> u64 {
        std::mem::take(&mut self.messages)
    }

    /// The earliest and latest positive broker timestamps seen here since the last call.
    fn take_timestamps(&mut self) -> (Option<i64>, Option<i64>) {
        (self.first_timestamp.take(), self.last_timestamp.take())
    }

    /// Partitions whose first message already went to the Verifier.
    fn partitions(&self) -> Vec<i64> {
        let mut out: Vec<i64> = self.fed_partitions.iter().copied().collect();
        out.sort_unstable();
        out
    }

    /// Writer versions this step scans without building records.
    fn scanned_versions(&self) -> Vec<i64> {
        self.shipped.versions()
    }

    /// `verify --follow`'s batch admitted (`admit::admit`): the messages past their
    /// partition's next offset, and per partition (next offset, latest timestamp,
    /// admitted, read again).
    #[staticmethod]
    fn admit<'py>(batch: &Bound<'py, PyList>, next_offsets: &Bound<'py, PyDict>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        admit::admit(batch, next_offsets, None, None)
    }

    /// `admit::positions`: the messages with a partition and an offset, and per partition
    /// (first offset, offset after the last); what it read of each is kept for
    /// `admit_for_run` over the returned list.
    fn positions<'py>(&mut self, records: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        self.positioned = None;
        let mut read = Vec::new();
        let (placed, met) = admit::positions(records, &mut read)?;
        self.positioned = Some((placed.clone().unbind(), read));
        Ok((placed, met))
    }

    /// `admit`, keeping what it read of each admitted message for `run` over the list it
    /// returns (the list is not to change in between; a message that did is asked again).
    fn admit_for_run<'py>(
        &mut self,
        batch: &Bound<'py, PyList>,
        next_offsets: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        self.admitted = None;
        let py = batch.py();
        let known = self.positioned.take().filter(|(list, read)| list.bind(py).is(batch) && read.len() == batch.len());
        let mut read = Vec::with_capacity(batch.len());
        let (live, met) = admit::admit(batch, next_offsets, Some(&mut read), known.as_ref().map(|(_, k)| k.as_slice()))?;
        self.admitted = Some((live.clone().unbind(), read));
        Ok((live, met))
    }

    #[classattr]
    fn kinds() -> (u8, u8, u8, u8) {
        (DONE, FEED, FINISH, NOT_A_TURN)
    }
}
