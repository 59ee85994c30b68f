//! The steps of an HTIR trace made from one turn, the one home of the rule
//! `turnaudit.htir_steps.turn_steps` calls: the tool calls the runtime reported, then the
//! turn itself, in the flat shape the auditors read (a `None` field left out, the keys in
//! one fixed order: the manifest writes the steps as they are), surfaces and tool I/O as
//! the surface policy lets them through.
//!
//! Two sources give the rule the same record through `Rec`: a scanned message's slots
//! (`&V`, the consumer step's `STEPS` outlet, `consume.rs`) and a decoded event's dict
//! (`Bound<PyAny>`, `turn_steps`), read in place, only the fields the rule reads (no copy
//! of the event), so both paths build the steps the same way.

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use super::contracts::{ACTION, EVENT_ID, OCCURRED_AT, PATH, SEQUENCE, SESSION_ID, SURFACE, VERDICTS};
use super::line::{ALL_SLOTS, RUNTIME, TASK, TOOL_STEPS, TURN};
use crate::decode::scan::V;
use crate::htir::TurnIn;

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
    fn tool_io<'py, R: Rec<'py>>(&self, py: Python<'py>, value: &R) -> PyResult<Option<Bound<'py, PyAny>>> {
        let written = match self {
            Redact::Drop => return Ok(None),
            Redact::Keep => value.value(py)?,
            Redact::Text(text) => text.bind(py).call1((value.value(py)?,))?,
        };
        Ok((!written.is_none()).then_some(written))
    }

    /// The turn's surface as written: kept, its gist; hashed, the whole text (so it
    /// compares with the log sink's hash).
    fn surface<'py, R: Rec<'py>>(&self, py: Python<'py>, value: &R) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self {
            Redact::Keep => match value.text()? {
                Some(s) => {
                    let cut = s.char_indices().nth(SURFACE_LIMIT).map_or(s, |(at, _)| &s[..at]);
                    Ok(Some(PyString::new(py, cut).into_any()))
                }
                None => Err(PyTypeError::new_err("a surface is a text")),
            },
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

/// A field's name, as text (a scanned record's) and interned (a dict's key: no Python
/// string made per look-up).
pub(crate) struct Key<'k, 'py> {
    pub(crate) name: &'static str,
    pub(crate) interned: &'k Bound<'py, PyString>,
}

macro_rules! key {
    ($py:expr, $name:literal) => {
        Key { name: $name, interned: pyo3::intern!($py, $name) }
    };
}
pub(crate) use key;

/// What the rule reads of a record: a scanned value (`&V`) or a decoded event's value in
/// place (`Bound<PyAny>`), so the one rule reads both.
pub(crate) trait Rec<'py>: Sized {
    /// `record[name]`, failing as Python's subscript would on a missing key.
    fn at(&self, key: &Key<'_, 'py>) -> PyResult<Self>;
    /// The value as a step holds it (`to_py`'s kinds).
    fn value(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
    fn is_null(&self) -> bool;
    /// A list's items; `None`, no list.
    fn items(&self) -> PyResult<Option<Vec<Self>>>;
    /// A text's content; `None`, no text.
    fn text(&self) -> PyResult<Option<&str>>;
}

impl<'py, 'v, 'a> Rec<'py> for &'v V<'a> {
    fn at(&self, key: &Key<'_, 'py>) -> PyResult<Self> {
        (*self).field(key.name).ok_or_else(|| missing(key.name))
    }
    fn value(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self)
    }
    fn is_null(&self) -> bool {
        matches!(self, V::Null)
    }
    fn items(&self) -> PyResult<Option<Vec<Self>>> {
        Ok(match self {
            V::List(items) => Some(items.iter().collect()),
            _ => None,
        })
    }
    fn text(&self) -> PyResult<Option<&str>> {
        Ok(match self {
            V::Str(s) => Some(s),
            _ => None,
        })
    }
}

/// A decoded value read in place. Where it is not what the rule looks for, it must still
/// be of a kind the decoder gives (`Owned::of`'s check), as a scanned value is.
impl<'py> Rec<'py> for Bound<'py, PyAny> {
    fn at(&self, key: &Key<'_, 'py>) -> PyResult<Self> {
        match self.cast::<PyDict>() {
            Ok(d) => d.get_item(key.interned)?.ok_or_else(|| missing(key.name)),
            Err(_) => Owned::of(self).and(Err(missing(key.name))),
        }
    }
    fn value(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // An immutable scalar of its exact kind is its own value (an int one an i64 holds);
        // the rest (containers, subclasses) made anew, as `to_py` makes a scanned one.
        if self.is_none() || self.is_exact_instance_of::<PyString>() || self.is_exact_instance_of::<PyBool>() || self.is_exact_instance_of::<PyFloat>() {
            return Ok(self.clone());
        }
        if self.is_exact_instance_of::<PyInt>() {
            self.extract::<i64>()?;
            return Ok(self.clone());
        }
        to_py(py, &Owned::of(self)?.view())
    }
    fn is_null(&self) -> bool {
        self.is_none()
    }
    fn items(&self) -> PyResult<Option<Vec<Self>>> {
        match self.cast::<PyList>() {
            Ok(l) => Ok(Some(l.iter().collect())),
            Err(_) => Owned::of(self).map(|_| None),
        }
    }
    fn text(&self) -> PyResult<Option<&str>> {
        match self.cast::<PyString>() {
            Ok(s) => s.to_str().map(Some),
            Err(_) => Owned::of(self).map(|_| None),
        }
    }
}

