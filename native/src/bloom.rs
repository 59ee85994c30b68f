//! A blocked Bloom filter over strings (the tracker's forgotten ids, the spills' keys).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// A Bloom filter over strings, blocked: three bit positions per string, all in one
/// 512-bit block (one cache line), so a lookup or insert touches memory once instead of
/// three times (the filter is 32 MiB: each touch a cache miss). `might_hold` is false
/// only for a string never added.
#[pyclass(module = "turnaudit._native")]
pub(crate) struct BloomFilter {
    pub(crate) words: Vec<u64>,
    blocks: u64,
    block_words: u64,
}

impl BloomFilter {
    pub(crate) fn with_bits(bits: u64) -> Self {
        let words = bits / 64;
        let block_words = words.min(8);
        BloomFilter { words: vec![0u64; words as usize], blocks: words / block_words, block_words }
    }

    fn positions<T: Hash + ?Sized>(&self, value: &T) -> [u64; 3] {
        let mut h = DefaultHasher::new();
        value.hash(&mut h);
        let h = h.finish();
        // The low bits pick the block, three 9-bit fields of the high half a bit in it.
        let block_bits = self.block_words * 64;
        let base = (h & (self.blocks - 1)) * block_bits;
        [32, 41, 50].map(|at| base + ((h >> at) & (block_bits - 1)))
    }

    pub(crate) fn insert<T: Hash + ?Sized>(&mut self, value: &T) {
        for p in self.positions(value) {
            self.words[(p >> 6) as usize] |= 1 << (p & 63);
        }
    }

    pub(crate) fn holds<T: Hash + ?Sized>(&self, value: &T) -> bool {
        self.positions(value).iter().all(|p| self.words[(p >> 6) as usize] & (1 << (p & 63)) != 0)
    }
}

#[pymethods]
impl BloomFilter {
    #[new]
    fn new(bits: u64) -> PyResult<Self> {
        if bits < 64 || !bits.is_power_of_two() {
            return Err(PyValueError::new_err(format!(
                "a Bloom filter has a power of two of 64 or more bits, not {bits}"
            )));
        }
        Ok(Self::with_bits(bits))
    }

    fn add(&mut self, text: &str) {
        self.insert(text);
    }

    /// Every string of an iterable (one call for a batch).
    fn add_many(&mut self, texts: &Bound<'_, PyAny>) -> PyResult<()> {
        for text in texts.try_iter()? {
            self.insert(text?.cast::<PyString>()?.to_str()?);
        }
        Ok(())
    }

    fn might_hold(&self, text: &str) -> bool {
        self.holds(text)
    }
}
