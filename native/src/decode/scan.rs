//! A record's body read without building Python objects: every byte checked exactly as
//! `Plan::value` checks it (so a body scans cleanly exactly when it decodes), and the
//! top-level fields verify needs kept as borrowed values (`V`), the rest skipped.
//!
//! Equality of two `V`s implies equality of the Python values the decoder would build
//! (same kind, same content; a float compares as a float, NaN unequal): the other way
//! round is not promised, so a caller that finds two values unequal asks Python.

use pyo3::prelude::*;

use super::body::{py_index, Body, Fail, R};
use super::schema::{Node, NodeId};
use super::Plan;

/// A decoded value, borrowed from the message and the schema.
pub(crate) enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bytes(&'a [u8]),
    List(Vec<V<'a>>),
    Fields(Vec<(&'a str, V<'a>)>),
}

impl V<'_> {
    /// Python's `bool(value)`.
    pub(crate) fn truthy(&self) -> bool {
        match self {
            V::Null => false,
            V::Bool(b) => *b,
            V::Int(i) => *i != 0,
            V::Float(f) => *f != 0.0,
            V::Str(s) => !s.is_empty(),
            V::Bytes(b) => !b.is_empty(),
            V::List(l) => !l.is_empty(),
            V::Fields(f) => !f.is_empty(),
        }
    }

    /// `value == number` as Python answers it, for the kinds that can be equal.
    pub(crate) fn is_number(&self, number: i64) -> bool {
        match self {
            V::Bool(b) => i64::from(*b) == number,
            V::Int(i) => *i == number,
            V::Float(f) => *f == number as f64,
            _ => false,
        }
    }

    pub(crate) fn is_text(&self, text: &str) -> bool {
        matches!(self, V::Str(s) if *s == text)
    }

    /// A record's (or map's) field by name.
    pub(crate) fn field(&self, name: &str) -> Option<&Self> {
        match self {
            V::Fields(fields) => fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// True only where the Python values are surely equal.
    pub(crate) fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (V::Null, V::Null) => true,
            (V::Bool(a), V::Bool(b)) => a == b,
            (V::Int(a), V::Int(b)) => a == b,
            (V::Float(a), V::Float(b)) => a == b,
            (V::Str(a), V::Str(b)) => a == b,
            (V::Bytes(a), V::Bytes(b)) => a == b,
            (V::List(a), V::List(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y)),
            (V::Fields(a), V::Fields(b)) => {
                // Dict equality: the same keys (each once here), equal values.
                a.len() == b.len()
                    && a.iter().all(|(n, x)| {
                        a.iter().filter(|(m, _)| m == n).count() == 1
                            && b.iter().filter(|(m, _)| m == n).count() == 1
                            && other.field(n).is_some_and(|y| x.same(y))
                    })
            }
            _ => false,
        }
    }
}

/// The texts of a plan's names (fields, enum symbols), per node, read once.
pub(crate) struct Names {
    fields: Vec<Vec<String>>,
    symbols: Vec<Vec<String>>,
}

impl Names {
    pub(crate) fn of(py: Python<'_>, plan: &Plan) -> PyResult<Self> {
        let mut fields = Vec::with_capacity(plan.nodes.len());
        let mut symbols = Vec::with_capacity(plan.nodes.len());
        for node in &plan.nodes {
            fields.push(match node {
                Node::Record(fs) => fs.iter().map(|f| f.name.bind(py).to_str().map(str::to_owned)).collect::<PyResult<_>>()?,
                _ => Vec::new(),
            });
            symbols.push(match node {
                Node::Enum(ss) => ss.iter().map(|s| s.bind(py).to_str().map(str::to_owned)).collect::<PyResult<_>>()?,
                _ => Vec::new(),
            });
        }
        Ok(Names { fields, symbols })
    }

    /// The root record's field names.
    pub(crate) fn top(&self, plan: &Plan) -> &[String] {
        &self.fields[plan.root]
    }
}

