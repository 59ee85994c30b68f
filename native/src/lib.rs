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

use std::collections::{HashMap, HashSet};
use std::os::raw::c_char;

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

// The crate's own allocations (streams, keys, decoded values) through mimalloc: verify
// evicts and frees streams by the million, and glibc's malloc spent a sixth of a job's
// time sorting freed chunks (malloc_consolidate) under that churn.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod encode;
mod track;
mod spill;
mod follow;
mod stream_spill;
mod scan;
mod verify;

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
pyo3::create_exception!(
    turnaudit._native,
    UnsupportedSchemaError,
    PyValueError,
    "The schema is outside what the native compiler promises to decode like fastavro."
);

pub(crate) type NodeId = usize;

pub(crate) enum Node {
    Null,
    Boolean,
    Int,  // decoded as a long: fastavro's reader does not range-check ints
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum(Vec<Py<PyString>>),
    Array(NodeId),
    Map(NodeId),
    Union(Vec<NodeId>),
    Record(Vec<Field>),
    Pending, // a named type whose definition is being compiled
}

pub(crate) struct Field {
    pub(crate) name: Py<PyString>,
    pub(crate) node: NodeId,
    millis_range: bool, // a top-level epoch-millis field held to datetime's range
}

const PRIMITIVES: [&str; 8] = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];

struct Compiler<'py> {
    py: Python<'py>,
    nodes: Vec<Node>,
    named: HashMap<String, NodeId>,
    pending: HashSet<NodeId>,
}

pub(crate) fn unsupported(why: impl Into<String>) -> PyErr {
    UnsupportedSchemaError::new_err(why.into())
}

fn full_name(name: &str, namespace: &str) -> (String, String) {
    // (full name, namespace of the type's own children)
    if let Some(dot) = name.rfind('.') {
        (name.to_string(), name[..dot].to_string())
    } else if namespace.is_empty() {
        (name.to_string(), String::new())
    } else {
        (format!("{namespace}.{name}"), namespace.to_string())
    }
}

impl<'py> Compiler<'py> {
    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn primitive(&mut self, name: &str) -> Option<NodeId> {
        let node = match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::String,
            _ => return None,
        };
        Some(self.push(node))
    }

    fn reference(&self, name: &str, namespace: &str) -> PyResult<NodeId> {
        let candidates = if name.contains('.') || namespace.is_empty() {
            vec![name.to_string()]
        } else {
            vec![format!("{namespace}.{name}"), name.to_string()]
        };
        for candidate in candidates {
            if let Some(&id) = self.named.get(&candidate) {
                if self.pending.contains(&id) {
                    return Err(unsupported(format!("recursive type {candidate}")));
                }
                return Ok(id);
            }
        }
        Err(unsupported(format!("unknown type {name:?}")))
    }

    fn register(&mut self, dict: &Bound<'py, PyDict>, namespace: &str) -> PyResult<(NodeId, String)> {
        let name: String = dict
            .get_item("name")?
            .ok_or_else(|| unsupported("a named type without a name"))?
            .extract()?;
        let own_ns: Option<String> = match dict.get_item("namespace")? {
            Some(ns) if !ns.is_none() => Some(ns.extract()?),
            _ => None,
        };
        let (full, child_ns) = full_name(&name, own_ns.as_deref().unwrap_or(namespace));
        if self.named.contains_key(&full) {
            return Err(unsupported(format!("type {full} defined twice")));
        }
        let id = self.push(Node::Pending);
        self.named.insert(full, id);
        Ok((id, child_ns))
    }

    fn compile(&mut self, schema: &Bound<'py, PyAny>, namespace: &str) -> PyResult<NodeId> {
        if let Ok(name) = schema.extract::<String>() {
            if let Some(id) = self.primitive(&name) {
                return Ok(id);
            }
            return self.reference(&name, namespace);
        }
        if let Ok(branches) = schema.cast::<PyList>() {
            let mut ids = Vec::with_capacity(branches.len());
            for branch in branches.iter() {
                if branch.is_instance_of::<PyList>() {
                    return Err(unsupported("a union inside a union"));
                }
                ids.push(self.compile(&branch, namespace)?);
            }
            return Ok(self.push(Node::Union(ids)));
        }
        let dict = schema
            .cast::<PyDict>()
            .map_err(|_| unsupported(format!("not a schema: {schema}")))?;
        if dict.contains("logicalType")? {
            // fastavro turns several logical types into Python objects.
            return Err(unsupported("logical types"));
        }
        let kind = dict.get_item("type")?.ok_or_else(|| unsupported("no type"))?;
        let kind: String = kind
            .extract()
            .map_err(|_| unsupported("a type that is not a name"))?;
        if PRIMITIVES.contains(&kind.as_str()) {
            return Ok(self.primitive(&kind).expect("a primitive"));
        }
        match kind.as_str() {
            "record" | "error" => {
                let (id, child_ns) = self.register(dict, namespace)?;
                self.pending.insert(id);
                let fields_obj = dict.get_item("fields")?.ok_or_else(|| unsupported("no fields"))?;
                let fields_list = fields_obj.cast::<PyList>().map_err(|_| unsupported("fields"))?;
                let mut fields = Vec::with_capacity(fields_list.len());
                for f in fields_list.iter() {
                    let f = f.cast::<PyDict>().map_err(|_| unsupported("a field"))?.clone();
                    let name: String = f
                        .get_item("name")?
                        .ok_or_else(|| unsupported("a field without a name"))?
                        .extract()?;
                    let ftype = f.get_item("type")?.ok_or_else(|| unsupported("a field without a type"))?;
                    let node = self.compile(&ftype, &child_ns)?;
                    fields.push(Field {
                        name: PyString::intern(self.py, &name).unbind(),
                        node,
                        millis_range: false,
                    });
                }
                self.pending.remove(&id);
                self.nodes[id] = Node::Record(fields);
                Ok(id)
            }
            "enum" => {
                let (id, _) = self.register(dict, namespace)?;
                let symbols: Vec<String> = dict
                    .get_item("symbols")?
                    .ok_or_else(|| unsupported("an enum without symbols"))?
                    .extract()?;
                self.nodes[id] = Node::Enum(
                    symbols.iter().map(|s| PyString::intern(self.py, s).unbind()).collect(),
                );
                Ok(id)
            }
            "fixed" => {
                let (id, _) = self.register(dict, namespace)?;
                let size: usize = dict
                    .get_item("size")?
                    .ok_or_else(|| unsupported("a fixed without a size"))?
                    .extract()?;
                self.nodes[id] = Node::Fixed(size);
                Ok(id)
            }
            "array" => {
                let items = dict.get_item("items")?.ok_or_else(|| unsupported("no items"))?;
                let items = self.compile(&items, namespace)?;
                Ok(self.push(Node::Array(items)))
            }
            "map" => {
                let values = dict.get_item("values")?.ok_or_else(|| unsupported("no values"))?;
                let values = self.compile(&values, namespace)?;
                Ok(self.push(Node::Map(values)))
            }
            other => self.reference(other, namespace),
        }
    }
}

