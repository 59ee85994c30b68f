//! The steps of an HTIR trace made from one turn, the one home of the rule
//! `turnaudit.htir_steps.turn_steps` calls: the tool calls the runtime reported, then the
//! turn itself, in the flat shape the auditors read (a `None` field left out, the keys in
//! one fixed order: the manifest writes the steps as they are), surfaces and tool I/O as
//! the surface policy lets them through.
//!
//! Two sources give the rule the same record: a scanned message's slots (the consumer
//! step's `STEPS` outlet, `consume.rs`) and a decoded event's dict (`turn_steps`, read
//! into the same slots by `dict_slots`), so both paths build the steps the same way.

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use super::contracts::{ACTION, EVENT_ID, PATH, SEQUENCE, SURFACE, VERDICTS};
use super::line::{ALL_SLOTS, TASK, TOOL_STEPS, TURN};
use crate::decode::scan::V;

/// How much of a surface a trace keeps under `keep` (surfaces are sensitive and long;
/// the auditors need the gist).
pub(crate) const SURFACE_LIMIT: usize = 500;

/// The surface policy (`turnaudit.redaction.Redaction`): dropped, kept, or written as
/// its `text` (a keyed hash) says.
pub(crate) enum Redact {
    Drop,
    Keep,
    Text(Py<PyAny>),
}

impl Redact {
    /// `policy`: `SurfacePolicy`'s value; `text`: the redaction's `text` (called for `hash`).
    pub(crate) fn new(policy: &str, text: Py<PyAny>) -> PyResult<Self> {
        Ok(match policy {
            "drop" => Redact::Drop,
            "keep" => Redact::Keep,
            "hash" => Redact::Text(text),
            _ => return Err(PyValueError::new_err(format!("no surface policy {policy:?}"))),
        })
    }

    /// A tool's arguments or result as written, `None` to leave it out.
    fn tool_io<'py>(&self, py: Python<'py>, value: &V<'_>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let written = match self {
            Redact::Drop => return Ok(None),
            Redact::Keep => to_py(py, value)?,
            Redact::Text(text) => text.bind(py).call1((to_py(py, value)?,))?,
        };
        Ok((!written.is_none()).then_some(written))
    }

    /// The turn's surface as written: kept, its gist; hashed, the whole text (so it
    /// compares with the log sink's hash).
    fn surface<'py>(&self, py: Python<'py>, value: &V<'_>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match (self, value) {
            (Redact::Keep, V::Str(s)) => {
                let cut = s.char_indices().nth(SURFACE_LIMIT).map_or(*s, |(at, _)| &s[..at]);
                Ok(Some(PyString::new(py, cut).into_any()))
            }
            (Redact::Keep, _) => Err(PyTypeError::new_err("a surface is a text")),
            _ => self.tool_io(py, value),
        }
    }
}

/// A scanned or read value as the decoder gives it.
pub(crate) fn to_py<'py>(py: Python<'py>, v: &V<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        V::Null => py.None().into_bound(py),
        V::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        V::Int(i) => i.into_pyobject(py)?.into_any(),
        V::Float(x) => PyFloat::new(py, *x).into_any(),
        V::Str(s) => PyString::new(py, s).into_any(),
        V::Bytes(b) => PyBytes::new(py, b).into_any(),
        V::List(items) => PyList::new(py, items.iter().map(|i| to_py(py, i)).collect::<PyResult<Vec<_>>>()?)?.into_any(),
        V::Fields(fields) => {
            let out = PyDict::new(py);
            for (name, value) in fields {
                out.set_item(name, to_py(py, value)?)?;
            }
            out.into_any()
        }
    })
}

fn missing(name: &str) -> PyErr {
    PyKeyError::new_err(name.to_owned())
}

/// `record[name]`, as Python's subscript would fail on a missing key.
fn at<'v, 'a>(record: &'v V<'a>, name: &str) -> PyResult<&'v V<'a>> {
    record.field(name).ok_or_else(|| missing(name))
}

fn slot<'v, 'a>(f: &'v [Option<V<'a>>], at: usize, name: &str) -> PyResult<&'v V<'a>> {
    f[at].as_ref().ok_or_else(|| missing(name))
}

