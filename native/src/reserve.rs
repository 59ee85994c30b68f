//! A service's stream tracker with its event-id table sized to its bound at the start.
//!
//! The table (and its arrival order) grows by doubling; each doubling rehashes every id
//! held, in the one `observe` call that crosses the threshold (at 57,344, 114,688 and
//! 229,376 ids, 7/8 of a power of two): 50-200 ms of CPU at 114,688 and 229,376 ids on
//! a loaded machine, a batch held that long, every run. A consumer service reaches its
//! bound within minutes at any real rate and then holds it, so the room is taken at the
//! start instead of in steps. The room is touched then too (each page written once as it
//! is allocated, `allocator::touching`): else its pages (about 70 MB at the default bound
//! of 500,000 ids) are faulted in by the first messages that land in them, a page fault
//! every few ids in the first minutes, and where the machine backs its memory lazily (a
//! virtual machine) each costs tens of microseconds: 0.1-0.3 s of a service's first
//! 100,000 turns, measured. The bound's memory is then resident from the start, so a
//! memory limit too small for it fails at start, not hours later. Verify's trackers,
//! whose bounds are set for whole topics, are not sized this way.

use pyo3::prelude::*;

use crate::allocator::touching;
use crate::track::NativeStreamTracker;

/// Makes room for the tracker's bound of event ids (and the ids it may hold over it
/// until it forgets a batch), now; what it already holds counts.
#[pyfunction]
pub(crate) fn reserve_event_ids(tracker: &Bound<'_, NativeStreamTracker>) -> PyResult<()> {
    let tracker = tracker.get();
    let bound = tracker.bounds.max_event_ids.saturating_add(tracker.bounds.forget_batch);
    let mut st = tracker.lock()?;
    let held = st.seen.len();
    let queued = st.order.len();
    touching(|| {
        st.seen.reserve(bound.saturating_sub(held));
        st.order.reserve(bound.saturating_sub(queued));
    });
    Ok(())
}
