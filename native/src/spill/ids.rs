//! `SortedRunStore`'s workings: a batch in memory, sorted runs on disk (merged as they
//! pile up), a Bloom filter of every id held; and `IdChunks`, a run read a list at a time.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufReader};
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::runs::*;
use crate::bloom::BloomFilter;

/// The ids of one run, a list at a time.
#[pyclass(module = "turnaudit._native")]
pub(crate) struct IdChunks {
    pub(crate) reader: Option<RunReader>,
    pub(crate) chunk: usize,
}

#[pymethods]
impl IdChunks {
    pub(crate) fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    pub(crate) fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(reader) = self.reader.as_mut() else { return Ok(None) };
        let out = PyList::empty(py);
        while out.len() < self.chunk {
            match reader.next()? {
                Some((id, _)) => out.append(id)?,
                None => {
                    self.reader = None;
                    break;
                }
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }
}

/// Verify's spilled event ids: a batch in memory, sorted runs on disk, a Bloom filter.
#[pyclass(module = "turnaudit._native")]
pub(crate) struct SortedRunStore {
    pub(crate) directory: Option<PathBuf>, // made at the first run written, by `make_directory`
    pub(crate) make_directory: Option<Py<PyAny>>,
    pub(crate) batch: usize,
    pub(crate) pending: HashMap<String, Seen>,
    pub(crate) runs: Vec<Run>, // oldest first; their levels never rise towards the end
    pub(crate) filter: Option<BloomFilter>, // made at the first id held
    pub(crate) filter_bits: u64,
    pub(crate) next_file: u64,
    pub(crate) closed: bool,
}

impl SortedRunStore {
    pub(crate) fn check_open(&self) -> PyResult<()> {
        if self.closed {
            return Err(PyValueError::new_err("the spilled event ids were removed (verify ended)"));
        }
        Ok(())
    }

    pub(crate) fn new_path(&mut self) -> PathBuf {
        self.next_file += 1;
        let directory = self.directory.as_ref().expect("a run is written only once the directory is made");
        directory.join(format!("run-{:08}.ids", self.next_file))
    }

    /// The directory of the runs, made (by the caller's function) when first needed.
    pub(crate) fn ensure_directory(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.directory.is_none() {
            let make = self.make_directory.as_ref().ok_or_else(|| PyValueError::new_err("a closed spill store"))?;
            self.directory = Some(make.bind(py).call0()?.extract()?);
        }
        Ok(())
    }

    pub(crate) fn filter_mut(&mut self) -> &mut BloomFilter {
        let bits = self.filter_bits;
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(bits))
    }

    pub(crate) fn hold(&mut self, id: String, seen: Seen) {
        if !self.pending.contains_key(&id) {
            self.filter_mut().insert(&id);
        }
        if let Entry::Vacant(slot) = self.pending.entry(id) {
            slot.insert(seen);
        }
    }

    /// The pending batch written once it is full (the directory made first).
    pub(crate) fn write_if_full(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.pending.len() >= self.batch {
            self.ensure_directory(py)?;
            self.write_pending().map_err(os_error)?;
        }
        Ok(())
    }

    /// Everything in one run, the directory made first if anything is to be written.
    pub(crate) fn compact_py(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.pending.is_empty() {
            self.ensure_directory(py)?;
        }
        self.compact().map_err(os_error)
    }

