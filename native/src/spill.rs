//! Verify's spilled event ids on disk as sorted runs: `SortedRunStore`, the native
//! part of `turnaudit.verify.id_store.SpilledIds` (the Python module owns the meaning).
//!
//! A random event id into one large B-tree costs a random page per id once the tree
//! outgrows the cache (several µs an id in SQLite at ten million). Here a batch of ids
//! is sorted in memory and written once, sequentially, as a run file; `FAN_IN` runs of
//! one size are merged into one run of the next size (a k-way merge, sequential too),
//! so an id is rewritten about log8(ids / batch) times and never looked up on the way.
//! A Bloom filter of every id held answers "never spilled" for most lookups; the
//! others binary-search each run's sparse index (every `INDEX_EVERY`th key in memory)
//! and read one block of the file.
//!
//! An id is held once: the first copy kept wins, in a batch and across runs (the
//! oldest run's copy survives a merge), as `INSERT OR IGNORE` did.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::track::{BloomFilter, NativeStreamTracker};

const INDEX_EVERY: u64 = 64;
const FAN_IN: usize = 8;
const IO_BUFFER: usize = 1 << 16;

/// Where an id was first read: its content hash (hex, as the tracker keeps it) and place.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub(crate) hash: String,
    pub(crate) partition: Option<i64>,
    pub(crate) offset: Option<i64>,
}

impl Seen {
    fn place(&self) -> (i64, i64) {
        (self.partition.unwrap_or(0), self.offset.unwrap_or(0))
    }

    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (self.hash.as_str(), self.partition, self.offset).into_pyobject(py)
    }
}

type Record = (String, Seen);

// One record: u32 id length, id, u16 hash length, hash, u8 which of partition and
// offset are there, then both as i64 (0 when absent). Little-endian.
fn write_record(w: &mut impl Write, id: &str, seen: &Seen) -> io::Result<u64> {
    let hash = seen.hash.as_bytes();
    let hash_len = u16::try_from(hash.len()).map_err(|_| io::Error::new(ErrorKind::InvalidInput, "hash too long"))?;
    let id_len = u32::try_from(id.len()).map_err(|_| io::Error::new(ErrorKind::InvalidInput, "event id too long"))?;
    w.write_all(&id_len.to_le_bytes())?;
    w.write_all(id.as_bytes())?;
    w.write_all(&hash_len.to_le_bytes())?;
    w.write_all(hash)?;
    let flags = u8::from(seen.partition.is_some()) | (u8::from(seen.offset.is_some()) << 1);
    w.write_all(&[flags])?;
    w.write_all(&seen.partition.unwrap_or(0).to_le_bytes())?;
    w.write_all(&seen.offset.unwrap_or(0).to_le_bytes())?;
    Ok(4 + id.len() as u64 + 2 + hash.len() as u64 + 1 + 16)
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("spill run damaged: {what}"))
}

/// The next record's id into `id` (its other fields skipped): the bytes the record
/// took, or None at a clean end.
fn read_id(r: &mut impl Read, id: &mut Vec<u8>, scratch: &mut Vec<u8>) -> io::Result<Option<u64>> {
    let mut len4 = [0u8; 4];
    match r.read_exact(&mut len4) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    id.resize(u32::from_le_bytes(len4) as usize, 0);
    r.read_exact(id)?;
    let mut len2 = [0u8; 2];
    r.read_exact(&mut len2)?;
    let rest = usize::from(u16::from_le_bytes(len2)) + 17;
    scratch.resize(rest, 0);
    r.read_exact(scratch)?;
    Ok(Some(4 + id.len() as u64 + 2 + rest as u64))
}

