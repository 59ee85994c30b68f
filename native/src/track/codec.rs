//! The tracker's state as bytes (pickled trackers, spilled streams, the follower's
//! checkpoints): little-endian integers, texts as a u32 length and UTF-8.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pub(crate) struct StateWriter(pub(crate) Vec<u8>);

impl StateWriter {
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i128(&mut self, v: i128) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn text(&mut self, t: &str) {
        self.0.extend_from_slice(&(t.len() as u32).to_le_bytes());
        self.0.extend_from_slice(t.as_bytes());
    }
    pub(crate) fn opt(&mut self, v: Option<i64>) {
        self.0.push(u8::from(v.is_some()));
        self.0.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
    }
}

pub(crate) struct StateReader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
}

impl StateReader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> PyResult<&[u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| PyValueError::new_err("a tracker's state cut short"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    pub(crate) fn u64(&mut self) -> PyResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(crate) fn i64(&mut self) -> PyResult<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub(crate) fn i128(&mut self) -> PyResult<i128> {
        Ok(i128::from_le_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }
    pub(crate) fn text(&mut self) -> PyResult<String> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| PyValueError::new_err("a tracker's state with a text not UTF-8"))
    }
    pub(crate) fn opt(&mut self) -> PyResult<Option<i64>> {
        let some = self.take(1)?[0] == 1;
        let v = self.i64()?;
        Ok(some.then_some(v))
    }
}
