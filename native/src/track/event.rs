//! A turn's fields read from the Python event the tracker is handed (a dict, or any
//! mapping through its own `[]` and `get`), and the ints it hands back.

use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString};

use super::stream::Prev;

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
