//! A lane's task storage: the type-erased cell a future lives in, its vtable, and the slab of
//! slots. The task layer's raw memory is all here, and no fd: the unsafe that moves a future
//! into a slot, polls it in place, drops it, and moves its output out.
//!
//! Invariants (what the callers' task state protocol, `state.rs`, guarantees, and every
//! function's `# Safety` names):
//! * a slot's storage is written by one spawner between the pop of its index from the free
//!   list and the release that publishes the task, and touched afterwards only by the one thread
//!   that holds the task (`RUNNING` for a poll or a cancel, `COMPLETE` for the output);
//! * a future is pinned where it was written: the slab never moves, and a cell's future is
//!   dropped in place before its output takes its storage (`Cell` is a union, reached only
//!   through the functions monomorphised for its `F`, never by casting the slot's address);
//! * the slab is allocated and pre-faulted once ([`Storage::new`]) and freed once, by the drop
//!   of the executor that owns it.
//!
//! A memory checker runs over these unit tests in CI (valgrind's memcheck, `.ci/run`), as Miri
//! cannot be installed on these machines.

use crate::sys::mem;
use std::alloc::{self, Layout};
use std::future::Future;
use std::io;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::Poll;

/// The alignment of every task slot: a future whose type needs more is refused at spawn.
pub const TASK_ALIGN: usize = 64;

/// Type-erased operations on the future stored in a slot.
pub(super) struct Vtable {
    /// Polls the future; on `Ready` drops it and stores the output in its place.
    pub(super) poll: unsafe fn(*mut u8, &mut std::task::Context<'_>) -> Polled,
    /// Drops the (not finished) future.
    pub(super) drop_future: unsafe fn(*mut u8),
    /// Drops the stored output.
    pub(super) drop_output: unsafe fn(*mut u8),
    /// Moves the stored output out of the slot into `*dst`, a `MaybeUninit<F::Output>`.
    pub(super) take_output: unsafe fn(*mut u8, *mut u8),
}

/// What one poll of a stored future did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Polled {
    Pending,
    /// The output is stored in the slot.
    Ready,
    /// The future panicked in `poll`; it has been dropped (a panic in that drop too is
    /// swallowed: the slot is reused either way).
    Panicked,
}

/// The storage of a task: the future until it finishes, then its output.
///
/// Both fields are reached only through this type (`poll_cell`, `drop_future`, `drop_output`,
/// `take_output`, all monomorphised for `F`), never by casting the slot's address to `F` or
/// to `F::Output`: a union without `#[repr(C)]` has no specified field offsets, so no code
/// may assume a field starts at the slot's start.
pub(super) union Cell<F: Future> {
    future: ManuallyDrop<F>,
    output: ManuallyDrop<F::Output>,
}

/// # Safety
/// `p` points at a `Cell<F>` whose `future` is initialised, pinned in place (the slot never
/// moves), and polled by no other thread.
unsafe fn poll_cell<F: Future>(p: *mut u8, cx: &mut std::task::Context<'_>) -> Polled {
    let cell = p.cast::<Cell<F>>();
    // SAFETY: the caller guarantees the future is initialised and pinned in its slot.
    let polled = catch_unwind(AssertUnwindSafe(|| unsafe {
        Pin::new_unchecked(&mut *(*cell).future).poll(cx)
    }));
    match polled {
        Ok(Poll::Pending) => Polled::Pending,
        Ok(Poll::Ready(out)) => {
            // SAFETY: the future finished; drop it once, in place, then reuse its storage.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
                ManuallyDrop::drop(&mut (*cell).future)
            }));
            // SAFETY: the future's storage is dead; the union's other field takes it over.
            unsafe { std::ptr::addr_of_mut!((*cell).output).write(ManuallyDrop::new(out)) };
            Polled::Ready
        }
        Err(_) => {
            // SAFETY: the future panicked in poll but is still initialised: drop it once.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
                ManuallyDrop::drop(&mut (*cell).future)
            }));
            Polled::Panicked
        }
    }
}

/// # Safety
/// `p` points at a `Cell<F>` whose `future` is initialised and not running.
unsafe fn drop_future<F: Future>(p: *mut u8) {
    let cell = p.cast::<Cell<F>>();
    // SAFETY: delegated to the caller.
    unsafe { ManuallyDrop::drop(&mut (*cell).future) }
}

/// # Safety
/// `p` points at a `Cell<F>` whose `output` is initialised and not taken.
unsafe fn drop_output<F: Future>(p: *mut u8) {
    let cell = p.cast::<Cell<F>>();
    // SAFETY: delegated to the caller.
    unsafe { ManuallyDrop::drop(&mut (*cell).output) }
}

