//! A lane's task table, its wakers, and the two event handlers that run it on the lane.

use crate::engine::handler::{Context as LaneContext, Disposition, Event, EventHandler, Registry};
pub use crate::observe::metrics::TaskStats;
use crate::sync::Mutex;
use crate::sys::{self, fd::EventFd, fd::TimerFd, mem};
use crate::task::deadlines::Deadlines;
use crate::task::state::{self, Start, TaskState};
use crossbeam_queue::ArrayQueue;
use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};

/// The alignment of every task slot: a future whose type needs more is refused at spawn.
pub const TASK_ALIGN: usize = 64;

/// The most tasks one executor turn polls before it hands the lane back (see the module docs:
/// bounded work per turn).
pub const POLLS_PER_TURN: usize = 16;

/// Largest `max_tasks` (slot indices and the ready set are sized by it).
pub const MAX_TASKS: usize = 1 << 16;

/// Type-erased operations on the future stored in a slot.
struct Vtable {
    /// Polls the future; on `Ready` drops it and stores the output in its place.
    poll: unsafe fn(*mut u8, &mut std::task::Context<'_>) -> Polled,
    /// Drops the (not finished) future.
    drop_future: unsafe fn(*mut u8),
    /// Drops the stored output.
    drop_output: unsafe fn(*mut u8),
    /// Moves the stored output out of the slot into `*dst`, a `MaybeUninit<F::Output>`.
    take_output: unsafe fn(*mut u8, *mut u8),
}

/// What one poll of a stored future did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
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
union Cell<F: Future> {
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
fn vtable_of<F: Future>() -> &'static Vtable {
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

/// One task slot: the state word, what the spawner wrote and the join waker. The future
/// itself lives in [`Shared::storage`] at `index × stride`; its `lfrt::time` deadline, if it
/// waits for one, in [`Shared::timer`]'s heap.
struct Slot {
    state: TaskState,
    index: u32,
    /// The executor this slot belongs to, for wakers (which hold one strong count of it).
    shared: *const Shared,
    /// Written by the spawner before `TaskState::spawn` publishes the task; read only by
    /// threads that observed the publication (the poller, the handle, the drop at close).
    priority: UnsafeCell<u8>,
    vtable: UnsafeCell<Option<&'static Vtable>>,
    /// The waker of the task (or thread) awaiting the [`JoinHandle`].
    joiner: Mutex<Option<Waker>>,
}

#[derive(Default)]
struct Counters {
    spawned: AtomicU64,
    completed: AtomicU64,
    panicked: AtomicU64,
    cancelled: AtomicU64,
    refused_full: AtomicU64,
    refused_too_large: AtomicU64,
    polls: AtomicU64,
    turns: AtomicU64,
}

/// The lane's executor state, shared by the spawners, the handles, the wakers and the two
/// handlers registered with the lane.
pub(crate) struct Shared {
    lane: String,
    slots: Box<[Slot]>,
    storage: *mut u8,
    layout: Layout,
    stride: usize,
    slot_bytes: usize,
    /// Free slot indices.
    free: ArrayQueue<u32>,
    /// Woken tasks not yet taken by a turn (each at most once: `SCHEDULED`).
    ready: ArrayQueue<u32>,
    /// The doorbell protocol of `sources/inbox.rs`: true while a wake-up is pending.
    rung: AtomicBool,
    doorbell: EventFd,
    timer: TimerFd,
    /// The tasks' deadlines and the instant the timerfd is armed for; the lock orders
    /// `timerfd_settime` calls.
    timer_state: Mutex<TimerState>,
    /// A copy of the armed instant readable without the lock: a turn compares the clock with
    /// it before every poll and wakes the tasks whose deadline passed itself (see `expire`).
    next_deadline: AtomicU64,
    /// Set once by [`close`](Shared::close): spawns are refused and turns poll no more.
    closed: AtomicBool,
    /// The cancellation order at close, preallocated to `max_tasks`; its lock also makes one
    /// closer at a time (the shutdown thread, or the lane's turn finishing what it left).
    close_order: Mutex<BinaryHeap<(u8, Reverse<u32>)>>,
    counters: Counters,
}

/// The lane timer's state, under [`Shared::timer_state`].
struct TimerState {
    /// The deadlines tasks wait for, earliest first (at most one per slot).
    deadlines: Deadlines,
    /// The instant the timerfd is armed for (`u64::MAX`: disarmed).
    armed: u64,
}

// SAFETY: the raw storage is reached only through the task state protocol (state.rs): a
// future is touched by the one thread that set `RUNNING` (or that owns a free or completed
// slot), the `UnsafeCell`s are written before the release that publishes a task and read
// after the acquire that observed it. Futures and outputs are `Send`, checked at spawn.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The start of slot `index`'s storage.
    ///
    /// # Panics
    /// If `index` is not a slot of this table (a bug: indices come from the free list).
    fn storage_of(&self, index: u32) -> *mut u8 {
        assert!(
            (index as usize) < self.slots.len(),
            "task slot {index} out of range"
        );
        // SAFETY: index < max_tasks (checked above), so the offset, at most
        // (max_tasks − 1) × stride, stays inside the `max_tasks × stride` allocation.
        unsafe { self.storage.add(index as usize * self.stride) }
    }

    /// Rings the doorbell unless a wake-up is pending already.
    fn ring(&self) {
        if !self.rung.swap(true, SeqCst) {
            let _ = self.doorbell.write(1);
        }
    }

    /// Puts a task whose `SCHEDULED` bit the caller just set into the ready set.
    fn push_ready(&self, index: u32) {
        // Never full: a slot is queued at most once (state.rs), and the queue holds max_tasks.
        let pushed = self.ready.push(index);
        debug_assert!(pushed.is_ok(), "ready queue overflow");
        self.ring();
    }

    pub(crate) fn wake(&self, index: u32, gen: u16) {
        if self.slots[index as usize].state.wake(gen) {
            self.push_ready(index);
        }
    }

    /// The task of a slot finished: record the outcome, then free the slot or hand the
    /// outcome to the handle.
    fn finish(&self, index: u32, outcome: u32) {
        let slot = &self.slots[index as usize];
        if slot.state.complete(outcome) {
            self.release(index);
        } else {
            let joiner = slot.joiner.lock().take();
            if let Some(w) = joiner {
                w.wake();
            }
        }
    }

    /// Frees a complete slot nobody refers to any more: drops a stored output, forgets the
    /// join waker and the deadline, bumps the generation, returns the index to the free list.
    fn release(&self, index: u32) {
        let slot = &self.slots[index as usize];
        if slot.state.load() & state::OUTPUT != 0 {
            // SAFETY: the output is stored and the slot is ours (complete, no handle).
            let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
            let p = self.storage_of(index);
            // SAFETY: the output is initialised and not taken.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_output)(p) }));
        }
        drop(slot.joiner.lock().take());
        // A deadline the task left armed stays in the heap under its generation: due, its
        // wake is stale and does nothing (`Deadlines`).
        slot.state.free();
        let _ = self.free.push(index);
    }