fn slice<'a>(body: &mut Body<'a>, n: usize, what: &'static str) -> R<&'a [u8]> {
    let buf: &'a [u8] = body.buf;
    match body.pos.checked_add(n).filter(|&e| e <= buf.len()) {
        Some(end) => {
            let out = &buf[body.pos..end];
            body.pos = end;
            Ok(out)
        }
        None => Err(Fail::Eof(what, body.pos)),
    }
}

fn sized<'a>(body: &mut Body<'a>, what: &'static str) -> R<&'a [u8]> {
    let size = body.long()?;
    let remaining = body.buf.len() - body.pos;
    if size < 0 || size as u64 > remaining as u64 {
        return Err(Fail::Msg(format!("{what} of {size} bytes at byte {} but {remaining} remain", body.pos)));
    }
    slice(body, size as usize, what)
}

fn text<'a>(body: &mut Body<'a>) -> R<&'a str> {
    utf8(sized(body, "string")?).ok_or_else(|| Fail::Msg("invalid UTF-8".into()))
}

/// Strict UTF-8 (no surrogates, no overlong forms): what Python's decoder accepts. Most
/// of a turn's texts are short and ASCII: checked a word at a time, inline.
#[inline(always)]
fn utf8(raw: &[u8]) -> Option<&str> {
    if raw.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(raw) });
    }
    std::str::from_utf8(raw).ok()
}

/// A long, `None` at the end of the input (the skip's reader: no error built).
#[inline(always)]
fn long(body: &mut Body<'_>) -> Option<i64> {
    body.long().ok()
}

/// `n` bytes passed over, `None` past the end.
#[inline(always)]
fn pass(body: &mut Body<'_>, n: usize) -> Option<()> {
    let end = body.pos.checked_add(n).filter(|&e| e <= body.buf.len())?;
    body.pos = end;
    Some(())
}

/// A size-prefixed value's bytes, `None` where `sized` fails.
#[inline(always)]
fn sized_skip<'a>(body: &mut Body<'a>) -> Option<&'a [u8]> {
    let size = long(body)?;
    let remaining = body.buf.len() - body.pos;
    if size < 0 || size as u64 > remaining as u64 {
        return None;
    }
    let out = &body.buf[body.pos..body.pos + size as usize];
    body.pos += size as usize;
    Some(out)
}

/// Checks one value of node `id` as `read` does, building nothing (no `V`, no vector,
/// no error text): `None` exactly where `read` fails.
fn skip(plan: &Plan, id: NodeId, body: &mut Body<'_>) -> Option<()> {
    match &plan.nodes[id] {
        Node::Null => Some(()),
        Node::Boolean => pass(body, 1),
        Node::Int | Node::Long => long(body).map(drop),
        Node::Float => pass(body, 4),
        Node::Double => pass(body, 8),
        Node::Bytes => sized_skip(body).map(drop),
        Node::String => utf8(sized_skip(body)?).map(drop),
        Node::Fixed(size) => pass(body, *size),
        Node::Enum(symbols) => py_index(long(body)?, symbols.len(), "enum symbol").ok().map(drop),
        Node::Union(branches) => {
            let i = py_index(long(body)?, branches.len(), "union branch").ok()?;
            skip(plan, branches[i], body)
        }
        Node::Record(fields) => fields.iter().try_for_each(|field| skip(plan, field.node, body)),
        Node::Array(item) => skip_blocks(plan, *item, body, |plan, body| skip(plan, *item, body)),
        Node::Map(values) => skip_blocks(plan, *values, body, |plan, body| {
            utf8(sized_skip(body)?)?;
            skip(plan, *values, body)
        }),
        Node::Pending => None,
    }
}

/// `Plan::blocks` for the skip: the same counts, sizes and refusals.
#[inline(always)]
fn skip_blocks(plan: &Plan, item: NodeId, body: &mut Body<'_>, each: impl Fn(&Plan, &mut Body<'_>) -> Option<()>) -> Option<()> {
    let mut count = long(body)?;
    while count != 0 {
        if count < 0 {
            count = count.wrapping_neg();
            long(body)?;
        }
        if count > 0 {
            plan.check_count(count, item, body).ok()?;
            for _ in 0..count {
                each(plan, body)?;
            }
        }
        count = long(body)?;
    }
    Some(())
}

