//! A service's stream tracker with its event-id table sized to its bound at the start.
//!
//! The table (and its arrival order) grows by doubling; each doubling rehashes every id
//! held, in the one `observe` call that crosses the threshold (at 57,344, 114,688 and
//! 229,376 ids, 7/8 of a power of two): 50-200 ms of CPU at 114,688 and 229,376 ids on
//! a loaded machine, a batch held that long, every run. A consumer service reaches its
//! bound within minutes at any real rate and then holds it, so the room is taken at the
//! start instead of in steps (its pages are still faulted in by the first messages that
//! land in them, once). Verify's trackers, whose bounds are set for whole topics, are
//! not sized this way.

use pyo3::prelude::*;

use crate::track::NativeStreamTracker;

/// Makes room for the tracker's bound of event ids (and the ids it may hold over it
/// until it forgets a batch), now; what it already holds counts.
#[pyfunction]
pub(crate) fn reserve_event_ids(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
    let tracker = tracker.get();
    let bound = tracker.bounds.max_event_ids.saturating_add(tracker.bounds.forget_batch);
    let mut st = tracker.lock()?;
    let held = st.seen.len();
    st.seen.reserve(bound.saturating_sub(held));
    let queued = st.order.len();
    st.order.reserve(bound.saturating_sub(queued));
    Ok(())
}