fn slot<'f, R>(f: &'f [Option<R>], at: usize, name: &str) -> PyResult<&'f R> {
    f[at].as_ref().ok_or_else(|| missing(name))
}

/// The steps of one turn, without indices (see the module comment): `f`, the turn's slots
/// (`ALL_SLOTS`); `millis`, its occurred_at in epoch ms; `breaches`, its contract breaches
/// (a fresh list, the turn step's own).
pub(crate) fn turn_steps<'py, R: Rec<'py>>(py: Python<'py>, f: &[Option<R>], millis: i64, breaches: Bound<'py, PyList>, redact: &Redact) -> PyResult<Bound<'py, PyList>> {
    let task = slot(f, TASK, "task")?;
    let event_id = slot(f, EVENT_ID, "event_id")?.value(py)?;
    let task_step = task.at(&key!(py, "step"))?.value(py)?;
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
    if let Some(tools) = f[TOOL_STEPS].as_ref().map(Rec::items).transpose()?.flatten() {
        for t in tools {
            let tool = common(intern!(py, "tool"))?;
            tool.set_item(intern!(py, "name"), t.at(&key!(py, "name"))?.value(py)?)?;
            if let Some(arguments) = redact.tool_io(py, &t.at(&key!(py, "arguments"))?)? {
                tool.set_item(intern!(py, "arguments"), arguments)?;
            }
            if let Some(result) = redact.tool_io(py, &t.at(&key!(py, "result"))?)? {
                tool.set_item(intern!(py, "result"), result)?;
            }
            tool.set_item(intern!(py, "ok"), t.at(&key!(py, "ok"))?.value(py)?)?;
            steps.append(tool)?;
        }
    }
    let bundle = slot(f, VERDICTS, "verdicts")?;
    let nested = |key: Key<'_, 'py>| -> PyResult<Option<R>> {
        let v = bundle.at(&key)?;
        Ok((!v.is_null()).then_some(v))
    };
    let (identity, safety, ethics) = (nested(key!(py, "identity_score"))?, nested(key!(py, "safety_verdict"))?, nested(key!(py, "ethics_verdict"))?);
    let action = slot(f, ACTION, "action_assessment")?;
    let action = (!action.is_null()).then_some(action);
    let turn = common(intern!(py, "turn"))?;
    turn.set_item(intern!(py, "sequence"), slot(f, SEQUENCE, "sequence")?.value(py)?)?;
    turn.set_item(intern!(py, "turn"), slot(f, TURN, "turn")?.value(py)?)?;
    turn.set_item(intern!(py, "path"), slot(f, PATH, "path")?.value(py)?)?;
    turn.set_item(intern!(py, "refusal_emitted"), bundle.at(&key!(py, "refusal_emitted"))?.value(py)?)?;
    turn.set_item(intern!(py, "hedge_injected"), bundle.at(&key!(py, "hedge_injected"))?.value(py)?)?;
    if let Some(identity) = &identity {
        turn.set_item(intern!(py, "identity_score"), identity.at(&key!(py, "score"))?.value(py)?)?;
        turn.set_item(intern!(py, "identity_threshold"), identity.at(&key!(py, "threshold"))?.value(py)?)?;
    }
    if let Some(safety) = &safety {
        turn.set_item(intern!(py, "safety_passed"), safety.at(&key!(py, "passed"))?.value(py)?)?;
    }
    if let Some(ethics) = &ethics {
        turn.set_item(intern!(py, "ethics_passed"), ethics.at(&key!(py, "passed"))?.value(py)?)?;
    }
    let ids = |verdict: Option<&R>, key: Key<'_, 'py>| -> PyResult<Bound<'py, PyList>> {
        match verdict {
            None => Ok(PyList::empty(py)),
            Some(v) => match v.at(&key)?.items()? {
                Some(items) => PyList::new(py, items.iter().map(|i| i.value(py)).collect::<PyResult<Vec<_>>>()?),
                None => Err(PyTypeError::new_err(format!("{} is a list", key.name))),
            },
        }
    };
    turn.set_item(intern!(py, "violated_boundary_ids"), ids(safety.as_ref(), key!(py, "violated_boundary_ids"))?)?;
    turn.set_item(intern!(py, "violated_predicate_ids"), ids(ethics.as_ref(), key!(py, "violated_predicate_ids"))?)?;
    if let Some(action) = action {
        let out = PyDict::new(py);
        let keys = [
            key!(py, "execution_verdict"),
            key!(py, "action_risk_verdict"),
            key!(py, "risk_tier"),
            key!(py, "human_decision_required"),
            key!(py, "output_policy"),
        ];
        for key in keys {
            out.set_item(key.interned, action.at(&key)?.value(py)?)?;
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

/// A decoded value, owned: what `Rec` checks a value the rule does not take as it is
/// against, and makes anew through `view` (exact kinds: a `str` subclass is its text, a
/// `bool` is not an int).
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

/// `turnaudit.htir_steps.turn_steps` over a decoded event (a dict): `millis`, its
/// occurred_at in epoch ms; `policy` and `text`, the surface policy's value and its
/// `Redaction.text`.
#[pyfunction]
pub(crate) fn htir_turn_steps<'py>(py: Python<'py>, event: &Bound<'py, PyDict>, millis: i64, breaches: &Bound<'py, PyAny>, policy: &str, text: Py<PyAny>) -> PyResult<Bound<'py, PyList>> {
    let mut f: [Option<Bound<'py, PyAny>>; ALL_SLOTS] = std::array::from_fn(|_| None);
    // The fields the rule reads, by slot, and whether the event may lack one
    // (`event.get("tool_steps")`).
    let read = [
        (key!(py, "event_id"), EVENT_ID, false),
        (key!(py, "task"), TASK, false),
        (key!(py, "sequence"), SEQUENCE, false),
        (key!(py, "turn"), TURN, false),
        (key!(py, "path"), PATH, false),
        (key!(py, "verdicts"), VERDICTS, false),
        (key!(py, "action_assessment"), ACTION, false),
        (key!(py, "surface"), SURFACE, false),
        (key!(py, "tool_steps"), TOOL_STEPS, true),
    ];
    for (key, at, optional) in read {
        match event.get_item(key.interned)? {
            Some(v) => f[at] = Some(v),
            None if optional => {}
            None => return Err(missing(key.name)),
        }
    }
    let breaches = PyList::new(py, breaches.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
    turn_steps(py, &f, millis, breaches, &Redact::new(policy, text)?)
}

/// A scanned task turn as the trace store takes it (`TurnIn`), its steps made, but where
/// it was read (the caller's); `None` where a field is not of the kind the decoded event
/// would hold (the Python path then makes it, or fails, the same way).
pub(crate) fn task_turn<'a, 'py>(py: Python<'py>, f: &'a [Option<V<'a>>], redact: &Redact) -> PyResult<Option<TurnIn<'a, 'py>>> {
    let (Some(task @ V::Fields(_)), Some(V::Int(millis)), Some(runtime @ V::Fields(_)), Some(_)) = (&f[TASK], f[OCCURRED_AT].as_ref(), &f[RUNTIME], &f[SURFACE]) else {
        return Ok(None);
    };
    if !matches!(f[TOOL_STEPS], Some(V::List(_) | V::Null)) {
        return Ok(None);
    }
    let (Some(V::Str(task_id)), Some(V::Str(task_family)), Some(V::Int(task_step)), Some(V::Bool(end_of_task))) =
        (task.field("task_id"), task.field("task_family"), task.field("step"), task.field("end_of_task"))
    else {
        return Ok(None);
    };
    let (Some(V::Str(session_id)), Some(V::Str(event_id)), Some(V::Int(sequence))) = (&f[SESSION_ID], &f[EVENT_ID], &f[SEQUENCE]) else {
        return Ok(None);
    };
    // `runtime.get(name, "")`, as the Python path reads it: a name that is no text is its.
    let text = |name: &str| match runtime.field(name) {
        None => Some(""),
        Some(V::Str(s)) => Some(*s),
        Some(_) => None,
    };
    let (Some(runtime_name), Some(runtime_version)) = (text("name"), text("version")) else {
        return Ok(None);
    };
    let slots: [Option<&V<'_>>; ALL_SLOTS] = std::array::from_fn(|at| f.get(at).and_then(Option::as_ref));
    let steps = turn_steps(py, &slots, *millis, PyList::empty(py), redact)?;
    Ok(Some(TurnIn { task_id, task_family, task_step: *task_step, end_of_task: *end_of_task, session_id, runtime_name, runtime_version, event_id, sequence: *sequence, steps, topic: "", partition: 0, offset: 0 }))
}
