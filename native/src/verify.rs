//! Verify's per-message step, native: a batch of consumed messages decoded, placed in
//! their streams, checked against contracts 1-4 and 6 and tallied, with no Python
//! bytecode run for an ordinary message (a new turn at its stream's next position, its
//! key the session id, no breach found or recorded).
//!
//! The Python `Verifier` owns the meaning; this file only takes its common case. Every
//! other message goes back to it at once, in stream order, at one of two points: before
//! anything about it was kept (`FEED`: the Verifier's whole `feed` runs) or after the
//! tracker placed it (`FINISH`, `NOT_A_TURN`: the Verifier concludes from the placement).
//! `ContractCheck` answers "no breach" exactly when `turnaudit.contracts.check_event`
//! returns no breach and raises nothing; in every case of doubt it says "maybe", and the
//! Python check decides. The differential tests hold the two to that.

use std::collections::{HashMap, HashSet};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::track::{NativeStreamTracker, NEW};
use crate::Decoder;

/// Avro single-object framing: two magic bytes, then the writer schema's 8-byte fingerprint.
const MAGIC: [u8; 2] = [0xC3, 0x01];
const HEADER: usize = 10;

/// A shipped writer schema as the Python decoder reads it natively (`ReadPlan`): its
/// compiled decoder, its version, and the defaults of the fields the reader added.
struct Shipped {
    decoder: Py<Decoder>,
    version: Py<PyAny>,
    fill_shared: Py<PyDict>,
    fill_copied: Vec<(Py<PyString>, Py<PyAny>)>,
}

type ShippedPlan = (Vec<u8>, Py<Decoder>, Py<PyAny>, Py<PyDict>, Vec<(Py<PyString>, Py<PyAny>)>);

/// Where `VerifyStep.run` stopped: the batch is done, or the message at the index is the
/// Verifier's to handle (see the module comment).
const DONE: u8 = 0;
const FEED: u8 = 1;
const FINISH: u8 = 2;
const NOT_A_TURN: u8 = 3;

/// Contracts 1-4 on a decoded event: `breaks` is `Ok(false)` only when the Python check
/// finds nothing. The constants are the Python side's own (passed in, not copied).
#[pyclass(frozen, module = "turnaudit_native")]
pub(crate) struct ContractCheck {
    stub_path: Py<PyAny>,
    unknown_surface: Py<PyAny>,
    per_field: Vec<Py<PyString>>,
    v2_per_field: Vec<Py<PyString>>,
    void_tiers: Vec<Py<PyAny>>,
    void: Py<PyAny>,
    hold: Py<PyAny>,
    domain_void: Py<PyAny>,
    domain_hold: Py<PyAny>,
    domain_seal: Py<PyAny>,
}

fn item<'py>(d: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    d.get_item(key)
}