    /// The pending batch as a run of level 0, then merges while `FAN_IN` runs share a
    /// level. On an error (a full disk) nothing held is dropped: the batch stays pending,
    /// the runs stay as they were, and the partial file is removed.
    pub(crate) fn write_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let path = self.new_path();
        let mut batch: Vec<(&String, &Seen)> = self.pending.iter().collect();
        batch.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let written = RunWriter::create(path.clone()).and_then(|mut writer| {
            for (id, seen) in &batch {
                writer.push(id, seen)?;
            }
            writer.finish(0)
        });
        match written {
            Ok(run) => {
                self.pending.clear();
                self.runs.push(run);
            }
            Err(e) => {
                let _ = fs::remove_file(&path);
                return Err(e);
            }
        }
        loop {
            let n = self.runs.len();
            if n < FAN_IN {
                break;
            }
            let level = self.runs[n - 1].level;
            if !self.runs[n - FAN_IN..].iter().all(|r| r.level == level) {
                break;
            }
            self.merge_tail(FAN_IN, level + 1)?;
        }
        Ok(())
    }

    /// The last `k` runs merged into one (the oldest copy of an id kept); on an error
    /// they stay as they were.
    pub(crate) fn merge_tail(&mut self, k: usize, level: u32) -> io::Result<()> {
        let path = self.new_path();
        let from = self.runs.len() - k;
        match merge_runs(&self.runs[from..], path.clone(), level) {
            Ok(run) => {
                for old in self.runs.drain(from..) {
                    drop(old.file);
                    fs::remove_file(&old.path)?;
                }
                self.runs.push(run);
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Everything in one run (or none): pending written, every run merged.
    pub(crate) fn compact(&mut self) -> io::Result<()> {
        self.write_pending()?;
        if self.runs.len() > 1 {
            let level = self.runs.iter().map(|r| r.level).max().unwrap_or(0) + 1;
            self.merge_tail(self.runs.len(), level)?;
        }
        Ok(())
    }

    /// `absorb`: one merge-join of the store's single run with the other file; on an
    /// error the store is as it was.
    pub(crate) fn absorb_file(&mut self, path: &std::path::Path) -> io::Result<Vec<(String, Seen, Seen)>> {
        self.compact()?;
        let mut theirs = RunReader(BufReader::with_capacity(IO_BUFFER, File::open(path)?));
        let mut mine = self.runs.first().map(Run::records).transpose()?;
        let out = self.new_path();
        let mut writer = RunWriter::create(out.clone())?;
        let mut repeats = Vec::new();
        let merged = (|| {
            let mut a = match mine.as_mut() {
                Some(r) => r.next()?,
                None => None,
            };
            let mut b = theirs.next()?;
            loop {
                let take_mine = match (&a, &b) {
                    (None, None) => break,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (Some((ia, sa)), Some((ib, sb))) if ia == ib => {
                        let kept = if sb.place() < sa.place() { sb } else { sa };
                        writer.push(ia, kept)?;
                        repeats.push((ia.clone(), sa.clone(), sb.clone()));
                        a = mine.as_mut().expect("a record came from it").next()?;
                        b = theirs.next()?;
                        continue;
                    }
                    (Some((ia, _)), Some((ib, _))) => ia < ib,
                };
                if take_mine {
                    let (id, seen) = a.take().expect("matched above");
                    writer.push(&id, &seen)?;
                    a = mine.as_mut().expect("a record came from it").next()?;
                } else {
                    let (id, seen) = b.take().expect("matched above");
                    self.filter_mut().insert(&id); // a superset is safe: at worst one lookup more
                    writer.push(&id, &seen)?;
                    b = theirs.next()?;
                }
            }
            let level = self.runs.first().map_or(0, |r| r.level);
            writer.finish(level)
        })();
        match merged {
            Ok(run) => {
                for old in self.runs.drain(..) {
                    drop(old.file);
                    fs::remove_file(&old.path)?;
                }
                self.runs.push(run);
                Ok(repeats)
            }
            Err(e) => {
                let _ = fs::remove_file(&out);
                Err(e)
            }
        }
    }

    /// Run files other stores exported, taken over as this store's runs when this store
    /// is empty and no id is in two of them (one read of each, nothing rewritten); `None`
    /// otherwise, with nothing taken (the caller merges them one by one). An id of a
    /// later file the filter may already hold is looked up in the earlier files.
    pub(crate) fn adopt(&mut self, paths: &[PathBuf]) -> io::Result<Option<()>> {
        if !self.runs.is_empty() || !self.pending.is_empty() {
            return Ok(None);
        }
        let mut taken: Vec<Run> = Vec::with_capacity(paths.len());
        for path in paths {
            let mut reader = BufReader::with_capacity(IO_BUFFER, File::open(path)?);
            let (mut id, mut scratch, mut count, mut bytes) = (Vec::new(), Vec::new(), 0u64, 0u64);
            let mut index: Vec<(Box<str>, u64)> = Vec::new();
            let mut maybe_held: Vec<String> = Vec::new();
            while let Some(size) = read_id(&mut reader, &mut id, &mut scratch)? {
                let text = std::str::from_utf8(&id).map_err(|_| corrupt("event id not UTF-8"))?;
                if count.is_multiple_of(INDEX_EVERY) {
                    index.push((text.into(), bytes));
                }
                if !taken.is_empty() && self.filter.as_ref().is_some_and(|f| f.holds(text)) {
                    maybe_held.push(text.to_owned());
                }
                self.filter_mut().insert(text); // a superset is safe, should this fall back
                count += 1;
                bytes += size;
            }
            for text in &maybe_held {
                for run in &taken {
                    if run.find(text)?.is_some() {
                        return Ok(None); // an id two of them hold: merged the usual way
                    }
                }
            }
            taken.push(Run { file: File::open(path)?, path: path.clone(), level: 1, count, bytes, index });
        }
        for mut run in taken {
            let own = self.new_path();
            if fs::rename(&run.path, &own).is_err() {
                fs::copy(&run.path, &own)?;
                run.file = File::open(&own)?;
            }
            run.path = own;
            self.runs.push(run);
        }
        Ok(Some(()))
    }

    /// The stream tracker's hand-over, native to native (no Python tuples on the way).
    pub(crate) fn keep_native(
        &mut self,
        py: Python<'_>,
        dropped: impl IntoIterator<Item = (String, Seen)>,
    ) -> PyResult<()> {
        self.check_open()?;
        for (id, seen) in dropped {
            self.hold(id, seen);
        }
        self.write_if_full(py)
    }

    /// `recall` for the stream tracker, native to native.
    pub(crate) fn recall_native(&self, event_id: &str) -> PyResult<Option<Seen>> {
        self.check_open()?;
        if !self.filter.as_ref().is_some_and(|f| f.holds(event_id)) {
            return Ok(None);
        }
        for run in &self.runs {
            if let Some(seen) = run.find(event_id).map_err(os_error)? {
                return Ok(Some(seen));
            }
        }
        Ok(self.pending.get(event_id).cloned())
    }

    pub(crate) fn seen_of(seen: &Bound<'_, PyAny>) -> PyResult<Seen> {
        let (hash, partition, offset): (String, Option<i64>, Option<i64>) = seen.extract()?;
        Ok(Seen { hash, partition, offset })
    }
}
