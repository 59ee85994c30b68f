//! `turnaudit._native`: the crate's Python module. This file only registers what each
//! job's module defines:
//!
//! - `decode`: writer schemas compiled once, bodies decoded into Python objects (and
//!   scanned in place, `decode::scan`);
//! - `encode`: records written as fastavro writes them;
//! - `track`: the stream tracker (placement, chains, gaps, its state's encoding, its idle
//!   streams on disk) and the follower's hold on it;
//! - `spill`: verify's forgotten event ids on disk as sorted runs; `run_store`: that
//!   store's Python methods (above `track`: it takes a tracker's remembered ids);
//! - `verify`: verify's per-message step and contracts 1-4 on a scanned record;
//! - `htir`: the HTIR feeder's traces, assembled and written as their records;
//! - `ffi`: every raw CPython call; `constants`: the bytes both languages share;
//!   `bloom`: the Bloom filter the tracker and the spill share.
//!
//! No module uses one that uses it back, and no folder either
//! (tests/unit/test_rust_module_graph.py); docs/architecture.md has the floors.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

// The crate's own allocations (streams, keys, decoded values) through mimalloc, with room
// touched up front when asked (allocator.rs).
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

mod allocator;
mod bloom;
mod constants;
mod decode;
mod encode;
mod ffi;
mod hashing;
mod htir;
mod reserve;
mod run_store;
mod spill;
mod track;
mod verify;

/// The module `turnaudit._native`: the classes and functions each job's module defines.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<decode::Decoder>()?;
    m.add_class::<encode::Encoder>()?;
    m.add_class::<track::NativeStreamTracker>()?;
    m.add_class::<bloom::BloomFilter>()?;
    m.add_class::<spill::SortedRunStore>()?;
    m.add_class::<spill::IdChunks>()?;
    m.add_class::<verify::ContractCheck>()?;
    m.add_class::<verify::VerifyStep>()?;
    m.add_class::<verify::ConsumeStep>()?;
    m.add_class::<htir::TraceStore>()?;
    m.add_function(wrap_pyfunction!(htir::trace_gap, m)?)?;
    m.add_function(wrap_pyfunction!(verify::htir_turn_steps, m)?)?;
    m.add("SURFACE_LIMIT", verify::SURFACE_LIMIT)?;
    m.add_function(wrap_pyfunction!(verify::otlp_turn_records, m)?)?;
    m.add_function(wrap_pyfunction!(verify::otlp_requests, m)?)?;
    m.add("OTLP_MAX_TEXT", verify::MAX_TEXT)?;
    m.add("OTLP_MAX_EXPLANATION", verify::MAX_EXPLANATION)?;
    m.add("OTLP_MAX_IDS", verify::MAX_IDS)?;
    m.add_function(wrap_pyfunction!(track::chain_hash_hex, m)?)?;
    m.add_function(wrap_pyfunction!(reserve::reserve_event_ids, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::start_partition, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::stream_state, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::stream_partition, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::stream_head, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::restore_stream, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::drop_stream, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::track_dirty, m)?)?;
    m.add_function(wrap_pyfunction!(track::follow::take_dirty, m)?)?;
    m.add("EncodeFallback", py.get_type::<encode::EncodeFallback>())?;
    m.add("DecodeError", py.get_type::<decode::DecodeError>())?;
    m.add("TrailingBytesError", py.get_type::<decode::TrailingBytesError>())?;
    m.add("UnsupportedSchemaError", py.get_type::<decode::UnsupportedSchemaError>())?;
    // The shared bytes, for the test that holds the Python copies to them.
    m.add("CHAIN_DOMAIN", PyBytes::new(py, constants::CHAIN_DOMAIN))?;
    m.add("SCHEMA_CHAIN_DOMAIN", PyBytes::new(py, constants::SCHEMA_CHAIN_DOMAIN))?;
    let legacy: Vec<Bound<'_, PyBytes>> =
        constants::LEGACY_CHAIN_FINGERPRINTS.iter().map(|f| PyBytes::new(py, f)).collect();
    m.add("LEGACY_CHAIN_FINGERPRINTS", legacy)?;
    m.add("GENESIS_HASH", constants::GENESIS_HEX)?;
    m.add("SINGLE_OBJECT_MAGIC", PyBytes::new(py, &constants::SINGLE_OBJECT_MAGIC))?;
    m.add("SINGLE_OBJECT_HEADER", constants::SINGLE_OBJECT_HEADER)?;
    m.add("CONFLUENT_MAGIC", PyBytes::new(py, &constants::CONFLUENT_MAGIC))?;
    m.add("CONFLUENT_HEADER", constants::CONFLUENT_HEADER)?;
    Ok(())
}