impl ContractCheck {
    /// `Ok(false)`: the event keeps contracts 1-4 (the Python check agrees); `Ok(true)` or an
    /// error: a breach, or something only the Python check can say.
    fn breaks(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(event) = event.cast::<PyDict>() else { return Ok(true) };
        let Some(bundle) = item(event, intern!(py, "verdicts"))? else { return Ok(true) };
        let Ok(bundle) = bundle.cast::<PyDict>() else { return Ok(true) };
        let Some(refused) = item(bundle, intern!(py, "refusal_emitted"))? else { return Ok(true) };
        let refused = refused.is_truthy()?;
        if refused {
            let Some(hedged) = item(bundle, intern!(py, "hedge_injected"))? else { return Ok(true) };
            if hedged.is_truthy()? {
                return Ok(true); // contract 1
            }
        }
        let Some(path) = item(event, intern!(py, "path"))? else { return Ok(true) };
        if path.eq(self.stub_path.bind(py))? && !self.stub_keeps_its_fields(py, event, bundle, refused)? {
            return Ok(true); // contract 2
        }
        if let Some(action) = item(event, intern!(py, "action_assessment"))? {
            if !action.is_none() && !self.action_keeps_the_rule(py, &action)? {
                return Ok(true); // contracts 3 and the verdict split
            }
        }
        // Contract 4: the per-field verdicts equal the bundle's (v2: only identity_score).
        let Some(version) = item(bundle, intern!(py, "schema_version"))? else { return Ok(true) };
        let names = if version.eq(2)? { &self.v2_per_field } else { &self.per_field };
        for name in names {
            let name = name.bind(py);
            if let Some(field) = item(event, name)? {
                let Some(in_bundle) = item(bundle, name)? else { return Ok(true) };
                if field.ne(in_bundle)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn stub_keeps_its_fields(
        &self,
        py: Python<'_>,
        event: &Bound<'_, PyDict>,
        bundle: &Bound<'_, PyDict>,
        refused: bool,
    ) -> PyResult<bool> {
        let unknown = self.unknown_surface.bind(py);
        let false_ = PyBool::new(py, false);
        let Some(hedged) = item(bundle, intern!(py, "hedge_injected"))? else { return Ok(false) };
        let Some(identity) = item(event, intern!(py, "identity_score"))? else { return Ok(false) };
        let Some(bundle_identity) = item(bundle, intern!(py, "identity_score"))? else { return Ok(false) };
        let Some(cost) = item(event, intern!(py, "cycle_cost_total"))? else { return Ok(false) };
        let Some(hits) = item(event, intern!(py, "vault_hits"))? else { return Ok(false) };
        let Some(flagged) = item(event, intern!(py, "flagged"))? else { return Ok(false) };
        let Some(tokens) = item(event, intern!(py, "input_tokens"))? else { return Ok(false) };
        let Some(walk) = item(event, intern!(py, "walk_surface"))? else { return Ok(false) };
        let Some(articulation) = item(event, intern!(py, "articulation_surface"))? else { return Ok(false) };
        let Some(surface) = item(event, intern!(py, "surface"))? else { return Ok(false) };
        Ok(hedged.is(&*false_)
            && identity.is_none()
            && bundle_identity.is_none()
            && cost.eq(0.0_f64)?
            && hits.eq(0)?
            && flagged.is(&*false_)
            && tokens.is_truthy()?
            && walk.eq(unknown)?
            && articulation.eq(unknown)?
            && (refused || surface.eq(unknown)?))
    }

    fn action_keeps_the_rule(&self, py: Python<'_>, action: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(action) = action.cast::<PyDict>() else { return Ok(false) };
        let (Some(tier), Some(risk), Some(human), Some(execution), Some(policy)) = (
            item(action, intern!(py, "risk_tier"))?,
            item(action, intern!(py, "action_risk_verdict"))?,
            item(action, intern!(py, "human_decision_required"))?,
            item(action, intern!(py, "execution_verdict"))?,
            item(action, intern!(py, "output_policy"))?,
        ) else {
            return Ok(false);
        };
        let void = self.void.bind(py);
        let hold = self.hold.bind(py);
        let mut void_tier = false;
        for t in &self.void_tiers {
            if tier.eq(t.bind(py))? {
                void_tier = true;
                break;
            }
        }
        let expected = if void_tier || risk.eq(void)? {
            self.domain_void.bind(py)
        } else if human.is_truthy()? || risk.eq(hold)? {
            self.domain_hold.bind(py)
        } else {
            self.domain_seal.bind(py)
        };
        // The verdict split's fixed paths: injection -> VOID/VOID, no critic -> HOLD/HOLD
        // (`action.get(name, default)`, and a pair compared as Python compares tuples).
        let pair_is = |verdict: &Bound<'_, PyAny>| -> PyResult<bool> {
            Ok((execution.is(verdict) || execution.eq(verdict)?) && (risk.is(verdict) || risk.eq(verdict)?))
        };
        if let Some(injection) = item(action, intern!(py, "injection_detected"))? {
            if injection.is_truthy()? && !pair_is(void)? {
                return Ok(false);
            }
        }
        if let Some(critic) = item(action, intern!(py, "critic_available"))? {
            if !critic.is_truthy()? && !pair_is(hold)? {
                return Ok(false);
            }
        }
        Ok(!policy.ne(expected)?)
    }
}

#[pymethods]
impl ContractCheck {
    #[new]
    #[pyo3(signature = (*, stub_path, unknown_surface, per_field, v2_per_field, void_tiers, void, hold, policies))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        stub_path: Py<PyAny>,
        unknown_surface: Py<PyAny>,
        per_field: Vec<Py<PyString>>,
        v2_per_field: Vec<Py<PyString>>,
        void_tiers: Vec<Py<PyAny>>,
        void: Py<PyAny>,
        hold: Py<PyAny>,
        policies: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
    ) -> Self {
        let (domain_seal, domain_hold, domain_void) = policies;
        ContractCheck { stub_path, unknown_surface, per_field, v2_per_field, void_tiers, void, hold, domain_void, domain_hold, domain_seal }
    }

    /// True unless the event surely keeps contracts 1-4; raises where the Python check may.
    fn __call__(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.breaks(py, event)
    }
}

/// One range's ordinary messages, verified natively (see the module comment).
#[pyclass(module = "turnaudit_native")]
pub(crate) struct VerifyStep {
    decode: Py<PyAny>,
    shipped: HashMap<[u8; 8], Shipped>,
    tracker: Py<NativeStreamTracker>,
    check: Py<ContractCheck>,
    tally: Py<PyDict>,
    fed_partitions: HashSet<i64>,
    messages: u64,
    first_timestamp: Option<i64>,
    last_timestamp: Option<i64>,
}

type Stop = (usize, u8, Py<PyAny>, Py<PyAny>, bool);

impl VerifyStep {
    /// The event and its writer version, as `TurnEventDeserializer` gives them: a shipped
    /// single-object schema decoded here, any other through it. `None`: it does not decode.
    fn decoded<'py>(
        &self,
        py: Python<'py>,
        decode: &Bound<'py, PyAny>,
        bytes: &Bound<'py, PyBytes>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        let payload = bytes.as_bytes();
        let plan = if payload.len() >= HEADER && payload[..2] == MAGIC {
            let fingerprint: [u8; 8] = payload[2..HEADER].try_into().expect("8 bytes");
            self.shipped.get(&fingerprint)
        } else {
            None
        };
        let Some(plan) = plan else {
            return Ok(match decode.call1((bytes,)) {
                Ok(decoded) => Some((decoded.get_item(0)?, decoded.get_item(1)?)),
                Err(_) => None,
            });
        };
        let Ok((record, end)) = plan.decoder.get().run(py, payload, HEADER) else { return Ok(None) };
        if end != payload.len() {
            return Ok(None); // trailing bytes
        }
        let record = record.into_bound(py);
        let event = record.cast::<PyDict>()?;
        let shared = plan.fill_shared.bind(py);
        if !shared.is_empty() {
            event.update(shared.as_mapping())?;
        }
        for (name, default) in &plan.fill_copied {
            event.set_item(name.bind(py), default.bind(py).call_method0(intern!(py, "copy"))?)?;
        }
        Ok(Some((record, plan.version.bind(py).clone())))
    }

