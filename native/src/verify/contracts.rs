//! Contracts 1-4 (`turnaudit.contracts.check_event`), the one implementation: the rule
//! reads a turn through `Value`, which a decoded event (Python objects, every answer
//! exact: `contract_values::Object`) and verify's scanned record (borrowed values,
//! "unsure" wherever the scan cannot vouch for Python's answer: `contract_values::Scanned`)
//! both give. The breaches and their details are Python's `Breach` objects, built here;
//! the rule's constants (the verdict names, the per-field lists) are Python's own,
//! passed in once.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

use super::contract_values::{Object, Scanned};
pub(crate) use super::rule_input::{Ask, Key, Number, Stop, Text, Value};
use crate::decode::scan::V;


/// The top-level fields the scanning path keeps, by slot (the last two: the metrics
/// service's labels and delay, `consume`).
pub(crate) const SLOTS: [&str; 22] = [
    "event_id", "session_id", "producer_id", "sequence", "prev_hash", "pack_id", "path", "breaches",
    "verdicts", "action_assessment", "identity_score", "safety_verdict", "ethics_verdict",
    "cycle_cost_total", "vault_hits", "flagged", "input_tokens", "walk_surface",
    "articulation_surface", "surface", "domain", "occurred_at",
];
pub(crate) const EVENT_ID: usize = 0;
pub(crate) const SESSION_ID: usize = 1;
pub(crate) const PRODUCER_ID: usize = 2;
pub(crate) const SEQUENCE: usize = 3;
pub(crate) const PREV_HASH: usize = 4;
pub(crate) const PACK_ID: usize = 5;
pub(crate) const PATH: usize = 6;
pub(crate) const BREACHES: usize = 7;
pub(crate) const VERDICTS: usize = 8;
pub(crate) const ACTION: usize = 9;
pub(crate) const SURFACE: usize = 19;
pub(crate) const DOMAIN: usize = 20;
pub(crate) const OCCURRED_AT: usize = 21;

pub(crate) fn slot(name: &str) -> Option<usize> {
    SLOTS.iter().position(|s| *s == name)
}

/// The breaches' contracts, by index into `ContractCheck::contracts`.
const REFUSAL_HEDGE: usize = 0;
const STUB_FIELDS: usize = 1;
const VERDICT_SPLIT: usize = 2;
const POLICY_DERIVED: usize = 3;
const BUNDLE_MATCHES: usize = 4;

/// The field names the rule reads.
pub(crate) struct Keys {
    verdicts: Key,
    refusal_emitted: Key,
    hedge_injected: Key,
    path: Key,
    identity_score: Key,
    cycle_cost_total: Key,
    vault_hits: Key,
    flagged: Key,
    input_tokens: Key,
    walk_surface: Key,
    articulation_surface: Key,
    surface: Key,
    action_assessment: Key,
    risk_tier: Key,
    action_risk_verdict: Key,
    human_decision_required: Key,
    execution_verdict: Key,
    injection_detected: Key,
    critic_available: Key,
    output_policy: Key,
    schema_version: Key,
    per_field: Vec<Key>,
    v2_per_field: Vec<Key>,
}

/// Contracts 1-4: called with an event, its breaches (`list[Breach]`); verify's step asks
/// `breaks_scanned` of a scanned record.
#[pyclass(frozen, module = "turnaudit._native")]
pub(crate) struct ContractCheck {
    pub(crate) texts: Texts,
    keys: Keys,
    breach: Py<PyAny>,
    contracts: Vec<Py<PyAny>>,
}

/// The rule's constants.
pub(crate) struct Texts {
    pub(crate) stub_path: Text,
    unknown_surface: Text,
    void_tiers: Vec<Text>,
    void: Text,
    hold: Text,
    domain_seal: Text,
    domain_hold: Text,
    domain_void: Text,
}

