//! The crate's global allocator: mimalloc, and room touched when asked.
//!
//! mimalloc: verify evicts and frees streams by the million, and glibc's malloc spent a
//! sixth of a job's time sorting freed chunks (malloc_consolidate) under that churn.
//!
//! `touching`: the large blocks allocated inside it (a tracker's reserved id table and
//! arrival order) have each of their pages written once before they are handed out, so
//! the page faults are taken there and then (at a service's start) instead of by the
//! first messages that land in each page (see `reserve.rs`). One comparison of the size
//! on every other allocation.
//!
//! Transparent huge pages: only for those blocks. mimalloc is built without asking for
//! them for its arenas (`no_thp`): there, the first touch of each 2 MiB as the heap grew
//! was one fault that zeroed (and, for a huge page, might first compact) 2 MiB at once,
//! stalling the batch that took it 10-20 ms, several times in a service's first minutes.
//! A touched block is asked for huge pages (`MADV_HUGEPAGE`) before it is written: its
//! faults are all taken at the start, and the id table's random lookups keep a huge
//! page's reach in the TLB (with huge pages off for the whole process, a turn took 3 %
//! longer, measured).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

use mimalloc::MiMalloc;

/// Blocks at least this large are touched inside `touching` (a table's, not an id's).
const TOUCH_FROM: usize = 1 << 20;
const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

thread_local! {
    static TOUCH: Cell<bool> = const { Cell::new(false) };
}

pub(crate) struct Allocator;

/// `f`, with each large block it allocates on this thread touched page by page.
pub(crate) fn touching<R>(f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TOUCH.set(false);
        }
    }
    TOUCH.set(true);
    let _reset = Reset; // a panic in `f` leaves the flag down too
    f()
}

/// One byte of each page of the block written: it is the allocator's to write (not
/// yet handed out), and every page is then resident; huge pages where the system gives
/// them (the whole 2 MiB inside the block).
unsafe fn touch(block: *mut u8, size: usize) {
    if block.is_null() || size < TOUCH_FROM || !TOUCH.get() {
        return;
    }
    let start = (block as usize).next_multiple_of(HUGE_PAGE);
    let end = (block as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: a range of whole pages inside the block; advice only (an error, such as
        // a kernel without transparent huge pages, leaves small pages: ignored).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    let mut at = 0;
    while at < size {
        // SAFETY: `at < size`, within the block just allocated and not handed out.
        unsafe { block.add(at).write_volatile(0) };
        at += PAGE;
    }
}

// SAFETY: every call is mimalloc's; `touch` only writes inside a block before returning it.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let block = unsafe { MiMalloc.alloc(layout) };
        // SAFETY: a block of `layout.size()` bytes, or null.
        unsafe { touch(block, layout.size()) };
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on (zeroed blocks are not touched: the
        // zeroing wrote them, or the kernel's fresh pages are zero without a write).
        unsafe { MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let block = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !block.is_null() && new_size > layout.size() {
            // SAFETY: the grown part lies past the old contents, inside the new block.
            unsafe { touch(block.add(layout.size()), new_size - layout.size()) };
        }
        block
    }
}
