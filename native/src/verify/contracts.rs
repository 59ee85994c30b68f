//! Contracts 1-4 on a scanned record (`ContractCheck`): "no breach" only where
//! `turnaudit.contracts.check_event` finds none, "maybe" in every case of doubt.

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::decode::scan::V;


/// The top-level fields the scanning path keeps, by slot.
pub(crate) const SLOTS: [&str; 20] = [
    "event_id", "session_id", "producer_id", "sequence", "prev_hash", "pack_id", "path", "breaches",
    "verdicts", "action_assessment", "identity_score", "safety_verdict", "ethics_verdict",
    "cycle_cost_total", "vault_hits", "flagged", "input_tokens", "walk_surface",
    "articulation_surface", "surface",
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
pub(crate) const IDENTITY_SCORE: usize = 10;
pub(crate) const CYCLE_COST: usize = 13;
pub(crate) const VAULT_HITS: usize = 14;
pub(crate) const FLAGGED: usize = 15;
pub(crate) const INPUT_TOKENS: usize = 16;
pub(crate) const WALK_SURFACE: usize = 17;
pub(crate) const ARTICULATION_SURFACE: usize = 18;
pub(crate) const SURFACE: usize = 19;

pub(crate) fn slot(name: &str) -> Option<usize> {
    SLOTS.iter().position(|s| *s == name)
}

/// Contracts 1-4 on a scanned record: `breaks_scanned` is false only when the Python
/// check finds nothing. The constants are the Python side's own (passed in as text).
#[pyclass(frozen, module = "turnaudit._native")]
pub(crate) struct ContractCheck {
    pub(crate) texts: Texts,
}

/// The rule's constants, as text.
pub(crate) struct Texts {
    pub(crate) stub_path: String,
    pub(crate) unknown_surface: String,
    pub(crate) per_field: Vec<usize>,
    pub(crate) v2_per_field: Vec<usize>,
    pub(crate) void_tiers: Vec<String>,
    pub(crate) void: String,
    pub(crate) hold: String,
    pub(crate) domain_seal: String,
    pub(crate) domain_hold: String,
    pub(crate) domain_void: String,
}

impl ContractCheck {
    /// `breaks` on a scanned record: false only when the Python check finds nothing.
    pub(crate) fn breaks_scanned(&self, f: &[Option<V<'_>>]) -> bool {
        let t = &self.texts;
        let (Some(bundle), Some(path)) = (&f[VERDICTS], &f[PATH]) else { return true };
        let (Some(refused), Some(hedged)) = (bundle.field("refusal_emitted"), bundle.field("hedge_injected")) else {
            return true;
        };
        let refused = refused.truthy();
        if refused && hedged.truthy() {
            return true;
        }
        if path.is_text(&t.stub_path) {
            let unknown = t.unknown_surface.as_str();
            let is = |i: usize, test: &dyn Fn(&V<'_>) -> bool| f[i].as_ref().is_some_and(test);
            let kept = matches!(hedged, V::Bool(false))
                && is(IDENTITY_SCORE, &|v| matches!(v, V::Null))
                && bundle.field("identity_score").is_some_and(|v| matches!(v, V::Null))
                && is(CYCLE_COST, &|v| v.is_number(0))
                && is(VAULT_HITS, &|v| v.is_number(0))
                && is(FLAGGED, &|v| matches!(v, V::Bool(false)))
                && is(INPUT_TOKENS, &|v| v.truthy())
                && is(WALK_SURFACE, &|v| v.is_text(unknown))
                && is(ARTICULATION_SURFACE, &|v| v.is_text(unknown))
                && (refused || is(SURFACE, &|v| v.is_text(unknown)));
            if !kept {
                return true;
            }
        }
        match &f[ACTION] {
            None => return true,
            Some(V::Null) => {}
            Some(action @ V::Fields(_)) => {
                let (Some(tier), Some(risk), Some(human), Some(execution), Some(policy)) = (
                    action.field("risk_tier"),
                    action.field("action_risk_verdict"),
                    action.field("human_decision_required"),
                    action.field("execution_verdict"),
                    action.field("output_policy"),
                ) else {
                    return true;
                };
                let expected = if t.void_tiers.iter().any(|v| tier.is_text(v)) || risk.is_text(&t.void) {
                    &t.domain_void
                } else if human.truthy() || risk.is_text(&t.hold) {
                    &t.domain_hold
                } else {
                    &t.domain_seal
                };
                let pair_is = |v: &str| execution.is_text(v) && risk.is_text(v);
                if action.field("injection_detected").is_some_and(|i| i.truthy()) && !pair_is(&t.void) {
                    return true;
                }
                if action.field("critic_available").is_some_and(|c| !c.truthy()) && !pair_is(&t.hold) {
                    return true;
                }
                if !policy.is_text(expected) {
                    return true;
                }
            }
            Some(_) => return true,
        }
        let Some(version) = bundle.field("schema_version") else { return true };
        let names = if version.is_number(2) { &t.v2_per_field } else { &t.per_field };
        for &i in names {
            // The writer has every slot (the step scans no other): the field is there.
            let (Some(field), Some(in_bundle)) = (&f[i], bundle.field(SLOTS[i])) else { return true };
            if !field.same(in_bundle) {
                return true;
            }
        }
        false
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
        py: Python<'_>,
    ) -> PyResult<Self> {
        let (domain_seal, domain_hold, domain_void) = policies;
        let text = |o: &Py<PyAny>| o.bind(py).extract::<String>();
        let slots = |names: &Vec<Py<PyString>>| -> PyResult<Vec<usize>> {
            names
                .iter()
                .map(|n| {
                    let n = n.bind(py).to_str()?;
                    slot(n).ok_or_else(|| pyo3::exceptions::PyValueError::new_err(format!("{n} is not a field the native step reads")))
                })
                .collect()
        };
        let texts = Texts {
            stub_path: text(&stub_path)?,
            unknown_surface: text(&unknown_surface)?,
            per_field: slots(&per_field)?,
            v2_per_field: slots(&v2_per_field)?,
            void_tiers: void_tiers.iter().map(text).collect::<PyResult<_>>()?,
            void: text(&void)?,
            hold: text(&hold)?,
            domain_seal: text(&domain_seal)?,
            domain_hold: text(&domain_hold)?,
            domain_void: text(&domain_void)?,
        };
        Ok(ContractCheck { texts })
    }
}

#[cfg(test)]
mod tests;
