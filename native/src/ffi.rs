//! Every raw CPython call of the crate, in one place: the decoder builds values and the
//! encoder reads them through these (pyo3's safe API costs a reference count or a type
//! check per call, which the per-field paths cannot afford). Everything else in the crate
//! goes through pyo3's safe `Bound` API.
//!
//! The functions are thin: each is one C API call (or two) with its contract stated.
//! All take and return raw object pointers; the caller holds the GIL.

use std::os::raw::c_char;

use pyo3::ffi;

/// A raw object pointer (owned or borrowed: each function says which).
pub(crate) type Obj = *mut ffi::PyObject;

/// A new reference to `None`.
#[inline(always)]
pub(crate) unsafe fn none() -> Obj {
    let none = ffi::Py_None();
    ffi::Py_IncRef(none);
    none
}

/// A new reference to `True` or `False`.
#[inline(always)]
pub(crate) unsafe fn boolean(value: bool) -> Obj {
    let out = if value { ffi::Py_True() } else { ffi::Py_False() };
    ffi::Py_IncRef(out);
    out
}

/// A new reference to a borrowed object.
#[inline(always)]
pub(crate) unsafe fn new_ref(obj: Obj) -> Obj {
    ffi::Py_IncRef(obj);
    obj
}

/// One reference to `obj` released.
#[inline(always)]
pub(crate) unsafe fn release(obj: Obj) {
    ffi::Py_DecRef(obj)
}

/// A new int (null with an exception set on failure, as every constructor here).
#[inline(always)]
pub(crate) unsafe fn long(value: i64) -> Obj {
    ffi::PyLong_FromLongLong(value)
}

#[inline(always)]
pub(crate) unsafe fn float(value: f64) -> Obj {
    ffi::PyFloat_FromDouble(value)
}

#[inline(always)]
pub(crate) unsafe fn bytes(raw: &[u8]) -> Obj {
    ffi::PyBytes_FromStringAndSize(raw.as_ptr() as *const c_char, raw.len() as ffi::Py_ssize_t)
}

/// A str from UTF-8 by Python's own strict decoder (`UnicodeDecodeError` when not).
#[inline(always)]
pub(crate) unsafe fn text(raw: &[u8]) -> Obj {
    ffi::PyUnicode_DecodeUTF8(raw.as_ptr() as *const c_char, raw.len() as ffi::Py_ssize_t, std::ptr::null())
}

#[inline(always)]
pub(crate) unsafe fn new_dict() -> Obj {
    ffi::PyDict_New()
}

#[inline(always)]
pub(crate) unsafe fn new_list() -> Obj {
    ffi::PyList_New(0)
}

/// `dict[key] = value` (both borrowed); false with an exception set on failure.
#[inline(always)]
pub(crate) unsafe fn dict_set(dict: Obj, key: Obj, value: Obj) -> bool {
    ffi::PyDict_SetItem(dict, key, value) == 0
}

/// `list.append(value)` (borrowed); false with an exception set on failure.
#[inline(always)]
pub(crate) unsafe fn list_append(list: Obj, value: Obj) -> bool {
    ffi::PyList_Append(list, value) == 0
}

/// An exact int's value: None with an exception set when it exceeds 64 bits.
#[inline(always)]
pub(crate) unsafe fn long_value(obj: Obj) -> Option<i64> {
    let v = ffi::PyLong_AsLongLong(obj);
    if v == -1 && !ffi::PyErr_Occurred().is_null() {
        return None;
    }
    Some(v)
}

/// An exact float's value.
#[inline(always)]
pub(crate) unsafe fn float_value(obj: Obj) -> f64 {
    ffi::PyFloat_AsDouble(obj)
}

/// Whether a C API call left an exception set.
#[inline(always)]
pub(crate) unsafe fn error_set() -> bool {
    !ffi::PyErr_Occurred().is_null()
}

/// The exact built-in type of a value, where it is one the codecs handle (subclasses
/// are none of them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Exact {
    None = 0,
    Bool,
    Int,
    Float,
    Str,
    Bytes,
    List,
    Dict,
}

#[inline(always)]
unsafe fn is(obj: Obj, ty: *mut ffi::PyTypeObject) -> bool {
    ffi::Py_TYPE(obj) == ty
}