/// The next record of `r`, or None at a clean end.
fn read_record(r: &mut impl Read) -> io::Result<Option<Record>> {
    let mut len4 = [0u8; 4];
    match r.read_exact(&mut len4) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut id = vec![0u8; u32::from_le_bytes(len4) as usize];
    r.read_exact(&mut id)?;
    let mut len2 = [0u8; 2];
    r.read_exact(&mut len2)?;
    let mut hash = vec![0u8; u16::from_le_bytes(len2) as usize];
    r.read_exact(&mut hash)?;
    let mut rest = [0u8; 17];
    r.read_exact(&mut rest)?;
    let partition = i64::from_le_bytes(rest[1..9].try_into().expect("8 bytes"));
    let offset = i64::from_le_bytes(rest[9..17].try_into().expect("8 bytes"));
    let id = String::from_utf8(id).map_err(|_| corrupt("event id not UTF-8"))?;
    let hash = String::from_utf8(hash).map_err(|_| corrupt("hash not UTF-8"))?;
    Ok(Some((
        id,
        Seen {
            hash,
            partition: (rest[0] & 1 != 0).then_some(partition),
            offset: (rest[0] & 2 != 0).then_some(offset),
        },
    )))
}

/// A sorted run file: unique ids in ascending byte order.
struct Run {
    path: PathBuf,
    file: File,
    level: u32,
    count: u64,
    bytes: u64,
    index: Vec<(Box<str>, u64)>, // every INDEX_EVERY-th id and where its record starts
}