/// A writer schema (as ``json.loads`` gives it) compiled into nodes and the root's id.
pub(crate) fn compile_schema(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<(Vec<Node>, NodeId)> {
    let mut compiler = Compiler { py, nodes: Vec::new(), named: HashMap::new(), pending: HashSet::new() };
    let root = compiler.compile(schema, "")?;
    Ok((compiler.nodes, root))
}

/// Why a body does not decode. `Python`: an exception is already set.
enum Fail {
    Eof(&'static str, usize),
    Msg(String),
    Overflow(String), // a time field beyond a date's range: OverflowError, as on fastavro's path
    Python,
}

type R<T> = Result<T, Fail>;

/// Arrays and maps of items that may take no bytes (null, empty records):
/// a block count beyond this is refused instead of building a list that size.
const ZERO_WIDTH_LIMIT: i64 = 1 << 24;

struct Body<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Body<'_> {
    #[inline(always)]
    fn long(&mut self) -> R<i64> {
        let buf = self.buf;
        let mut pos = self.pos;
        let Some(&first) = buf.get(pos) else {
            return Err(Fail::Eof("long", pos));
        };
        pos += 1;
        let mut b = first as u64;
        let mut n = b & 0x7f;
        let mut shift: u32 = 7;
        while b & 0x80 != 0 {
            let Some(&next) = buf.get(pos) else {
                return Err(Fail::Eof("long", pos));
            };
            pos += 1;
            b = next as u64;
            // As fastavro's C reader on x86-64: the shift count modulo 64.
            n |= (b & 0x7f).wrapping_shl(shift);
            shift = shift.wrapping_add(7);
        }
        self.pos = pos;
        Ok(((n >> 1) ^ (n & 1).wrapping_neg()) as i64)
    }

    #[inline(always)]
    fn take(&mut self, n: usize, what: &'static str) -> R<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(Fail::Eof(what, self.pos)),
        }
    }

    #[inline(always)]
    fn sized(&mut self, what: &'static str) -> R<&[u8]> {
        let size = self.long()?;
        let remaining = self.buf.len() - self.pos;
        if size < 0 || size as u64 > remaining as u64 {
            return Err(Fail::Msg(format!(
                "{what} of {size} bytes at byte {} but {remaining} remain",
                self.pos
            )));
        }
        self.take(size as usize, what)
    }
}

