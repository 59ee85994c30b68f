//! The native Avro encoder of turnaudit's writers.
//!
//! A writer schema is compiled by the decoder's compiler (the same nodes);
//! a record is then written as a framing header followed by its Avro binary
//! body, byte for byte what fastavro's `schemaless_writer` writes for it.
//!
//! The encoder is strict: it writes only values whose encoding is beyond
//! doubt, exact built-in types of the schema's own kind (None, bool, int in
//! range, float, str, bytes, list, dict with str keys, records with every
//! field present, or missing only where fastavro writes its default: `null` for a
//! union with null, `[]` for an array). Anything else (a missing field, a subclass, an int where a
//! double goes, a datetime, a tuple, a union value more than one branch could
//! take, a string UTF-8 cannot encode) raises `EncodeFallback`, and the caller
//! hands the record to fastavro, which writes it or raises its own error. The
//! encoder never raises an error of its own about the data.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::decode::{compile_schema, unsupported, Field, FieldDefault, Node, NodeId};
use crate::ffi::{self, Held, Obj};

pyo3::create_exception!(
    turnaudit._native,
    EncodeFallback,
    PyException,
    "The record is not one the native encoder writes as surely as fastavro: use fastavro."
);

/// The Python kinds a union branch is chosen by (exact built-in types only).
use ffi::Exact as Kind;
const KINDS: usize = 8;
const ALL_KINDS: [Kind; KINDS] =
    [Kind::None, Kind::Bool, Kind::Int, Kind::Float, Kind::Str, Kind::Bytes, Kind::List, Kind::Dict];

/// (fastavro's validator may accept a value of this kind for this branch,
/// the native encoder writes it). The first is a superset of fastavro's
/// `_validate`: a bytes value is a Sequence (an array may take it), an int
/// is a Real (a float or double may take it).
fn branch_fit(kind: Kind, node: &Node) -> (bool, bool) {
    match (kind, node) {
        (Kind::None, Node::Null) | (Kind::Bool, Node::Boolean) => (true, true),
        (Kind::Int, Node::Int | Node::Long) => (true, true),
        (Kind::Int, Node::Float | Node::Double) => (true, false),
        (Kind::Float, Node::Float | Node::Double) => (true, true),
        (Kind::Str, Node::String | Node::Enum(_)) => (true, true),
        (Kind::Bytes, Node::Bytes | Node::Fixed(_)) => (true, true),
        (Kind::Bytes, Node::Array(_)) => (true, false),
        (Kind::List, Node::Array(_)) => (true, true),
        (Kind::Dict, Node::Map(_) | Node::Record(_)) => (true, true),
        _ => (false, false),
    }
}