/// # Safety
/// `p` points at a `Cell<F>` whose `output` is initialised and not taken; `dst` points at a
/// writable `MaybeUninit<F::Output>`. The output is moved out: the slot no longer holds it.
unsafe fn take_output<F: Future>(p: *mut u8, dst: *mut u8) {
    let cell = p.cast::<Cell<F>>();
    // SAFETY: the caller guarantees the output is initialised and is taken only this once;
    // reading the field through the union (not through a cast of `p`) finds it wherever the
    // union's layout put it; `dst` is a valid, aligned place for an `F::Output`.
    unsafe {
        let out = ManuallyDrop::into_inner(std::ptr::addr_of!((*cell).output).read());
        dst.cast::<F::Output>().write(out);
    }
}

/// The vtable of `F` (a promoted constant: no allocation).
pub(super) fn vtable_of<F: Future>() -> &'static Vtable {
    trait HasVtable {
        const VTABLE: Vtable;
    }
    impl<F: Future> HasVtable for F {
        const VTABLE: Vtable = Vtable {
            poll: poll_cell::<F>,
            drop_future: drop_future::<F>,
            drop_output: drop_output::<F>,
            take_output: take_output::<F>,
        };
    }
    &<F as HasVtable>::VTABLE
}

/// Bytes between two slots' storage: `task_bytes` rounded up to [`TASK_ALIGN`].
pub(super) fn stride(task_bytes: usize) -> usize {
    task_bytes.div_ceil(TASK_ALIGN) * TASK_ALIGN
}

/// The slab: `slots` cells of `slot_bytes` each, `stride` apart, at alignment [`TASK_ALIGN`].
pub(super) struct Storage {
    base: *mut u8,
    layout: Layout,
    stride: usize,
    slot_bytes: usize,
    slots: usize,
}

// SAFETY: the slab is plain memory; who may touch which slot when is the task state protocol's
// (module docs). The futures and outputs stored in it are `Send`, checked at spawn.
unsafe impl Send for Storage {}
// SAFETY: as above.
unsafe impl Sync for Storage {}

impl Storage {
    /// `slots` slots of `slot_bytes`, allocated (zeroed) and pre-faulted now.
    pub(super) fn new(slots: usize, slot_bytes: usize) -> io::Result<Storage> {
        let stride = stride(slot_bytes);
        let layout = Layout::from_size_align(stride * slots, TASK_ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: the layout has a non-zero size (slots and slot_bytes are at least 1).
        let base = unsafe { alloc::alloc_zeroed(layout) };
        if base.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // SAFETY: just allocated, `layout.size()` bytes, exclusively ours.
        mem::prefault(unsafe { std::slice::from_raw_parts_mut(base, layout.size()) });
        Ok(Storage {
            base,
            layout,
            stride,
            slot_bytes,
            slots,
        })
    }

    /// Bytes one slot holds (`task_bytes`).
    pub(super) fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The start of slot `index`'s storage.
    ///
    /// # Panics
    /// If `index` is not a slot of this slab (a bug: indices come from the free list).
    pub(super) fn at(&self, index: u32) -> *mut u8 {
        assert!(
            (index as usize) < self.slots,
            "task slot {index} out of range"
        );
        // SAFETY: index < slots (checked above), so the offset, at most (slots − 1) × stride,
        // stays inside the `slots × stride` allocation.
        unsafe { self.base.add(index as usize * self.stride) }
    }

    /// `Err((size, align))` if a cell of `F` does not fit a slot (too large, or aligned above
    /// [`TASK_ALIGN`]).
    pub(super) fn fits<F: Future>(&self) -> Result<(), (usize, usize)> {
        let (size, align) = (size_of::<Cell<F>>(), align_of::<Cell<F>>());
        if size > self.slot_bytes || align > TASK_ALIGN {
            Err((size, align))
        } else {
            Ok(())
        }
    }

    /// Moves `future` into slot `index`.
    ///
    /// # Safety
    /// The slot is unused (its index came off the free list and no task was published in it
    /// since), and `F` [`fits`](Self::fits).
    pub(super) unsafe fn put<F: Future>(&self, index: u32, future: F) {
        // SAFETY: delegated: the slot is ours and the cell fits and is aligned.
        unsafe {
            self.at(index).cast::<Cell<F>>().write(Cell {
                future: ManuallyDrop::new(future),
            })
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; what the slots held was dropped by
        // their owner (the executor's drop) first.
        unsafe { alloc::dealloc(self.base, self.layout) };
    }
}