impl ContractCheck {
    /// Contracts 1-4 on `event`, each breach found as (contract, detail) into `out`, in
    /// the order and with the words of `check_event`.
    pub(crate) fn breaches<T: Value>(&self, event: &T, out: &mut Vec<(usize, String)>) -> Ask<()> {
        let (k, t) = (&self.keys, &self.texts);
        let bundle = event.item(&k.verdicts)?;
        let refused = bundle.item(&k.refusal_emitted)?.truthy()?;
        if refused && bundle.item(&k.hedge_injected)?.truthy()? {
            out.push((REFUSAL_HEDGE, "refusal_emitted and hedge_injected both true".into()));
        }
        if event.item(&k.path)?.is_text(&t.stub_path)? {
            // Every expression evaluated, in order, as the Python tuple is.
            let unknown = &t.unknown_surface;
            let kept = [
                ("hedge_injected", bundle.item(&k.hedge_injected)?.is_false()?),
                ("identity_score", event.item(&k.identity_score)?.is_none()?),
                ("bundle.identity_score", bundle.item(&k.identity_score)?.is_none()?),
                ("cycle_cost_total", event.item(&k.cycle_cost_total)?.is_number(Number::Float(0.0))?),
                ("vault_hits", event.item(&k.vault_hits)?.is_number(Number::Int(0))?),
                ("flagged", event.item(&k.flagged)?.is_false()?),
                ("input_tokens", event.item(&k.input_tokens)?.truthy()?),
                ("walk_surface", event.item(&k.walk_surface)?.is_text(unknown)?),
                ("articulation_surface", event.item(&k.articulation_surface)?.is_text(unknown)?),
                ("surface", refused || event.item(&k.surface)?.is_text(unknown)?),
            ];
            let wrong: Vec<&str> = kept.iter().filter(|(_, ok)| !ok).map(|(name, _)| *name).collect();
            if !wrong.is_empty() {
                out.push((STUB_FIELDS, format!("stub turn with {}", wrong.join(", "))));
            }
        }
        if let Some(action) = event.get(&k.action_assessment)? {
            self.action_breaches(&action, out)?;
        }
        // v2 events carry verdicts only in the bundle; v1, v3 on and the event's own
        // identity_score must agree.
        let v2 = bundle.item(&k.schema_version)?.is_number(Number::Int(2))?;
        let mut mismatched: Vec<&str> = Vec::new();
        for key in if v2 { &k.v2_per_field } else { &k.per_field } {
            if event.has(key)? && !event.item(key)?.equals(&bundle.item(key)?)? {
                mismatched.push(&key.name);
            }
        }
        if !mismatched.is_empty() {
            out.push((BUNDLE_MATCHES, format!("bundle differs from {}", mismatched.join(", "))));
        }
        Ok(())
    }

    /// `derive_output_policy` and `verdict_split_problem` on an action assessment.
    fn action_breaches<T: Value>(&self, action: &T, out: &mut Vec<(usize, String)>) -> Ask<()> {
        let (k, t) = (&self.keys, &self.texts);
        let tier = action.item(&k.risk_tier)?;
        let risk = action.item(&k.action_risk_verdict)?;
        let human = action.item(&k.human_decision_required)?;
        let mut void_tier = false;
        for v in &t.void_tiers {
            if tier.is_text(v)? {
                void_tier = true;
                break;
            }
        }
        let expected = if void_tier || risk.is_text(&t.void)? {
            &t.domain_void
        } else if human.truthy()? || risk.is_text(&t.hold)? {
            &t.domain_hold
        } else {
            &t.domain_seal
        };
        let execution = action.item(&k.execution_verdict)?;
        let risk = action.item(&k.action_risk_verdict)?;
        let injection = action.flag(&k.injection_detected, false)?;
        let critic = action.flag(&k.critic_available, true)?;
        let pair_is = |v: &Text| -> Ask<bool> { Ok(execution.is_text(v)? && risk.is_text(v)?) };
        let problem = if injection && !pair_is(&t.void)? {
            Some(("injection detected", &t.void))
        } else if !critic && !pair_is(&t.hold)? {
            Some(("critic unavailable", &t.hold))
        } else {
            None
        };
        if let Some((why, path)) = problem {
            let (e, r, p) = (execution.shown()?, risk.shown()?, &path.text);
            out.push((VERDICT_SPLIT, format!("{why} but verdicts are {e}/{r}, not {p}/{p}")));
        }
        let policy = action.item(&k.output_policy)?;
        if !policy.is_text(expected)? {
            let shown = action.item(&k.output_policy)?.shown()?;
            out.push((POLICY_DERIVED, format!("output_policy {shown} but the rule gives {}", expected.text)));
        }
        Ok(())
    }

