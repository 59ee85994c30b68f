//! Contracts 1-4 on scanned values: a clean turn (plain and stub) passes, and each
//! contract broken on its own, or a value the scan cannot vouch for, sends the turn to
//! the Python check. Built from `V`s directly: no message, no Python.

use pyo3::types::PyString;

use super::*;

fn check() -> ContractCheck {
    Python::initialize();
    Python::attach(|py| {
        let text = |t: &str| Text { text: t.into(), py: PyString::new(py, t).unbind() };
        let keys = |names: &[&str]| names.iter().map(|n| key(py, n)).collect();
        let none = || py.None();
        ContractCheck {
            texts: Texts {
                stub_path: text("STUB"),
                unknown_surface: text("[unknown-domain]"),
                void_tiers: vec![text("RED"), text("CRITICAL")],
                void: text("VOID"),
                hold: text("HOLD"),
                domain_seal: text("DOMAIN_SEAL"),
                domain_hold: text("DOMAIN_HOLD"),
                domain_void: text("DOMAIN_VOID"),
            },
            keys: Keys::new(py, keys(&["identity_score", "safety_verdict", "ethics_verdict"]), keys(&["identity_score"])),
            breach: none(),
            contracts: (0..5).map(|_| none()).collect(),
        }
    })
}

fn at(name: &str) -> usize {
    slot(name).expect("a slot")
}

/// Where `ethics_verdict` sits among the slots.
const ETHICS: usize = 12;

fn bundle(refused: bool, hedged: bool, version: i64) -> V<'static> {
    V::Fields(vec![
        ("refusal_emitted", V::Bool(refused)),
        ("hedge_injected", V::Bool(hedged)),
        ("identity_score", V::Null),
        ("safety_verdict", V::Str("SEAL")),
        ("ethics_verdict", V::Str("SEAL")),
        ("schema_version", V::Int(version)),
    ])
}

fn action(tier: &'static str, risk: &'static str, human: bool, policy: &'static str) -> V<'static> {
    V::Fields(vec![
        ("risk_tier", V::Str(tier)),
        ("action_risk_verdict", V::Str(risk)),
        ("human_decision_required", V::Bool(human)),
        ("execution_verdict", V::Str(risk)),
        ("output_policy", V::Str(policy)),
        ("injection_detected", V::Bool(false)),
        ("critic_available", V::Bool(true)),
    ])
}

/// A turn keeping every contract: a full path with verdicts equal in both places.
fn clean() -> Vec<Option<V<'static>>> {
    let mut f: Vec<Option<V<'static>>> = (0..SLOTS.len()).map(|_| None).collect();
    f[PATH] = Some(V::Str("FULL"));
    f[VERDICTS] = Some(bundle(false, false, 3));
    f[ACTION] = Some(V::Null);
    f[at("identity_score")] = Some(V::Null);
    f[slot("safety_verdict").unwrap()] = Some(V::Str("SEAL"));
    f[ETHICS] = Some(V::Str("SEAL"));
    f
}

/// A stub turn as the contract wants it.
fn stub() -> Vec<Option<V<'static>>> {
    let mut f = clean();
    f[PATH] = Some(V::Str("STUB"));
    f[at("cycle_cost_total")] = Some(V::Float(0.0));
    f[at("vault_hits")] = Some(V::Int(0));
    f[at("flagged")] = Some(V::Bool(false));
    f[at("input_tokens")] = Some(V::Int(12));
    for i in [at("walk_surface"), at("articulation_surface"), at("surface")] {
        f[i] = Some(V::Str("[unknown-domain]"));
    }
    f
}

#[test]
fn the_slots_name_the_fields_their_indexes_say() {
    assert_eq!(SLOTS[11], "safety_verdict");
    assert_eq!(SLOTS[12], "ethics_verdict");
    for (i, name) in SLOTS.iter().enumerate() {
        assert_eq!(slot(name), Some(i));
    }
    assert_eq!(slot("no_such_field"), None);
}

