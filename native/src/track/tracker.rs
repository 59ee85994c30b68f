//! The tracker's class and what is fixed at its construction: `NativeStreamTracker` (its
//! tables behind the lock, its counters outside it), its bounds, what a placement
//! concludes and the outcome indexes. The methods live by job beside it (`methods`,
//! `place`, `pickle`, `follow`); they use this module, and it none of them.

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::state::State;
use super::stream::StreamKey;

// Outcome indexes into the `outcomes` tuple the Python side passes in.
pub(crate) const NEW: usize = 0;
pub(crate) const LATE: usize = 1;
pub(crate) const REDELIVERY: usize = 2;
pub(crate) const DUPLICATE: usize = 3;
pub(crate) const CONTENT_CHANGED: usize = 4;
pub(crate) const POSITION_REUSED: usize = 5;

pub(crate) fn describe_stream(session: &str, producer: &str) -> String {
    let producer = if producer.is_empty() { "(none: v1/v2)" } else { producer };
    format!("session {session} / producer {producer}")
}

/// What one placement concluded (the fields of a `TrackResult` but the stream).
pub(crate) struct Placed {
    pub(crate) outcome: usize,
    pub(crate) opened: i128,
    pub(crate) gap_closed: bool,
    pub(crate) chain_break: Option<String>,
}

impl Placed {
    pub(crate) fn plain(outcome: usize) -> Self {
        Placed { outcome, opened: 0, gap_closed: false, chain_break: None }
    }
}

/// Bounds and settings, fixed at construction.
pub(crate) struct Bounds {
    pub(crate) max_event_ids: usize,
    pub(crate) max_streams: usize,
    pub(crate) max_missing: i128,
    pub(crate) log_start: HashMap<i64, i64>,
    pub(crate) start_gaps: bool,
    pub(crate) forget_batch: usize,
}

#[pyclass(frozen, subclass, module = "turnaudit._native")]
pub(crate) struct NativeStreamTracker {
    pub(crate) state: Mutex<State>,
    pub(crate) bounds: Bounds,
    pub(crate) forgotten: Option<Py<PyAny>>,
    pub(crate) outcomes: Vec<Py<PyAny>>,
    pub(crate) result_type: Py<PyAny>,
    pub(crate) tuple_new: Py<PyAny>,
    pub(crate) currently_missing: AtomicI64,
    pub(crate) new_turns: AtomicI64,
    pub(crate) forgotten_event_ids: AtomicI64,
}

pub(crate) fn busy() -> PyErr {
    PyRuntimeError::new_err("the stream tracker is in use by another thread")
}

pub(crate) fn stream_tuple<'py>(py: Python<'py>, key: &StreamKey) -> PyResult<Bound<'py, PyTuple>> {
    (key.0.as_str(), key.1.as_str()).into_pyobject(py)
}
