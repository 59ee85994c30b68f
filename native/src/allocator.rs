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

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;

use mimalloc::MiMalloc;

/// Blocks at least this large are touched inside `touching` (a table's, not an id's).
const TOUCH_FROM: usize = 1 << 20;
const PAGE: usize = 4096;

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
/// yet handed out), and every page is then resident.
unsafe fn touch(block: *mut u8, size: usize) {
    if block.is_null() || size < TOUCH_FROM || !TOUCH.get() {
        return;
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