/// Python's list indexing: -len..len, negative from the end.
#[inline(always)]
fn py_index(index: i64, len: usize, what: &str) -> R<usize> {
    let len_i = len as i64;
    let i = if index < 0 { index.wrapping_add(len_i) } else { index };
    if i < 0 || i >= len_i {
        return Err(Fail::Msg(format!("{what} index {index} out of range ({len})")));
    }
    Ok(i as usize)
}

struct Plan {
    nodes: Vec<Node>,
    root: NodeId,
    min_millis: i64,
    max_millis: i64,
}

impl Plan {
    fn zero_width(&self, id: NodeId, depth: usize) -> bool {
        match &self.nodes[id] {
            Node::Null => true,
            Node::Fixed(0) => true,
            Node::Record(fields) => depth < 64 && fields.iter().all(|f| self.zero_width(f.node, depth + 1)),
            Node::Union(branches) => branches.len() == 1 && self.zero_width(branches[0], depth + 1),
            _ => false,
        }
    }

    fn check_count(&self, count: i64, item: NodeId, body: &Body) -> R<()> {
        let remaining = (body.buf.len() - body.pos) as i64;
        if count > remaining && (!self.zero_width(item, 0) || count > ZERO_WIDTH_LIMIT) {
            // Every item takes a byte at least: the input ends first.
            return Err(Fail::Msg(format!(
                "a block of {count} items at byte {} but {remaining} bytes remain",
                body.pos
            )));
        }
        Ok(())
    }

    unsafe fn value(&self, id: NodeId, body: &mut Body) -> R<*mut ffi::PyObject> {
        match &self.nodes[id] {
            Node::Null => {
                let none = ffi::Py_None();
                ffi::Py_IncRef(none);
                Ok(none)
            }
            Node::Boolean => {
                let byte = body.take(1, "boolean")?[0];
                let out = if byte != 0 { ffi::Py_True() } else { ffi::Py_False() };
                ffi::Py_IncRef(out);
                Ok(out)
            }
            Node::Int | Node::Long => {
                let v = body.long()?;
                checked(ffi::PyLong_FromLongLong(v))
            }
            Node::Float => {
                let raw = body.take(4, "float")?;
                let v = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                checked(ffi::PyFloat_FromDouble(v as f64))
            }
            Node::Double => {
                let raw = body.take(8, "double")?;
                let mut b = [0u8; 8];
                b.copy_from_slice(raw);
                checked(ffi::PyFloat_FromDouble(f64::from_le_bytes(b)))
            }
            Node::Bytes => {
                let raw = body.sized("bytes")?;
                checked(ffi::PyBytes_FromStringAndSize(
                    raw.as_ptr() as *const c_char,
                    raw.len() as ffi::Py_ssize_t,
                ))
            }
            Node::String => {
                let raw = body.sized("string")?;
                // Python's own strict UTF-8 decoder: the same acceptance as fastavro's .decode().
                checked(ffi::PyUnicode_DecodeUTF8(
                    raw.as_ptr() as *const c_char,
                    raw.len() as ffi::Py_ssize_t,
                    std::ptr::null(),
                ))
            }
            Node::Fixed(size) => {
                let raw = body.take(*size, "fixed")?;
                checked(ffi::PyBytes_FromStringAndSize(
                    raw.as_ptr() as *const c_char,
                    raw.len() as ffi::Py_ssize_t,
                ))
            }
            Node::Enum(symbols) => {
                let index = body.long()?;
                let i = py_index(index, symbols.len(), "enum symbol")?;
                let out = symbols[i].as_ptr();
                ffi::Py_IncRef(out);
                Ok(out)
            }
            Node::Union(branches) => {
                let index = body.long()?;
                let i = py_index(index, branches.len(), "union branch")?;
                self.value(branches[i], body)
            }
            Node::Record(fields) => {
                let dict = checked(ffi::PyDict_New())?;
                for field in fields {
                    let v = match self.value(field.node, body) {
                        Ok(v) => v,
                        Err(e) => {
                            ffi::Py_DecRef(dict);
                            return Err(e);
                        }
                    };
                    if field.millis_range {
                        let millis = ffi::PyLong_AsLongLong(v);
                        if millis < self.min_millis || millis > self.max_millis {
                            let name = field.name.to_string();
                            ffi::Py_DecRef(v);
                            ffi::Py_DecRef(dict);
                            return Err(Fail::Overflow(format!(
                                "{name} {millis} ms is beyond the range of a date (years 1-9999)"
                            )));
                        }
                    }
                    let rc = ffi::PyDict_SetItem(dict, field.name.as_ptr(), v);
                    ffi::Py_DecRef(v);
                    if rc != 0 {
                        ffi::Py_DecRef(dict);
                        return Err(Fail::Python);
                    }
                }
                Ok(dict)
            }
            Node::Array(item) => {
                let list = checked(ffi::PyList_New(0))?;
                match self.blocks(*item, body, |plan, body| {
                    let v = plan.value(*item, body)?;
                    let rc = ffi::PyList_Append(list, v);
                    ffi::Py_DecRef(v);
                    if rc != 0 {
                        return Err(Fail::Python);
                    }
                    Ok(())
                }) {
                    Ok(()) => Ok(list),
                    Err(e) => {
                        ffi::Py_DecRef(list);
                        Err(e)
                    }
                }
            }
            Node::Map(values) => {
                let dict = checked(ffi::PyDict_New())?;
                match self.blocks(*values, body, |plan, body| {
                    let raw = body.sized("string")?;
                    let key = checked(ffi::PyUnicode_DecodeUTF8(
                        raw.as_ptr() as *const c_char,
                        raw.len() as ffi::Py_ssize_t,
                        std::ptr::null(),
                    ))?;
                    let v = match plan.value(*values, body) {
                        Ok(v) => v,
                        Err(e) => {
                            ffi::Py_DecRef(key);
                            return Err(e);
                        }
                    };
                    let rc = ffi::PyDict_SetItem(dict, key, v);
                    ffi::Py_DecRef(key);
                    ffi::Py_DecRef(v);
                    if rc != 0 {
                        return Err(Fail::Python);
                    }
                    Ok(())
                }) {
                    Ok(()) => Ok(dict),
                    Err(e) => {
                        ffi::Py_DecRef(dict);
                        Err(e)
                    }
                }
            }
            Node::Pending => Err(Fail::Msg("an incomplete type".into())),
        }
    }

