//! The native Avro decoder of turnaudit's readers (and, in `encode`, the
//! encoder of its writers, compiled by the same schema compiler).
//!
//! A writer schema (the JSON object Python parsed, with `timestamp-millis`
//! already stripped by `decoding_schema`) is compiled once into a small arena
//! of nodes; a message body is then decoded straight into Python objects:
//! dicts with interned keys, lists, str, int, float, bool, None.
//!
//! The decoded value is exactly what fastavro's `schemaless_reader` returns
//! for the same writer schema (no reader schema), including its leniencies:
//! Python-style negative union and enum indexes, booleans that are any
//! non-zero byte, over-long varints folded the way fastavro's Cython reader
//! folds them (the shift taken modulo 64), ints not range-checked. Where
//! fastavro raises, this raises too (`DecodeError`, or Python's own
//! `UnicodeDecodeError`; `OverflowError` for a time field beyond a date's
//! range), never crashing. Bytes after the record are refused
//! (`TrailingBytesError`, with the count).
//!
//! Schemas it does not compile (recursive types, logical types, reader
//! schemas: anything whose result it cannot promise to equal fastavro's)
//! raise `UnsupportedSchemaError` at compile time; the caller keeps fastavro.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;

mod body;
pub(crate) use body::{Body, Fail};
pub(crate) mod scan;
mod schema;
mod value;

pub(crate) use schema::{compile_schema, unsupported, Field, FieldDefault, Node, NodeId, UnsupportedSchemaError};
pub(crate) use value::Plan;

pyo3::create_exception!(
    turnaudit._native,
    DecodeError,
    PyValueError,
    "The bytes are not a record of the writer schema."
);
pyo3::create_exception!(
    turnaudit._native,
    TrailingBytesError,
    DecodeError,
    "A whole record was read but bytes remain after it (args: count, end)."
);

fn raise(py: Python<'_>, fail: Fail) -> PyErr {
    match fail {
        Fail::Eof(what, at) => DecodeError::new_err(format!("cannot read {what} at byte {at}: end of input")),
        Fail::Msg(msg) => DecodeError::new_err(msg),
        Fail::Overflow(msg) => PyOverflowError::new_err(msg),
        Fail::Python => PyErr::fetch(py),
    }
}

/// One writer schema, compiled: call it with a framed message and where its body starts.
#[pyclass(frozen, module = "turnaudit._native")]
pub(crate) struct Decoder {
    pub(crate) plan: Plan,
}

impl Decoder {
    pub(crate) fn run(&self, py: Python<'_>, payload: &[u8], start: usize) -> PyResult<(Py<PyAny>, usize)> {
        if start > payload.len() {
            return Err(DecodeError::new_err("the body starts after the end of the message"));
        }
        let mut body = Body { buf: payload, pos: start };
        let obj = unsafe { self.plan.value(self.plan.root, &mut body) }.map_err(|f| raise(py, f))?;
        let obj = unsafe { Bound::from_owned_ptr(py, obj) }.unbind();
        Ok((obj, body.pos))
    }
}

#[pymethods]
impl Decoder {
    /// ``Decoder(schema, time_fields=(), min_millis=..., max_millis=...)``: ``schema`` is
    /// the writer schema as ``json.loads`` gives it; ``time_fields`` name top-level
    /// long fields held to ``[min_millis, max_millis]``.
    #[new]
    #[pyo3(signature = (schema, time_fields = Vec::new(), min_millis = i64::MIN, max_millis = i64::MAX))]
    fn new(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        time_fields: Vec<String>,
        min_millis: i64,
        max_millis: i64,
    ) -> PyResult<Self> {
        let (mut nodes, root) = compile_schema(py, schema)?;
        if !time_fields.is_empty() {
            let Node::Record(fields) = &mut nodes[root] else {
                return Err(unsupported("time fields on a schema that is not a record"));
            };
            for name in &time_fields {
                let field = fields
                    .iter_mut()
                    .find(|f| f.name.bind(py).to_str().map(|s| s == name).unwrap_or(false))
                    .ok_or_else(|| unsupported(format!("no top-level field {name}")))?;
                field.millis_range = true;
            }
        }
        // Time fields must be longs (the range check reads an int).
        if let Node::Record(fields) = &nodes[root] {
            for f in fields.iter().filter(|f| f.millis_range) {
                if !matches!(nodes[f.node], Node::Long) {
                    return Err(unsupported("a time field that is not a long"));
                }
            }
        }
        Ok(Decoder { plan: Plan { nodes, root, min_millis, max_millis } })
    }

    /// The record of ``payload[start:]``; ``TrailingBytesError(count, end)`` when
    /// bytes remain after it.
    fn __call__(&self, py: Python<'_>, payload: &[u8], start: usize) -> PyResult<Py<PyAny>> {
        let (obj, end) = self.run(py, payload, start)?;
        if end != payload.len() {
            return Err(TrailingBytesError::new_err((payload.len() - end, end)));
        }
        Ok(obj)
    }

    /// ``(record, end)``: the record at ``payload[start:]`` and where it ended
    /// (bytes after it are not looked at).
    fn decode_prefix(&self, py: Python<'_>, payload: &[u8], start: usize) -> PyResult<(Py<PyAny>, usize)> {
        self.run(py, payload, start)
    }
}

#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod tests;
