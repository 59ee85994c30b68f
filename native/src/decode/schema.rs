//! The writer schema compiler the decoder and the encoder share: a schema (the JSON
//! object Python parsed) compiled once into an arena of nodes. Anything whose result
//! could differ from fastavro's (recursive types, logical types) is refused here.

use std::collections::{HashMap, HashSet};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

// Raised here, where a schema is refused (re-exported by the decoder's module).
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
    pub(crate) millis_range: bool, // a top-level epoch-millis field held to datetime's range
    /// The field's `default`, as far as the encoder writes one for a record without the
    /// field (as fastavro does).
    pub(crate) default: FieldDefault,
}

/// A field's `default` in the schema: none, `null`, `[]`, or another value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldDefault {
    Absent,
    Null,
    EmptyList,
    Other,
}

fn default_of(field: &Bound<'_, PyDict>) -> PyResult<FieldDefault> {
    Ok(match field.get_item("default")? {
        None => FieldDefault::Absent,
        Some(v) if v.is_none() => FieldDefault::Null,
        Some(v) if v.cast::<PyList>().is_ok_and(|l| l.is_empty()) => FieldDefault::EmptyList,
        Some(_) => FieldDefault::Other,
    })
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
                        default: default_of(&f)?,
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