    fn stamp(&mut self, timestamp: i64) {
        if timestamp <= 0 {
            return;
        }
        self.first_timestamp = Some(self.first_timestamp.map_or(timestamp, |t| t.min(timestamp)));
        self.last_timestamp = Some(self.last_timestamp.map_or(timestamp, |t| t.max(timestamp)));
    }

    fn tally(&self, py: Python<'_>, stub_path: &Bound<'_, PyAny>, event: &Bound<'_, PyAny>, version: &Bound<'_, PyAny>) -> PyResult<()> {
        // `TurnCounts.add`'s key: (pack, stub, refused, hedged, writer version, policy).
        let bundle = event.get_item(intern!(py, "verdicts"))?;
        let action = event.get_item(intern!(py, "action_assessment"))?;
        let stub = event.get_item(intern!(py, "path"))?.eq(stub_path)?;
        let refused = bundle.get_item(intern!(py, "refusal_emitted"))?.is_truthy()?;
        let hedged = bundle.get_item(intern!(py, "hedge_injected"))?.is_truthy()?;
        let policy = if action.is_none() { action } else { action.get_item(intern!(py, "output_policy"))? };
        let kind = PyTuple::new(
            py,
            [
                event.get_item(intern!(py, "pack_id"))?,
                PyBool::new(py, stub).to_owned().into_any(),
                PyBool::new(py, refused).to_owned().into_any(),
                PyBool::new(py, hedged).to_owned().into_any(),
                version.clone(),
                policy,
            ],
        )?;
        let tally = self.tally.bind(py);
        let n: u64 = match tally.get_item(&kind)? {
            Some(n) => n.extract()?,
            None => 0,
        };
        tally.set_item(kind, n + 1)
    }
}