/// Reads one value of node `id`, kept.
fn read<'a>(plan: &Plan, names: &'a Names, id: NodeId, body: &mut Body<'a>) -> R<V<'a>> {
    Ok(match &plan.nodes[id] {
        Node::Null => V::Null,
        Node::Boolean => V::Bool(slice(body, 1, "boolean")?[0] != 0),
        Node::Int | Node::Long => V::Int(body.long()?),
        Node::Float => {
            let raw = slice(body, 4, "float")?;
            V::Float(f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as f64)
        }
        Node::Double => {
            let raw = slice(body, 8, "double")?;
            let mut b = [0u8; 8];
            b.copy_from_slice(raw);
            V::Float(f64::from_le_bytes(b))
        }
        Node::Bytes => V::Bytes(sized(body, "bytes")?),
        Node::String => V::Str(text(body)?),
        Node::Fixed(size) => V::Bytes(slice(body, *size, "fixed")?),
        Node::Enum(symbols) => {
            let i = py_index(body.long()?, symbols.len(), "enum symbol")?;
            V::Str(&names.symbols[id][i])
        }
        Node::Union(branches) => {
            let i = py_index(body.long()?, branches.len(), "union branch")?;
            read(plan, names, branches[i], body)?
        }
        Node::Record(fields) => {
            let mut kept = Vec::with_capacity(fields.len());
            for (field, name) in fields.iter().zip(&names.fields[id]) {
                kept.push((name.as_str(), read(plan, names, field.node, body)?));
            }
            V::Fields(kept)
        }
        Node::Array(item) => {
            // `Plan::blocks`, with each block's items sized for at once (a count beyond
            // the bytes left is zero-width items: grown as they come).
            let mut kept = Vec::new();
            let mut count = body.long()?;
            while count != 0 {
                if count < 0 {
                    count = count.wrapping_neg();
                    body.long()?;
                }
                if count > 0 {
                    plan.check_count(count, *item, body)?;
                    kept.reserve((count as u64).min((body.buf.len() - body.pos) as u64) as usize);
                    for _ in 0..count {
                        kept.push(read(plan, names, *item, body)?);
                    }
                }
                count = body.long()?;
            }
            V::List(kept)
        }
        Node::Map(values) => {
            let mut kept = Vec::new();
            plan.blocks(*values, body, |plan, body| {
                let key = text(body)?;
                let v = read(plan, names, *values, body)?;
                // A later equal key replaces the earlier one, as in a dict.
                kept.retain(|(k, _): &(&str, V<'_>)| *k != key);
                kept.push((key, v));
                Ok(())
            })?;
            V::Fields(kept)
        }
        Node::Pending => return Err(Fail::Msg("an incomplete type".into())),
    })
}

/// The root record of `payload[start..]`, the fields `wanted` marks kept (by position,
/// into `SLOTS` slots, on the stack), the others checked and dropped; `None` where
/// decoding would fail (or bytes trail).
pub(crate) fn scan<'a, const SLOTS: usize>(
    plan: &Plan,
    names: &'a Names,
    wanted: &[Option<usize>],
    payload: &'a [u8],
    start: usize,
) -> Option<[Option<V<'a>>; SLOTS]> {
    let Node::Record(fields) = &plan.nodes[plan.root] else { return None };
    let mut body = Body { buf: payload, pos: start };
    let mut out: [Option<V<'a>>; SLOTS] = std::array::from_fn(|_| None);
    for (field, slot) in fields.iter().zip(wanted) {
        if slot.is_none() && !field.millis_range {
            skip(plan, field.node, &mut body)?;
            continue;
        }
        let v = read(plan, names, field.node, &mut body).ok()?;
        if field.millis_range {
            let V::Int(millis) = v else { return None };
            if millis < plan.min_millis || millis > plan.max_millis {
                return None;
            }
        }
        if let Some(slot) = slot {
            out[*slot] = Some(v);
        }
    }
    (body.pos == payload.len()).then_some(out)
}