    /// Drops the future of a task taken unpolled (cancel at close), then completes it: its
    /// handle sees the end only once the future is gone.
    fn drop_unpolled(&self, index: u32) {
        let slot = &self.slots[index as usize];
        // SAFETY: the task was published (we read its state), so its vtable was written.
        let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
        let p = self.storage_of(index);
        // SAFETY: take_unpolled won the slot (RUNNING is ours): the future is initialised and
        // no one else touches it.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_future)(p) }));
        self.counters.cancelled.fetch_add(1, Relaxed);
        self.finish(index, 0);
    }

    /// Adds a deadline for the task of generation `gen` in `index`, and arms the timerfd if
    /// it is the earliest. O(log n) in the deadlines armed.
    pub(crate) fn add_deadline(&self, index: u32, gen: u16, at_ns: u64) {
        let at_ns = at_ns.max(1);
        let mut t = self.timer_state.lock();
        t.deadlines.arm(index, gen, at_ns);
        if at_ns < t.armed {
            self.arm(&mut t, at_ns);
        }
    }

    /// Arms the timerfd for `at_ns` (under the timer lock).
    fn arm(&self, t: &mut TimerState, at_ns: u64) {
        t.armed = at_ns;
        self.next_deadline.store(at_ns, SeqCst);
        let _ = self.timer.set_abs(at_ns, 0);
    }

    /// Wakes every task whose deadline is at or before `now` and re-arms the timer for the
    /// next one. Run by the timer's handler when the timerfd fires, and by a turn before each
    /// poll once the earliest deadline passed, so that a timed task competes by priority at
    /// every poll boundary instead of waiting for the turn to end (up to `POLLS_PER_TURN`
    /// polls). Both may run at once; the timer lock orders them. O(k log n) for k due
    /// deadlines among n armed, not a scan of the table.
    fn expire(&self, now: u64) {
        let mut t = self.timer_state.lock();
        while let Some((index, gen)) = t.deadlines.pop_due(now) {
            // A stale generation (the task finished) wakes nothing.
            self.wake(index, gen);
        }
        match t.deadlines.earliest() {
            Some(next) => self.arm(&mut t, next),
            None => {
                // Nothing armed: the timerfd fired already (or fires once more, harmlessly).
                t.armed = u64::MAX;
                self.next_deadline.store(u64::MAX, SeqCst);
            }
        }
    }

    /// Cancels every unfinished task, highest task priority first (ties: lower slot first),
    /// and from now on refuses spawns and stops the lane's turns from polling. Callable from
    /// any thread at any time, also while a turn runs: a task is cancelled only when no poll
    /// of it runs (one CAS against the poller's, `state.rs`). A task found mid-poll is waited
    /// for until `until_ns` (`CLOCK_MONOTONIC`), before any lower task is cancelled, so the
    /// order holds; one still being polled then is left to its turn, which cancels it when
    /// the poll returns (see [`Turn`]). Returns how many tasks were left that way.
    pub(crate) fn close(&self, until_ns: u64) -> usize {
        self.closed.store(true, SeqCst);
        let mut order = self.close_order.lock();
        order.clear();
        for slot in self.slots.iter() {
            let s = slot.state.load();
            if s & state::LIVE != 0 && s & state::COMPLETE == 0 {
                // SAFETY: the task was published (LIVE observed with acquire).
                let p = unsafe { *slot.priority.get() };
                order.push((p, Reverse(slot.index)));
            }
        }
        let mut left = 0;
        while let Some((_, Reverse(i))) = order.pop() {
            let slot = &self.slots[i as usize];
            loop {
                let s = slot.state.load();
                if s & state::LIVE == 0 || s & state::COMPLETE != 0 {
                    break; // finished meanwhile
                }
                if slot.state.take_unpolled(state::generation(s)) {
                    self.drop_unpolled(i);
                    break;
                }
                // Being polled: its turn stops after this poll (it sees `closed`).
                if sys::now_ns() >= until_ns {
                    left += 1;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        // Entries of cancelled tasks; a turn that still pops one finds `Start::Gone`.
        while self.ready.pop().is_some() {}
        left
    }

    fn stats(&self) -> TaskStats {
        let c = &self.counters;
        TaskStats {
            spawned: c.spawned.load(Relaxed),
            completed: c.completed.load(Relaxed),
            panicked: c.panicked.load(Relaxed),
            cancelled: c.cancelled.load(Relaxed),
            refused_full: c.refused_full.load(Relaxed),
            refused_too_large: c.refused_too_large.load(Relaxed),
            polls: c.polls.load(Relaxed),
            turns: c.turns.load(Relaxed),
        }
    }
}

impl Drop for Shared {
    /// The last reference is gone (every handler, spawner, handle and waker): drop what the
    /// slots still hold. Normally `close` already cancelled every task at shutdown.
    fn drop(&mut self) {
        for i in 0..self.slots.len() as u32 {
            let s = self.slots[i as usize].state.load();
            if s & state::LIVE == 0 {
                continue;
            }
            // SAFETY: a live slot was published with its vtable; we are the last owner.
            let vt = unsafe { (*self.slots[i as usize].vtable.get()).expect("vtable") };
            let p = self.storage_of(i);
            if s & state::COMPLETE == 0 {
                // SAFETY: unfinished: the future is initialised and nobody polls it.
                let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_future)(p) }));
            } else if s & state::OUTPUT != 0 {
                // SAFETY: the output is initialised and was not taken.
                let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_output)(p) }));
            }
        }
        // SAFETY: allocated in `Executor::new` with this layout.
        unsafe { alloc::dealloc(self.storage, self.layout) };
    }
}

// ---- wakers: (slot address | generation << 48), one strong count of the executor each ----

const GEN_SHIFT_PTR: u32 = 48;
const ADDR_MASK: usize = (1 << GEN_SHIFT_PTR) - 1;

fn waker_data(slot: &Slot, gen: u16) -> *const () {
    let addr = slot as *const Slot as usize;
    debug_assert_eq!(addr & !ADDR_MASK, 0);
    (addr | (usize::from(gen) << GEN_SHIFT_PTR)) as *const ()
}

/// # Safety
/// `data` came from `waker_data` of a slot of a live `Shared`.
unsafe fn decode<'a>(data: *const ()) -> (&'a Slot, u16) {
    let d = data as usize;
    // SAFETY: the waker holds a strong count of the executor, so its slots are alive.
    let slot = unsafe { &*((d & ADDR_MASK) as *const Slot) };
    (slot, (d >> GEN_SHIFT_PTR) as u16)
}

static WAKER_VTABLE: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake_by_ref, waker_drop);