pub(crate) unsafe fn exact(obj: Obj) -> Option<Exact> {
    if obj == ffi::Py_None() {
        Some(Exact::None)
    } else if obj == ffi::Py_True() || obj == ffi::Py_False() {
        Some(Exact::Bool)
    } else if is(obj, &raw mut ffi::PyLong_Type) {
        Some(Exact::Int)
    } else if is(obj, &raw mut ffi::PyFloat_Type) {
        Some(Exact::Float)
    } else if is(obj, &raw mut ffi::PyUnicode_Type) {
        Some(Exact::Str)
    } else if is(obj, &raw mut ffi::PyBytes_Type) {
        Some(Exact::Bytes)
    } else if is(obj, &raw mut ffi::PyList_Type) {
        Some(Exact::List)
    } else if is(obj, &raw mut ffi::PyDict_Type) {
        Some(Exact::Dict)
    } else {
        None
    }
}

#[inline(always)]
pub(crate) unsafe fn is_exact(obj: Obj, kind: Exact) -> bool {
    match kind {
        Exact::None => obj == ffi::Py_None(),
        Exact::Bool => obj == ffi::Py_True() || obj == ffi::Py_False(),
        Exact::Int => is(obj, &raw mut ffi::PyLong_Type),
        Exact::Float => is(obj, &raw mut ffi::PyFloat_Type),
        Exact::Str => is(obj, &raw mut ffi::PyUnicode_Type),
        Exact::Bytes => is(obj, &raw mut ffi::PyBytes_Type),
        Exact::List => is(obj, &raw mut ffi::PyList_Type),
        Exact::Dict => is(obj, &raw mut ffi::PyDict_Type),
    }
}

#[inline(always)]
pub(crate) unsafe fn is_true(obj: Obj) -> bool {
    obj == ffi::Py_True()
}

#[inline(always)]
pub(crate) unsafe fn is_false(obj: Obj) -> bool {
    obj == ffi::Py_False()
}

/// A str's UTF-8 (borrowed from the str); None with an exception set when it has none
/// (a lone surrogate).
pub(crate) unsafe fn utf8<'a>(obj: Obj) -> Option<&'a [u8]> {
    let mut size: ffi::Py_ssize_t = 0;
    let data = ffi::PyUnicode_AsUTF8AndSize(obj, &mut size);
    if data.is_null() {
        return None;
    }
    Some(std::slice::from_raw_parts(data as *const u8, size as usize))
}

/// An exact bytes object's content (borrowed from it).
pub(crate) unsafe fn bytes_content<'a>(obj: Obj) -> Option<&'a [u8]> {
    let data = ffi::PyBytes_AsString(obj);
    let size = ffi::PyBytes_Size(obj);
    if data.is_null() || size < 0 {
        return None;
    }
    Some(std::slice::from_raw_parts(data as *const u8, size as usize))
}

#[inline(always)]
pub(crate) unsafe fn list_len(list: Obj) -> isize {
    ffi::PyList_Size(list)
}

/// A borrowed item of a list (null past its end).
#[inline(always)]
pub(crate) unsafe fn list_item(list: Obj, index: isize) -> Obj {
    ffi::PyList_GetItem(list, index)
}

#[inline(always)]
pub(crate) unsafe fn dict_len(dict: Obj) -> isize {
    ffi::PyDict_Size(dict)
}

/// The next (key, value) of a dict, both borrowed; `pos` starts at 0.
#[inline(always)]
pub(crate) unsafe fn dict_next(dict: Obj, pos: &mut isize) -> Option<(Obj, Obj)> {
    let mut key: Obj = std::ptr::null_mut();
    let mut value: Obj = std::ptr::null_mut();
    (ffi::PyDict_Next(dict, pos, &mut key, &mut value) != 0).then_some((key, value))
}

/// `key in dict`: None with an exception set when the lookup failed.
#[inline(always)]
pub(crate) unsafe fn dict_contains(dict: Obj, key: Obj) -> Option<bool> {
    match ffi::PyDict_Contains(dict, key) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// `dict[key]`, borrowed: Ok(None) when absent, Err with an exception set when the
/// lookup failed.
#[inline(always)]
pub(crate) unsafe fn dict_get(dict: Obj, key: Obj) -> Result<Option<Obj>, ()> {
    let v = ffi::PyDict_GetItemWithError(dict, key);
    if v.is_null() {
        return if error_set() { Err(()) } else { Ok(None) };
    }
    Ok(Some(v))
}

/// A strong reference for as long as a value is being read: looking up a key may run a
/// foreign key's `__eq__`, which could drop a borrowed one.
pub(crate) struct Held(pub(crate) Obj);

impl Held {
    pub(crate) unsafe fn new(obj: Obj) -> Self {
        ffi::Py_IncRef(obj);
        Held(obj)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        unsafe { ffi::Py_DecRef(self.0) }
    }
}
