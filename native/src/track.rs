//! The native stream tracker: `turnaudit.stream_tracking.StreamTracker`'s state and
//! per-message step, message for message what the Python reference
//! (`ReferenceStreamTracker`) decides, in compact native tables.
//!
//! The Python module owns the meaning (the docstrings there); this file only
//! mirrors it. What differs is the representation: chain hashes as 32 raw
//! bytes, event ids and stream ids as Rust strings, an LRU of streams, and,
//! for a tracker with a store of forgotten ids, a Bloom filter of the ids it
//! handed to that store, so a new id (most of them) is not asked for there.
//!
//! Counters live outside the lock (atomics): a metrics scrape on another
//! thread reads them while a message is being placed. The tables sit behind
//! a mutex taken with `try_lock`: a second thread using the tracker at the
//! same time (possible only through a callback into Python) gets an error,
//! never a deadlock.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use lru::LruCache;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};

use crate::spill::{Seen, SortedRunStore};
use crate::stream_spill::StreamSpill;
use std::path::PathBuf;

// The chain rule, as `turnaudit.chain` states it (a differential test over random
// bodies and fingerprints holds the two to one rule): turns of the TurnEvent v1..v4
// writer schemas hash the v1 domain and the body; every other writer schema (v5 on)
// hashes the v2 domain, its 8-byte fingerprint and the body.
const CHAIN_DOMAIN: &[u8] = b"turnaudit.chain.v1\x00";
const SCHEMA_CHAIN_DOMAIN: &[u8] = b"turnaudit.chain.v2\x00";
const LEGACY_CHAIN_FINGERPRINTS: [[u8; 8]; 4] = [
    [0x87, 0x71, 0x48, 0xbd, 0x22, 0xbe, 0xe4, 0xa2],
    [0x2b, 0xe4, 0x25, 0x53, 0xfb, 0xf6, 0x66, 0x11],
    [0x27, 0x6b, 0xa4, 0xd9, 0x00, 0xc0, 0x85, 0x46],
    [0x47, 0x33, 0x56, 0xc1, 0xb8, 0x59, 0xa1, 0xbc],
];
const GENESIS_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const SEEN_DIGITS: usize = 16;
const FILTER_BITS: u64 = 1 << 28;

// Outcome indexes into the `outcomes` tuple the Python side passes in.
pub(crate) const NEW: usize = 0;
const LATE: usize = 1;
const REDELIVERY: usize = 2;
const DUPLICATE: usize = 3;
const CONTENT_CHANGED: usize = 4;
const POSITION_REUSED: usize = 5;

type Hash32 = [u8; 32];
pub(crate) type StreamKey = (String, String);

/// The chain hash of a framed message under its writer schema's fingerprint
/// (`fingerprint`, else the single-object header's; none: an unframed or Confluent
/// message whose schema was not resolved, hashed by the v1 rule).
pub(crate) fn chain_digest(value: &[u8], fingerprint: Option<&[u8; 8]>) -> Hash32 {
    let single_object = value.starts_with(b"\xc3\x01") && value.len() >= 10;
    let start = if value.starts_with(b"\xc3\x01") {
        10
    } else if value.first() == Some(&0) {
        5
    } else {
        0
    };
    let header: Option<[u8; 8]> = single_object.then(|| value[2..10].try_into().expect("8 bytes"));
    let fp = fingerprint.copied().or(header);
    let mut h = Sha256::new();
    match fp {
        Some(fp) if !LEGACY_CHAIN_FINGERPRINTS.contains(&fp) => {
            h.update(SCHEMA_CHAIN_DOMAIN);
            h.update(fp);
        }
        _ => h.update(CHAIN_DOMAIN),
    }
    h.update(&value[start.min(value.len())..]);
    h.finalize().into()
}