/// `RawWakerVTable::clone` of a lane task's waker: one more strong count of the executor.
///
/// # Safety
/// `data` is the data of a live lane waker (made by `waker_data` and holding, or borrowed
/// from a poll that holds, a strong count of the slot's executor), as the `Waker` contract
/// guarantees for a vtable function.
unsafe fn waker_clone(data: *const ()) -> RawWaker {
    // SAFETY: `data` is a live lane waker's.
    let (slot, _) = unsafe { decode(data) };
    // SAFETY: `slot.shared` is the `Arc<Shared>` the slot lives in, kept alive by this waker;
    // the clone takes its own count (no allocation).
    unsafe { Arc::increment_strong_count(slot.shared) };
    RawWaker::new(data, &WAKER_VTABLE)
}

/// `RawWakerVTable::wake`: schedules the task, then gives the waker's count back.
///
/// # Safety
/// As [`waker_clone`]; the waker is consumed (its strong count is released here), so `data`
/// is not used again by the caller.
unsafe fn waker_wake(data: *const ()) {
    // SAFETY: as `waker_clone`; the wake consumes the waker's count.
    unsafe {
        waker_wake_by_ref(data);
        waker_drop(data);
    }
}

/// `RawWakerVTable::wake_by_ref`: schedules the task of the waker's slot and generation on
/// its lane (one CAS, at most one push and one `write(2)`; never polls).
///
/// # Safety
/// As [`waker_clone`].
unsafe fn waker_wake_by_ref(data: *const ()) {
    // SAFETY: `data` is a live lane waker's.
    let (slot, gen) = unsafe { decode(data) };
    // SAFETY: the waker keeps the executor alive.
    let shared = unsafe { &*slot.shared };
    shared.wake(slot.index, gen);
}

/// `RawWakerVTable::drop`: gives the waker's strong count of the executor back.
///
/// # Safety
/// As [`waker_clone`], for an owned waker (not one borrowed from a poll, which holds no count
/// of its own): `data` is not used again.
unsafe fn waker_drop(data: *const ()) {
    // SAFETY: `data` is a live lane waker's.
    let (slot, _) = unsafe { decode(data) };
    // SAFETY: this waker's strong count is given back.
    unsafe { Arc::decrement_strong_count(slot.shared) };
}

/// If `waker` is a lane task's waker: its executor, slot index and generation.
pub(crate) fn lane_task(waker: &Waker) -> Option<(&Shared, u32, u16)> {
    if waker.vtable() != &WAKER_VTABLE {
        return None;
    }
    // SAFETY: our vtable, so `data` is a lane waker's and keeps its executor alive while the
    // borrow of `waker` lasts.
    let (slot, gen) = unsafe { decode(waker.data()) };
    // SAFETY: as above.
    Some((unsafe { &*slot.shared }, slot.index, gen))
}

// ---- the public handles ----

/// Why [`Spawner::spawn`] refused a future; the future is handed back.
pub enum SpawnError<F> {
    /// Every one of the lane's `max_tasks` slots holds a task (counted in
    /// [`TaskStats::refused_full`]).
    Full(F),
    /// The future (or its output) needs more than a slot: `size` bytes at alignment `align`,
    /// while the lane's slots hold `slot_bytes` at alignment [`TASK_ALIGN`] (counted in
    /// [`TaskStats::refused_too_large`]).
    TooLarge {
        /// The future handed back.
        future: F,
        /// Bytes the future (or its output, whichever is larger) needs.
        size: usize,
        /// Its alignment.
        align: usize,
        /// Bytes a slot of this lane holds (`task_bytes`).
        slot_bytes: usize,
    },
    /// The runtime shut down (or the lane has no task table: `max_tasks = 0`).
    Closed(F),
}

impl<F> SpawnError<F> {
    /// The refused future.
    pub fn into_inner(self) -> F {
        match self {
            SpawnError::Full(f) | SpawnError::Closed(f) => f,
            SpawnError::TooLarge { future, .. } => future,
        }
    }
}

impl<F> fmt::Debug for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::Full(_) => f.pad("Full(_)"),
            SpawnError::Closed(_) => f.pad("Closed(_)"),
            SpawnError::TooLarge {
                size,
                align,
                slot_bytes,
                ..
            } => f
                .debug_struct("TooLarge")
                .field("size", size)
                .field("align", align)
                .field("slot_bytes", slot_bytes)
                .finish_non_exhaustive(),
        }
    }
}

impl<F> fmt::Display for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::Full(_) => f.write_str(
                "the lane's task table is full (every one of its `max_tasks` slots holds a \
                 task); the future was handed back",
            ),
            SpawnError::TooLarge {
                size,
                align,
                slot_bytes,
                ..
            } => write!(
                f,
                "the future needs {size} bytes at alignment {align}, but the lane's task slots \
                 hold {slot_bytes} bytes at alignment {TASK_ALIGN}: raise the group's \
                 `task_bytes`, or box the future's large state before spawning"
            ),
            SpawnError::Closed(_) => f.write_str(
                "the lane runs no tasks: its runtime shut down, or its group has `max_tasks = 0`",
            ),
        }
    }
}

impl<F> std::error::Error for SpawnError<F> {}

/// Why a task gave no output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinError {
    /// The task was cancelled ([`JoinHandle::cancel`], or the runtime shut down).
    Cancelled,
    /// The task's future panicked (the panic was caught and counted).
    Panicked,
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JoinError::Cancelled => "the task was cancelled",
            JoinError::Panicked => "the task panicked",
        })
    }
}

impl std::error::Error for JoinError {}

/// Spawns tasks onto one lane. Cheap to clone (an `Arc`), usable from any thread.
///
/// Obtained from [`Lane::spawner`](crate::Lane::spawner); [`Lane::spawn`](crate::Lane::spawn)
/// is the shortcut.
#[derive(Clone)]
pub struct Spawner {
    shared: Arc<Shared>,
    /// The lane's handle registry: where `lfrt::net` sockets register their readiness.
    pub(crate) registry: Registry,
}

impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawner")
            .field("lane", &self.shared.lane)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    /// Spawns `future` at task priority 0. See [`spawn_with_priority`](Self::spawn_with_priority).
    ///
    /// # Errors
    /// As [`spawn_with_priority`](Self::spawn_with_priority).
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, SpawnError<F>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_with_priority(0, future)
    }

    /// Spawns `future` onto the lane: it is polled on the lane's pool threads, at the lane's
    /// policy and priority. Among the lane's runnable tasks, a higher `priority` is polled
    /// first; equal priorities are polled in the order they became runnable.
    ///
    /// # Errors
    /// The future is handed back: [`SpawnError::TooLarge`] if it (or its output) does not fit
    /// a slot; [`SpawnError::Full`] if every slot holds a task; [`SpawnError::Closed`] after
    /// shutdown. Each refusal is counted ([`TaskStats`]).
    ///
    /// # Real-time safety
    /// No allocation: the future is moved into a preallocated slot (one lock-free pop of the
    /// free list), then scheduled (one lock-free push and at most one `write(2)` to the
    /// lane's eventfd).
    pub fn spawn_with_priority<F>(
        &self,
        priority: u8,
        future: F,
    ) -> Result<JoinHandle<F::Output>, SpawnError<F>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let s = &*self.shared;
        let (size, align) = (size_of::<Cell<F>>(), align_of::<Cell<F>>());
        if size > s.slot_bytes || align > TASK_ALIGN {
            s.counters.refused_too_large.fetch_add(1, Relaxed);
            return Err(SpawnError::TooLarge {
                future,
                size,
                align,
                slot_bytes: s.slot_bytes,
            });
        }
        if s.closed.load(SeqCst) {
            return Err(SpawnError::Closed(future));
        }
        let Some(index) = s.free.pop() else {
            s.counters.refused_full.fetch_add(1, Relaxed);
            return Err(SpawnError::Full(future));
        };
        let slot = &s.slots[index as usize];
        // SAFETY: the slot came off the free list, so no other thread touches it until
        // `TaskState::spawn` publishes it; the storage fits and is aligned (checked above).
        unsafe {
            s.storage_of(index).cast::<Cell<F>>().write(Cell {
                future: ManuallyDrop::new(future),
            });
            *slot.priority.get() = priority;
            *slot.vtable.get() = Some(vtable_of::<F>());
        }
        let gen = slot.state.spawn(true);
        s.counters.spawned.fetch_add(1, Relaxed);
        s.push_ready(index);
        if s.closed.load(SeqCst) {
            // Shutdown raced with us and may have missed the task: cancel it ourselves (one
            // of us wins `take_unpolled`).
            if slot.state.take_unpolled(gen) {
                s.drop_unpolled(index);
            }
        }
        Ok(JoinHandle {
            shared: self.shared.clone(),
            index,
            gen,
            done: false,
            _output: PhantomData,
        })
    }

    /// Shutdown: cancels the lane's tasks ([`Shared::close`]); the number left running past
    /// `until_ns`.
    pub(crate) fn close(&self, until_ns: u64) -> usize {
        self.shared.close(until_ns)
    }

    /// The lane's task counters.
    pub fn stats(&self) -> TaskStats {
        self.shared.stats()
    }

    /// Bytes one task slot holds (`task_bytes`).
    pub fn slot_bytes(&self) -> usize {
        self.shared.slot_bytes
    }

    /// The number of task slots (`max_tasks`).
    pub fn max_tasks(&self) -> usize {
        self.shared.slots.len()
    }
}

/// A spawned task: await it for the output, or [`cancel`](Self::cancel) it. Dropping the
/// handle detaches the task (it runs on; its output is dropped when it finishes).
///
/// Awaitable from anywhere: a lane task, a tokio task, or [`JoinHandle::wait`]'s blocking
/// wait on a plain thread.
pub struct JoinHandle<T> {
    shared: Arc<Shared>,
    index: u32,
    gen: u16,
    /// The outcome was taken (and the slot released).
    done: bool,
    _output: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("lane", &self.shared.lane)
            .field("slot", &self.index)
            .finish_non_exhaustive()
    }
}

impl<T> JoinHandle<T> {
    fn slot(&self) -> &Slot {
        &self.shared.slots[self.index as usize]
    }

    /// Requests cancellation: the task's future is dropped on its lane the next time it is
    /// taken from the ready set (at once if it is not running), and awaiting the handle gives
    /// [`JoinError::Cancelled`], unless the task finished first.
    pub fn cancel(&self) {
        if !self.done && self.slot().state.cancel(self.gen) {
            self.shared.wake(self.index, self.gen);
        }
    }

    /// True once the task finished (output ready, cancelled or panicked).
    pub fn is_finished(&self) -> bool {
        self.done || self.slot().state.load() & state::COMPLETE != 0
    }

    /// Blocks the calling thread until the task finishes. For plain threads (tests, set-up
    /// code); never call it on a lane thread.
    ///
    /// # Errors
    /// As awaiting the handle.
    pub fn wait(mut self) -> Result<T, JoinError> {
        let parker = Arc::new(ThreadWaker(std::thread::current()));
        let waker = Waker::from(parker);
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            if let Poll::Ready(r) = Pin::new(&mut self).poll(&mut cx) {
                return r;
            }
            std::thread::park();
        }
    }
}

struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        assert!(
            !self.done,
            "JoinHandle polled after it returned its outcome"
        );
        let slot = self.slot();
        let mut s = slot.state.load();
        if s & state::COMPLETE == 0 {
            // Register, then look again: the completing thread sets COMPLETE before it takes
            // the waker under the same lock, so one of the two sees the other.
            {
                let mut j = slot.joiner.lock();
                match &*j {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *j = Some(cx.waker().clone()),
                }
            }
            s = slot.state.load();
            if s & state::COMPLETE == 0 {
                return Poll::Pending;
            }
        }
        let out = if s & state::OUTPUT != 0 {
            // SAFETY: a published task's vtable was written before the release that published
            // it; COMPLETE was observed with acquire.
            let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
            let mut v = std::mem::MaybeUninit::<T>::uninit();
            // SAFETY: COMPLETE with OUTPUT: the output is stored and only the handle takes it
            // (once: `done` is set below). The vtable is the spawned future's, whose output
            // type is this handle's `T` (`spawn_with_priority` returns `JoinHandle<F::Output>`),
            // so `v` is a valid destination and is initialised by the call.
            let v = unsafe {
                (vt.take_output)(self.shared.storage_of(self.index), v.as_mut_ptr().cast());
                v.assume_init()
            };
            slot.state.output_taken();
            Ok(v)
        } else if s & state::PANICKED != 0 {
            Err(JoinError::Panicked)
        } else {
            Err(JoinError::Cancelled)
        };
        self.done = true;
        if self.slot().state.release_handle() {
            self.shared.release(self.index);
        }
        Poll::Ready(out)
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if !self.done && self.slot().state.release_handle() {
            self.shared.release(self.index);
        }
    }
}

// ---- the executor: built with a lane, registered as two handlers ----

/// The lane's overrun settings, as its executor needs them (`budget_us`, `on_overrun`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The lane's `budget_us`, in ns.
    pub(crate) ns: u64,
    /// `on_overrun = "demote"`: a streak over budget is kept in one dispatch, so the demotion
    /// lasts until the streak ends (see [`Turn`]).
    pub(crate) demote: bool,
}

/// A lane's executor before it is registered: the [`Spawner`] and the two handlers (task
/// doorbell, timer) the runtime registers with the lane.
pub(crate) struct Executor {
    pub(crate) spawner: Spawner,
    pub(crate) turn: Box<dyn EventHandler>,
    pub(crate) clock: Box<dyn EventHandler>,
}

/// Bytes between two slots' storage: `task_bytes` rounded up to [`TASK_ALIGN`].
fn stride(task_bytes: usize) -> usize {
    task_bytes.div_ceil(TASK_ALIGN) * TASK_ALIGN
}

