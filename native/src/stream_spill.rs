//! Verify's idle streams on disk: the streams a tracker bounded by `max_streams` pushes
//! out of memory (least recently seen first), kept exactly, in one SQLite scratch file.
//!
//! A stream lives in exactly one place at a time: the tracker's LRU, this store's
//! pending batch, or the file. An evicted stream joins the pending batch (written in one
//! transaction when full); a stream that comes back is taken out (row deleted) and lives
//! in memory again. A Bloom filter of every stream ever put here answers "never
//! spilled" for almost every new stream, so a new session costs no lookup. The file is
//! keyed by (session, producer) in SQLite's binary collation, UTF-8 byte order, the
//! order Python sorts the keys in: the heads come out of it sorted, a page at a time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use crate::track::{BloomFilter, Stream, StreamKey};

const FILTER_BITS: u64 = 1 << 27; // 16 MiB
const ENOSPC: i32 = 28;

/// An SQLite error as Python's OSError (ENOSPC for a full disk, as the id spill's).
fn db_error(e: rusqlite::Error) -> PyErr {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::DiskFull => {
            PyOSError::new_err((ENOSPC, format!("no space left for verify's spilled streams: {e}")))
        }
        _ => PyOSError::new_err(format!("verify's spilled streams: {e}")),
    }
}

fn open(path: &Path) -> PyResult<Connection> {
    let conn = Connection::open(path).map_err(db_error)?;
    // A scratch file: nothing survives the process, so no journal and no syncs.
    conn.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE;
         PRAGMA cache_size = -32768;
         CREATE TABLE IF NOT EXISTS streams (
             session TEXT NOT NULL, producer TEXT NOT NULL, partition INTEGER,
             missing INTEGER NOT NULL, gappy INTEGER NOT NULL, state BLOB NOT NULL,
             PRIMARY KEY (session, producer)) WITHOUT ROWID;",
    )
    .map_err(db_error)?;
    Ok(conn)
}

/// One stream's row: what is kept, and what the report queries select on.
pub(crate) struct Row {
    pub(crate) key: StreamKey,
    pub(crate) stream: Stream,
}

/// A row as written (`connection` borrows the spill mutably: rows are encoded first).
struct Encoded {
    key: StreamKey,
    partition: Option<i64>,
    missing: i64,
    gappy: bool,
    state: Vec<u8>,
}

pub(crate) struct StreamSpill {
    make_path: Option<Py<PyAny>>, // called once, at the first write: the file's path
    path: Option<PathBuf>,
    conn: Option<Connection>,
    pending: HashMap<StreamKey, Stream>,
    batch: usize,
    filter: Option<BloomFilter>,
    stored: u64, // rows in the file
}

impl StreamSpill {
    pub(crate) fn new(make_path: Py<PyAny>, batch: usize) -> Self {
        StreamSpill {
            make_path: Some(make_path),
            path: None,
            conn: None,
            pending: HashMap::new(),
            batch: batch.max(1),
            filter: None,
            stored: 0,
        }
    }

    /// Streams held here (pending and in the file).
    pub(crate) fn len(&self) -> u64 {
        self.pending.len() as u64 + self.stored
    }

    fn connection(&mut self, py: Python<'_>) -> PyResult<&Connection> {
        if self.conn.is_none() {
            let path: PathBuf = match &self.path {
                Some(p) => p.clone(),
                None => {
                    let maker = self.make_path.as_ref().ok_or_else(|| PyOSError::new_err("verify's spilled streams were exported"))?;
                    let p: PathBuf = maker.bind(py).call0()?.extract()?;
                    self.path = Some(p.clone());
                    p
                }
            };
            self.conn = Some(open(&path)?);
        }
        Ok(self.conn.as_ref().expect("opened above"))
    }

