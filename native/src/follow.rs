//! `verify --follow`'s hold on the shared stream tracker: a partition taken over, one
//! stream's state checkpointed to the follower's state topic and restored from it, a
//! closed stream dropped. The stream's state is the tracker's own format (the spill's
//! rows and the pickled tracker use it too): one place for what a stream is.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::track::NativeStreamTracker;

/// `tracker.start_partition`: a partition taken over at `first_offset`, its log start.
#[pyfunction]
pub(crate) fn start_partition(
    tracker: &Bound<'_, NativeStreamTracker>,
    partition: i64,
    log_start: i64,
    first_offset: i64,
) -> PyResult<()> {
    tracker.get().start_partition(partition, log_start, first_offset)
}

/// One stream's partition and its state as bytes, or None when the tracker holds no
/// such stream.
#[pyfunction]
pub(crate) fn stream_state<'py>(
    py: Python<'py>,
    tracker: &Bound<'py, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<Option<(Option<i64>, Bound<'py, PyBytes>)>> {
    let key = (session_id.to_owned(), producer_id.to_owned());
    Ok(tracker.get().stream_bytes(&key)?.map(|(partition, bytes)| (partition, PyBytes::new(py, &bytes))))
}

/// A stream restored from `stream_state`'s bytes (in place of any copy held).
#[pyfunction]
pub(crate) fn restore_stream(
    py: Python<'_>,
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
    state: &[u8],
) -> PyResult<()> {
    tracker.get().restore_stream(py, (session_id.to_owned(), producer_id.to_owned()), state)
}

/// The stream forgotten wherever it is held; whether it was.
#[pyfunction]
pub(crate) fn drop_stream(
    tracker: &Bound<'_, NativeStreamTracker>,
    session_id: &str,
    producer_id: &str,
) -> PyResult<bool> {
    tracker.get().drop_stream(&(session_id.to_owned(), producer_id.to_owned()))
}

/// The tracker remembers, from now on, each stream it places a turn into.
#[pyfunction]
pub(crate) fn track_dirty(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
    tracker.get().track_dirty()
}

/// The streams placed into since the last call (session, producer), forgotten here.
#[pyfunction]
pub(crate) fn take_dirty(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<Vec<(String, String)>> {
    tracker.get().take_dirty()
}