#[pymethods]
impl VerifyStep {
    /// `shipped`: (fingerprint, decoder, version, shared defaults, copied defaults) of the
    /// writer schemas decoded here directly; any other message goes through `decode`.
    #[new]
    #[pyo3(signature = (decode, tracker, check, tally, shipped = Vec::new()))]
    fn new(
        decode: Py<PyAny>,
        tracker: Py<NativeStreamTracker>,
        check: Py<ContractCheck>,
        tally: Py<PyDict>,
        shipped: Vec<ShippedPlan>,
    ) -> PyResult<Self> {
        let mut plans = HashMap::new();
        for (fingerprint, decoder, version, fill_shared, fill_copied) in shipped {
            let fingerprint: [u8; 8] = fingerprint
                .as_slice()
                .try_into()
                .map_err(|_| pyo3::exceptions::PyValueError::new_err("a fingerprint is 8 bytes"))?;
            plans.insert(fingerprint, Shipped { decoder, version, fill_shared, fill_copied });
        }
        Ok(VerifyStep { decode, shipped: plans, tracker, check, tally, fed_partitions: HashSet::new(), messages: 0, first_timestamp: None, last_timestamp: None })
    }

    /// The batch's messages from `start` on, until one is the Verifier's: (its index, why,
    /// its decoded event, its `TrackResult` or the error placing it raised, whether it
    /// opened a stream). `(len(batch), DONE, None, None, False)` at the end.
    fn run(&mut self, py: Python<'_>, batch: &Bound<'_, PyList>, start: usize) -> PyResult<Stop> {
        let decode = self.decode.clone_ref(py);
        let decode = decode.bind(py);
        let tracker = self.tracker.clone_ref(py);
        let tracker = tracker.get();
        let check = self.check.clone_ref(py);
        let check = check.get();
        let none = || py.None();
        for index in start..batch.len() {
            let msg = batch.get_item(index)?;
            let partition: i64 = msg.call_method0(intern!(py, "partition"))?.extract::<Option<i64>>()?.unwrap_or(0);
            if !self.fed_partitions.contains(&partition) {
                self.fed_partitions.insert(partition);
                return Ok((index, FEED, none(), none(), false)); // its partition's first message
            }
            let value = msg.call_method0(intern!(py, "value"))?;
            let Ok(bytes) = value.cast::<PyBytes>() else {
                return Ok((index, FEED, none(), none(), false)); // no value: the Verifier says why
            };
            let Some((event, version)) = self.decoded(py, decode, bytes)? else {
                return Ok((index, FEED, none(), none(), false)); // undecodable: the Verifier says why
            };
            let offset: i64 = msg.call_method0(intern!(py, "offset"))?.extract::<Option<i64>>()?.unwrap_or(0);
            let timestamp: Option<i64> = msg.call_method0(intern!(py, "timestamp"))?.get_item(1)?.extract()?;
            self.messages += 1;
            if let Some(t) = timestamp {
                self.stamp(t);
            }
            let held = tracker.streams_held()?;
            let (stream, sequence, placed) = match tracker.place_event(py, &event, bytes.as_bytes(), Some(partition), Some(offset)) {
                Ok(placing) => placing,
                Err(err) => return Ok((index, NOT_A_TURN, none(), err.into_value(py).into_any(), false)),
            };
            let opened = tracker.streams_held()? != held;
            let key = msg.call_method0(intern!(py, "key"))?;
            let session = stream.get_item(0)?;
            let key_is_session = match (key.cast::<PyBytes>(), session.cast::<PyString>()) {
                (Ok(k), Ok(s)) => s.to_str().is_ok_and(|s| s.as_bytes() == k.as_bytes()),
                _ => false,
            };
            let recorded = match event.cast::<PyDict>() {
                Ok(d) => match d.get_item(intern!(py, "breaches"))? {
                    Some(b) => b.is_truthy()?,
                    None => false,
                },
                Err(_) => true,
            };
            let ordinary = placed.outcome == NEW
                && placed.chain_break.is_none()
                && !(opened && sequence > 0)
                && key_is_session
                && !recorded
                && !check.breaks(py, &event).unwrap_or(true);
            if !ordinary {
                let result = tracker.result_of(py, &stream, sequence, placed)?;
                // The Verifier's own decoding of it (the same record): rare, so built again.
                let decoded = decode.call1((bytes,))?;
                return Ok((index, FINISH, decoded.unbind(), result, opened));
            }
            self.tally(py, check.stub_path.bind(py), &event, &version)?;
        }
        Ok((batch.len(), DONE, none(), none(), false))
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

    #[classattr]
    fn kinds() -> (u8, u8, u8, u8) {
        (DONE, FEED, FINISH, NOT_A_TURN)
    }
}
