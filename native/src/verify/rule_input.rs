//! What the contract rule (`contracts`) asks of a turn: the `Value` interface both of its
//! sources give (`contract_values`), with the names, constants and answers it passes.
//! A module of its own below both, so the rule and its sources do not use each other.

use pyo3::prelude::*;
use pyo3::types::PyString;

/// Why the rule stopped without an answer: the value source could not vouch for one
/// (`Unsure`, the scanned source only), or Python raised (a field missing, a failing
/// `__eq__`), as the Python check would have.
pub(crate) enum Stop {
    Unsure,
    Raised(PyErr),
}

impl From<PyErr> for Stop {
    fn from(err: PyErr) -> Self {
        Stop::Raised(err)
    }
}

pub(crate) type Ask<T> = Result<T, Stop>;

/// A field's name: its text, its slot in a scanned record (if the scan keeps it) and
/// the interned Python string a lookup uses.
pub(crate) struct Key {
    pub(crate) name: String,
    pub(crate) slot: Option<usize>,
    pub(crate) py: Py<PyString>,
}

/// A constant of the rule, as text and as the Python string a comparison uses.
pub(crate) struct Text {
    pub(crate) text: String,
    pub(crate) py: Py<PyString>,
}

/// A number a field is compared with (`== 0.0`, `== 0`, `== 2`).
#[derive(Clone, Copy)]
pub(crate) enum Number {
    Int(i64),
    Float(f64),
}

/// What the rule asks of a turn and its values; each answer is Python's for the same
/// expression, or `Unsure`.
pub(crate) trait Value: Sized {
    /// `self[key]`.
    fn item(&self, key: &Key) -> Ask<Self>;
    /// `self.get(key)`, None for an absent key or a None value.
    fn get(&self, key: &Key) -> Ask<Option<Self>>;
    /// `bool(self.get(key, default))`.
    fn flag(&self, key: &Key, default: bool) -> Ask<bool>;
    /// `key in self`.
    fn has(&self, key: &Key) -> Ask<bool>;
    fn truthy(&self) -> Ask<bool>;
    fn is_none(&self) -> Ask<bool>;
    /// `self is False`.
    fn is_false(&self) -> Ask<bool>;
    /// `self == text`.
    fn is_text(&self, text: &Text) -> Ask<bool>;
    /// `self == number`.
    fn is_number(&self, number: Number) -> Ask<bool>;
    /// `self == other`.
    fn equals(&self, other: &Self) -> Ask<bool>;
    /// `f"{self}"`.
    fn shown(&self) -> Ask<String>;
}
