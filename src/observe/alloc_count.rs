//! A counting global allocator with per-thread counters.
//!
//! Install it in a binary (the `lfrt` binary does, and so do the tests):
//! ```ignore
//! #[global_allocator]
//! static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;
//! ```
//! Pool threads then report how many allocations they made after warm-up
//! (`pool_allocations`). Without it installed, [`is_active`] is false, [`thread_allocations`]
//! reads 0 and `pool_allocations` is `None` (not measured).
//!
//! Cost: one thread-local increment per allocation (the TLS is `const`-initialised and has no
//! destructor, so reading it never allocates).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn bump() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// The system allocator, counting allocations (including reallocations) per thread.
///
/// # Examples
/// ```
/// #[global_allocator]
/// static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;
///
/// fn main() {
///     assert!(lfrt::counting_alloc_active()); // pool_allocations is now measured
///     let before = lfrt::thread_allocations();
///     let v = vec![1u8; 16];
///     assert!(lfrt::thread_allocations() > before);
///     # drop(v);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counter
// is a thread-local that never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
}

/// Allocations made by the calling thread so far.
///
/// Example: [`CountingAlloc`].
#[inline]
pub fn thread_allocations() -> u64 {
    ALLOCS.try_with(Cell::get).unwrap_or(0)
}

/// Whether [`CountingAlloc`] is this program's global allocator.
///
/// Example: [`CountingAlloc`].
pub fn is_active() -> bool {
    let before = thread_allocations();
    drop(std::hint::black_box(Box::new(0u64)));
    thread_allocations() != before
}