/// The steps of one turn, without indices (see the module comment): `f`, the turn's slots
/// (`ALL_SLOTS`); `millis`, its occurred_at in epoch ms; `breaches`, its contract breaches
/// (a fresh list, the turn step's own).
pub(crate) fn turn_steps<'py>(py: Python<'py>, f: &[Option<V<'_>>], millis: i64, breaches: Bound<'py, PyList>, redact: &Redact) -> PyResult<Bound<'py, PyList>> {
    let task = slot(f, TASK, "task")?;
    let event_id = to_py(py, slot(f, EVENT_ID, "event_id")?)?;
    let task_step = to_py(py, at(task, "step")?)?;
    let occurred = millis.into_pyobject(py)?.into_any();
    let steps = PyList::empty(py);
    let common = |kind: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyDict>> {
        let step = PyDict::new(py);
        step.set_item(intern!(py, "kind"), kind)?;
        step.set_item(intern!(py, "event_id"), &event_id)?;
        step.set_item(intern!(py, "task_step"), &task_step)?;
        step.set_item(intern!(py, "occurred_at"), &occurred)?;
        Ok(step)
    };
    if let Some(V::List(tools)) = f[TOOL_STEPS].as_ref() {
        for t in tools {
            let tool = common(intern!(py, "tool"))?;
            tool.set_item(intern!(py, "name"), to_py(py, at(t, "name")?)?)?;
            if let Some(arguments) = redact.tool_io(py, at(t, "arguments")?)? {
                tool.set_item(intern!(py, "arguments"), arguments)?;
            }
            if let Some(result) = redact.tool_io(py, at(t, "result")?)? {
                tool.set_item(intern!(py, "result"), result)?;
            }
            tool.set_item(intern!(py, "ok"), to_py(py, at(t, "ok")?)?)?;
            steps.append(tool)?;
        }
    }
    let bundle = slot(f, VERDICTS, "verdicts")?;
    let nested = |name: &str| -> PyResult<Option<&V<'_>>> {
        Ok(match at(bundle, name)? {
            V::Null => None,
            v => Some(v),
        })
    };
    let (identity, safety, ethics) = (nested("identity_score")?, nested("safety_verdict")?, nested("ethics_verdict")?);
    let action = match slot(f, ACTION, "action_assessment")? {
        V::Null => None,
        v => Some(v),
    };
    let turn = common(intern!(py, "turn"))?;
    turn.set_item(intern!(py, "sequence"), to_py(py, slot(f, SEQUENCE, "sequence")?)?)?;
    turn.set_item(intern!(py, "turn"), to_py(py, slot(f, TURN, "turn")?)?)?;
    turn.set_item(intern!(py, "path"), to_py(py, slot(f, PATH, "path")?)?)?;
    turn.set_item(intern!(py, "refusal_emitted"), to_py(py, at(bundle, "refusal_emitted")?)?)?;
    turn.set_item(intern!(py, "hedge_injected"), to_py(py, at(bundle, "hedge_injected")?)?)?;
    if let Some(identity) = identity {
        turn.set_item(intern!(py, "identity_score"), to_py(py, at(identity, "score")?)?)?;
        turn.set_item(intern!(py, "identity_threshold"), to_py(py, at(identity, "threshold")?)?)?;
    }
    if let Some(safety) = safety {
        turn.set_item(intern!(py, "safety_passed"), to_py(py, at(safety, "passed")?)?)?;
    }
    if let Some(ethics) = ethics {
        turn.set_item(intern!(py, "ethics_passed"), to_py(py, at(ethics, "passed")?)?)?;
    }
    let ids = |verdict: Option<&V<'_>>, name: &str| -> PyResult<Bound<'py, PyList>> {
        match verdict {
            None => Ok(PyList::empty(py)),
            Some(v) => match at(v, name)? {
                V::List(items) => PyList::new(py, items.iter().map(|i| to_py(py, i)).collect::<PyResult<Vec<_>>>()?),
                _ => Err(PyTypeError::new_err(format!("{name} is a list"))),
            },
        }
    };
    turn.set_item(intern!(py, "violated_boundary_ids"), ids(safety, "violated_boundary_ids")?)?;
    turn.set_item(intern!(py, "violated_predicate_ids"), ids(ethics, "violated_predicate_ids")?)?;
    if let Some(action) = action {
        let out = PyDict::new(py);
        // The keys interned: one dict per turn, the same five keys.
        let keys = [
            intern!(py, "execution_verdict"),
            intern!(py, "action_risk_verdict"),
            intern!(py, "risk_tier"),
            intern!(py, "human_decision_required"),
            intern!(py, "output_policy"),
        ];
        for key in keys {
            out.set_item(key, to_py(py, at(action, key.to_str()?)?)?)?;
        }
        turn.set_item(intern!(py, "action"), out)?;
    }
    turn.set_item(intern!(py, "contract_breaches"), breaches)?;
    if let Some(surface) = redact.surface(py, slot(f, SURFACE, "surface")?)? {
        turn.set_item(intern!(py, "surface"), surface)?;
    }
    steps.append(turn)?;
    Ok(steps)
}

