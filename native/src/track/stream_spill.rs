//! Verify's idle streams on disk: the streams a tracker bounded by `max_streams` pushes
//! out of memory (least recently seen first), kept exactly, in one SQLite scratch file.
//!
//! A stream lives in exactly one place at a time: the tracker's LRU, this store's
//! pending batch, or the file. An evicted stream joins the pending batch (written in one
//! transaction when full); a stream that comes back is read and lives in memory again,
//! its row left behind as stale (its key in `stale`, every read skips it) and deleted in
//! the next batch's transaction: a return costs one read, not a transaction of its own
//! (at a million live sessions nearly every turn is one). A Bloom filter of every stream ever put here answers "never
//! spilled" for almost every new stream, so a new session costs no lookup. The file is
//! keyed by (session, producer) in SQLite's binary collation, UTF-8 byte order, the
//! order Python sorts the keys in: the heads come out of it sorted, a page at a time.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use rusqlite::{params, Connection, ErrorCode};

use super::stream::{Stream, StreamKey, StreamKeyView};
use crate::bloom::BloomFilter;
use crate::hashing::{FastMap, FastSet};

pub(crate) const FILTER_BITS: u64 = 1 << 27; // 16 MiB
pub(crate) const ENOSPC: i32 = 28;

/// An SQLite error as Python's OSError (ENOSPC for a full disk, as the id spill's).
pub(crate) fn db_error(e: rusqlite::Error) -> PyErr {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::DiskFull => {
            PyOSError::new_err((ENOSPC, format!("no space left for verify's spilled streams: {e}")))
        }
        _ => PyOSError::new_err(format!("verify's spilled streams: {e}")),
    }
}

pub(crate) fn open(path: &Path) -> PyResult<Connection> {
    let conn = Connection::open(path).map_err(db_error)?;
    // A scratch file: nothing survives the process, so no journal and no syncs.
    conn.execute_batch(
        "PRAGMA journal_mode = MEMORY; PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE;
         PRAGMA cache_size = -32768;
         CREATE TABLE IF NOT EXISTS streams (
             session TEXT NOT NULL, producer TEXT NOT NULL, partition INTEGER,
             missing INTEGER NOT NULL, gappy INTEGER NOT NULL, state BLOB NOT NULL,
             PRIMARY KEY (session, producer)) WITHOUT ROWID;
         CREATE INDEX IF NOT EXISTS gappy_streams ON streams (gappy) WHERE gappy = 1;",
    )
    .map_err(db_error)?;
    Ok(conn)
}

/// One stream's row: what is kept, and what the report queries select on.
pub(crate) struct Row {
    pub(crate) key: StreamKey,
    pub(crate) stream: Stream,
}

pub(crate) struct StreamSpill {
    pub(crate) make_path: Option<Py<PyAny>>, // called once, at the first write: the file's path
    pub(crate) path: Option<PathBuf>,
    pub(crate) conn: Option<Connection>,
    pub(crate) pending: FastMap<StreamKey, Stream>, // foldhash: a lookup per return
    // Rows taken back into memory (or dropped) but still in the file, deleted with the
    // next batch; no read returns them.
    pub(crate) stale: FastSet<StreamKey>,
    pub(crate) batch: usize,
    pub(crate) filter: Option<BloomFilter>,
    pub(crate) stored: u64,        // rows in the file
    pub(crate) stored_legacy: u64, // of which v1/v2 streams (no producer)
    pub(crate) unfiltered: bool,   // rows copied in by SQLite, not in the filter: every lookup asks
}

impl StreamSpill {
    pub(crate) fn new(make_path: Py<PyAny>, batch: usize) -> Self {
        StreamSpill {
            make_path: Some(make_path),
            path: None,
            conn: None,
            pending: FastMap::default(),
            stale: FastSet::default(),
            batch: batch.max(1),
            filter: None,
            stored: 0,
            stored_legacy: 0,
            unfiltered: false,
        }
    }