    /// Avro's blocked encoding of arrays and maps, as fastavro reads it: a
    /// negative count is followed by a byte size (read, unused) and means its
    /// absolute value (i64::MIN stays negative: no items); 0 ends.
    fn blocks<'b>(
        &self,
        item: NodeId,
        body: &mut Body<'b>,
        mut each: impl FnMut(&Self, &mut Body<'b>) -> R<()>,
    ) -> R<()> {
        let mut count = body.long()?;
        while count != 0 {
            if count < 0 {
                count = count.wrapping_neg();
                body.long()?;
            }
            if count > 0 {
                self.check_count(count, item, body)?;
                for _ in 0..count {
                    each(self, body)?;
                }
            }
            count = body.long()?;
        }
        Ok(())
    }
}

#[inline(always)]
unsafe fn checked(obj: *mut ffi::PyObject) -> R<*mut ffi::PyObject> {
    if obj.is_null() {
        Err(Fail::Python)
    } else {
        Ok(obj)
    }
}

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
    plan: Plan,
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

/// The module `turnaudit._native`: the classes and functions each job's module defines.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Decoder>()?;
    m.add_class::<encode::Encoder>()?;
    m.add_class::<track::NativeStreamTracker>()?;
    m.add_class::<track::BloomFilter>()?;
    m.add_class::<spill::SortedRunStore>()?;
    m.add_class::<spill::IdChunks>()?;
    m.add_class::<verify::ContractCheck>()?;
    m.add_class::<verify::VerifyStep>()?;
    m.add_function(wrap_pyfunction!(track::chain_hash_hex, m)?)?;
    m.add_function(wrap_pyfunction!(follow::start_partition, m)?)?;
    m.add_function(wrap_pyfunction!(follow::stream_state, m)?)?;
    m.add_function(wrap_pyfunction!(follow::restore_stream, m)?)?;
    m.add_function(wrap_pyfunction!(follow::drop_stream, m)?)?;
    m.add_function(wrap_pyfunction!(follow::track_dirty, m)?)?;
    m.add_function(wrap_pyfunction!(follow::take_dirty, m)?)?;
    m.add("EncodeFallback", py.get_type::<encode::EncodeFallback>())?;
    m.add("DecodeError", py.get_type::<DecodeError>())?;
    m.add("TrailingBytesError", py.get_type::<TrailingBytesError>())?;
    m.add("UnsupportedSchemaError", py.get_type::<UnsupportedSchemaError>())?;
    Ok(())
}
