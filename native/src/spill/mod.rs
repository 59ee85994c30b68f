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
//!
//! The store's Python methods are `crate::run_store` (above the tracker, whose ids it
//! takes); the tracker's idle streams on disk are `crate::track::stream_spill`.

pub(crate) mod ids;
pub(crate) mod runs;

pub(crate) use ids::{IdChunks, SortedRunStore};
pub(crate) use runs::{os_error, Seen};

#[cfg(test)]
mod tests;
