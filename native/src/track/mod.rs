//! The native stream tracker: `turnaudit.stream_tracking.StreamTracker`'s state and
//! per-message step, message for message what the Python reference
//! (`ReferenceStreamTracker`) decides, in compact native tables.
//!
//! The Python module owns the meaning (the docstrings there); this file only
//! mirrors it. What differs is the representation: chain hashes as 32 raw
//! bytes, event ids and stream ids as Rust strings, an LRU of streams, and,
//! for a tracker with a store of forgotten ids, a Bloom filter of the ids it
//! handed to that store, so a new id (most of them) is not asked for there.
//!
//! Counters live outside the lock (atomics): a metrics scrape on another
//! thread reads them while a message is being placed. The tables sit behind
//! a mutex taken with `try_lock`: a second thread using the tracker at the
//! same time (possible only through a callback into Python) gets an error,
//! never a deadlock.


use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::Mutex;

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple};

mod bloom;
mod chain;
mod codec;
pub(crate) mod follow;
mod methods;
mod pickle;
mod place;
mod state;
mod stream;

pub(crate) use bloom::BloomFilter;
pub(crate) use chain::{chain_digest, chain_hash_hex};
pub(crate) use stream::{Prev, Stream};
use state::State;

// Outcome indexes into the `outcomes` tuple the Python side passes in.
pub(crate) const NEW: usize = 0;
pub(crate) const LATE: usize = 1;
pub(crate) const REDELIVERY: usize = 2;
pub(crate) const DUPLICATE: usize = 3;
pub(crate) const CONTENT_CHANGED: usize = 4;
pub(crate) const POSITION_REUSED: usize = 5;

pub(crate) type StreamKey = (String, String);

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

pub(crate) fn item<'py>(event: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(d) = event.cast::<PyDict>() {
        return d.get_item(key)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()));
    }
    event.get_item(key)
}

pub(crate) fn get<'py>(event: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(d) = event.cast::<PyDict>() {
        return d.get_item(key);
    }
    let v = event.call_method1(intern!(event.py(), "get"), (key,))?;
    Ok(if v.is_none() { None } else { Some(v) })
}

/// `event.get(key) or ""`, as text or another object.
pub(crate) fn prev_of(event: &Bound<'_, PyAny>) -> PyResult<Prev> {
    let py = event.py();
    match get(event, intern!(py, "prev_hash"))? {
        None => Ok(Prev::Text(String::new())),
        Some(v) => {
            if let Ok(s) = v.cast::<PyString>() {
                return Ok(Prev::Text(s.to_str()?.to_owned()));
            }
            if !v.is_truthy()? {
                return Ok(Prev::Text(String::new()));
            }
            Ok(Prev::Other)
        }
    }
}

pub(crate) fn text<'py>(v: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyString>> {
    v.cast::<PyString>()
        .cloned()
        .map_err(|_| PyTypeError::new_err(format!("{what} is not a string")))
}

pub(crate) fn opt_i64(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

/// A Python int (through i64 when it fits: the common, cheaper conversion).
pub(crate) fn int_obj(py: Python<'_>, v: i128) -> PyResult<Bound<'_, PyAny>> {
    match i64::try_from(v) {
        Ok(small) => Ok(small.into_pyobject(py)?.into_any()),
        Err(_) => Ok(v.into_pyobject(py)?.into_any()),
    }
}

pub(crate) fn stream_tuple<'py>(py: Python<'py>, key: &StreamKey) -> PyResult<Bound<'py, PyTuple>> {
    (key.0.as_str(), key.1.as_str()).into_pyobject(py)
}

pub(crate) fn sequence_of(event: &Bound<'_, PyAny>) -> PyResult<i128> {
    let py = event.py();
    let raw = item(event, intern!(py, "sequence"))?;
    let int = if raw.is_exact_instance_of::<PyInt>() {
        raw
    } else {
        py.import(intern!(py, "builtins"))?.getattr(intern!(py, "int"))?.call1((raw,))?
    };
    // Through i64 first: under the stable ABI an i128 conversion is several calls.
    match int.extract::<i64>() {
        Ok(small) => Ok(i128::from(small)),
        Err(_) => int.extract(),
    }
}

#[cfg(test)]
mod tests;