/// A decoded event's value, owned: the dict path's record, which the rule reads through
/// `view` as it reads a scanned one (exact kinds: a `str` subclass is its text, a `bool`
/// is not an int).
pub(crate) enum Owned {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Owned>),
    Fields(Vec<(String, Owned)>),
}

impl Owned {
    fn of(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(if value.is_none() {
            Owned::Null
        } else if let Ok(b) = value.cast::<PyBool>() {
            Owned::Bool(b.is_true())
        } else if let Ok(i) = value.cast::<PyInt>() {
            Owned::Int(i.extract()?)
        } else if let Ok(x) = value.cast::<PyFloat>() {
            Owned::Float(x.value())
        } else if let Ok(s) = value.cast::<PyString>() {
            Owned::Str(s.to_str()?.to_owned())
        } else if let Ok(b) = value.cast::<PyBytes>() {
            Owned::Bytes(b.as_bytes().to_vec())
        } else if let Ok(l) = value.cast::<PyList>() {
            Owned::List(l.iter().map(|item| Owned::of(&item)).collect::<PyResult<_>>()?)
        } else if let Ok(d) = value.cast::<PyDict>() {
            let mut fields = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                fields.push((k.cast::<PyString>()?.to_str()?.to_owned(), Owned::of(&v)?));
            }
            Owned::Fields(fields)
        } else {
            return Err(PyTypeError::new_err(format!("an HTIR step is made of no {}", value.get_type().name()?)));
        })
    }

    fn view(&self) -> V<'_> {
        match self {
            Owned::Null => V::Null,
            Owned::Bool(b) => V::Bool(*b),
            Owned::Int(i) => V::Int(*i),
            Owned::Float(x) => V::Float(*x),
            Owned::Str(s) => V::Str(s),
            Owned::Bytes(b) => V::Bytes(b),
            Owned::List(items) => V::List(items.iter().map(Owned::view).collect()),
            Owned::Fields(fields) => V::Fields(fields.iter().map(|(k, v)| (k.as_str(), v.view())).collect()),
        }
    }
}

/// The fields the rule reads of a decoded event, by slot, and whether the event may lack
/// one (`event.get("tool_steps")`).
const READ: [(&str, usize, bool); 9] = [
    ("event_id", EVENT_ID, false),
    ("task", TASK, false),
    ("sequence", SEQUENCE, false),
    ("turn", TURN, false),
    ("path", PATH, false),
    ("verdicts", VERDICTS, false),
    ("action_assessment", ACTION, false),
    ("surface", SURFACE, false),
    ("tool_steps", TOOL_STEPS, true),
];

/// A decoded event's fields the rule reads (`READ`), owned, by slot.
pub(crate) fn dict_fields(event: &Bound<'_, PyDict>) -> PyResult<Vec<(usize, Owned)>> {
    let mut read = Vec::with_capacity(READ.len());
    for (name, at, optional) in READ {
        match event.get_item(name)? {
            Some(v) => read.push((at, Owned::of(&v)?)),
            None if optional => {}
            None => return Err(missing(name)),
        }
    }
    Ok(read)
}

/// `dict_fields` as the slots a scan fills (`tool_steps` left out when empty or null, as
/// the rule's `if tools:` reads it).
pub(crate) fn dict_slots(read: &[(usize, Owned)]) -> [Option<V<'_>>; ALL_SLOTS] {
    let mut f: [Option<V<'_>>; ALL_SLOTS] = std::array::from_fn(|_| None);
    for (at, value) in read {
        f[*at] = Some(value.view());
    }
    f
}

/// `turnaudit.htir_steps.turn_steps` over a decoded event (a dict): `millis`, its
/// occurred_at in epoch ms; `policy` and `text`, the surface policy's value and its
/// `Redaction.text`.
#[pyfunction]
pub(crate) fn htir_turn_steps<'py>(py: Python<'py>, event: &Bound<'py, PyDict>, millis: i64, breaches: &Bound<'py, PyAny>, policy: &str, text: Py<PyAny>) -> PyResult<Bound<'py, PyList>> {
    let read = dict_fields(event)?;
    let breaches = PyList::new(py, breaches.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
    turn_steps(py, &dict_slots(&read), millis, breaches, &Redact::new(policy, text)?)
}