    /// Streams held here (pending and in the file).
    pub(crate) fn len(&self) -> u64 {
        self.pending.len() as u64 + self.stored
    }

    /// The file opened (made at the first write, at the path the maker gives).
    pub(crate) fn connect(&mut self, py: Python<'_>) -> PyResult<()> {
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
        Ok(())
    }

    /// An evicted stream kept (the pending batch written once full).
    pub(crate) fn put(&mut self, py: Python<'_>, key: StreamKey, stream: Stream) -> PyResult<()> {
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(FILTER_BITS)).insert(&key);
        self.pending.insert(key, stream);
        if self.pending.len() >= self.batch {
            self.flush(py)?;
        }
        Ok(())
    }

    /// The stale rows deleted and the pending batch written, in one transaction; on an
    /// error (a full disk) nothing is dropped: the batch stays pending, the stale keys
    /// stale and the file as it was.
    pub(crate) fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        if self.pending.is_empty() {
            return self.delete_stale();
        }
        self.connect(py)?;
        let conn = self.conn.as_ref().expect("connected above");
        let mut rows: Vec<(&StreamKey, &Stream)> = self.pending.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0)); // inserted in key order: fewer pages touched
        let stale = &self.stale;
        let write = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN")?;
            delete_rows(conn, stale)?;
            {
                let mut insert = conn.prepare_cached(
                    "INSERT INTO streams (session, producer, partition, missing, gappy, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?;
                let mut state = Vec::with_capacity(256);
                for (k, s) in &rows {
                    state.clear();
                    s.write_into(&mut state);
                    insert.execute(params![k.0, k.1, s.partition, s.missing_len() as i64, s.is_gappy(), state])?;
                }
            }
            conn.execute_batch("COMMIT")
        };
        if let Err(e) = write() {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(db_error(e));
        }
        let legacy = self.pending.keys().filter(|k| k.1.is_empty()).count() as u64;
        self.stored += self.pending.len() as u64;
        self.stored_legacy += legacy;
        self.pending.clear();
        self.stale.clear();
        Ok(())
    }

    /// The stale rows deleted, in one transaction (all or, on an error, none).
    pub(crate) fn delete_stale(&mut self) -> PyResult<()> {
        if self.stale.is_empty() {
            return Ok(());
        }
        let Some(conn) = self.conn.as_ref() else {
            self.stale.clear(); // no file: nothing left behind
            return Ok(());
        };
        let stale = &self.stale;
        let write = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN")?;
            delete_rows(conn, stale)?;
            conn.execute_batch("COMMIT")
        };
        if let Err(e) = write() {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(db_error(e));
        }
        self.stale.clear();
        Ok(())
    }

    pub(crate) fn might_hold(&self, key: &StreamKey) -> bool {
        self.unfiltered || self.filter.as_ref().is_some_and(|f| f.holds(key))
    }

    /// The stream, taken out (it lives in memory again), or None if it is not here. Its
    /// row goes stale (deleted with the next batch, or once `batch` rows are stale).
    pub(crate) fn take(&mut self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.pending.remove(key) {
            return Ok(Some(s));
        }
        let found = self.stored_row(key, "SELECT state FROM streams WHERE session = ?1 AND producer = ?2")?;
        if found.is_some() {
            self.stored -= 1;
            self.stored_legacy -= u64::from(key.1.is_empty());
            self.stale.insert(key.clone());
            if self.stale.len() >= self.batch {
                self.delete_stale()?;
            }
        }
        Ok(found)
    }

    /// The stream's row, by `sql` (a select of its state), asked only when the file may
    /// hold it and the row is not stale.
    pub(crate) fn stored_row(&self, key: &StreamKey, sql: &str) -> PyResult<Option<Stream>> {
        if self.stored == 0 || !self.might_hold(key) || self.stale.contains(key) {
            return Ok(None);
        }
        let Some(conn) = self.conn.as_ref() else { return Ok(None) };
        let mut q = conn.prepare_cached(sql).map_err(db_error)?;
        let mut rows = q.query(params![key.0, key.1]).map_err(db_error)?;
        match rows.next().map_err(db_error)? {
            // Decoded from SQLite's own buffer: no copy of the row.
            Some(row) => Ok(Some(Stream::from_bytes(row.get_ref(0).and_then(|v| Ok(v.as_blob()?)).map_err(db_error)?)?)),
            None => Ok(None),
        }
    }

    /// The stream's state in the tracker's own format added to `out` (a row's state is
    /// that encoding: copied, not decoded), and its partition; None when not held here.
    pub(crate) fn state_into(&self, key: &StreamKey, out: &mut Vec<u8>) -> PyResult<Option<Option<i64>>> {
        if let Some(s) = self.pending.get(key) {
            s.write_into(out);
            return Ok(Some(s.partition));
        }
        if self.stored == 0 || !self.might_hold(key) || self.stale.contains(key) {
            return Ok(None);
        }
        let Some(conn) = self.conn.as_ref() else { return Ok(None) };
        let mut q = conn
            .prepare_cached("SELECT partition, state FROM streams WHERE session = ?1 AND producer = ?2")
            .map_err(db_error)?;
        let mut rows = q.query(params![key.0, key.1]).map_err(db_error)?;
        let Some(row) = rows.next().map_err(db_error)? else { return Ok(None) };
        let partition: Option<i64> = row.get(0).map_err(db_error)?;
        out.extend_from_slice(row.get_ref(1).and_then(|v| Ok(v.as_blob()?)).map_err(db_error)?);
        Ok(Some(partition))
    }

    /// `f` of the stream, left where it is (a pending one not copied), or None; the key
    /// is allocated only to ask the file.
    pub(crate) fn peek_with<R>(&self, view: &dyn StreamKeyView, f: impl FnOnce(&Stream) -> R) -> PyResult<Option<R>> {
        if let Some(s) = self.pending.get(view) {
            return Ok(Some(f(s)));
        }
        let key: StreamKey = (view.session().to_owned(), view.producer().to_owned());
        Ok(self.peek(&key)?.map(|s| f(&s)))
    }

    /// The stream, left where it is (a copy), or None.
    pub(crate) fn peek(&self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.pending.get(key) {
            return Ok(Some(s.clone()));
        }
        self.stored_row(key, "SELECT state FROM streams WHERE session = ?1 AND producer = ?2")
    }

    /// (chained, legacy) streams held here.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let legacy = self.pending.keys().filter(|k| k.1.is_empty()).count() as u64 + self.stored_legacy;
        (self.len() - legacy, legacy)
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
            "SELECT session, producer, state FROM streams INDEXED BY gappy_streams WHERE gappy = 1"
        } else {
            "SELECT session, producer, state FROM streams"
        };
        let mut q = conn.prepare(sql).map_err(db_error)?;
        let rows = q.query([]).map_err(db_error)?;
        for_rows(rows, &mut |key, stream| if self.stale.contains(&key) { Ok(()) } else { f(&key, &stream) })
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
            // Stale rows are skipped: ask for as many more as there are.
            let asked = limit.saturating_add(self.stale.len()) as i64;
            for_rows(q.query(params![session, producer, asked]).map_err(db_error)?, &mut |key, stream| {
                if !self.stale.contains(&key) {
                    out.push(Row { key, stream });
                }
                Ok(())
            })?;
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out.truncate(limit);
        Ok(out)
    }

    /// Drops the streams read from `partitions`; returns the missing positions they held.
    pub(crate) fn forget_partitions(&mut self, partitions: &std::collections::HashSet<i64>) -> PyResult<i64> {
        self.delete_stale()?; // the file's counts below are of live rows only
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
                let (rows, legacy, missing): (i64, i64, i64) = conn
                    .query_row(
                        "SELECT COUNT(*), COALESCE(SUM(producer = ''), 0), COALESCE(SUM(missing), 0) FROM streams WHERE partition = ?1",
                        [p],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .map_err(db_error)?;
                conn.execute("DELETE FROM streams WHERE partition = ?1", [p]).map_err(db_error)?;
                self.stored -= rows as u64;
                self.stored_legacy -= legacy as u64;
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
        self.stored_legacy = 0;
        self.filter = None;
        Ok(true)
    }
}

