//! The two sources the contract rule reads a turn from (`rule_input::Value`).
//!
//! `Object`: a decoded event, Python objects: each answer is Python's own (the same
//! lookups, comparisons and truth tests `check_event` made in Python; its exceptions).
//!
//! `Scanned`: verify's record read in place (`decode::scan`): exact where the scanned
//! value settles Python's answer (its kind and content are the decoded object's), and
//! `Unsure` where it does not (a field the scan did not keep, two values not surely
//! equal, a detail's text): the step then hands the turn to Python.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};

use super::rule_input::{Ask, Key, Number, Stop, Text, Value};
use crate::decode::scan::V;

/// A Python object the rule reads. An exact dict is read by the dict API (what indexing
/// it would do); anything else, a dict subclass too (it may override `__getitem__`),
/// through its own `[]` and `get`.
pub(crate) struct Object<'py>(pub(crate) Bound<'py, PyAny>);

impl<'py> Value for Object<'py> {
    fn item(&self, key: &Key) -> Ask<Self> {
        let name = key.py.bind(self.0.py());
        if let Ok(dict) = self.0.cast_exact::<PyDict>() {
            return match dict.get_item(name)? {
                Some(v) => Ok(Object(v)),
                None => Err(Stop::Raised(pyo3::exceptions::PyKeyError::new_err(name.clone().unbind()))),
            };
        }
        Ok(Object(self.0.get_item(name)?))
    }

    fn get(&self, key: &Key) -> Ask<Option<Self>> {
        let py = self.0.py();
        let name = key.py.bind(py);
        let v = match self.0.cast_exact::<PyDict>() {
            Ok(dict) => dict.get_item(name)?,
            Err(_) => Some(self.0.call_method1(intern!(py, "get"), (name,))?),
        };
        Ok(v.filter(|v| !v.is_none()).map(Object))
    }

    fn flag(&self, key: &Key, default: bool) -> Ask<bool> {
        let py = self.0.py();
        let name = key.py.bind(py);
        match self.0.cast_exact::<PyDict>() {
            Ok(dict) => match dict.get_item(name)? {
                Some(v) => Ok(v.is_truthy()?),
                None => Ok(default),
            },
            Err(_) => Ok(self.0.call_method1(intern!(py, "get"), (name, default))?.is_truthy()?),
        }
    }

    fn has(&self, key: &Key) -> Ask<bool> {
        Ok(self.0.contains(key.py.bind(self.0.py()))?)
    }

    fn truthy(&self) -> Ask<bool> {
        Ok(self.0.is_truthy()?)
    }

    fn is_none(&self) -> Ask<bool> {
        Ok(self.0.is_none())
    }

    fn is_false(&self) -> Ask<bool> {
        Ok(self.0.is(PyBool::new(self.0.py(), false)))
    }

    fn is_text(&self, text: &Text) -> Ask<bool> {
        Ok(self.0.eq(text.py.bind(self.0.py()))?)
    }

    fn is_number(&self, number: Number) -> Ask<bool> {
        Ok(match number {
            Number::Int(n) => self.0.eq(n)?,
            Number::Float(x) => self.0.eq(x)?,
        })
    }

    fn equals(&self, other: &Self) -> Ask<bool> {
        // `!=` as Python's check wrote it: not always `not ==` for a foreign type.
        Ok(!self.0.ne(&other.0)?)
    }

    fn shown(&self) -> Ask<String> {
        Ok(self.0.str()?.to_str()?.to_owned())
    }
}

/// A scanned record (its kept top-level fields by slot) or one of its values.
pub(crate) enum Scanned<'s, 'a> {
    Top(&'s [Option<V<'a>>]),
    Value(&'s V<'a>),
}

impl<'s, 'a> Scanned<'s, 'a> {
    fn value(&self) -> Ask<&'s V<'a>> {
        match self {
            Scanned::Value(v) => Ok(v),
            Scanned::Top(_) => Err(Stop::Unsure),
        }
    }

    /// The field, if the source holds it; `Unsure` where the scan cannot say.
    fn field(&self, key: &Key) -> Ask<Option<&'s V<'a>>> {
        match self {
            // A slot the scan kept is there; any other field is not one it vouches for.
            Scanned::Top(f) => key.slot.and_then(|i| f[i].as_ref()).map(Some).ok_or(Stop::Unsure),
            // A record's fields are all there: an absent one is absent in Python too.
            Scanned::Value(V::Fields(fields)) => Ok(fields.iter().find(|(n, _)| *n == key.name).map(|(_, v)| v)),
            Scanned::Value(_) => Err(Stop::Unsure),
        }
    }
}

impl Value for Scanned<'_, '_> {
    fn item(&self, key: &Key) -> Ask<Self> {
        self.field(key)?.map(Scanned::Value).ok_or(Stop::Unsure)
    }

    fn get(&self, key: &Key) -> Ask<Option<Self>> {
        Ok(self.field(key)?.filter(|v| !matches!(v, V::Null)).map(Scanned::Value))
    }

    fn flag(&self, key: &Key, default: bool) -> Ask<bool> {
        Ok(self.field(key)?.map_or(default, V::truthy))
    }

    fn has(&self, key: &Key) -> Ask<bool> {
        self.field(key).map(|f| f.is_some())
    }

    fn truthy(&self) -> Ask<bool> {
        Ok(self.value()?.truthy())
    }

    fn is_none(&self) -> Ask<bool> {
        Ok(matches!(self.value()?, V::Null))
    }

    fn is_false(&self) -> Ask<bool> {
        Ok(matches!(self.value()?, V::Bool(false)))
    }

    fn is_text(&self, text: &Text) -> Ask<bool> {
        Ok(self.value()?.is_text(&text.text))
    }

    fn is_number(&self, number: Number) -> Ask<bool> {
        let v = self.value()?;
        Ok(match number {
            Number::Int(n) => v.is_number(n),
            Number::Float(x) if x == x.trunc() && x.abs() < 1e15 => v.is_number(x as i64),
            Number::Float(_) => return Err(Stop::Unsure),
        })
    }

    fn equals(&self, other: &Self) -> Ask<bool> {
        // Surely equal, or not known to be.
        if self.value()?.same(other.value()?) {
            Ok(true)
        } else {
            Err(Stop::Unsure)
        }
    }

    fn shown(&self) -> Ask<String> {
        Err(Stop::Unsure)
    }
}
