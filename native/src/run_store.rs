//! `SortedRunStore`'s Python methods (`turnaudit.verify.id_store.SpilledIds` calls them), the
//! store itself being `spill::ids`. A floor of its own: `export_runs` takes a tracker's
//! remembered ids, and the tracker in turn keeps its forgotten ids in the store.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fs::{self, File};
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::spill::ids::*;
use crate::spill::runs::*;
use crate::track::NativeStreamTracker;

#[pymethods]
impl SortedRunStore {
    /// A store writing its runs into the directory `make_directory()` returns, called
    /// when the first run is written (the caller removes it), `batch` ids a run at
    /// first, a Bloom filter of `filter_bits` bits made at the first id.
    #[new]
    fn new(make_directory: Py<PyAny>, batch: usize, filter_bits: u64) -> PyResult<Self> {
        if batch < 1 {
            return Err(PyValueError::new_err(format!("a spill run holds 1 or more ids, not {batch}")));
        }
        if filter_bits < 64 || !filter_bits.is_power_of_two() {
            return Err(PyValueError::new_err(format!(
                "a spill filter has a power of two of 64 or more bits, not {filter_bits}"
            )));
        }
        Ok(SortedRunStore {
            directory: None,
            make_directory: Some(make_directory),
            batch,
            pending: HashMap::new(),
            runs: Vec::new(),
            filter: None,
            filter_bits,
            next_file: 0,
            closed: false,
        })
    }

    /// A closed store: what an unpickled one is (a store is pickled only once closed,
    /// as a job's verifier is after handing its ids over).
    #[staticmethod]
    fn closed_store() -> Self {
        SortedRunStore {
            directory: None,
            make_directory: None,
            batch: 1,
            pending: HashMap::new(),
            runs: Vec::new(),
            filter: None,
            filter_bits: 64,
            next_file: 0,
            closed: true,
        }
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, ())> {
        if !slf.borrow().closed {
            return Err(PyValueError::new_err("an open spill store is not pickled (its runs are files of this process)"));
        }
        Ok((slf.get_type().getattr("closed_store")?, ()))
    }

    fn keep(&mut self, py: Python<'_>, event_id: String, seen: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_open()?;
        self.hold(event_id, Self::seen_of(seen)?);
        self.write_if_full(py)
    }

    /// Every (event id, (hash, partition, offset)) of an iterable, one call for a batch.
    fn keep_many(&mut self, py: Python<'_>, dropped: &Bound<'_, PyAny>) -> PyResult<()> {
        self.check_open()?;
        for item in dropped.try_iter()? {
            let (event_id, seen): (String, Bound<'_, PyAny>) = item?.extract()?;
            self.hold(event_id, Self::seen_of(&seen)?);
        }
        self.write_if_full(py)
    }

    /// The first (hash, partition, offset) kept for `event_id`, or None.
    fn recall<'py>(&self, py: Python<'py>, event_id: &str) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.recall_native(event_id)?.map(|seen| seen.to_py(py)).transpose()
    }

    /// The pending batch written as a run.
    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        self.check_open()?;
        if !self.pending.is_empty() {
            self.ensure_directory(py)?;
        }
        self.write_pending().map_err(os_error)
    }

    /// How many distinct ids are held (merges every run into one to know).
    fn __len__(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.check_open()?;
        self.compact_py(py)?;
        Ok(self.runs.first().map_or(0, |r| r.count as usize))
    }

    /// Every id held, in ascending order, in lists of up to `chunk` (merges first; read
    /// from a file handle of its own, so the lists come while the run is read).
    fn id_chunks(&mut self, py: Python<'_>, chunk: usize) -> PyResult<IdChunks> {
        self.check_open()?;
        self.compact_py(py)?;
        let reader = self.runs.first().map(Run::records).transpose().map_err(os_error)?;
        Ok(IdChunks { reader, chunk: chunk.max(1) })
    }

    /// Every id held, in one run file at `destination` for another process to
    /// `absorb`; the store is closed after.
    fn export(&mut self, py: Python<'_>, destination: PathBuf) -> PyResult<()> {
        self.check_open()?;
        self.compact_py(py)?;
        match self.runs.first() {
            Some(run) => {
                if fs::rename(&run.path, &destination).is_err() {
                    fs::copy(&run.path, &destination).map_err(os_error)?;
                }
            }
            None => {
                File::create(&destination).map_err(os_error)?;
            }
        }
        self.close();
        Ok(())
    }

    /// Every id held, and those `tracker` still remembers (taken from it), as run files in
    /// `directory` (`0000.ids`, `0001.ids`, ... in the store's order) for another process
    /// to `absorb_all`: the runs as they are, the rest in one more run, nothing merged. The
    /// store is closed after.
    fn export_runs(&mut self, py: Python<'_>, tracker: &Bound<'_, NativeStreamTracker>, directory: PathBuf) -> PyResult<Vec<PathBuf>> {
        self.check_open()?;
        for (id, seen) in tracker.get().drain_remembered()? {
            if let Entry::Vacant(slot) = self.pending.entry(id) {
                slot.insert(seen);
            }
        }
        if !self.pending.is_empty() {
            self.ensure_directory(py)?;
            let path = self.new_path();
            let mut batch: Vec<(&String, &Seen)> = self.pending.iter().collect();
            batch.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let run = RunWriter::create(path.clone())
                .and_then(|mut writer| {
                    for (id, seen) in &batch {
                        writer.push(id, seen)?;
                    }
                    writer.finish(0)
                })
                .map_err(os_error)?;
            self.pending.clear();
            self.runs.push(run);
        }
        fs::create_dir_all(&directory).map_err(os_error)?;
        let mut out = Vec::with_capacity(self.runs.len());
        for (n, run) in self.runs.iter().enumerate() {
            let destination = directory.join(format!("{n:04}.ids"));
            if fs::rename(&run.path, &destination).is_err() {
                fs::copy(&run.path, &destination).map_err(os_error)?;
            }
            out.push(destination);
        }
        self.close();
        Ok(out)
    }

    /// `absorb` of each file in turn, the same answer; an empty store whose files share
    /// no id takes them over as runs instead of rewriting them (verify's jobs: one file
    /// each, partitions apart).
    fn absorb_all<'py>(&mut self, py: Python<'py>, paths: Vec<PathBuf>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.check_open()?;
        self.ensure_directory(py)?;
        if self.adopt(&paths).map_err(os_error)?.is_some() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for path in paths {
            out.extend(self.absorb(py, path)?);
        }
        Ok(out)
    }

    /// The ids of a run file another store exported, merged in. Returns
    /// (event id, kept here, theirs) for each id both held; of the two, the copy read
    /// first (lowest partition, then offset) is what the store keeps.
    fn absorb<'py>(&mut self, py: Python<'py>, path: PathBuf) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.check_open()?;
        self.ensure_directory(py)?;
        let repeats = self.absorb_file(&path).map_err(os_error)?;
        repeats
            .iter()
            .map(|(id, mine, theirs)| (id.as_str(), mine.to_py(py)?, theirs.to_py(py)?).into_pyobject(py))
            .collect()
    }

    /// Drops every run from memory (the caller removes the directory); idempotent.
    fn close(&mut self) {
        self.closed = true;
        self.pending = HashMap::new();
        self.runs.clear();
        self.filter = None;
        self.make_directory = None;
    }
}
