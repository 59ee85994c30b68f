//! One stream's state: its next position, the positions still missing, its own chain
//! hashes by position and the predecessor hashes later positions claimed; and its
//! encoding (one stream, one byte string: the follower's state records compare equal).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::chain::{hex_is, Hash32};
use super::codec::{StateReader, StateWriter};

/// A stream's key: its session id and producer id.
pub(crate) type StreamKey = (String, String);

/// A stream's key as borrowed texts: the tables keyed by `StreamKey` are looked up by
/// `&(session, producer) as &dyn StreamKeyView` without allocating the key (a placement's
/// common case finds its stream; only a new one needs the owned key).
pub(crate) trait StreamKeyView {
    fn session(&self) -> &str;
    fn producer(&self) -> &str;
}

impl StreamKeyView for StreamKey {
    fn session(&self) -> &str {
        &self.0
    }
    fn producer(&self) -> &str {
        &self.1
    }
}

impl StreamKeyView for (&str, &str) {
    fn session(&self) -> &str {
        self.0
    }
    fn producer(&self) -> &str {
        self.1
    }
}

impl<'a> Borrow<dyn StreamKeyView + 'a> for StreamKey {
    fn borrow(&self) -> &(dyn StreamKeyView + 'a) {
        self
    }
}

// As the tuple hashes (field by field) and compares: a view finds the key it borrows from.
impl Hash for dyn StreamKeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.session().hash(state);
        self.producer().hash(state);
    }
}

impl PartialEq for dyn StreamKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.session() == other.session() && self.producer() == other.producer()
    }
}

impl Eq for dyn StreamKeyView + '_ {}

/// A `prev_hash` as the event carries it (after Python's `or ""`): text, or some
/// other object (equal to no hash).
#[derive(Clone)]
pub(crate) enum Prev {
    Text(String),
    Other,
}

impl Prev {
    pub(crate) fn is_hash(&self, hash: &Hash32) -> bool {
        matches!(self, Prev::Text(t) if hex_is(hash, t))
    }
}

/// A stream's own chain hashes by position: almost always one (its head), held inline;
/// more (left edges of holes) in a table made only when needed.
#[derive(Clone, Default)]
pub(crate) struct Own {
    pub(crate) first: Option<(i128, Hash32)>,
    #[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
    pub(crate) more: Option<Box<HashMap<i128, Hash32>>>,
}

impl Own {
    pub(crate) fn get(&self, k: &i128) -> Option<&Hash32> {
        match &self.first {
            Some((p, h)) if p == k => Some(h),
            _ => self.more.as_ref().and_then(|m| m.get(k)),
        }
    }

    pub(crate) fn remove(&mut self, k: &i128) -> Option<Hash32> {
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

    pub(crate) fn insert(&mut self, k: i128, v: Hash32) {
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

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&i128, &Hash32)> {
        self.first.iter().map(|(p, h)| (p, h)).chain(self.more.iter().flat_map(|m| m.iter()))
    }

    /// Every entry of `other` put in (its values win).
    pub(crate) fn extend(&mut self, other: Own) {
        for (k, v) in other.iter() {
            self.insert(*k, *v);
        }
    }
}

/// Missing positions: no table at all while the stream has no gap (most never do).
#[derive(Clone, Default)]
#[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
pub(crate) struct Positions(pub(crate) Option<Box<HashSet<i128>>>);

impl Positions {
    pub(crate) fn of(set: HashSet<i128>) -> Self {
        Positions(if set.is_empty() { None } else { Some(Box::new(set)) })
    }

    pub(crate) fn contains(&self, p: &i128) -> bool {
        self.0.as_ref().is_some_and(|s| s.contains(p))
    }

    pub(crate) fn insert(&mut self, p: i128) {
        self.0.get_or_insert_with(Default::default).insert(p);
    }

    /// Whether it was there; the table goes once empty.
    pub(crate) fn remove(&mut self, p: &i128) -> bool {
        let Some(set) = self.0.as_mut() else { return false };
        let was = set.remove(p);
        if set.is_empty() {
            self.0 = None;
        }
        was
    }

    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &i128> {
        self.0.iter().flat_map(|s| s.iter())
    }
}

/// The predecessor hashes successors of missing positions claimed (rare: a table only then).
#[derive(Clone, Default)]
#[allow(clippy::box_collection)] // 8 bytes inline, not 48: most streams have none
pub(crate) struct Claims(pub(crate) Option<Box<HashMap<i128, Prev>>>);

impl Claims {
    pub(crate) fn insert(&mut self, p: i128, prev: Prev) {
        self.0.get_or_insert_with(Default::default).insert(p, prev);
    }

    pub(crate) fn remove(&mut self, p: &i128) -> Option<Prev> {
        let map = self.0.as_mut()?;
        let out = map.remove(p);
        if map.is_empty() {
            self.0 = None;
        }
        out
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&i128, &Prev)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    pub(crate) fn extend(&mut self, other: Claims) {
        for (p, prev) in other.iter() {
            self.insert(*p, prev.clone());
        }
    }
}

#[derive(Clone, Default)]
pub(crate) struct Stream {
    pub(crate) partition: Option<i64>,
    pub(crate) next: i128,
    pub(crate) missing: Positions,
    pub(crate) untracked_missing: i128,
    pub(crate) own: Own,
    pub(crate) claimed: Claims,
    /// Placed into since the follower's last checkpoint (not part of its encoding): the
    /// flag sits in the stream the placement holds already, where a set of keys cost a
    /// lookup per turn; a flagged stream leaving memory joins `State::dirty`.
    pub(crate) dirty: bool,
}

impl Stream {
    pub(crate) fn missing_len(&self) -> usize {
        self.missing.len()
    }

    /// The highest position seen (None: none past -1).
    pub(crate) fn last_position(&self) -> Option<i128> {
        (self.next > 0).then(|| self.next - 1)
    }

    /// Whether positions are missing (tracked or only counted).
    pub(crate) fn is_gappy(&self) -> bool {
        !self.missing.is_empty() || self.untracked_missing != 0
    }

    pub(crate) fn write(&self, w: &mut StateWriter) {
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

    pub(crate) fn read(r: &mut StateReader<'_>) -> PyResult<Self> {
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
        Ok(Stream { partition, next, missing: Positions::of(missing), untracked_missing, own, claimed, dirty: false })
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

    /// Positions `start..end` missing, the first up to `max_missing` tracked in all and
    /// the rest only counted: (how many are missing, how many of them tracked).
    pub(crate) fn open_gap(&mut self, start: i128, end: i128, max_missing: i128) -> (i128, i128) {
        let skipped = end - start;
        if skipped <= 0 {
            return (0, 0);
        }
        let room = (max_missing - self.missing.len() as i128).max(0);
        let tracked = room.min(skipped);
        let mut p = start;
        while p < start + tracked {
            self.missing.insert(p);
            p += 1;
        }
        self.untracked_missing += (skipped - room).max(0);
        (skipped, tracked)
    }

    /// This stream's head: its highest position and that position's chain hash.
    pub(crate) fn head(&self) -> Option<(i128, &Hash32)> {
        self.own.get(&(self.next - 1)).map(|h| (self.next - 1, h))
    }
}
