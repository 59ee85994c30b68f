//! The metrics service's tallies, as the native consumer step (`consume.rs`) keeps them
//! between hand-backs: turns by (pack, domain, path, writer version, refused, hedged),
//! action assessments by (output policy, risk tier, action-risk verdict), occurred_at.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple};

use super::contracts::{ACTION, DOMAIN, OCCURRED_AT, PACK_ID, PATH, VERDICTS};
use super::scanned::Interned;
use crate::decode::scan::V;
use crate::hashing::FastMap;

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

/// The tallies since the last hand-back.
pub(crate) struct Tallies {
    turns: Ordered<TurnKey>,
    actions: Ordered<ActionKey>,
    occurred: Vec<i64>,
    texts: Interned,
}

impl Tallies {
    pub(crate) fn new() -> Self {
        Tallies { turns: Ordered::new(), actions: Ordered::new(), occurred: Vec::new(), texts: Interned::default() }
    }

    pub(crate) fn add(&mut self, l: &Labels<'_>, version: i64) {
        let t = &mut self.texts;
        let key = (t.of(l.pack), t.of(l.domain), t.of(l.path), version, l.refused, l.hedged);
        self.turns.add(key);
        if let Some((policy, tier, verdict)) = l.action {
            let key = (t.of(policy), t.of(tier), t.of(verdict));
            self.actions.add(key);
        }
        self.occurred.push(l.occurred_ms);
    }

    /// The tallies into the sink's.
    pub(crate) fn flush(&mut self, py: Python<'_>, turns: &Bound<'_, PyDict>, actions: &Bound<'_, PyDict>, occurred: &Bound<'_, PyList>) -> PyResult<()> {
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
        self.texts.clear();
        Ok(())
    }
}

/// A scanned message's labels, of the kinds the sink tallies.
pub(crate) struct Labels<'a> {
    pack: &'a str,
    domain: &'a str,
    path: &'a str,
    refused: bool,
    hedged: bool,
    action: Option<(&'a str, &'a str, &'a str)>,
    occurred_ms: i64,
}

pub(crate) fn labels<'a>(f: &'a [Option<V<'a>>]) -> Option<Labels<'a>> {
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