impl Executor {
    /// Bytes [`new`](Self::new) allocates for `max_tasks` slots of `task_bytes`: the slots'
    /// storage (pre-faulted), their state words and join-waker locks, the free list, the
    /// ready queue, the turn's heap, the close order and the deadline heap. Kept next to `new` so the two stay in step.
    pub(crate) fn allocated_bytes(max_tasks: usize, task_bytes: usize) -> u64 {
        // An `ArrayQueue` slot: a stamp word beside the value.
        let queue_entry = size_of::<(usize, u32)>();
        let per_slot = stride(task_bytes)
            + size_of::<Slot>()
            + 2 * queue_entry
            + size_of::<(u8, Reverse<u64>, u32)>()
            + size_of::<(u8, Reverse<u32>)>()
            + Deadlines::BYTES_PER_SLOT;
        (max_tasks as u64).saturating_mul(per_slot as u64)
    }

    /// `max_tasks` slots of `task_bytes` each, allocated and pre-faulted now.
    pub(crate) fn new(
        lane: &str,
        max_tasks: usize,
        task_bytes: usize,
        budget: Option<Budget>,
        registry: Registry,
    ) -> io::Result<Executor> {
        if max_tasks == 0 || max_tasks > MAX_TASKS || task_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_tasks must be 1..=65536 and task_bytes at least 1",
            ));
        }
        let stride = stride(task_bytes);
        let layout = Layout::from_size_align(stride * max_tasks, TASK_ALIGN)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let storage = unsafe { alloc::alloc_zeroed(layout) };
        if storage.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // SAFETY: just allocated, `layout.size()` bytes, exclusively ours.
        mem::prefault(unsafe { std::slice::from_raw_parts_mut(storage, layout.size()) });
        let doorbell = EventFd::new()?;
        let timer = TimerFd::new()?;
        let free = ArrayQueue::new(max_tasks);
        for i in 0..max_tasks as u32 {
            let _ = free.push(i);
        }
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
            let me = me.as_ptr();
            let slots = (0..max_tasks as u32)
                .map(|index| Slot {
                    state: TaskState::new(),
                    index,
                    shared: me,
                    priority: UnsafeCell::new(0),
                    vtable: UnsafeCell::new(None),
                    joiner: Mutex::new(None),
                })
                .collect();
            Shared {
                lane: lane.to_owned(),
                slots,
                storage,
                layout,
                stride,
                slot_bytes: task_bytes,
                free,
                ready: ArrayQueue::new(max_tasks),
                rung: AtomicBool::new(false),
                doorbell,
                timer,
                timer_state: Mutex::new(TimerState {
                    deadlines: Deadlines::new(max_tasks),
                    armed: u64::MAX,
                }),
                next_deadline: AtomicU64::new(u64::MAX),
                closed: AtomicBool::new(false),
                close_order: Mutex::new(BinaryHeap::with_capacity(max_tasks)),
                counters: Counters::default(),
            }
        });
        if shared
            .slots
            .iter()
            .any(|s| (s as *const Slot as usize) & !ADDR_MASK != 0)
        {
            return Err(io::Error::other(
                "task slots above 2^48: lane wakers cannot tag them with a generation",
            ));
        }
        let turn = Turn {
            shared: shared.clone(),
            heap: BinaryHeap::with_capacity(max_tasks),
            seq: 0,
            streak_since: 0,
            budget,
        };
        let clock = Clock {
            shared: shared.clone(),
        };
        Ok(Executor {
            spawner: Spawner { shared, registry },
            turn: Box::new(turn),
            clock: Box::new(clock),
        })
    }
}

/// The task doorbell's handler: one executor turn per event.
///
/// **Streaks.** A turn polls at most [`POLLS_PER_TURN`] tasks and, if tasks remain runnable,
/// rings its own doorbell and returns; so a task that wakes itself (`yield_now` in a loop, any
/// future that calls its own waker) keeps the lane busy through a chain of short turns, none
/// of them long enough for the overrun watchdog. The turns from the moment the ready set
/// became non-empty until it is empty again are one *streak*: every turn of it backdates its
/// dispatch, as the watchdog sees it, to the streak's start (`Context::backdate_dispatch`), so
/// a streak longer than the lane's `budget_us` is counted in `budget_overruns` like a handler
/// that ran that long. With `on_overrun = "demote"`, a turn that finds its streak over budget
/// does not hand the lane back: it goes on polling in the same dispatch until the ready set is
/// empty (or the executor closes), so the watchdog's demotion holds until the streak ends,
/// exactly as for a runaway handler (the lane's other handles are served by its other threads
/// meanwhile).
struct Turn {
    shared: Arc<Shared>,
    /// The ready set, ordered by (task priority, FIFO sequence). Preallocated to `max_tasks`:
    /// it holds each scheduled task at most once.
    heap: BinaryHeap<(u8, Reverse<u64>, u32)>,
    seq: u64,
    /// When the current streak began (`CLOCK_MONOTONIC` ns), 0 while the ready set is empty.
    streak_since: u64,
    budget: Option<Budget>,
}

impl Turn {
    /// Moves newly woken tasks from the lock-free queue into the heap.
    fn drain(&mut self) {
        while let Some(i) = self.shared.ready.pop() {
            // SAFETY: a scheduled slot was published; its priority is fixed for its life.
            let p = unsafe { *self.shared.slots[i as usize].priority.get() };
            self.seq += 1;
            self.heap.push((p, Reverse(self.seq), i));
        }
    }

    /// Polls (or cancels) the task in slot `index`.
    fn run(&mut self, index: u32) {
        let s = &*self.shared;
        let slot = &s.slots[index as usize];
        let start = slot.state.start();
        if start == Start::Gone {
            return; // cancelled by shutdown while queued; the slot may be free already
        }
        // SAFETY: `start` took the task (RUNNING is ours): it was published, with its vtable,
        // before it was scheduled, and nobody writes the vtable of a live slot.
        let vt = unsafe { (*slot.vtable.get()).expect("a scheduled slot has a vtable") };
        let p = s.storage_of(index);
        let gen = match start {
            Start::Poll(gen) => gen,
            Start::Gone => unreachable!("returned above"),
            Start::Cancel(_) => {
                // SAFETY: RUNNING is ours: the future is initialised and no one else polls.
                let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_future)(p) }));
                s.counters.cancelled.fetch_add(1, Relaxed);
                s.finish(index, 0);
                return;
            }
        };
        // A borrowed waker: it holds no count of its own (clones take one).
        let waker = ManuallyDrop::new(
            // SAFETY: the data is this slot's, with the vtable above.
            unsafe { Waker::from_raw(RawWaker::new(waker_data(slot, gen), &WAKER_VTABLE)) },
        );
        let mut cx = std::task::Context::from_waker(&waker);
        s.counters.polls.fetch_add(1, Relaxed);
        // SAFETY: RUNNING is ours; the future is initialised and pinned in its slot.
        match unsafe { (vt.poll)(p, &mut cx) } {
            Polled::Pending => {
                if slot.state.pending() {
                    let pushed = s.ready.push(index);
                    debug_assert!(pushed.is_ok(), "ready queue overflow");
                }
            }
            Polled::Ready => {
                s.counters.completed.fetch_add(1, Relaxed);
                s.finish(index, state::OUTPUT);
            }
            Polled::Panicked => {
                s.counters.panicked.fetch_add(1, Relaxed);
                s.finish(index, state::PANICKED);
            }
        }
    }
}