/// Why a record is left to fastavro. `Python`: an exception is set and must be cleared.
enum Fall {
    Because(&'static str),
    Python(&'static str),
}

type E<T> = Result<T, Fall>;

struct Plan {
    nodes: Vec<Node>,
    root: NodeId,
    // Per union node: the branch each kind of value takes, None when no
    // branch or more than one branch could take it.
    unions: Vec<[Option<usize>; KINDS]>,
    // Per enum node: its symbols as UTF-8.
    symbols: Vec<Vec<Box<[u8]>>>,
    type_key: Py<PyString>, // "-type": fastavro's record validation reads it
}

#[inline(always)]
pub(crate) fn long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[inline(always)]
pub(crate) fn sized(out: &mut Vec<u8>, raw: &[u8]) {
    long(out, raw.len() as i64);
    out.extend_from_slice(raw);
}

unsafe fn int_of(obj: Obj) -> E<i64> {
    if !ffi::is_exact(obj, Kind::Int) {
        return Err(Fall::Because("not an int"));
    }
    ffi::long_value(obj).ok_or(Fall::Python("an int beyond 64 bits"))
}

unsafe fn float_of(obj: Obj) -> E<f64> {
    if !ffi::is_exact(obj, Kind::Float) {
        return Err(Fall::Because("not a float"));
    }
    Ok(ffi::float_value(obj))
}

unsafe fn utf8_of<'a>(obj: Obj) -> E<&'a [u8]> {
    if !ffi::is_exact(obj, Kind::Str) {
        return Err(Fall::Because("not a str"));
    }
    ffi::utf8(obj).ok_or(Fall::Python("a str UTF-8 cannot encode"))
}

unsafe fn bytes_of<'a>(obj: Obj) -> E<&'a [u8]> {
    if !ffi::is_exact(obj, Kind::Bytes) {
        return Err(Fall::Because("not bytes"));
    }
    ffi::bytes_content(obj).ok_or(Fall::Python("unreadable bytes"))
}

impl Plan {
    fn new(py: Python<'_>, nodes: Vec<Node>, root: NodeId) -> PyResult<Self> {
        let mut unions = vec![[None; KINDS]; nodes.len()];
        let mut symbols = vec![Vec::new(); nodes.len()];
        for (id, node) in nodes.iter().enumerate() {
            match node {
                Node::Union(branches) => {
                    for kind in ALL_KINDS {
                        let fits: Vec<(usize, bool)> = branches
                            .iter()
                            .enumerate()
                            .filter_map(|(i, &b)| {
                                let (may, writes) = branch_fit(kind, &nodes[b]);
                                may.then_some((i, writes))
                            })
                            .collect();
                        if let [(i, true)] = fits[..] {
                            unions[id][kind as usize] = Some(i);
                        }
                    }
                }
                Node::Enum(names) => {
                    symbols[id] = names
                        .iter()
                        .map(|s| Ok(s.bind(py).to_str()?.as_bytes().into()))
                        .collect::<PyResult<_>>()
                        .map_err(|_| unsupported("an enum symbol UTF-8 cannot encode"))?;
                }
                _ => {}
            }
        }
        let type_key = PyString::intern(py, "-type").unbind();
        Ok(Plan { nodes, root, unions, symbols, type_key })
    }

    unsafe fn value(&self, id: NodeId, obj: Obj, out: &mut Vec<u8>) -> E<()> {
        match &self.nodes[id] {
            Node::Null => {
                if !ffi::is_exact(obj, Kind::None) {
                    return Err(Fall::Because("not None for null"));
                }
            }
            Node::Boolean => {
                if ffi::is_true(obj) {
                    out.push(1);
                } else if ffi::is_false(obj) {
                    out.push(0);
                } else {
                    return Err(Fall::Because("not a bool for boolean"));
                }
            }
            Node::Int => {
                let v = int_of(obj)?;
                if v < i32::MIN as i64 || v > i32::MAX as i64 {
                    return Err(Fall::Because("an int beyond 32 bits"));
                }
                long(out, v);
            }
            Node::Long => long(out, int_of(obj)?),
            Node::Float => {
                let v = float_of(obj)?;
                if v.is_nan() {
                    // The NaN payload fastavro's C cast keeps is not a Rust promise.
                    return Err(Fall::Because("NaN for float"));
                }
                out.extend_from_slice(&(v as f32).to_le_bytes());
            }
            Node::Double => out.extend_from_slice(&float_of(obj)?.to_le_bytes()),
            Node::String => sized(out, utf8_of(obj)?),
            Node::Bytes => sized(out, bytes_of(obj)?),
            Node::Fixed(size) => {
                let raw = bytes_of(obj)?;
                if raw.len() != *size {
                    return Err(Fall::Because("bytes of another size for fixed"));
                }
                out.extend_from_slice(raw);
            }
            Node::Enum(_) => {
                let raw = utf8_of(obj)?;
                let index = self.symbols[id]
                    .iter()
                    .position(|s| &s[..] == raw)
                    .ok_or(Fall::Because("not a symbol of the enum"))?;
                long(out, index as i64);
            }
            Node::Union(branches) => {
                let kind = ffi::exact(obj).ok_or(Fall::Because("a type no union branch surely takes"))?;
                let index = self.unions[id][kind as usize]
                    .ok_or(Fall::Because("no branch or more than one could take the value"))?;
                long(out, index as i64);
                self.value(branches[index], obj, out)?;
            }
            Node::Array(item) => {
                if !ffi::is_exact(obj, Kind::List) {
                    return Err(Fall::Because("not a list for array"));
                }
                let len = ffi::list_len(obj);
                if len > 0 {
                    long(out, len as i64);
                    for i in 0..len {
                        let v = ffi::list_item(obj, i);
                        if v.is_null() {
                            return Err(Fall::Python("a list that changed while written"));
                        }
                        let v = Held::new(v);
                        self.value(*item, v.0, out)?;
                    }
                    if ffi::list_len(obj) != len {
                        return Err(Fall::Because("a list that changed while written"));
                    }
                }
                out.push(0);
            }
            Node::Map(values) => {
                if !ffi::is_exact(obj, Kind::Dict) {
                    return Err(Fall::Because("not a dict for map"));
                }
                let len = ffi::dict_len(obj);
                if len > 0 {
                    long(out, len as i64);
                    let mut pos: isize = 0;
                    let mut seen: isize = 0;
                    while let Some((key, val)) = ffi::dict_next(obj, &mut pos) {
                        let (k, v) = (Held::new(key), Held::new(val));
                        sized(out, utf8_of(k.0)?);
                        self.value(*values, v.0, out)?;
                        seen += 1;
                    }
                    if seen != len || ffi::dict_len(obj) != len {
                        return Err(Fall::Because("a dict that changed while written"));
                    }
                }
                out.push(0);
            }
            Node::Record(fields) => {
                if !ffi::is_exact(obj, Kind::Dict) {
                    return Err(Fall::Because("not a dict for record"));
                }
                // fastavro's record validation (union branches) reads "-type".
                match ffi::dict_contains(obj, self.type_key.as_ptr()) {
                    Some(false) => {}
                    Some(true) => return Err(Fall::Because("a record with a -type key")),
                    None => return Err(Fall::Python("a dict lookup failed")),
                }
                for field in fields {
                    let v = match ffi::dict_get(obj, field.name.as_ptr()) {
                        Ok(Some(v)) => Held::new(v),
                        Ok(None) => {
                            self.missing(field, out)?;
                            continue;
                        }
                        Err(()) => return Err(Fall::Python("a dict lookup failed")),
                    };
                    self.value(field.node, v.0, out)?;
                }
            }
            Node::Pending => return Err(Fall::Because("an incomplete type")),
        }
        Ok(())
    }
}

impl Plan {
    /// A field the record lacks, as fastavro writes it (`datum.get(name, default)`): a
    /// union with null whose default is null, null; an array whose default is `[]`, `[]`.
    fn missing(&self, field: &Field, out: &mut Vec<u8>) -> E<()> {
        match (&self.nodes[field.node], field.default) {
            (Node::Union(_), FieldDefault::Null) => {
                let index = self.unions[field.node][Kind::None as usize].ok_or(Fall::Because("a record without one of its fields"))?;
                long(out, index as i64);
            }
            (Node::Array(_), FieldDefault::EmptyList) => out.push(0),
            _ => return Err(Fall::Because("a record without one of its fields")),
        }
        Ok(())
    }
}

/// One writer schema, compiled: call it with a record and the framing header.
#[pyclass(frozen, module = "turnaudit._native")]
pub(crate) struct Encoder {
    plan: Plan,
    size_hint: AtomicUsize, // the last message's size: one allocation per message
}

#[pymethods]
impl Encoder {
    /// ``Encoder(schema)``: ``schema`` is the writer schema as ``json.loads`` gives
    /// it, ``timestamp-millis`` stripped (those longs are written from ints).
    #[new]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (nodes, root) = compile_schema(py, schema)?;
        Ok(Encoder { plan: Plan::new(py, nodes, root)?, size_hint: AtomicUsize::new(256) })
    }

    /// ``header + body``: the record's Avro binary body behind ``header``, or
    /// ``EncodeFallback`` for a record fastavro must write (or refuse).
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        record: &Bound<'py, PyAny>,
        header: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = Vec::with_capacity(self.size_hint.load(Ordering::Relaxed).max(header.len() + 16));
        out.extend_from_slice(header);
        match unsafe { self.plan.value(self.plan.root, record.as_ptr(), &mut out) } {
            Ok(()) => {
                self.size_hint.store(out.len() + out.len() / 8, Ordering::Relaxed);
                Ok(PyBytes::new(py, &out))
            }
            Err(Fall::Because(why)) => Err(EncodeFallback::new_err(why)),
            Err(Fall::Python(why)) => {
                // The data's own error (an int beyond 64 bits, a lone surrogate)
                // is fastavro's to raise: drop the one the C API set.
                let _ = PyErr::take(py);
                Err(EncodeFallback::new_err(why))
            }
        }
    }
}