/// An optional 8-byte fingerprint from Python (`None` or bytes).
pub(crate) fn fingerprint_arg(fingerprint: Option<&[u8]>) -> PyResult<Option<[u8; 8]>> {
    fingerprint
        .map(|f| f.try_into().map_err(|_| PyValueError::new_err("a writer schema fingerprint is 8 bytes")))
        .transpose()
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_of(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// Whether `text` is exactly the lowercase hex of `hash` (what `hexdigest` gives).
fn hex_is(hash: &Hash32, text: &str) -> bool {
    let t = text.as_bytes();
    t.len() == 64
        && hash.iter().enumerate().all(|(i, b)| {
            t[2 * i] == HEX[(b >> 4) as usize] && t[2 * i + 1] == HEX[(b & 15) as usize]
        })
}

fn head16(hash: &Hash32) -> [u8; SEEN_DIGITS] {
    let mut out = [0u8; SEEN_DIGITS];
    for (i, b) in hash[..SEEN_DIGITS / 2].iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    out
}

/// A `prev_hash` as the event carries it (after Python's `or ""`): text, or some
/// other object (equal to no hash).
#[derive(Clone)]
pub(crate) enum Prev {
    Text(String),
    Other,
}

impl Prev {
    fn is_hash(&self, hash: &Hash32) -> bool {
        matches!(self, Prev::Text(t) if hex_is(hash, t))
    }
}

#[derive(Clone)]
struct SeenEntry {
    hash16: [u8; SEEN_DIGITS],
    partition: Option<i64>,
    offset: Option<i64>,
}

/// A stream's own chain hashes by position: almost always one (its head), held inline;
/// more (left edges of holes) in a table made only when needed.
#[derive(Clone, Default)]
struct Own {
    first: Option<(i128, Hash32)>,
    #[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
    more: Option<Box<HashMap<i128, Hash32>>>,
}

impl Own {
    fn get(&self, k: &i128) -> Option<&Hash32> {
        match &self.first {
            Some((p, h)) if p == k => Some(h),
            _ => self.more.as_ref().and_then(|m| m.get(k)),
        }
    }

    fn remove(&mut self, k: &i128) -> Option<Hash32> {
        if matches!(self.first, Some((p, _)) if p == *k) {
            return self.first.take().map(|(_, h)| h);
        }
        let more = self.more.as_mut()?;
        let out = more.remove(k);
        if more.is_empty() {
            self.more = None;
        }
        out
    }

    fn insert(&mut self, k: i128, v: Hash32) {
        if let Some((p, h)) = &mut self.first {
            if *p == k {
                *h = v;
                return;
            }
        }
        if let Some(slot) = self.more.as_mut().and_then(|m| m.get_mut(&k)) {
            *slot = v;
            return;
        }
        if self.first.is_none() {
            self.first = Some((k, v));
        } else {
            self.more.get_or_insert_with(Default::default).insert(k, v);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&i128, &Hash32)> {
        self.first.iter().map(|(p, h)| (p, h)).chain(self.more.iter().flat_map(|m| m.iter()))
    }

    /// Every entry of `other` put in (its values win).
    fn extend(&mut self, other: Own) {
        for (k, v) in other.iter() {
            self.insert(*k, *v);
        }
    }
}

/// Missing positions: no table at all while the stream has no gap (most never do).
#[derive(Clone, Default)]
#[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
struct Positions(Option<Box<HashSet<i128>>>);

impl Positions {
    fn of(set: HashSet<i128>) -> Self {
        Positions(if set.is_empty() { None } else { Some(Box::new(set)) })
    }

    fn contains(&self, p: &i128) -> bool {
        self.0.as_ref().is_some_and(|s| s.contains(p))
    }

    fn insert(&mut self, p: i128) {
        self.0.get_or_insert_with(Default::default).insert(p);
    }

    /// Whether it was there; the table goes once empty.
    fn remove(&mut self, p: &i128) -> bool {
        let Some(set) = self.0.as_mut() else { return false };
        let was = set.remove(p);
        if set.is_empty() {
            self.0 = None;
        }
        was
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len())
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> impl Iterator<Item = &i128> {
        self.0.iter().flat_map(|s| s.iter())
    }
}

/// The predecessor hashes successors of missing positions claimed (rare: a table only then).
#[derive(Clone, Default)]
#[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
struct Claims(Option<Box<HashMap<i128, Prev>>>);

impl Claims {
    fn insert(&mut self, p: i128, prev: Prev) {
        self.0.get_or_insert_with(Default::default).insert(p, prev);
    }

    fn remove(&mut self, p: &i128) -> Option<Prev> {
        let map = self.0.as_mut()?;
        let out = map.remove(p);
        if map.is_empty() {
            self.0 = None;
        }
        out
    }

    fn iter(&self) -> impl Iterator<Item = (&i128, &Prev)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    fn extend(&mut self, other: Claims) {
        for (p, prev) in other.iter() {
            self.insert(*p, prev.clone());
        }
    }
}

#[derive(Clone, Default)]
pub(crate) struct Stream {
    pub(crate) partition: Option<i64>,
    next: i128,
    missing: Positions,
    untracked_missing: i128,
    own: Own,
    claimed: Claims,
}

impl Stream {
    pub(crate) fn missing_len(&self) -> usize {
        self.missing.len()
    }

    /// Whether positions are missing (tracked or only counted).
    pub(crate) fn is_gappy(&self) -> bool {
        !self.missing.is_empty() || self.untracked_missing != 0
    }

    fn write(&self, w: &mut StateWriter) {
        w.opt(self.partition);
        w.i128(self.next);
        let mut missing: Vec<i128> = self.missing.iter().copied().collect();
        missing.sort_unstable();
        w.u64(missing.len() as u64);
        missing.iter().for_each(|p| w.i128(*p));
        w.i128(self.untracked_missing);
        // Sorted: one stream, one encoding (the follower's state records compare equal).
        let mut own: Vec<(&i128, &Hash32)> = self.own.iter().collect();
        own.sort_unstable_by_key(|(p, _)| **p);
        w.u64(own.len() as u64);
        for (p, h) in own {
            w.i128(*p);
            w.0.extend_from_slice(h);
        }
        let mut claimed: Vec<(&i128, &Prev)> = self.claimed.iter().collect();
        claimed.sort_unstable_by_key(|(p, _)| **p);
        w.u64(claimed.len() as u64);
        for (p, c) in claimed {
            w.i128(*p);
            match c {
                Prev::Text(t) => {
                    w.0.push(1);
                    w.text(t);
                }
                Prev::Other => w.0.push(0),
            }
        }
    }

    fn read(r: &mut StateReader<'_>) -> PyResult<Self> {
        let partition = r.opt()?;
        let next = r.i128()?;
        let mut missing = HashSet::new();
        for _ in 0..r.u64()? {
            missing.insert(r.i128()?);
        }
        let untracked_missing = r.i128()?;
        let mut own = Own::default();
        for _ in 0..r.u64()? {
            let p = r.i128()?;
            let h: Hash32 = r.take(32)?.try_into().expect("32 bytes");
            own.insert(p, h);
        }
        let mut claimed = Claims::default();
        for _ in 0..r.u64()? {
            let p = r.i128()?;
            let prev = if r.take(1)?[0] == 1 { Prev::Text(r.text()?) } else { Prev::Other };
            claimed.insert(p, prev);
        }
        Ok(Stream { partition, next, missing: Positions::of(missing), untracked_missing, own, claimed })
    }

    /// The stream alone, in the tracker state's format (a spilled stream's row), added
    /// to `out`.
    pub(crate) fn write_into(&self, out: &mut Vec<u8>) {
        let mut w = StateWriter(std::mem::take(out));
        self.write(&mut w);
        *out = w.0;
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> PyResult<Self> {
        let mut r = StateReader { buf: bytes, pos: 0 };
        let s = Self::read(&mut r)?;
        if r.pos != bytes.len() {
            return Err(PyValueError::new_err("bytes after a spilled stream"));
        }
        Ok(s)
    }

    /// This stream's head: its highest position and that position's chain hash.
    fn head(&self) -> Option<(i128, &Hash32)> {
        self.own.get(&(self.next - 1)).map(|h| (self.next - 1, h))
    }
}

struct State {
    // One allocation per id, shared by the table and the arrival order.
    seen: HashMap<Arc<str>, SeenEntry>,
    order: VecDeque<Arc<str>>,
    streams: LruCache<StreamKey, Stream>,
    first_offset: HashMap<i64, i64>,
    // Log starts learnt when a partition is taken over (the follower's), over `Bounds`'.
    log_start: HashMap<i64, i64>,
    // The streams placed into since last taken (the follower's checkpoint), when asked for.
    dirty: Option<HashSet<StreamKey>>,
    filter: Option<BloomFilter>, // made when the first id is handed to the forgotten store
    // Where streams pushed out by `max_streams` go (verify's); none: they are forgotten.
    spill: Option<StreamSpill>,
}

impl State {
    /// The stream, brought back into memory from the spill if it is there; whether it
    /// is in memory now.
    fn revive(&mut self, key: &StreamKey) -> PyResult<bool> {
        if self.streams.contains(key) {
            return Ok(true);
        }
        let Some(spill) = self.spill.as_mut() else { return Ok(false) };
        match spill.take(key)? {
            Some(stream) => {
                self.streams.push(key.clone(), stream);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The stream wherever it is, left there (a copy when spilled).
    fn peek(&self, key: &StreamKey) -> PyResult<Option<Stream>> {
        if let Some(s) = self.streams.peek(key) {
            return Ok(Some(s.clone()));
        }
        match &self.spill {
            Some(spill) => spill.peek(key),
            None => Ok(None),
        }
    }

    /// Every stream, in memory then spilled (or only those with missing positions).
    fn each_stream(&self, gappy_only: bool, f: &mut dyn FnMut(&StreamKey, &Stream) -> PyResult<()>) -> PyResult<()> {
        for (k, s) in self.streams.iter().rev() {
            if !gappy_only || s.is_gappy() {
                f(k, s)?;
            }
        }
        match &self.spill {
            Some(spill) => spill.each(gappy_only, f),
            None => Ok(()),
        }
    }

    fn streams_held(&self) -> usize {
        self.streams.len() + self.spill.as_ref().map_or(0, |s| s.len() as usize)
    }
}

/// A Bloom filter over strings, blocked: three bit positions per string, all in one
/// 512-bit block (one cache line), so a lookup or insert touches memory once instead of
/// three times (the filter is 32 MiB: each touch a cache miss). `might_hold` is false
/// only for a string never added.
#[pyclass(module = "turnaudit._native")]
pub(crate) struct BloomFilter {
    words: Vec<u64>,
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

impl State {
    fn filter_add(&mut self, text: &str) {
        self.filter.get_or_insert_with(|| BloomFilter::with_bits(FILTER_BITS)).insert(text);
    }

    fn filter_might_hold(&self, text: &str) -> bool {
        self.filter.as_ref().is_some_and(|f| f.holds(text))
    }
}

fn describe_stream(session: &str, producer: &str) -> String {
    let producer = if producer.is_empty() { "(none: v1/v2)" } else { producer };
    format!("session {session} / producer {producer}")
}

/// What one placement concluded (the fields of a `TrackResult` but the stream).
pub(crate) struct Placed {
    pub(crate) outcome: usize,
    pub(crate) opened: i128,
    gap_closed: bool,
    pub(crate) chain_break: Option<String>,
}

impl Placed {
    fn plain(outcome: usize) -> Self {
        Placed { outcome, opened: 0, gap_closed: false, chain_break: None }
    }
}

/// Bounds and settings, fixed at construction.
struct Bounds {
    max_event_ids: usize,
    max_streams: usize,
    max_missing: i128,
    log_start: HashMap<i64, i64>,
    start_gaps: bool,
    forget_batch: usize,
}

#[pyclass(frozen, subclass, module = "turnaudit._native")]
pub(crate) struct NativeStreamTracker {
    state: Mutex<State>,
    bounds: Bounds,
    forgotten: Option<Py<PyAny>>,
    outcomes: Vec<Py<PyAny>>,
    result_type: Py<PyAny>,
    tuple_new: Py<PyAny>,
    currently_missing: AtomicI64,
    new_turns: AtomicI64,
    forgotten_event_ids: AtomicI64,
}

fn busy() -> PyErr {
    PyRuntimeError::new_err("the stream tracker is in use by another thread")
}

fn item<'py>(event: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(d) = event.cast::<PyDict>() {
        return d.get_item(key)?.ok_or_else(|| PyKeyError::new_err(key.clone().unbind()));
    }
    event.get_item(key)
}

fn get<'py>(event: &Bound<'py, PyAny>, key: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(d) = event.cast::<PyDict>() {
        return d.get_item(key);
    }
    let v = event.call_method1(intern!(event.py(), "get"), (key,))?;
    Ok(if v.is_none() { None } else { Some(v) })
}

/// `event.get(key) or ""`, as text or another object.
fn prev_of(event: &Bound<'_, PyAny>) -> PyResult<Prev> {
    let py = event.py();
    match get(event, intern!(py, "prev_hash"))? {
        None => Ok(Prev::Text(String::new())),
        Some(v) => {
            if let Ok(s) = v.cast::<PyString>() {
                return Ok(Prev::Text(s.to_str()?.to_owned()));
            }
            if !v.is_truthy()? {
                return Ok(Prev::Text(String::new()));
            }
            Ok(Prev::Other)
        }
    }
}

fn text<'py>(v: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyString>> {
    v.cast::<PyString>()
        .cloned()
        .map_err(|_| PyTypeError::new_err(format!("{what} is not a string")))
}

fn opt_i64(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => Ok(Some(v.extract()?)),
    }
}

impl NativeStreamTracker {
    /// `observe` without its `TrackResult`: the stream, the position and what placing
    /// concluded (verify's native step builds a result only for a message with a finding).
    pub(crate) fn place_event<'py>(
        &self,
        py: Python<'py>,
        event: &Bound<'py, PyAny>,
        value: &[u8],
        partition: Option<i64>,
        offset: Option<i64>,
        fingerprint: Option<&[u8; 8]>,
    ) -> PyResult<(Bound<'py, PyTuple>, i128, Placed)> {
        let content = chain_digest(value, fingerprint);
        let session = text(&item(event, intern!(py, "session_id"))?, "session_id")?;
        let producer = match get(event, intern!(py, "producer_id"))? {
            Some(p) if p.is_truthy()? => text(&p, "producer_id")?,
            _ => PyString::new(py, ""),
        };
        let sequence = sequence_of(event)?;
        let event_id_obj = item(event, intern!(py, "event_id"))?;
        let event_id_text = text(&event_id_obj, "event_id")?;
        let event_id: &str = event_id_text.to_str()?;
        let stream = PyTuple::new(py, [session.clone(), producer.clone()])?;
        let placed = self.place_fields(
            py,
            session.to_str()?,
            producer.to_str()?,
            sequence,
            event_id,
            &|| prev_of(event),
            &content,
            partition,
            offset,
        )?;
        Ok((stream, sequence, placed))
    }

    /// `place_event` with the event's fields already read (`prev` is asked for only when
    /// the chain is checked).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place_fields(
        &self,
        py: Python<'_>,
        session: &str,
        producer: &str,
        sequence: i128,
        event_id: &str,
        prev: &dyn Fn() -> PyResult<Prev>,
        content: &Hash32,
        partition: Option<i64>,
        offset: Option<i64>,
    ) -> PyResult<Placed> {
        let content = *content;
        let mut st = self.lock()?;
        let mut seen = st.seen.get(event_id).cloned();
        if seen.is_none() && self.forgotten_event_ids.load(Ordering::Relaxed) != 0 {
            if let Some(store) = &self.forgotten {
                let store = store.bind(py);
                if let Ok(runs) = store.cast::<SortedRunStore>() {
                    // Verify's own store: its filter answers first, natively.
                    seen = runs.try_borrow()?.recall_native(event_id)?.map(|found| entry_of(&found.hash, found.partition, found.offset));
                } else if st.filter_might_hold(event_id) {
                    let got = store.call_method1(intern!(py, "recall"), (event_id,))?;
                    if !got.is_none() {
                        let (hash, p, o): (String, Option<Bound<'_, PyAny>>, Option<Bound<'_, PyAny>>) = got.extract()?;
                        seen = Some(entry_of(&hash, opt_i64(p.as_ref())?, opt_i64(o.as_ref())?));
                    }
                }
            }
        }
        if let Some(seen) = seen {
            let placed = if seen.hash16 != head16(&content) {
                Placed::plain(CONTENT_CHANGED)
            } else if seen.offset.is_none() || (seen.partition, seen.offset) == (partition, offset) {
                Placed::plain(REDELIVERY)
            } else {
                Placed::plain(DUPLICATE)
            };
            drop(st);
            return Ok(placed);
        }
        if let (Some(p), Some(o)) = (partition, offset) {
            st.first_offset.entry(p).or_insert(o);
        }
        let key: StreamKey = (session.to_owned(), producer.to_owned());
        let legacy = key.1.is_empty();
        let mut fast = false;
        if let Some(s) = st.streams.get_mut(&key) {
            // The common case, a known stream's next position: only the link to the
            // predecessor is checked (no gap opens or closes, nothing claimed it).
            if sequence == s.next {
                fast = true;
                if !legacy {
                    if let Some(expected) = s.own.remove(&(sequence - 1)) {
                        if !prev()?.is_hash(&expected) {
                            s.own.insert(sequence - 1, expected); // the general path reports it
                            fast = false;
                        }
                    }
                    if fast {
                        s.own.insert(sequence, content);
                    }
                }
                if fast {
                    s.next = sequence + 1;
                }
            }
        }
        let placed = if fast {
            Placed::plain(NEW)
        } else {
            self.place(&mut st, prev, &content, &key, sequence, partition)?
        };
        if let Some(dirty) = st.dirty.as_mut() {
            dirty.insert(key);
        }
        self.placed(py, &mut st, event_id, partition, offset, placed.outcome, &content)?;
        drop(st);
        Ok(placed)
    }

    /// The ids in memory, taken out (forgotten here, nothing counted): verify's hand-over
    /// of a job's ids, native to native.
    pub(crate) fn drain_remembered(&self) -> PyResult<Vec<(String, Seen)>> {
        let mut st = self.lock()?;
        let order = std::mem::take(&mut st.order);
        let seen = std::mem::take(&mut st.seen);
        Ok(order.iter().map(|id| (id.to_string(), spilled_seen(&seen[id]))).collect())
    }

    /// The streams held (`len(tracker)`).
    pub(crate) fn streams_held(&self) -> PyResult<usize> {
        Ok(self.lock()?.streams_held())
    }

    pub(crate) fn result_of(&self, py: Python<'_>, stream: &Bound<'_, PyTuple>, sequence: i128, placed: Placed) -> PyResult<Py<PyAny>> {
        self.result(py, stream, sequence, placed)
    }

    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state.try_lock().map_err(|_| busy())
    }

    fn result(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyTuple>,
        sequence: i128,
        placed: Placed,
    ) -> PyResult<Py<PyAny>> {
        let fields = PyTuple::new(
            py,
            [
                self.outcomes[placed.outcome].bind(py).clone(),
                stream.clone().into_any(),
                int_obj(py, sequence)?,
                int_obj(py, placed.opened)?,
                PyBool::new(py, placed.gap_closed).to_owned().into_any(),
                match placed.chain_break {
                    None => py.None().into_bound(py),
                    Some(t) => PyString::new(py, &t).into_any(),
                },
            ],
        )?;
        Ok(self.tuple_new.bind(py).call1((self.result_type.bind(py), fields))?.unbind())
    }

    fn read_from_log_start(&self, st: &State, partition: Option<i64>) -> bool {
        let Some(p) = partition else { return false };
        if !self.bounds.start_gaps {
            return false;
        }
        let log_start = st.log_start.get(&p).or_else(|| self.bounds.log_start.get(&p));
        match st.first_offset.get(&p) {
            Some(first) => *first == log_start.copied().unwrap_or(0),
            None => false,
        }
    }

    /// Positions `start..end` missing (within the per-stream bound); returns how many.
    fn open_gap(&self, stream: &mut Stream, start: i128, end: i128) -> i128 {
        let skipped = end - start;
        if skipped <= 0 {
            return 0;
        }
        let room = (self.bounds.max_missing - stream.missing.len() as i128).max(0);
        let tracked = room.min(skipped);
        let mut p = start;
        while p < start + tracked {
            stream.missing.insert(p);
            p += 1;
        }
        stream.untracked_missing += (skipped - room).max(0);
        self.currently_missing.fetch_add(tracked as i64, Ordering::Relaxed);
        skipped
    }

    #[allow(clippy::too_many_arguments)]
    fn check_chain(
        stream: &mut Stream,
        key: &StreamKey,
        prev: &Prev,
        content: &Hash32,
        sequence: i128,
    ) -> Option<String> {
        let mut problems: Vec<String> = Vec::new();
        if sequence == 0 {
            if !matches!(prev, Prev::Text(t) if t == GENESIS_HEX) {
                problems.push("position 0 does not start the chain (prev_hash is not genesis)".into());
            }
        } else if let Some(expected) = stream.own.get(&(sequence - 1)) {
            if !prev.is_hash(expected) {
                problems.push(format!("prev_hash does not match position {}'s hash", sequence - 1));
            }
        }
        if sequence > stream.next || stream.missing.contains(&(sequence - 1)) {
            stream.claimed.insert(sequence - 1, prev.clone());
        }
        if let Some(claimed) = stream.claimed.remove(&sequence) {
            let same = match &claimed {
                Prev::Text(t) => hex_is(content, t),
                Prev::Other => false,
            };
            if !same {
                problems.push(format!("position {} names another predecessor hash", sequence + 1));
            }
        }
        if problems.is_empty() {
            return None;
        }
        Some(format!("{}, position {sequence}: {}", describe_stream(&key.0, &key.1), problems.join("; ")))
    }

    /// `_place`: the general placement (a new stream, a gap, a late arrival, a reuse).
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        st: &mut State,
        prev: &dyn Fn() -> PyResult<Prev>,
        content: &Hash32,
        key: &StreamKey,
        sequence: i128,
        partition: Option<i64>,
    ) -> PyResult<Placed> {
        let legacy = key.1.is_empty();
        let mut opened = 0;
        if !st.revive(key)? {
            let mut stream = Stream { partition, ..Stream::default() };
            if sequence > 0 && self.read_from_log_start(st, partition) {
                opened = self.open_gap(&mut stream, 0, sequence);
            }
            stream.next = sequence;
            st.streams.push(key.clone(), stream);
        }
        let forgotten_any = self.forgotten_event_ids.load(Ordering::Relaxed) != 0;
        let no_store = self.forgotten.is_none();
        let stream = st.streams.get_mut(key).expect("placed above");
        let chain_break = if legacy {
            None
        } else {
            let prev = prev()?;
            Self::check_chain(stream, key, &prev, content, sequence)
        };
        if sequence >= stream.next {
            let next = stream.next;
            opened += self.open_gap(stream, next, sequence);
            if !legacy {
                stream.own.remove(&(sequence - 1));
                stream.own.insert(sequence, *content);
            }
            stream.next = sequence + 1;
            return Ok(Placed { outcome: NEW, opened, gap_closed: false, chain_break });
        }
        if stream.missing.remove(&sequence) {
            self.currently_missing.fetch_sub(1, Ordering::Relaxed);
            if !legacy {
                stream.own.remove(&(sequence - 1));
                if stream.missing.contains(&(sequence + 1)) {
                    stream.own.insert(sequence, *content);
                }
            }
            return Ok(Placed { outcome: LATE, opened: 0, gap_closed: true, chain_break });
        }
        if legacy {
            return Ok(Placed::plain(NEW));
        }
        if forgotten_any && no_store && stream.own.get(&sequence).is_none_or(|h| h == content) {
            return Ok(Placed::plain(REDELIVERY));
        }
        Ok(Placed {
            outcome: POSITION_REUSED,
            opened: 0,
            gap_closed: false,
            chain_break: Some(format!(
                "position {sequence} of {} is already taken by another event",
                describe_stream(&key.0, &key.1)
            )),
        })
    }

    #[allow(clippy::too_many_arguments)]
    /// `_placed`: counts a new or late turn, remembers its id, keeps the bounds.
    fn placed(
        &self,
        py: Python<'_>,
        st: &mut State,
        event_id: &str,
        partition: Option<i64>,
        offset: Option<i64>,
        outcome: usize,
        content: &Hash32,
    ) -> PyResult<()> {
        if outcome == NEW || outcome == LATE {
            self.new_turns.fetch_add(1, Ordering::Relaxed);
            let id: Arc<str> = Arc::from(event_id);
            st.order.push_back(id.clone());
            st.seen.insert(id, SeenEntry { hash16: head16(content), partition, offset });
            if st.seen.len() > self.bounds.max_event_ids.saturating_add(self.bounds.forget_batch - 1) {
                let mut dropped: Vec<(Arc<str>, SeenEntry)> = Vec::new();
                while st.seen.len() > self.bounds.max_event_ids {
                    let oldest = st.order.pop_front().expect("in step with seen");
                    let entry = st.seen.remove(&oldest).expect("in step with order");
                    dropped.push((oldest, entry));
                }
                self.forgotten_event_ids.fetch_add(dropped.len() as i64, Ordering::Relaxed);
                if let Some(store) = &self.forgotten {
                    let store = store.bind(py);
                    if let Ok(runs) = store.cast::<SortedRunStore>() {
                        // Verify's own store: handed over natively, no Python tuple per id,
                        // and its Bloom filter is the only one.
                        runs.try_borrow_mut()?.keep_native(py, dropped.iter().map(|(id, entry)| {
                            (id.to_string(), spilled_seen(entry))
                        }))?;
                    } else {
                        for (id, _) in &dropped {
                            st.filter_add(id);
                        }
                        let handed = PyList::empty(py);
                        for (id, entry) in &dropped {
                            handed.append((&**id, seen_tuple(py, entry)?))?;
                        }
                        store.call_method1(intern!(py, "keep_many"), (handed,))?;
                    }
                }
            }
        }
        self.evict_over_bound(py, st)
    }

    /// Another tracker's stream `t` merged into this one's (brought into memory); the
    /// missing positions it adds.
    fn merge_stream(&self, st: &mut State, k: &StreamKey, t: &Stream) -> PyResult<i64> {
        if !st.revive(k)? {
            st.streams.push(k.clone(), t.clone());
            return Ok(t.missing.len() as i64);
        }
        let mine = st.streams.get_mut(k).expect("revived above");
        let mut missing: HashSet<i128> =
            mine.missing.iter().copied().filter(|p| *p >= t.next || t.missing.contains(p)).collect();
        missing.extend(t.missing.iter().copied().filter(|p| *p >= mine.next || mine.missing.contains(p)));
        let added = missing.len() as i64 - mine.missing.len() as i64;
        mine.missing = Positions::of(missing);
        mine.untracked_missing += t.untracked_missing;
        let (high, low) = if mine.next >= t.next { (mine.clone(), t.clone()) } else { (t.clone(), mine.clone()) };
        let mut own = low.own;
        own.extend(high.own);
        let mut claimed = low.claimed;
        claimed.extend(high.claimed);
        mine.own = own;
        mine.claimed = claimed;
        mine.next = high.next;
        Ok(added)
    }

    /// A partition taken over: where reading it begins and where its log starts (a stream
    /// first seen past position 0 opens a gap at its start only when the two agree).
    pub(crate) fn start_partition(&self, partition: i64, log_start: i64, first_offset: i64) -> PyResult<()> {
        let mut st = self.lock()?;
        st.log_start.insert(partition, log_start);
        st.first_offset.insert(partition, first_offset);
        Ok(())
    }

    /// From now on, remember the streams placed into until `take_dirty` (the follower
    /// checkpoints those).
    pub(crate) fn track_dirty(&self) -> PyResult<()> {
        self.lock()?.dirty.get_or_insert_with(HashSet::new);
        Ok(())
    }

    /// The streams placed into since the last call (none unless `track_dirty` was asked).
    pub(crate) fn take_dirty(&self) -> PyResult<Vec<StreamKey>> {
        let mut st = self.lock()?;
        Ok(st.dirty.as_mut().map(|d| d.drain().collect()).unwrap_or_default())
    }

    /// One stream's partition and state in the tracker's own format, wherever it is
    /// (memory, the pending batch or the spill file), left there; None when not held.
    pub(crate) fn stream_bytes(&self, key: &StreamKey) -> PyResult<Option<(Option<i64>, Vec<u8>)>> {
        let st = self.lock()?;
        Ok(st.peek(key)?.map(|stream| {
            let mut out = Vec::new();
            stream.write_into(&mut out);
            (stream.partition, out)
        }))
    }

    /// A stream as `stream_bytes` gave it, in place of any copy held, brought into memory
    /// (the least recently seen pushed out over the bound).
    pub(crate) fn restore_stream(&self, py: Python<'_>, key: StreamKey, bytes: &[u8]) -> PyResult<()> {
        let stream = Stream::from_bytes(bytes)?;
        let mut st = self.lock()?;
        self.take_out(&mut st, &key)?;
        self.currently_missing.fetch_add(stream.missing.len() as i64, Ordering::Relaxed);
        st.streams.push(key, stream);
        self.evict_over_bound(py, &mut st)
    }

    /// The stream forgotten wherever it is (its missing positions no longer counted);
    /// whether it was held.
    pub(crate) fn drop_stream(&self, key: &StreamKey) -> PyResult<bool> {
        let mut st = self.lock()?;
        self.take_out(&mut st, key)
    }

    fn take_out(&self, st: &mut State, key: &StreamKey) -> PyResult<bool> {
        let held = match st.streams.pop(key) {
            Some(s) => Some(s),
            None => match st.spill.as_mut() {
                Some(spill) => spill.take(key)?,
                None => None,
            },
        };
        if let Some(s) = &held {
            self.currently_missing.fetch_sub(s.missing.len() as i64, Ordering::Relaxed);
        }
        Ok(held.is_some())
    }

    /// The least recently seen streams past `max_streams` spilled (still counted) or,
    /// without a spill, forgotten.
    fn evict_over_bound(&self, py: Python<'_>, st: &mut State) -> PyResult<()> {
        while st.streams.len() > self.bounds.max_streams {
            let Some((key, stream)) = st.streams.pop_lru() else { break };
            match st.spill.as_mut() {
                Some(spill) => spill.put(py, key, stream)?,
                None => {
                    self.currently_missing.fetch_sub(stream.missing.len() as i64, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }
}

/// A Python int (through i64 when it fits: the common, cheaper conversion).
fn int_obj(py: Python<'_>, v: i128) -> PyResult<Bound<'_, PyAny>> {
    match i64::try_from(v) {
        Ok(small) => Ok(small.into_pyobject(py)?.into_any()),
        Err(_) => Ok(v.into_pyobject(py)?.into_any()),
    }
}

/// A recalled id's entry: a stored hash of another length than 16 hex digits never
/// equals one.
fn entry_of(hash: &str, partition: Option<i64>, offset: Option<i64>) -> SeenEntry {
    let bytes = hash.as_bytes();
    let mut hash16 = [b'?'; SEEN_DIGITS];
    if bytes.len() == SEEN_DIGITS {
        hash16.copy_from_slice(bytes);
    }
    SeenEntry { hash16, partition, offset }
}

fn spilled_seen(seen: &SeenEntry) -> Seen {
    let hash = std::str::from_utf8(&seen.hash16).expect("hex digits").to_owned();
    Seen { hash, partition: seen.partition, offset: seen.offset }
}

fn seen_tuple<'py>(py: Python<'py>, seen: &SeenEntry) -> PyResult<Bound<'py, PyTuple>> {
    let hash = std::str::from_utf8(&seen.hash16).expect("hex digits");
    (hash, seen.partition, seen.offset).into_pyobject(py)
}

fn stream_tuple<'py>(py: Python<'py>, key: &StreamKey) -> PyResult<Bound<'py, PyTuple>> {
    (key.0.as_str(), key.1.as_str()).into_pyobject(py)
}