    /// Whether a scanned record might break a contract: false only when the rule finds
    /// no breach on values it can vouch for.
    pub(crate) fn breaks_scanned(&self, f: &[Option<V<'_>>]) -> bool {
        let mut out = Vec::new();
        !matches!(self.breaches(&Scanned::Top(f), &mut out), Ok(())) || !out.is_empty()
    }
}

impl Keys {
    fn new(py: Python<'_>, per_field: Vec<Key>, v2_per_field: Vec<Key>) -> Self {
        let k = |name: &str| key(py, name);
        Keys {
            verdicts: k("verdicts"),
            refusal_emitted: k("refusal_emitted"),
            hedge_injected: k("hedge_injected"),
            path: k("path"),
            identity_score: k("identity_score"),
            cycle_cost_total: k("cycle_cost_total"),
            vault_hits: k("vault_hits"),
            flagged: k("flagged"),
            input_tokens: k("input_tokens"),
            walk_surface: k("walk_surface"),
            articulation_surface: k("articulation_surface"),
            surface: k("surface"),
            action_assessment: k("action_assessment"),
            risk_tier: k("risk_tier"),
            action_risk_verdict: k("action_risk_verdict"),
            human_decision_required: k("human_decision_required"),
            execution_verdict: k("execution_verdict"),
            injection_detected: k("injection_detected"),
            critic_available: k("critic_available"),
            output_policy: k("output_policy"),
            schema_version: k("schema_version"),
            per_field,
            v2_per_field,
        }
    }
}

fn key(py: Python<'_>, name: &str) -> Key {
    Key { name: name.to_owned(), slot: slot(name), py: PyString::intern(py, name).unbind() }
}

fn text(value: &Bound<'_, PyAny>) -> PyResult<Text> {
    let text: String = value.extract()?;
    Ok(Text { py: PyString::new(value.py(), &text).unbind(), text })
}

#[pymethods]
impl ContractCheck {
    #[new]
    #[pyo3(signature = (*, stub_path, unknown_surface, per_field, v2_per_field, void_tiers, void, hold, policies, breach, contracts))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        stub_path: Bound<'_, PyAny>,
        unknown_surface: Bound<'_, PyAny>,
        per_field: Vec<String>,
        v2_per_field: Vec<String>,
        void_tiers: Vec<Bound<'_, PyAny>>,
        void: Bound<'_, PyAny>,
        hold: Bound<'_, PyAny>,
        policies: (Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>),
        breach: Py<PyAny>,
        contracts: Vec<Py<PyAny>>,
        py: Python<'_>,
    ) -> PyResult<Self> {
        if contracts.len() != 5 {
            return Err(PyValueError::new_err(
                "five contracts: refusal/hedge, stub fields, verdict split, output policy, bundle",
            ));
        }
        for name in per_field.iter().chain(&v2_per_field) {
            if slot(name).is_none() {
                return Err(PyValueError::new_err(format!("{name} is not a field the native step reads")));
            }
        }
        let (domain_seal, domain_hold, domain_void) = policies;
        let texts = Texts {
            stub_path: text(&stub_path)?,
            unknown_surface: text(&unknown_surface)?,
            void_tiers: void_tiers.iter().map(text).collect::<PyResult<_>>()?,
            void: text(&void)?,
            hold: text(&hold)?,
            domain_seal: text(&domain_seal)?,
            domain_hold: text(&domain_hold)?,
            domain_void: text(&domain_void)?,
        };
        let names = |names: &[String]| names.iter().map(|n| key(py, n)).collect();
        let keys = Keys::new(py, names(&per_field), names(&v2_per_field));
        Ok(ContractCheck { texts, keys, breach, contracts })
    }

    /// `check_event(event)`: the breaches of contracts 1-4, as `Breach` objects.
    fn __call__<'py>(&self, event: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = event.py();
        let mut found = Vec::new();
        match self.breaches(&Object(event.clone()), &mut found) {
            Ok(()) => {}
            Err(Stop::Raised(err)) => return Err(err),
            Err(Stop::Unsure) => return Err(PyRuntimeError::new_err("a Python value left the contract rule unsure")),
        }
        let out = PyList::empty(py);
        for (contract, detail) in found {
            out.append(self.breach.bind(py).call1((self.contracts[contract].bind(py), detail))?)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