/// One record type of a writer schema (the items of an array field of its root), written
/// from a dict as `Encoder` writes it, without a header: for a writer that frames the
/// enclosing record itself (the HTIR trace store writes its steps as they join a trace).
pub(crate) struct ItemWriter {
    plan: Plan,
}

impl ItemWriter {
    /// The items of the root record's array field `field`.
    pub(crate) fn new(py: Python<'_>, schema: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        let (nodes, root) = compile_schema(py, schema)?;
        let Node::Record(fields) = &nodes[root] else {
            return Err(unsupported("a root that is not a record"));
        };
        let mut item = None;
        for f in fields {
            if f.name.bind(py).to_str()? == field {
                if let Node::Array(of) = nodes[f.node] {
                    item = Some(of);
                }
            }
        }
        let item = item.ok_or_else(|| unsupported("no array field of that name"))?;
        let mut plan = Plan::new(py, nodes, root)?;
        plan.root = item;
        Ok(ItemWriter { plan })
    }

    /// `record`'s Avro binary body appended to `out`, or why it is left to fastavro (`out`
    /// then holds part of it: the caller cuts it back).
    pub(crate) fn write(&self, py: Python<'_>, record: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> Result<(), &'static str> {
        match unsafe { self.plan.value(self.plan.root, record.as_ptr(), out) } {
            Ok(()) => Ok(()),
            Err(Fall::Because(why)) => Err(why),
            Err(Fall::Python(why)) => {
                let _ = PyErr::take(py);
                Err(why)
            }
        }
    }
}

#[cfg(test)]
mod tests;