fn sequence_of(event: &Bound<'_, PyAny>) -> PyResult<i128> {
    let py = event.py();
    let raw = item(event, intern!(py, "sequence"))?;
    let int = if raw.is_exact_instance_of::<PyInt>() {
        raw
    } else {
        py.import(intern!(py, "builtins"))?.getattr(intern!(py, "int"))?.call1((raw,))?
    };
    // Through i64 first: under the stable ABI an i128 conversion is several calls.
    match int.extract::<i64>() {
        Ok(small) => Ok(i128::from(small)),
        Err(_) => int.extract(),
    }
}

#[pymethods]
impl NativeStreamTracker {
    #[new]
    #[pyo3(signature = (outcomes, result_type, *, max_event_ids = 500_000, max_streams = 100_000,
                        max_missing = 1_000, log_start_offsets = None, start_gaps = true,
                        forgotten = None, forget_batch = 1, stream_spill = None,
                        stream_batch = 4096))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        outcomes: Vec<Py<PyAny>>,
        result_type: Py<PyAny>,
        max_event_ids: i128,
        max_streams: i128,
        max_missing: i128,
        log_start_offsets: Option<HashMap<i64, i64>>,
        start_gaps: bool,
        forgotten: Option<Py<PyAny>>,
        forget_batch: i128,
        stream_spill: Option<Py<PyAny>>,
        stream_batch: i128,
    ) -> PyResult<Self> {
        if forget_batch < 1 {
            return Err(PyValueError::new_err(format!("ids are forgotten 1 or more at a time, not {forget_batch}")));
        }
        if outcomes.len() != 6 {
            return Err(PyValueError::new_err("six outcomes: new, late, redelivery, duplicate, content changed, position reused"));
        }
        let clamp = |v: i128| v.clamp(0, usize::MAX as i128) as usize;
        let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?.unbind();
        Ok(NativeStreamTracker {
            state: Mutex::new(State {
                seen: HashMap::new(),
                order: VecDeque::new(),
                streams: LruCache::unbounded(),
                first_offset: HashMap::new(),
                log_start: HashMap::new(),
                dirty: None,
                filter: None,
                spill: stream_spill.filter(|f| !f.is_none(py)).map(|f| StreamSpill::new(f, clamp(stream_batch))),
            }),
            bounds: Bounds {
                max_event_ids: clamp(max_event_ids),
                max_streams: clamp(max_streams),
                max_missing,
                log_start: log_start_offsets.unwrap_or_default(),
                start_gaps,
                forget_batch: clamp(forget_batch),
            },
            forgotten: forgotten.filter(|f| !f.is_none(py)),
            outcomes,
            result_type,
            tuple_new,
            currently_missing: AtomicI64::new(0),
            new_turns: AtomicI64::new(0),
            forgotten_event_ids: AtomicI64::new(0),
        })
    }

    /// Places one consumed event in its stream; see `StreamTracker.observe`.
    #[pyo3(signature = (event, value, *, partition = None, offset = None, fingerprint = None))]
    fn observe(
        &self,
        py: Python<'_>,
        event: &Bound<'_, PyAny>,
        value: &[u8],
        partition: Option<i64>,
        offset: Option<i64>,
        fingerprint: Option<&[u8]>,
    ) -> PyResult<Py<PyAny>> {
        let fingerprint = fingerprint_arg(fingerprint)?;
        let (stream, sequence, placed) =
            self.place_event(py, event, value, partition, offset, fingerprint.as_ref())?;
        self.result(py, &stream, sequence, placed)
    }

    /// Forgets the streams read from these partitions (another consumer reads them now).
    fn forget_partitions(&self, partitions: HashSet<i64>) -> PyResult<()> {
        let mut st = self.lock()?;
        let gone: Vec<StreamKey> = st
            .streams
            .iter()
            .filter(|(_, s)| s.partition.is_some_and(|p| partitions.contains(&p)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some(s) = st.streams.pop(&k) {
                self.currently_missing.fetch_sub(s.missing.len() as i64, Ordering::Relaxed);
            }
        }
        if let Some(spill) = st.spill.as_mut() {
            let dropped = spill.forget_partitions(&partitions)?;
            self.currently_missing.fetch_sub(dropped, Ordering::Relaxed);
        }
        for p in partitions {
            st.first_offset.remove(&p);
        }
        Ok(())
    }

    /// Positions still missing, per stream (tracked ones), sorted.
    fn missing<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(true, &mut |k, s| {
            if !s.missing.is_empty() {
                let mut positions: Vec<i128> = s.missing.iter().copied().collect();
                positions.sort_unstable();
                out.set_item(stream_tuple(py, k)?, PyList::new(py, positions)?)?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    fn untracked_missing(&self) -> PyResult<i128> {
        let st = self.lock()?;
        let mut total = 0;
        st.each_stream(true, &mut |_, s| {
            total += s.untracked_missing;
            Ok(())
        })?;
        Ok(total)
    }

    /// Each stream's highest position and its chain hash (where still kept).
    fn heads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(false, &mut |k, s| {
            if let Some((position, h)) = s.head() {
                out.set_item(stream_tuple(py, k)?, (position, hex_of(h)))?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// How many streams are held: (chained, v1/v2 legacy), counted natively.
    fn stream_counts(&self) -> PyResult<(usize, usize)> {
        let st = self.lock()?;
        let legacy = st.streams.iter().filter(|(k, _)| k.1.is_empty()).count();
        let (spilled_chained, spilled_legacy) = st.spill.as_ref().map_or((0, 0), StreamSpill::counts);
        Ok((st.streams.len() - legacy + spilled_chained as usize, legacy + spilled_legacy as usize))
    }

    /// One stream's entry of `heads()` (its highest position and that position's chain
    /// hash), or None: what a check of a few anchored streams needs, without the table.
    fn head(&self, session_id: &str, producer_id: &str) -> PyResult<Option<(i128, String)>> {
        let st = self.lock()?;
        let key: StreamKey = (session_id.to_owned(), producer_id.to_owned());
        Ok(st.peek(&key)?.and_then(|s| s.head().map(|(p, h)| (p, hex_of(h)))))
    }

    /// The chained streams' heads (v1/v2 legacy streams left out) as
    /// `(session_id, producer_id, position, hash)`, sorted by stream: what `heads()`
    /// gives, without the table built first. A page of up to `limit` after the stream
    /// `after` (all of them from the first by default): a report of millions of streams
    /// goes through them a page at a time.
    #[pyo3(signature = (after = None, limit = None))]
    fn chained_heads<'py>(
        &self,
        py: Python<'py>,
        after: Option<(String, String)>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let st = self.lock()?;
        let limit = limit.unwrap_or(usize::MAX);
        let mut held: Vec<(&StreamKey, i128, &Hash32)> = st
            .streams
            .iter()
            .filter(|(k, _)| !k.1.is_empty() && after.as_ref().is_none_or(|a| *k > a))
            .filter_map(|(k, s)| s.head().map(|(p, h)| (k, p, h)))
            .collect();
        if held.len() > limit {
            // Only the page's first `limit` of memory's streams can be on it.
            held.select_nth_unstable_by(limit, |a, b| a.0.cmp(b.0));
            held.truncate(limit);
        }
        let mut heads: Vec<(StreamKey, i128, Hash32)> = held.into_iter().map(|(k, p, h)| (k.clone(), p, *h)).collect();
        if let Some(spill) = &st.spill {
            for row in spill.chained_page(after.as_ref(), limit)? {
                if let Some((p, h)) = row.stream.head() {
                    heads.push((row.key, p, *h));
                }
            }
        }
        // UTF-8 byte order is code point order: the order Python's sort gives the keys.
        heads.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        heads.truncate(limit);
        let out = PyList::empty(py);
        for (k, position, h) in heads {
            out.append((k.0.as_str(), k.1.as_str(), int_obj(py, position)?, hex_of(&h)))?;
        }
        Ok(out)
    }

    /// One stream's highest position seen (None: not seen, or not past position -1).
    fn last_position(&self, session_id: &str, producer_id: &str) -> PyResult<Option<i128>> {
        let st = self.lock()?;
        let key: StreamKey = (session_id.to_owned(), producer_id.to_owned());
        Ok(st.peek(&key)?.filter(|s| s.next > 0).map(|s| s.next - 1))
    }

    /// Each stream's highest position seen.
    fn last_positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        st.each_stream(false, &mut |k, s| {
            if s.next > 0 {
                out.set_item(stream_tuple(py, k)?, s.next - 1)?;
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The streams held in memory (the rest spilled): at most `max_streams`.
    fn streams_in_memory(&self) -> PyResult<usize> {
        Ok(self.lock()?.streams.len())
    }

    /// Every stream held, the spilled ones too, into an SQLite file at `destination`
    /// for another process's `absorb_streams` (none held here after). False, with no
    /// file made, when there was none.
    fn export_streams(&self, py: Python<'_>, destination: PathBuf) -> PyResult<bool> {
        let mut st = self.lock()?;
        let Some(mut spill) = st.spill.take() else {
            return Err(PyValueError::new_err("only a tracker with a stream spill exports its streams"));
        };
        let result = (|| {
            while let Some((key, stream)) = st.streams.pop_lru() {
                spill.put(py, key, stream)?;
            }
            spill.export(py, &destination)
        })();
        st.spill = Some(spill);
        result
    }

    /// The streams of a file `export_streams` wrote (another tracker's, other
    /// partitions), each merged in as `absorb` merges a stream both hold.
    fn absorb_streams(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let mut st = self.lock()?;
        let st = &mut *st;
        let Some(spill) = st.spill.as_mut() else {
            return Err(PyValueError::new_err("only a tracker with a stream spill absorbs exported streams"));
        };
        // Everything of this tracker's on disk first, so SQLite finds which streams both
        // hold and copies the others file to file.
        while let Some((key, stream)) = st.streams.pop_lru() {
            spill.put(py, key, stream)?;
        }
        let (missing, both) = spill.absorb_file(py, &path)?;
        self.currently_missing.fetch_add(missing, Ordering::Relaxed);
        for row in both {
            let added = self.merge_stream(st, &row.key, &row.stream)?;
            self.currently_missing.fetch_add(added, Ordering::Relaxed);
            self.evict_over_bound(py, st)?;
        }
        Ok(())
    }

    /// The counted event ids in memory, in arrival order: a new dict (a copy).
    fn remembered_items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?;
        let out = PyDict::new(py);
        for id in &st.order {
            out.set_item(&**id, seen_tuple(py, &st.seen[id])?)?;
        }
        Ok(out)
    }

    fn remembered_get<'py>(&self, py: Python<'py>, event_id: &str) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let st = self.lock()?;
        st.seen.get(event_id).map(|s| seen_tuple(py, s)).transpose()
    }

    fn remembered_len(&self) -> PyResult<usize> {
        Ok(self.lock()?.seen.len())
    }

    fn remembered_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let st = self.lock()?;
        PyList::new(py, st.order.iter().map(|id| &**id))
    }

    /// The ids in memory, forgotten here.
    fn hand_over_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = self.remembered_items(py)?;
        let mut st = self.lock()?;
        st.seen = HashMap::new();
        st.order = VecDeque::new();
        Ok(out)
    }

    /// The streams of a tracker that read other partitions; see `StreamTracker.absorb`.
    fn absorb(&self, other: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
        let theirs_tracker = other.get();
        if std::ptr::eq(theirs_tracker, self) {
            return Err(PyValueError::new_err("a tracker cannot absorb itself"));
        }
        let theirs = theirs_tracker.lock()?;
        let mut st = self.lock()?;
        if theirs.spill.as_ref().is_some_and(|s| s.len() > 0) {
            return Err(PyValueError::new_err("a tracker with spilled streams hands them over by export_streams"));
        }
        let mut added: i64 = 0;
        for (k, t) in theirs.streams.iter().rev() {
            added += self.merge_stream(&mut st, k, t)?;
        }
        self.evict_over_bound(other.py(), &mut st)?;
        for (p, o) in &theirs.first_offset {
            st.first_offset.entry(*p).or_insert(*o);
        }
        self.currently_missing.fetch_add(added, Ordering::Relaxed);
        self.new_turns.fetch_add(theirs_tracker.new_turns.load(Ordering::Relaxed), Ordering::Relaxed);
        self.forgotten_event_ids
            .fetch_add(theirs_tracker.forgotten_event_ids.load(Ordering::Relaxed), Ordering::Relaxed);
        Ok(())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.lock()?.streams_held())
    }

    #[getter]
    fn currently_missing(&self) -> i64 {
        self.currently_missing.load(Ordering::Relaxed)
    }

    #[getter]
    fn new_turns(&self) -> i64 {
        self.new_turns.load(Ordering::Relaxed)
    }

    #[getter]
    fn forgotten_event_ids(&self) -> i64 {
        self.forgotten_event_ids.load(Ordering::Relaxed)
    }

    /// The construction arguments but the two the Python class supplies (pickle).
    fn _settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let b = &self.bounds;
        out.set_item("max_event_ids", b.max_event_ids)?;
        out.set_item("max_streams", b.max_streams)?;
        out.set_item("max_missing", b.max_missing)?;
        out.set_item("log_start_offsets", b.log_start.clone())?;
        out.set_item("start_gaps", b.start_gaps)?;
        out.set_item("forget_batch", b.forget_batch)?;
        out.set_item("forgotten", self.forgotten.as_ref().map(|f| f.clone_ref(py)))?;
        Ok(out)
    }

    /// Everything placed so far, as plain Python values (pickle).
    /// The tables as bytes (`StateWriter`'s format), for pickling: one bytes object, not
    /// Python objects by the million (verify's jobs send their trackers back).
    fn _state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let st = self.lock()?;
        if st.spill.as_ref().is_some_and(|s| s.len() > 0) {
            return Err(PyValueError::new_err("a tracker with spilled streams hands them over by export_streams"));
        }
        let mut w = StateWriter(Vec::new());
        w.u64(st.streams.len() as u64);
        for (k, s) in st.streams.iter().rev() {
            w.text(&k.0);
            w.text(&k.1);
            s.write(&mut w);
        }
        w.u64(st.order.len() as u64);
        for id in &st.order {
            let e = &st.seen[id];
            w.text(id);
            w.0.extend_from_slice(&e.hash16);
            w.opt(e.partition);
            w.opt(e.offset);
        }
        w.u64(st.first_offset.len() as u64);
        for (p, o) in &st.first_offset {
            w.0.extend_from_slice(&p.to_le_bytes());
            w.0.extend_from_slice(&o.to_le_bytes());
        }
        let words: &[u64] = st.filter.as_ref().map_or(&[], |f| &f.words);
        w.u64(words.len() as u64);
        words.iter().for_each(|word| w.0.extend_from_slice(&word.to_le_bytes()));
        for counter in [&self.currently_missing, &self.new_turns, &self.forgotten_event_ids] {
            w.0.extend_from_slice(&counter.load(Ordering::Relaxed).to_le_bytes());
        }
        Ok(PyBytes::new(py, &w.0))
    }

    fn _restore(&self, state: &[u8]) -> PyResult<()> {
        let mut r = StateReader { buf: state, pos: 0 };
        let mut st = self.lock()?;
        st.streams = LruCache::unbounded();
        for _ in 0..r.u64()? {
            let session = r.text()?;
            let producer = r.text()?;
            let stream = Stream::read(&mut r)?;
            st.streams.push((session, producer), stream);
        }
        st.seen = HashMap::new();
        st.order = VecDeque::new();
        for _ in 0..r.u64()? {
            let id: Arc<str> = Arc::from(r.text()?);
            let hash16: [u8; SEEN_DIGITS] = r.take(SEEN_DIGITS)?.try_into().expect("16 bytes");
            let partition = r.opt()?;
            let offset = r.opt()?;
            st.order.push_back(id.clone());
            st.seen.insert(id, SeenEntry { hash16, partition, offset });
        }
        st.first_offset = HashMap::new();
        for _ in 0..r.u64()? {
            let p = r.i64()?;
            let o = r.i64()?;
            st.first_offset.insert(p, o);
        }
        let words = r.u64()?;
        st.filter = if words == 0 {
            None
        } else {
            let mut restored = BloomFilter::with_bits(FILTER_BITS);
            if words != restored.words.len() as u64 {
                return Err(PyValueError::new_err("a filter of the tracker's size"));
            }
            for word in restored.words.iter_mut() {
                *word = r.i64()? as u64;
            }
            Some(restored)
        };
        let (missing, turns, forgotten) = (r.i64()?, r.i64()?, r.i64()?);
        if r.pos != state.len() {
            return Err(PyValueError::new_err("bytes after a tracker's state"));
        }
        self.currently_missing.store(missing, Ordering::Relaxed);
        self.new_turns.store(turns, Ordering::Relaxed);
        self.forgotten_event_ids.store(forgotten, Ordering::Relaxed);
        Ok(())
    }
}