impl Turn {
    /// True if the streak is over the lane's budget and the lane demotes overruns: the turn
    /// then keeps the streak in this dispatch (see [`Turn`]).
    fn contain_streak(&self) -> bool {
        self.budget
            .is_some_and(|b| b.demote && sys::now_ns().saturating_sub(self.streak_since) > b.ns)
    }
}

impl EventHandler for Turn {
    fn source(&self) -> BorrowedFd<'_> {
        self.shared.doorbell.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut LaneContext) -> Disposition {
        let _ = self.shared.doorbell.read();
        // The doorbell was read (emptied): a ring from here on reports the handle again.
        ctx.set_drained();
        self.shared.rung.store(false, SeqCst);
        self.shared.counters.turns.fetch_add(1, Relaxed);
        if self.streak_since == 0 {
            self.streak_since = sys::now_ns();
        }
        ctx.backdate_dispatch(self.streak_since);
        loop {
            for _ in 0..POLLS_PER_TURN {
                // Shutdown: poll nothing more (the closer may be waiting for this turn's
                // last poll to return).
                if self.shared.closed.load(SeqCst) {
                    break;
                }
                // Before every poll, so a task woken by the previous one, or whose deadline
                // just passed, competes by priority.
                if self.shared.next_deadline.load(Relaxed) <= sys::now_ns() {
                    self.shared.expire(sys::now_ns());
                }
                self.drain();
                match self.heap.pop() {
                    Some((_, _, i)) => self.run(i),
                    None => break,
                }
            }
            if self.shared.closed.load(SeqCst) {
                // Cancel what the closer left: a task it found mid-poll past its deadline.
                self.heap.clear();
                self.shared.close(0);
                self.streak_since = 0;
                return Disposition::Rearm;
            }
            self.drain();
            if self.heap.is_empty() {
                self.streak_since = 0;
                return Disposition::Rearm;
            }
            if !self.contain_streak() {
                self.shared.ring();
                return Disposition::Rearm;
            }
        }
    }

    fn on_close(&mut self) {
        self.heap.clear();
        self.shared.close(0);
    }
}

/// The lane timer's handler: wakes the tasks whose `lfrt::time` deadline passed.
struct Clock {
    shared: Arc<Shared>,
}

impl EventHandler for Clock {
    fn source(&self) -> BorrowedFd<'_> {
        self.shared.timer.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut LaneContext) -> Disposition {
        let s = &*self.shared;
        let _ = s.timer.read();
        ctx.set_drained();
        s.expire(sys::now_ns());
        Disposition::Rearm
    }
}

/// Yields once: the task is re-queued behind the lane's other runnable tasks of its priority.
///
/// # Examples
/// ```no_run
/// # async fn f() {
/// for _ in 0..1000 {
///     // a long computation, cut into steps
///     lfrt::task::yield_now().await;
/// }
/// # }
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow(false)
}

/// The future of [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

