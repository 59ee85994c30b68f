//! Sorted run files of event ids: one record per id (its content hash and place), ids
//! ascending and unique; written sequentially, merged k-way, looked up through a sparse
//! index of every `INDEX_EVERY`th key and one block read.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

pub(crate) const INDEX_EVERY: u64 = 64;
pub(crate) const FAN_IN: usize = 8;
pub(crate) const IO_BUFFER: usize = 1 << 16;

/// Where an id was first read: its content hash (hex, as the tracker keeps it) and place.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub(crate) hash: String,
    pub(crate) partition: Option<i64>,
    pub(crate) offset: Option<i64>,
}

impl Seen {
    pub(crate) fn place(&self) -> (i64, i64) {
        (self.partition.unwrap_or(0), self.offset.unwrap_or(0))
    }

    pub(crate) fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        (self.hash.as_str(), self.partition, self.offset).into_pyobject(py)
    }
}

pub(crate) type Record = (String, Seen);

// One record: u32 id length, id, u16 hash length, hash, u8 which of partition and
// offset are there, then both as i64 (0 when absent). Little-endian.
pub(crate) fn write_record(w: &mut impl Write, id: &str, seen: &Seen) -> io::Result<u64> {
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

pub(crate) fn corrupt(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("spill run damaged: {what}"))
}

/// The next record's id into `id` (its other fields skipped): the bytes the record
/// took, or None at a clean end.
pub(crate) fn read_id(r: &mut impl Read, id: &mut Vec<u8>, scratch: &mut Vec<u8>) -> io::Result<Option<u64>> {
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
pub(crate) fn read_record(r: &mut impl Read) -> io::Result<Option<Record>> {
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
pub(crate) struct Run {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) level: u32,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
    pub(crate) index: Vec<(Box<str>, u64)>, // every INDEX_EVERY-th id and where its record starts
}

impl Run {
    pub(crate) fn find(&self, id: &str) -> io::Result<Option<Seen>> {
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

    pub(crate) fn records(&self) -> io::Result<RunReader> {
        Ok(RunReader(BufReader::with_capacity(IO_BUFFER, File::open(&self.path)?)))
    }
}

pub(crate) struct RunReader(pub(crate) BufReader<File>);

impl RunReader {
    pub(crate) fn next(&mut self) -> io::Result<Option<Record>> {
        read_record(&mut self.0)
    }
}

/// Writes one run, ids in ascending order, each once.
pub(crate) struct RunWriter {
    pub(crate) path: PathBuf,
    pub(crate) out: BufWriter<File>,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
    pub(crate) index: Vec<(Box<str>, u64)>,
    pub(crate) last: Option<String>,
}

impl RunWriter {
    pub(crate) fn create(path: PathBuf) -> io::Result<Self> {
        let out = BufWriter::with_capacity(IO_BUFFER, File::create(&path)?);
        Ok(RunWriter { path, out, count: 0, bytes: 0, index: Vec::new(), last: None })
    }

    pub(crate) fn push(&mut self, id: &str, seen: &Seen) -> io::Result<()> {
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

    pub(crate) fn finish(self, level: u32) -> io::Result<Run> {
        // A scratch file: written out, never synced (nothing survives the process anyway).
        drop(self.out.into_inner().map_err(|e| e.into_error())?);
        Ok(Run { file: File::open(&self.path)?, path: self.path, level, count: self.count, bytes: self.bytes, index: self.index })
    }
}

/// `runs` (oldest first) merged into one run at `path`: each id once, the oldest copy.
pub(crate) fn merge_runs(runs: &[Run], path: PathBuf, level: u32) -> io::Result<Run> {
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
