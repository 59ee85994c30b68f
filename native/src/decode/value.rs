//! A body decoded straight into Python objects (dicts with interned keys, lists, str,
//! int, float, bool, None), through the crate's one `ffi` module.

use super::body::{py_index, Body, Fail, R, ZERO_WIDTH_LIMIT};
use super::schema::{Node, NodeId};
use crate::ffi;

pub(crate) struct Plan {
    pub(crate) nodes: Vec<Node>,
    pub(crate) root: NodeId,
    pub(crate) min_millis: i64,
    pub(crate) max_millis: i64,
}

impl Plan {
    pub(crate) fn zero_width(&self, id: NodeId, depth: usize) -> bool {
        match &self.nodes[id] {
            Node::Null => true,
            Node::Fixed(0) => true,
            Node::Record(fields) => depth < 64 && fields.iter().all(|f| self.zero_width(f.node, depth + 1)),
            Node::Union(branches) => branches.len() == 1 && self.zero_width(branches[0], depth + 1),
            _ => false,
        }
    }

    pub(crate) fn check_count(&self, count: i64, item: NodeId, body: &Body) -> R<()> {
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

    pub(crate) unsafe fn value(&self, id: NodeId, body: &mut Body) -> R<ffi::Obj> {
        match &self.nodes[id] {
            Node::Null => {
                Ok(ffi::none())
            }
            Node::Boolean => {
                let byte = body.take(1, "boolean")?[0];
                Ok(ffi::boolean(byte != 0))
            }
            Node::Int | Node::Long => {
                let v = body.long()?;
                checked(ffi::long(v))
            }
            Node::Float => {
                let raw = body.take(4, "float")?;
                let v = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                checked(ffi::float(v as f64))
            }
            Node::Double => {
                let raw = body.take(8, "double")?;
                let mut b = [0u8; 8];
                b.copy_from_slice(raw);
                checked(ffi::float(f64::from_le_bytes(b)))
            }
            Node::Bytes => {
                let raw = body.sized("bytes")?;
                checked(ffi::bytes(raw))
            }
            Node::String => {
                let raw = body.sized("string")?;
                // Python's own strict UTF-8 decoder: the same acceptance as fastavro's .decode().
                checked(ffi::text(raw))
            }
            Node::Fixed(size) => {
                let raw = body.take(*size, "fixed")?;
                checked(ffi::bytes(raw))
            }
            Node::Enum(symbols) => {
                let index = body.long()?;
                let i = py_index(index, symbols.len(), "enum symbol")?;
                Ok(ffi::new_ref(symbols[i].as_ptr()))
            }
            Node::Union(branches) => {
                let index = body.long()?;
                let i = py_index(index, branches.len(), "union branch")?;
                self.value(branches[i], body)
            }
            Node::Record(fields) => {
                let dict = checked(ffi::new_dict())?;
                for field in fields {
                    let v = match self.value(field.node, body) {
                        Ok(v) => v,
                        Err(e) => {
                            ffi::release(dict);
                            return Err(e);
                        }
                    };
                    if field.millis_range {
                        let millis = ffi::long_value(v).unwrap_or(-1);
                        if millis < self.min_millis || millis > self.max_millis {
                            let name = field.name.to_string();
                            ffi::release(v);
                            ffi::release(dict);
                            return Err(Fail::Overflow(format!(
                                "{name} {millis} ms is beyond the range of a date (years 1-9999)"
                            )));
                        }
                    }
                    let ok = ffi::dict_set(dict, field.name.as_ptr(), v);
                    ffi::release(v);
                    if !ok {
                        ffi::release(dict);
                        return Err(Fail::Python);
                    }
                }
                Ok(dict)
            }
            Node::Array(item) => {
                let list = checked(ffi::new_list())?;
                match self.blocks(*item, body, |plan, body| {
                    let v = plan.value(*item, body)?;
                    let ok = ffi::list_append(list, v);
                    ffi::release(v);
                    if !ok {
                        return Err(Fail::Python);
                    }
                    Ok(())
                }) {
                    Ok(()) => Ok(list),
                    Err(e) => {
                        ffi::release(list);
                        Err(e)
                    }
                }
            }
            Node::Map(values) => {
                let dict = checked(ffi::new_dict())?;
                match self.blocks(*values, body, |plan, body| {
                    let raw = body.sized("string")?;
                    let key = checked(ffi::text(raw))?;
                    let v = match plan.value(*values, body) {
                        Ok(v) => v,
                        Err(e) => {
                            ffi::release(key);
                            return Err(e);
                        }
                    };
                    let ok = ffi::dict_set(dict, key, v);
                    ffi::release(key);
                    ffi::release(v);
                    if !ok {
                        return Err(Fail::Python);
                    }
                    Ok(())
                }) {
                    Ok(()) => Ok(dict),
                    Err(e) => {
                        ffi::release(dict);
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
    pub(crate) fn blocks<'b>(
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
unsafe fn checked(obj: ffi::Obj) -> R<ffi::Obj> {
    if obj.is_null() {
        Err(Fail::Python)
    } else {
        Ok(obj)
    }
}