// Not under loom: these drive the real executor, whose state words are loom atomics there.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::handle_set::Token;
    use crate::engine::handler::{Handles, Registry};
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    struct Lane {
        spawner: Spawner,
        turn: Box<dyn EventHandler>,
        ctx: LaneContext,
    }

    fn lane(max_tasks: usize, task_bytes: usize) -> Lane {
        let registry = Registry {
            set: Arc::new(Handles::new(4).unwrap()),
        };
        let ex = Executor::new("test", max_tasks, task_bytes, None, registry.clone()).unwrap();
        Lane {
            spawner: ex.spawner,
            turn: ex.turn,
            ctx: LaneContext::new(64, 0, 0, 0, 0, registry),
        }
    }

    impl Lane {
        /// One executor turn, as a pool thread runs it when the doorbell fires; false if the
        /// doorbell was not rung.
        fn turn(&mut self) -> bool {
            let rung = self.spawner.shared.doorbell.read().unwrap().is_some();
            if rung {
                self.spawner.shared.doorbell.write(1).unwrap();
                let ev = Event {
                    token: Token::from_raw(0),
                    readiness: 0,
                    woke_ns: 0,
                };
                let _ = self.turn.handle(&ev, &mut self.ctx);
            }
            rung
        }
        fn free_slots(&self) -> usize {
            self.spawner.shared.free.len()
        }
    }

    /// Polls `f` once on this thread with a no-op waker.
    fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        let mut cx = std::task::Context::from_waker(Waker::noop());
        Pin::new(f).poll(&mut cx)
    }

    #[test]
    fn a_task_runs_on_a_turn_and_its_handle_gives_the_output() {
        let mut l = lane(4, 256);
        let mut h = l.spawner.spawn(async { 6 * 7 }).unwrap();
        assert_eq!(poll_once(&mut h), Poll::Pending, "not polled before a turn");
        assert!(l.turn());
        assert_eq!(poll_once(&mut h), Poll::Ready(Ok(42)));
        drop(h);
        assert_eq!(l.free_slots(), 4, "the slot is free again");
        let st = l.spawner.stats();
        assert_eq!((st.spawned, st.completed, st.polls), (1, 1, 1));
    }

    /// Outputs of every shape (smaller and larger than the future, over-aligned, owning heap
    /// memory) come back through the handle intact: the handle moves the output out through
    /// the future's own `Cell` type, not by casting the slot's start.
    #[test]
    fn outputs_of_any_layout_come_back_through_the_handle() {
        #[repr(align(64))]
        #[derive(Debug, PartialEq)]
        struct Aligned(u8, [u64; 3]);
        let mut l = lane(4, 512);
        let pad = [7u8; 200]; // a future much larger than its output
        let small = l.spawner.spawn(async move { pad[199] }).unwrap();
        let aligned = l.spawner.spawn(async { Aligned(9, [1, 2, 3]) }).unwrap();
        let owned = l
            .spawner
            .spawn(async { String::from("owned output") })
            .unwrap();
        let wide = l.spawner.spawn(async { [0xabu8; 300] }).unwrap();
        assert!(l.turn());
        assert_eq!(small.wait(), Ok(7));
        assert_eq!(aligned.wait(), Ok(Aligned(9, [1, 2, 3])));
        assert_eq!(owned.wait().as_deref(), Ok("owned output"));
        assert_eq!(wide.wait(), Ok([0xab; 300]));
        assert_eq!(l.free_slots(), 4);
    }

    #[test]
    fn runnable_tasks_are_polled_by_priority_then_fifo() {
        let mut l = lane(8, 256);
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut hs = Vec::new();
        for (prio, name) in [
            (1, "low-1"),
            (9, "high-1"),
            (5, "mid"),
            (9, "high-2"),
            (1, "low-2"),
        ] {
            let o = order.clone();
            hs.push(
                l.spawner
                    .spawn_with_priority(prio, async move { o.lock().unwrap().push(name) })
                    .unwrap(),
            );
        }
        assert!(l.turn());
        assert_eq!(
            *order.lock().unwrap(),
            ["high-1", "high-2", "mid", "low-1", "low-2"]
        );
    }

    #[test]
    fn a_turn_polls_at_most_polls_per_turn_and_rings_again() {
        let n = POLLS_PER_TURN + 3;
        let mut l = lane(n, 256);
        let hs: Vec<_> = (0..n).map(|_| l.spawner.spawn(async {}).unwrap()).collect();
        assert!(l.turn());
        assert_eq!(l.spawner.stats().polls, POLLS_PER_TURN as u64);
        assert!(l.turn(), "tasks remained: the turn rang its doorbell again");
        assert_eq!(l.spawner.stats().polls, n as u64);
        assert!(!l.turn(), "nothing left: no wake-up pending");
        drop(hs);
    }

    #[test]
    fn a_future_larger_than_a_slot_is_refused_with_both_sizes() {
        let l = lane(2, 256);
        let big = [0u8; 1024];
        let e = l.spawner.spawn(async move { big.len() }).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                SpawnError::TooLarge {
                    slot_bytes: 256,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            msg.contains("256 bytes") && msg.contains("task_bytes"),
            "{msg}"
        );
        assert_eq!(l.spawner.stats().refused_too_large, 1);
        assert_eq!(l.free_slots(), 2);
    }

    #[test]
    fn a_full_table_is_a_counted_refusal_that_hands_the_future_back() {
        let l = lane(1, 256);
        let _first = l.spawner.spawn(async { 1 }).unwrap();
        let e = l.spawner.spawn(async { 2 }).unwrap_err();
        assert!(matches!(e, SpawnError::Full(_)));
        let mut back = Box::pin(e.into_inner());
        let mut cx = std::task::Context::from_waker(Waker::noop());
        assert_eq!(
            back.as_mut().poll(&mut cx),
            Poll::Ready(2),
            "the caller still has it"
        );
        assert_eq!(l.spawner.stats().refused_full, 1);
    }

    #[test]
    fn a_panicking_task_is_counted_its_slot_freed_and_others_run() {
        let mut l = lane(2, 256);
        let mut bad = l
            .spawner
            .spawn(async {
                if lfrt_true() {
                    panic!("task panics on purpose");
                }
            })
            .unwrap();
        let mut good = l.spawner.spawn(async { "fine" }).unwrap();
        assert!(l.turn());
        assert_eq!(poll_once(&mut bad), Poll::Ready(Err(JoinError::Panicked)));
        assert_eq!(poll_once(&mut good), Poll::Ready(Ok("fine")));
        drop((bad, good));
        assert_eq!(l.spawner.stats().panicked, 1);
        assert_eq!(l.free_slots(), 2);
        let mut again = l.spawner.spawn(async { 3 }).unwrap();
        assert!(l.turn());
        assert_eq!(poll_once(&mut again), Poll::Ready(Ok(3)));
    }

    fn lfrt_true() -> bool {
        std::hint::black_box(true)
    }

    /// A future that keeps a clone of its waker where the test can reach it, and finishes
    /// when `done` is set.
    struct Parked {
        waker: Arc<StdMutex<Option<Waker>>>,
        done: Arc<AtomicBool>,
        polls: Arc<AtomicU64>,
    }
    impl Future for Parked {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, SeqCst);
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            if self.done.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    /// A [`Parked`] future and the test's ends of it: its waker, its `done` flag, its polls.
    type ParkedParts = (
        Parked,
        Arc<StdMutex<Option<Waker>>>,
        Arc<AtomicBool>,
        Arc<AtomicU64>,
    );

    fn parked() -> ParkedParts {
        let w = Arc::new(StdMutex::new(None));
        let d = Arc::new(AtomicBool::new(false));
        let p = Arc::new(AtomicU64::new(0));
        (
            Parked {
                waker: w.clone(),
                done: d.clone(),
                polls: p.clone(),
            },
            w,
            d,
            p,
        )
    }

    #[test]
    fn a_wake_from_another_thread_schedules_the_task_on_its_lane_only() {
        let mut l = lane(2, 256);
        let (f, waker, done, polls) = parked();
        let mut h = l.spawner.spawn(f).unwrap();
        assert!(l.turn());
        assert_eq!(polls.load(SeqCst), 1);
        assert!(!l.turn(), "pending and not woken: no turn");
        done.store(true, SeqCst);
        let w = waker.lock().unwrap().take().unwrap();
        let me = std::thread::current().id();
        std::thread::spawn(move || {
            assert_ne!(std::thread::current().id(), me);
            w.wake(); // schedules only
        })
        .join()
        .unwrap();
        assert_eq!(polls.load(SeqCst), 1, "the waker's thread did not poll");
        assert!(l.turn());
        assert_eq!(polls.load(SeqCst), 2);
        assert_eq!(poll_once(&mut h), Poll::Ready(Ok(())));
    }

    #[test]
    fn many_wakes_before_a_poll_make_one_poll() {
        let mut l = lane(1, 256);
        let (f, waker, _done, polls) = parked();
        let _h = l.spawner.spawn(f).unwrap();
        assert!(l.turn());
        let w = waker.lock().unwrap().clone().unwrap();
        for _ in 0..5 {
            w.wake_by_ref();
        }
        assert!(l.turn());
        assert_eq!(polls.load(SeqCst), 2, "five wakes, one poll");
        assert!(!l.turn());
    }

    #[test]
    fn a_wake_during_the_poll_polls_once_more() {
        let mut l = lane(1, 256);
        let n = Arc::new(AtomicU64::new(0));
        let n2 = n.clone();
        let _h = l
            .spawner
            .spawn(std::future::poll_fn(move |cx| {
                if n2.fetch_add(1, SeqCst) == 0 {
                    cx.waker().wake_by_ref();
                    cx.waker().wake_by_ref(); // coalesces with the first
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            }))
            .unwrap();
        assert!(l.turn());
        assert_eq!(n.load(SeqCst), 2, "re-polled in the same turn, once");
    }

    #[test]
    fn a_stale_waker_does_not_wake_the_slots_next_task() {
        let mut l = lane(1, 256);
        let (f, waker, done, _) = parked();
        done.store(true, SeqCst);
        let h = l.spawner.spawn(f).unwrap();
        assert!(l.turn());
        drop(h); // complete and released: the slot is free, generation + 1
        let stale = waker.lock().unwrap().take().unwrap();
        let (g, _, _, polls) = parked();
        let _h2 = l.spawner.spawn(g).unwrap();
        assert!(l.turn());
        assert_eq!(polls.load(SeqCst), 1);
        stale.wake();
        assert!(!l.turn(), "the stale waker scheduled nothing");
        assert_eq!(polls.load(SeqCst), 1);
    }

    #[test]
    fn cancel_drops_the_future_on_the_lane_and_the_handle_says_cancelled() {
        let mut l = lane(1, 256);
        let (f, _waker, _done, _) = parked();
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = DropFlag(dropped.clone());
        let mut h = l
            .spawner
            .spawn(async move {
                let _g = guard;
                f.await
            })
            .unwrap();
        assert!(l.turn());
        h.cancel();
        assert!(
            !dropped.load(SeqCst),
            "dropped on the lane, not by cancel's caller"
        );
        assert!(l.turn());
        assert!(dropped.load(SeqCst));
        assert_eq!(poll_once(&mut h), Poll::Ready(Err(JoinError::Cancelled)));
        assert_eq!(l.spawner.stats().cancelled, 1);
    }

    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }

    struct DropLog(&'static str, Arc<StdMutex<Vec<&'static str>>>);
    impl Drop for DropLog {
        fn drop(&mut self) {
            self.1.lock().unwrap().push(self.0);
        }
    }

    #[test]
    fn close_cancels_unfinished_tasks_highest_priority_first() {
        let mut l = lane(8, 256);
        let log = Arc::new(StdMutex::new(Vec::new()));
        let mut hs = Vec::new();
        for (p, name) in [(1, "low"), (50, "high"), (10, "mid"), (50, "high-2")] {
            let d = DropLog(name, log.clone());
            hs.push(
                l.spawner
                    .spawn_with_priority(p, async move {
                        let _d = d;
                        std::future::pending::<()>().await
                    })
                    .unwrap(),
            );
        }
        assert!(l.turn());
        l.turn.on_close();
        assert_eq!(*log.lock().unwrap(), ["high", "high-2", "mid", "low"]);
        for h in &mut hs {
            assert_eq!(poll_once(h), Poll::Ready(Err(JoinError::Cancelled)));
        }
        assert!(matches!(
            l.spawner.spawn(async {}),
            Err(SpawnError::Closed(_))
        ));
    }

    /// Shutdown from another thread between two turns: the tasks a turn left queued in its
    /// heap are cancelled there, highest first, and the next turn polls nothing.
    #[test]
    fn close_between_turns_cancels_queued_tasks_and_stops_polling() {
        let n = POLLS_PER_TURN + 4;
        let mut l = lane(n, 256);
        let log = Arc::new(StdMutex::new(Vec::new()));
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let d = DropLog(if i == n - 1 { "last" } else { "other" }, log.clone());
                l.spawner
                    .spawn_with_priority(if i == n - 1 { 1 } else { 0 }, async move {
                        let _d = d;
                        yield_now().await; // stays runnable: the turn rings again
                        std::future::pending::<()>().await
                    })
                    .unwrap()
            })
            .collect();
        assert!(l.turn());
        let polls = l.spawner.stats().polls;
        assert_eq!(polls, POLLS_PER_TURN as u64);
        let shared = l.spawner.shared.clone();
        let left = std::thread::spawn(move || shared.close(0)).join().unwrap();
        assert_eq!(left, 0);
        assert_eq!(log.lock().unwrap().len(), n);
        assert_eq!(
            log.lock().unwrap()[0],
            "last",
            "highest task priority first"
        );
        let _ = l.turn();
        assert_eq!(l.spawner.stats().polls, polls, "no poll after close");
        for mut h in hs {
            assert_eq!(poll_once(&mut h), Poll::Ready(Err(JoinError::Cancelled)));
        }
        assert_eq!(l.free_slots(), n);
    }

    #[test]
    fn a_detached_task_frees_its_slot_and_drops_its_output_when_done() {
        let mut l = lane(1, 256);
        let dropped = Arc::new(AtomicBool::new(false));
        let out = DropFlag(dropped.clone());
        drop(l.spawner.spawn(async move { out }).unwrap());
        assert!(l.turn());
        assert!(dropped.load(SeqCst), "the unclaimed output was dropped");
        assert_eq!(l.free_slots(), 1);
    }

    /// A task whose `lfrt::time` deadline passed is woken by the next turn itself, before
    /// that turn's first poll, and so is polled ahead of lower tasks already queued (the timer
    /// handler, not run here, would only come after the turn).
    #[test]
    fn a_turn_wakes_expired_deadlines_before_it_polls() {
        let mut l = lane(8, 256);
        let order = Arc::new(StdMutex::new(Vec::new()));
        let o = order.clone();
        let deadline = sys::now_ns() + 1_000_000;
        let _timed = l
            .spawner
            .spawn_with_priority(5, async move {
                crate::task::time::sleep_until(deadline).await;
                o.lock().unwrap().push("timed");
            })
            .unwrap();
        assert!(l.turn(), "registers the deadline");
        std::thread::sleep(Duration::from_millis(2));
        let lows: Vec<_> = (0..3)
            .map(|_| {
                let o = order.clone();
                l.spawner
                    .spawn_with_priority(0, async move { o.lock().unwrap().push("low") })
                    .unwrap()
            })
            .collect();
        assert!(l.turn());
        assert_eq!(*order.lock().unwrap(), ["timed", "low", "low", "low"]);
        drop(lows);
    }

    /// A deadline left armed by a cancelled task does not wake the slot's next task; a due
    /// deadline of a live task wakes it. (The deadline heap names tasks by generation.)
    #[test]
    fn a_stale_deadline_does_not_wake_the_slots_next_task() {
        let mut l = lane(1, 256);
        let deadline = sys::now_ns() + 1_000_000;
        let h = l
            .spawner
            .spawn(async move { crate::task::time::sleep_until(deadline).await })
            .unwrap();
        assert!(l.turn(), "registers the deadline");
        h.cancel();
        assert!(l.turn(), "cancelled on the lane");
        drop(h);
        assert_eq!(l.free_slots(), 1);
        let (f, _waker, _done, polls) = parked();
        let _next = l.spawner.spawn(f).unwrap();
        assert!(l.turn());
        assert_eq!(polls.load(SeqCst), 1);
        std::thread::sleep(Duration::from_millis(2));
        l.spawner.shared.expire(sys::now_ns());
        assert!(
            !l.turn(),
            "the stale deadline scheduled the slot's next task"
        );
        assert_eq!(polls.load(SeqCst), 1);
        // A live task's own due deadline does wake it.
        let mut l = lane(1, 256);
        let late = sys::now_ns() + 1_000_000;
        let mut timed = l
            .spawner
            .spawn(async move { crate::task::time::sleep_until(late).await })
            .unwrap();
        assert!(l.turn());
        std::thread::sleep(Duration::from_millis(2));
        l.spawner.shared.expire(sys::now_ns());
        assert!(l.turn(), "the due deadline scheduled its task");
        assert_eq!(poll_once(&mut timed), Poll::Ready(Ok(())));
    }

    #[test]
    fn a_join_handle_wakes_its_awaiting_task() {
        let mut l = lane(2, 256);
        let (f, waker, done, _) = parked();
        let inner = l
            .spawner
            .spawn(async move {
                f.await;
                5
            })
            .unwrap();
        let outer = l
            .spawner
            .spawn(async move { inner.await.unwrap() + 1 })
            .unwrap();
        assert!(l.turn());
        done.store(true, SeqCst);
        waker.lock().unwrap().take().unwrap().wake();
        assert!(l.turn()); // inner completes and wakes outer, polled in the same turn
        assert_eq!(outer.wait(), Ok(6));
    }
}