impl StreamSpill {
    /// The streams of a file `export` wrote, taken in. Those this spill does not hold are
    /// copied by SQLite, file to file (no row decoded); returns the missing positions
    /// they hold, and the others (a stream both hold: rare), each with this spill's copy
    /// still here, for the tracker to merge. The caller has written everything it holds
    /// in memory here first.
    pub(crate) fn absorb_file(&mut self, py: Python<'_>, path: &Path) -> PyResult<(i64, Vec<Row>)> {
        self.flush(py)?;
        self.connect(py)?;
        let conn = self.conn.as_ref().expect("connected above");
        conn.execute("ATTACH DATABASE ?1 AS theirs", [path.to_string_lossy()]).map_err(db_error)?;
        let copied = (|| -> PyResult<(i64, i64, i64, Vec<Row>)> {
            let mut both = Vec::new();
            let mut q = conn
                .prepare(
                    "SELECT t.session, t.producer, t.state FROM theirs.streams t
                     JOIN main.streams m ON m.session = t.session AND m.producer = t.producer",
                )
                .map_err(db_error)?;
            for_rows(q.query([]).map_err(db_error)?, &mut |key, stream| {
                both.push(Row { key, stream });
                Ok(())
            })?;
            const NEW_ONLY: &str = "FROM theirs.streams t WHERE NOT EXISTS
                (SELECT 1 FROM main.streams m WHERE m.session = t.session AND m.producer = t.producer)";
            let (n, legacy, missing): (i64, i64, i64) = conn
                .query_row(
                    &format!("SELECT COUNT(*), COALESCE(SUM(producer = ''), 0), COALESCE(SUM(missing), 0) {NEW_ONLY}"),
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(db_error)?;
            conn.execute_batch(&format!("BEGIN; INSERT INTO main.streams SELECT * {NEW_ONLY}; COMMIT"))
                .map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    db_error(e)
                })?;
            Ok((n, legacy, missing, both))
        })();
        let detached = conn.execute("DETACH DATABASE theirs", []).map_err(db_error);
        let (n, legacy, missing, both) = copied?;
        detached?;
        self.stored += n as u64;
        self.stored_legacy += legacy as u64;
        self.unfiltered |= n > 0;
        Ok((missing, both))
    }
}

/// The rows of `keys` deleted (in key order: neighbouring pages), inside the caller's
/// transaction.
fn delete_rows(conn: &Connection, keys: &FastSet<StreamKey>) -> rusqlite::Result<()> {
    let mut sorted: Vec<&StreamKey> = keys.iter().collect();
    sorted.sort_unstable();
    let mut delete = conn.prepare_cached("DELETE FROM streams WHERE session = ?1 AND producer = ?2")?;
    for k in sorted {
        delete.execute(params![k.0, k.1])?;
    }
    Ok(())
}

/// Each (session, producer, state) row of a query, as a stream.
pub(crate) fn for_rows(mut rows: rusqlite::Rows<'_>, f: &mut dyn FnMut(StreamKey, Stream) -> PyResult<()>) -> PyResult<()> {
    while let Some(row) = rows.next().map_err(db_error)? {
        let key: StreamKey = (row.get(0).map_err(db_error)?, row.get(1).map_err(db_error)?);
        let bytes: Vec<u8> = row.get(2).map_err(db_error)?;
        f(key, Stream::from_bytes(&bytes)?)?;
    }
    Ok(())
}