impl Run {
    fn find(&self, id: &str) -> io::Result<Option<Seen>> {
        let block = self.index.partition_point(|(key, _)| &**key <= id);
        if block == 0 {
            return Ok(None);
        }
        let start = self.index[block - 1].1;
        let end = self.index.get(block).map_or(self.bytes, |(_, at)| *at);
        let mut buf = vec![0u8; (end - start) as usize];
        self.file.read_exact_at(&mut buf, start)?;
        let mut cursor = &buf[..];
        while let Some((key, seen)) = read_record(&mut cursor)? {
            match key.as_str().cmp(id) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => return Ok(Some(seen)),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    fn records(&self) -> io::Result<RunReader> {
        Ok(RunReader(BufReader::with_capacity(IO_BUFFER, File::open(&self.path)?)))
    }
}

struct RunReader(BufReader<File>);

impl RunReader {
    fn next(&mut self) -> io::Result<Option<Record>> {
        read_record(&mut self.0)
    }
}

/// Writes one run, ids in ascending order, each once.
struct RunWriter {
    path: PathBuf,
    out: BufWriter<File>,
    count: u64,
    bytes: u64,
    index: Vec<(Box<str>, u64)>,
    last: Option<String>,
}

impl RunWriter {
    fn create(path: PathBuf) -> io::Result<Self> {
        let out = BufWriter::with_capacity(IO_BUFFER, File::create(&path)?);
        Ok(RunWriter { path, out, count: 0, bytes: 0, index: Vec::new(), last: None })
    }

    fn push(&mut self, id: &str, seen: &Seen) -> io::Result<()> {
        debug_assert!(self.last.as_deref().is_none_or(|last| last < id), "ids in ascending order");
        if self.count.is_multiple_of(INDEX_EVERY) {
            self.index.push((id.into(), self.bytes));
        }
        self.bytes += write_record(&mut self.out, id, seen)?;
        self.count += 1;
        if cfg!(debug_assertions) {
            self.last = Some(id.to_owned());
        }
        Ok(())
    }

    fn finish(self, level: u32) -> io::Result<Run> {
        // A scratch file: written out, never synced (nothing survives the process anyway).
        drop(self.out.into_inner().map_err(|e| e.into_error())?);
        Ok(Run { file: File::open(&self.path)?, path: self.path, level, count: self.count, bytes: self.bytes, index: self.index })
    }
}

/// `runs` (oldest first) merged into one run at `path`: each id once, the oldest copy.
fn merge_runs(runs: &[Run], path: PathBuf, level: u32) -> io::Result<Run> {
    let mut readers = runs.iter().map(Run::records).collect::<io::Result<Vec<_>>>()?;
    let mut heads: Vec<Option<Seen>> = vec![None; runs.len()];
    // (id, run age) in a min-heap: equal ids come oldest first, the others are skipped.
    let mut heap: BinaryHeap<Reverse<(String, usize)>> = BinaryHeap::new();
    for (i, reader) in readers.iter_mut().enumerate() {
        if let Some((id, seen)) = reader.next()? {
            heads[i] = Some(seen);
            heap.push(Reverse((id, i)));
        }
    }
    let mut writer = RunWriter::create(path)?;
    let mut last: Option<String> = None;
    while let Some(Reverse((id, i))) = heap.pop() {
        let seen = heads[i].take().expect("a head per queued id");
        if last.as_deref() != Some(id.as_str()) {
            writer.push(&id, &seen)?;
            last = Some(id);
        }
        if let Some((next_id, next_seen)) = readers[i].next()? {
            heads[i] = Some(next_seen);
            heap.push(Reverse((next_id, i)));
        }
    }
    writer.finish(level)
}

/// An I/O error as Python's OSError with its errno (ENOSPC for a full disk).
pub(crate) fn os_error(e: io::Error) -> PyErr {
    match e.raw_os_error() {
        Some(code) => PyOSError::new_err((code, e.to_string())),
        None => PyOSError::new_err(e.to_string()),
    }
}

/// The ids of one run, a list at a time.
#[pyclass(module = "turnaudit._native")]
pub(crate) struct IdChunks {
    reader: Option<RunReader>,
    chunk: usize,
}

#[pymethods]
impl IdChunks {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
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
    directory: Option<PathBuf>, // made at the first run written, by `make_directory`
    make_directory: Option<Py<PyAny>>,
    batch: usize,
    pending: HashMap<String, Seen>,
    runs: Vec<Run>, // oldest first; their levels never rise towards the end
    filter: Option<BloomFilter>, // made at the first id held
    filter_bits: u64,
    next_file: u64,
    closed: bool,
}

impl SortedRunStore {
    fn check_open(&self) -> PyResult<()> {
        if self.closed {
            return Err(PyValueError::new_err("the spilled event ids were removed (verify ended)"));
        }
        Ok(())
    }

    fn new_path(&mut self) -> PathBuf {
        self.next_file += 1;
        let directory = self.directory.as_ref().expect("a run is written only once the directory is made");
        directory.join(format!("run-{:08}.ids", self.next_file))
    }

    /// The directory of the runs, made (by the caller's function) when first needed.
    fn ensure_directory(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.directory.is_none() {
            let make = self.make_directory.as_ref().ok_or_else(|| PyValueError::new_err("a closed spill store"))?;
            self.directory = Some(make.bind(py).call0()?.extract()?);
        }
        Ok(())
    }

    fn filter_mut(&mut self) -> &mut BloomFilter {
        let bits = self.filter_bits;
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(bits))
    }

    fn hold(&mut self, id: String, seen: Seen) {
        if !self.pending.contains_key(&id) {
            self.filter_mut().insert(&id);
        }
        if let Entry::Vacant(slot) = self.pending.entry(id) {
            slot.insert(seen);
        }
    }

    /// The pending batch written once it is full (the directory made first).
    fn write_if_full(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.pending.len() >= self.batch {
            self.ensure_directory(py)?;
            self.write_pending().map_err(os_error)?;
        }
        Ok(())
    }

    /// Everything in one run, the directory made first if anything is to be written.
    fn compact_py(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.pending.is_empty() {
            self.ensure_directory(py)?;
        }
        self.compact().map_err(os_error)
    }

    /// The pending batch as a run of level 0, then merges while `FAN_IN` runs share a
    /// level. On an error (a full disk) nothing held is dropped: the batch stays pending,
    /// the runs stay as they were, and the partial file is removed.
    fn write_pending(&mut self) -> io::Result<()> {
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
    fn merge_tail(&mut self, k: usize, level: u32) -> io::Result<()> {
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
    fn compact(&mut self) -> io::Result<()> {
        self.write_pending()?;
        if self.runs.len() > 1 {
            let level = self.runs.iter().map(|r| r.level).max().unwrap_or(0) + 1;
            self.merge_tail(self.runs.len(), level)?;
        }
        Ok(())
    }

    /// `absorb`: one merge-join of the store's single run with the other file; on an
    /// error the store is as it was.
    fn absorb_file(&mut self, path: &std::path::Path) -> io::Result<Vec<(String, Seen, Seen)>> {
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
    fn adopt(&mut self, paths: &[PathBuf]) -> io::Result<Option<()>> {
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

    fn seen_of(seen: &Bound<'_, PyAny>) -> PyResult<Seen> {
        let (hash, partition, offset): (String, Option<i64>, Option<i64>) = seen.extract()?;
        Ok(Seen { hash, partition, offset })
    }
}

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