/// A tracker's state as bytes: little-endian integers, texts as a u32 length and UTF-8.
struct StateWriter(Vec<u8>);

impl StateWriter {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i128(&mut self, v: i128) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn text(&mut self, t: &str) {
        self.0.extend_from_slice(&(t.len() as u32).to_le_bytes());
        self.0.extend_from_slice(t.as_bytes());
    }
    fn opt(&mut self, v: Option<i64>) {
        self.0.push(u8::from(v.is_some()));
        self.0.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
    }
}

struct StateReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl StateReader<'_> {
    fn take(&mut self, n: usize) -> PyResult<&[u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| PyValueError::new_err("a tracker's state cut short"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u64(&mut self) -> PyResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn i64(&mut self) -> PyResult<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn i128(&mut self) -> PyResult<i128> {
        Ok(i128::from_le_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }
    fn text(&mut self) -> PyResult<String> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| PyValueError::new_err("a tracker's state with a text not UTF-8"))
    }
    fn opt(&mut self) -> PyResult<Option<i64>> {
        let some = self.take(1)?[0] == 1;
        let v = self.i64()?;
        Ok(some.then_some(v))
    }
}

/// `chain_hash`'s hex digest, natively (for tests and the Python side alike).
#[pyfunction]
#[pyo3(signature = (value, fingerprint = None))]
pub(crate) fn chain_hash_hex(value: &[u8], fingerprint: Option<&[u8]>) -> PyResult<String> {
    Ok(hex_of(&chain_digest(value, fingerprint_arg(fingerprint)?.as_ref())))
}