    /// An evicted stream kept (the pending batch written once full).
    pub(crate) fn put(&mut self, py: Python<'_>, key: StreamKey, stream: Stream) -> PyResult<()> {
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(FILTER_BITS)).insert(&filter_text(&key));
        self.pending.insert(key, stream);
        if self.pending.len() >= self.batch {
            self.flush(py)?;
        }
        Ok(())
    }

    /// The pending batch written in one transaction; on an error (a full disk) nothing
    /// is dropped: the batch stays pending and the file as it was.
    pub(crate) fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut rows: Vec<(&StreamKey, &Stream)> = self.pending.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0)); // inserted in key order: fewer pages touched
        let encoded: Vec<Encoded> = rows
            .into_iter()
            .map(|(k, s)| Encoded { key: k.clone(), partition: s.partition, missing: s.missing_len() as i64, gappy: s.is_gappy(), state: s.to_bytes() })
            .collect();
        let n = encoded.len() as u64;
        let conn = self.connection(py)?;
        let write = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN")?;
            {
                let mut insert = conn.prepare_cached(
                    "INSERT INTO streams (session, producer, partition, missing, gappy, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                for e in &encoded {
                    insert.execute(params![e.key.0, e.key.1, e.partition, e.missing, e.gappy, e.state])?;
                }
            }
            conn.execute_batch("COMMIT")
        };
        if let Err(e) = write() {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(db_error(e));
        }
        self.pending.clear();
        self.stored += n;
        Ok(())
    }

    fn might_hold(&self, key: &StreamKey) -> bool {
        self.filter.as_ref().is_some_and(|f| f.holds(&filter_text(key)))
    }

    /// The stream, taken out (it lives in memory again), or None if it is not here.
    pub(crate) fn take(&mut self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.pending.remove(key) {
            return Ok(Some(s));
        }
        if self.stored == 0 || !self.might_hold(key) {
            return Ok(None);
        }
        let Some(conn) = self.conn.as_ref() else { return Ok(None) };
        let found: Option<Vec<u8>> = conn
            .prepare_cached("DELETE FROM streams WHERE session = ?1 AND producer = ?2 RETURNING state")
            .and_then(|mut q| q.query_row(params![key.0, key.1], |r| r.get(0)).optional())
            .map_err(db_error)?;
        match found {
            None => Ok(None),
            Some(bytes) => {
                self.stored -= 1;
                Ok(Some(Stream::from_bytes(&bytes)?))
            }
        }
    }

    /// The stream, left where it is (a copy), or None.
    pub(crate) fn peek(&self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.pending.get(key) {
            return Ok(Some(s.clone()));
        }
        if self.stored == 0 || !self.might_hold(key) {
            return Ok(None);
        }
        let Some(conn) = self.conn.as_ref() else { return Ok(None) };
        let found: Option<Vec<u8>> = conn
            .prepare_cached("SELECT state FROM streams WHERE session = ?1 AND producer = ?2")
            .and_then(|mut q| q.query_row(params![key.0, key.1], |r| r.get(0)).optional())
            .map_err(db_error)?;
        found.map(|b| Stream::from_bytes(&b)).transpose()
    }

    /// (chained, legacy) streams held here.
    pub(crate) fn counts(&self) -> PyResult<(u64, u64)> {
        let mut legacy = self.pending.keys().filter(|k| k.1.is_empty()).count() as u64;
        if let (Some(conn), true) = (self.conn.as_ref(), self.stored > 0) {
            let n: i64 = conn
                .query_row("SELECT COUNT(*) FROM streams WHERE producer = ''", [], |r| r.get(0))
                .map_err(db_error)?;
            legacy += n as u64;
        }
        Ok((self.len() - legacy, legacy))
    }

    /// Each stream held here, or (`gappy_only`) each with missing positions; unordered.
    pub(crate) fn each(&self, gappy_only: bool, f: &mut dyn FnMut(&StreamKey, &Stream) -> PyResult<()>) -> PyResult<()> {
        for (k, s) in &self.pending {
            if !gappy_only || s.is_gappy() {
                f(k, s)?;
            }
        }
        let Some(conn) = self.conn.as_ref() else { return Ok(()) };
        if self.stored == 0 {
            return Ok(());
        }
        let sql = if gappy_only {
            "SELECT session, producer, state FROM streams WHERE gappy = 1"
        } else {
            "SELECT session, producer, state FROM streams"
        };
        let mut q = conn.prepare(sql).map_err(db_error)?;
        let mut rows = q.query([]).map_err(db_error)?;
        while let Some(row) = rows.next().map_err(db_error)? {
            let key: StreamKey = (row.get(0).map_err(db_error)?, row.get(1).map_err(db_error)?);
            let bytes: Vec<u8> = row.get(2).map_err(db_error)?;
            f(&key, &Stream::from_bytes(&bytes)?)?;
        }
        Ok(())
    }

    /// Up to `limit` chained streams after `after` (all from the start when None), in
    /// key order: a page of the heads.
    pub(crate) fn chained_page(&self, after: Option<&StreamKey>, limit: usize) -> PyResult<Vec<Row>> {
        let mut out: Vec<Row> = self
            .pending
            .iter()
            .filter(|(k, _)| !k.1.is_empty() && after.is_none_or(|a| *k > a))
            .map(|(k, s)| Row { key: k.clone(), stream: s.clone() })
            .collect();
        if let (Some(conn), true) = (self.conn.as_ref(), self.stored > 0) {
            let (session, producer) = after.map_or(("", ""), |a| (a.0.as_str(), a.1.as_str()));
            let mut q = conn
                .prepare_cached(
                    "SELECT session, producer, state FROM streams WHERE producer != ''
                     AND (session, producer) > (?1, ?2) ORDER BY session, producer LIMIT ?3",
                )
                .map_err(db_error)?;
            let mut rows = q.query(params![session, producer, limit as i64]).map_err(db_error)?;
            while let Some(row) = rows.next().map_err(db_error)? {
                let key: StreamKey = (row.get(0).map_err(db_error)?, row.get(1).map_err(db_error)?);
                let bytes: Vec<u8> = row.get(2).map_err(db_error)?;
                out.push(Row { key, stream: Stream::from_bytes(&bytes)? });
            }
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out.truncate(limit);
        Ok(out)
    }

    /// Drops the streams read from `partitions`; returns the missing positions they held.
    pub(crate) fn forget_partitions(&mut self, partitions: &std::collections::HashSet<i64>) -> PyResult<i64> {
        let mut dropped_missing = 0i64;
        self.pending.retain(|_, s| {
            let gone = s.partition.is_some_and(|p| partitions.contains(&p));
            if gone {
                dropped_missing += s.missing_len() as i64;
            }
            !gone
        });
        if let (Some(conn), true) = (self.conn.as_ref(), self.stored > 0) {
            for p in partitions {
                let (rows, missing): (i64, i64) = conn
                    .query_row("SELECT COUNT(*), COALESCE(SUM(missing), 0) FROM streams WHERE partition = ?1", [p], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .map_err(db_error)?;
                conn.execute("DELETE FROM streams WHERE partition = ?1", [p]).map_err(db_error)?;
                self.stored -= rows as u64;
                dropped_missing += missing;
            }
        }
        Ok(dropped_missing)
    }

    /// Everything held, written and closed; the file moved to `destination` for
    /// another process to read with `rows_of`. Nothing is held here after.
    pub(crate) fn export(&mut self, py: Python<'_>, destination: &Path) -> PyResult<bool> {
        if self.len() == 0 {
            return Ok(false);
        }
        self.flush(py)?;
        let conn = self.conn.take().expect("a flushed spill has its file");
        conn.close().map_err(|(_, e)| db_error(e))?;
        let from = self.path.take().expect("a connected spill has its path");
        if std::fs::rename(&from, destination).is_err() {
            std::fs::copy(&from, destination).map_err(crate::spill::os_error)?;
            std::fs::remove_file(&from).map_err(crate::spill::os_error)?;
        }
        self.make_path = None;
        self.stored = 0;
        self.filter = None;
        Ok(true)
    }
}

/// The streams of a file `export` wrote, a page at a time, in key order.
pub(crate) fn rows_of(path: &Path, after: Option<&StreamKey>, limit: usize) -> PyResult<Vec<Row>> {
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(db_error)?;
    let (session, producer, first) = after.map_or(("", "", true), |a| (a.0.as_str(), a.1.as_str(), false));
    let mut q = conn
        .prepare(
            "SELECT session, producer, state FROM streams
             WHERE ?4 OR (session, producer) > (?1, ?2) ORDER BY session, producer LIMIT ?3",
        )
        .map_err(db_error)?;
    let mut rows = q.query(params![session, producer, limit as i64, first]).map_err(db_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(db_error)? {
        let key: StreamKey = (row.get(0).map_err(db_error)?, row.get(1).map_err(db_error)?);
        let bytes: Vec<u8> = row.get(2).map_err(db_error)?;
        out.push(Row { key, stream: Stream::from_bytes(&bytes)? });
    }
    Ok(out)
}

/// The filter's text for a key (a NUL cannot end a session id's UTF-8 and start the
/// producer's ambiguously: the lengths are part of it).
fn filter_text(key: &StreamKey) -> String {
    format!("{}:{}\u{0}{}", key.0.len(), key.0, key.1)
}