#[test]
fn turns_keeping_every_contract_pass() {
    let c = check();
    assert!(!c.breaks_scanned(&clean()));
    assert!(!c.breaks_scanned(&stub()));
    // A derived policy for each rule's branch.
    for (tier, risk, human, policy) in [
        ("GREEN", "SEAL", false, "DOMAIN_SEAL"),
        ("RED", "SEAL", false, "DOMAIN_VOID"),
        ("CRITICAL", "HOLD", true, "DOMAIN_VOID"),
        ("GREEN", "VOID", false, "DOMAIN_VOID"),
        ("AMBER", "SEAL", true, "DOMAIN_HOLD"),
        ("GREEN", "HOLD", false, "DOMAIN_HOLD"),
    ] {
        let mut f = clean();
        f[ACTION] = Some(action(tier, risk, human, policy));
        assert!(!c.breaks_scanned(&f), "{tier} {risk} {human} {policy}");
    }
}

/// A change to a clean turn's scanned fields.
type Breaking = dyn Fn(&mut Vec<Option<V<'static>>>);

#[test]
fn each_broken_contract_sends_the_turn_to_python() {
    let c = check();
    let broken: Vec<(&str, Box<Breaking>)> = vec![
        ("refusal and hedge", Box::new(|f| f[VERDICTS] = Some(bundle(true, true, 3)))),
        ("stub hedged", Box::new(|f| f[VERDICTS] = Some(bundle(false, true, 3)))),
        ("stub with cost", Box::new(|f| f[at("cycle_cost_total")] = Some(V::Float(0.5)))),
        ("stub with vault hits", Box::new(|f| f[at("vault_hits")] = Some(V::Int(1)))),
        ("stub flagged", Box::new(|f| f[at("flagged")] = Some(V::Bool(true)))),
        ("stub without tokens", Box::new(|f| f[at("input_tokens")] = Some(V::Int(0)))),
        ("stub with a surface", Box::new(|f| f[at("walk_surface")] = Some(V::Str("finance")))),
        ("stub with a score", Box::new(|f| f[at("identity_score")] = Some(V::Float(0.9)))),
        ("policy not derived", Box::new(|f| f[ACTION] = Some(action("RED", "SEAL", false, "DOMAIN_SEAL")))),
        ("hold not derived", Box::new(|f| f[ACTION] = Some(action("GREEN", "SEAL", true, "DOMAIN_SEAL")))),
        (
            "injection not VOID/VOID",
            Box::new(|f| {
                let Some(V::Fields(a)) = &mut f[ACTION] else { unreachable!() };
                a[5].1 = V::Bool(true);
            }),
        ),
        (
            "critic missing not HOLD/HOLD",
            Box::new(|f| {
                let Some(V::Fields(a)) = &mut f[ACTION] else { unreachable!() };
                a[6].1 = V::Bool(false);
            }),
        ),
        ("bundle differs", Box::new(|f| f[ETHICS] = Some(V::Str("HOLD")))),
        ("a field missing", Box::new(|f| f[VERDICTS] = None)),
        ("an action of another kind", Box::new(|f| f[ACTION] = Some(V::Int(1)))),
    ];
    for (what, break_it) in broken {
        let mut f = stub();
        f[ACTION] = Some(action("GREEN", "SEAL", false, "DOMAIN_SEAL"));
        assert!(!c.breaks_scanned(&f), "the stub with an action is clean");
        break_it(&mut f);
        assert!(c.breaks_scanned(&f), "{what} passed");
    }
}

#[test]
fn a_refusal_with_a_hedge_breaks_on_any_path() {
    let mut f = clean();
    f[VERDICTS] = Some(bundle(true, true, 3));
    assert!(check().breaks_scanned(&f));
    f[VERDICTS] = Some(bundle(true, false, 3));
    assert!(!check().breaks_scanned(&f));
}

#[test]
fn a_v2_bundle_compares_only_the_identity_score() {
    let c = check();
    let mut f = clean();
    f[VERDICTS] = Some(bundle(false, false, 2));
    f[ETHICS] = Some(V::Str("HOLD")); // differs from the bundle, but v2 carries it only there
    assert!(!c.breaks_scanned(&f));
    f[at("identity_score")] = Some(V::Float(0.5));
    assert!(c.breaks_scanned(&f));
}
