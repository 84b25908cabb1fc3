//! A lane's task table: the slots and their storage, the ready set and its doorbell, the timer
//! entries, and the wakers that name a slot (below). The pieces around it: the raw storage
//! (`raw.rs`), the relay of foreign wakes (`relay.rs`), the turns (`turn.rs`), spawning
//! (`spawn.rs`), awaiting (`join.rs`), the timer entries' heap (`timers.rs`), and building a
//! lane's executor (`lane.rs`). The modules form a stack, each using only those below it:
//! `raw`, `state`, `timers`, `relay` → `executor` → `turn`, `join` → `spawn` → `lane`.

use crate::engine::handler::{AfterDispatch, Context as LaneContext};
pub use crate::observe::metrics::TaskStats;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use crate::sync::doorbell::Doorbell;
use crate::sync::free::FreeSlots;
use crate::sync::queue::Queue;
use crate::sync::Mutex;
use crate::sys::{self, fd::TimerFd};
use crate::task::raw::{Storage, Vtable};
use crate::task::relay;
use crate::task::state::{self, TaskState};
use crate::task::timers::{TimerId, Timers};
use std::cell::Cell;
use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{RawWaker, RawWakerVTable, Waker};

/// Largest `max_tasks` (slot indices and the ready set are sized by it).
pub const MAX_TASKS: usize = 1 << 16;

/// Due timer entries `expire` takes out per look under the timer lock (their wakers are woken
/// after it is released).
const EXPIRE_BATCH: usize = 16;

/// One task slot: the state word, what the spawner wrote and the join waker. The future
/// itself lives in [`Shared::storage`] at the slot's index.
pub(super) struct Slot {
    pub(super) state: TaskState,
    pub(super) index: u32,
    /// The executor this slot belongs to, for wakers (which hold one strong count of it).
    pub(super) shared: *const Shared,
    /// Written by the spawner before `TaskState::spawn` publishes the task; read only by
    /// threads that observed the publication (the poller, the handle, the drop at close).
    pub(super) priority: UnsafeCell<u8>,
    pub(super) vtable: UnsafeCell<Option<&'static Vtable>>,
    /// The waker of the task (or thread) awaiting the [`JoinHandle`](crate::task::JoinHandle).
    pub(super) joiner: Mutex<Option<Waker>>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) spawned: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) panicked: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) refused_full: AtomicU64,
    pub(super) refused_too_large: AtomicU64,
    pub(super) polls: AtomicU64,
    pub(super) turns: AtomicU64,
    pub(super) timers_full: AtomicU64,
}

/// The lane's executor state, shared by the spawners, the handles, the wakers and the two
/// handlers registered with the lane.
pub(crate) struct Shared {
    pub(super) lane: String,
    pub(super) slots: Box<[Slot]>,
    pub(super) storage: Storage,
    /// Free slot indices (a bitmap: a slot given back is free at once, see `sync::free`).
    pub(super) free: FreeSlots,
    /// Woken tasks not yet taken by a turn (each at most once: `SCHEDULED`).
    pub(super) ready: Queue<u32>,
    /// Rung when the ready set gains a task; the turn handler waits on it.
    pub(super) doorbell: Doorbell,
    pub(super) timer: TimerFd,
    /// The timer entries tasks wait on and the instant the timerfd is armed for; the lock
    /// orders `timerfd_settime` calls.
    pub(super) timer_state: Mutex<TimerState>,
    /// A copy of the armed instant readable without the lock: a turn compares the clock with
    /// it before every poll and wakes the tasks whose deadline passed itself (see `expire`).
    pub(super) next_deadline: AtomicU64,
    /// Set once by [`close`](Shared::close): spawns are refused and turns poll no more.
    pub(super) closed: AtomicBool,
    /// The cancellation order at close, preallocated to `max_tasks`; its lock also makes one
    /// closer at a time (the shutdown thread, or the lane's turn finishing what it left).
    pub(super) close_order: Mutex<BinaryHeap<(u8, Reverse<u32>)>>,
    pub(super) counters: Counters,
}

/// The lane timer's state, under [`Shared::timer_state`].
pub(super) struct TimerState {
    /// The timer entries futures wait on, earliest first.
    pub(super) timers: Timers,
    /// The instant the timerfd is armed for (`u64::MAX`: disarmed).
    pub(super) armed: u64,
}

// SAFETY: the raw storage is reached only through the task state protocol (state.rs): a
// future is touched by the one thread that set `RUNNING` (or that owns a free or completed
// slot), the `UnsafeCell`s are written before the release that publishes a task and read
// after the acquire that observed it. Futures and outputs are `Send`, checked at spawn.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// This executor's `Arc`: every `Shared` lives in the one `Executor::new` made.
    pub(super) fn arc(&self) -> Arc<Shared> {
        let p = self as *const Shared;
        // SAFETY: `p` is the data of the `Arc` built by `Executor::new` (no `Shared` is made
        // anywhere else), and the caller's reference keeps its count at 1 or more while the
        // count is taken.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }

    /// Rings the doorbell unless a wake-up is pending already.
    pub(super) fn ring(&self) {
        self.doorbell.ring();
    }

    /// Puts a task whose `SCHEDULED` bit the caller just set into the ready set.
    pub(super) fn push_ready(&self, index: u32) {
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
    pub(super) fn finish(&self, index: u32, outcome: u32) {
        let slot = &self.slots[index as usize];
        if slot.state.complete(outcome) {
            self.release(index);
        } else {
            let joiner = slot.joiner.lock().take();
            if let Some(w) = joiner {
                // A tokio task or a thread awaiting the handle: relayed from a pool thread.
                wake(w);
            }
        }
    }

    /// Frees a complete slot nobody refers to any more: drops a stored output, forgets the
    /// join waker and the deadline, bumps the generation, returns the index to the free list.
    pub(super) fn release(&self, index: u32) {
        let slot = &self.slots[index as usize];
        if slot.state.load() & state::OUTPUT != 0 {
            // SAFETY: the output is stored and the slot is ours (complete, no handle).
            let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
            let p = self.storage.at(index);
            // SAFETY: the output is initialised and not taken.
            let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_output)(p) }));
        }
        drop(slot.joiner.lock().take());
        slot.state.free();
        self.free.give(index);
    }

    /// Drops the future of a task taken unpolled (cancel at close), then completes it: its
    /// handle sees the end only once the future is gone.
    pub(super) fn drop_unpolled(&self, index: u32) {
        let slot = &self.slots[index as usize];
        // SAFETY: the task was published (we read its state), so its vtable was written.
        let vt = unsafe { (*slot.vtable.get()).expect("a live slot has a vtable") };
        let p = self.storage.at(index);
        // SAFETY: take_unpolled won the slot (RUNNING is ours): the future is initialised and
        // no one else touches it.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_future)(p) }));
        self.counters.cancelled.fetch_add(1, Relaxed);
        self.finish(index, 0);
    }

    /// Arms `timer` (a future's entry; `None` before its first) for `at_ns`, to wake `waker`,
    /// and the timerfd if it is the earliest. O(log n) in the entries armed. `false` if every
    /// entry of the lane is armed (counted in `timers_full`): the caller retries later.
    pub(crate) fn arm_timer(&self, timer: &mut Option<TimerId>, at_ns: u64, waker: &Waker) -> bool {
        let at_ns = at_ns.max(1);
        let mut t = self.timer_state.lock();
        match t.timers.arm(*timer, at_ns, waker) {
            Some(id) => *timer = Some(id),
            None => {
                drop(t);
                self.counters.timers_full.fetch_add(1, Relaxed);
                return false;
            }
        }
        if at_ns < t.armed {
            self.arm(&mut t, at_ns);
        }
        true
    }

    /// Frees a future's timer entry if it is still armed (the future is dropped or done).
    pub(crate) fn cancel_timer(&self, timer: TimerId) {
        let w = self.timer_state.lock().timers.cancel(timer);
        drop(w); // outside the lock: a waker's drop may run foreign code
    }

    /// Arms the timerfd for `at_ns` (under the timer lock).
    fn arm(&self, t: &mut TimerState, at_ns: u64) {
        t.armed = at_ns;
        self.next_deadline.store(at_ns, SeqCst);
        let _ = self.timer.set_abs(at_ns, 0);
    }

    /// Wakes every timer entry due at or before `now` and re-arms the timerfd for the next one.
    /// Run by the timer's handler when the timerfd fires, and by a turn before each poll once
    /// the earliest entry is due, so that a timed task competes by priority at every poll
    /// boundary instead of waiting for the turn to end (up to `POLLS_PER_TURN` polls). Both
    /// may run at once; the timer lock orders them. The wakers are woken after the lock is
    /// released, [`EXPIRE_BATCH`] at a time. O(k log n) for k due entries among n armed.
    pub(super) fn expire(&self, now: u64) {
        self.expire_from(now, None);
    }

    /// [`expire`](Self::expire) from the timer's handler, which may leave the first due task
    /// of this lane to the end of its dispatch (the same-lane fast path, [`AfterDispatch`]):
    /// `fast` is the lane's executor and the handler's context.
    pub(super) fn expire_from(&self, now: u64, mut fast: Option<(&Arc<Shared>, &mut LaneContext)>) {
        loop {
            let mut due: [Option<Waker>; EXPIRE_BATCH] = Default::default();
            let mut n = 0;
            let more = {
                let mut t = self.timer_state.lock();
                while n < EXPIRE_BATCH {
                    match t.timers.pop_due(now) {
                        Some(w) => {
                            due[n] = Some(w);
                            n += 1;
                        }
                        None => break,
                    }
                }
                match t.timers.earliest() {
                    Some(next) => self.arm(&mut t, next),
                    None => {
                        // Nothing armed: the timerfd fired already (or fires once more,
                        // harmlessly).
                        t.armed = u64::MAX;
                        self.next_deadline.store(u64::MAX, SeqCst);
                    }
                }
                n == EXPIRE_BATCH
            };
            for w in due.iter_mut().take(n) {
                if let Some(w) = w.take() {
                    if let Some((me, ctx)) = fast.as_mut() {
                        let here = lane_task(&w)
                            .filter(|(ex, _, _)| std::ptr::eq(*ex, Arc::as_ptr(me)))
                            .map(|(_, index, gen)| fast_path_arg(index, gen));
                        if let Some(arg) = here {
                            let work: Arc<dyn AfterDispatch> = Arc::clone(me) as _;
                            if ctx.run_after(work, arg).is_ok() {
                                fast = None; // one per dispatch
                                continue; // `w` (a count of the lane) is dropped here
                            }
                        }
                    }
                    // Directly, wrapped or not: an entry is armed only inside a lane task's
                    // poll (`LaneTimer::poll_until`), so its waker is the task's own or a
                    // wrapper a combinator inside that task made (`FuturesUnordered`'s is a
                    // lock-free push), never another runtime's. Relaying it would make a lane
                    // task's wake-up wait for the time-shared relay thread.
                    w.wake();
                }
            }
            if !more {
                return;
            }
        }
    }

    /// Cancels every unfinished task, highest task priority first (ties: lower slot first),
    /// and from now on refuses spawns and stops the lane's turns from polling. Callable from
    /// any thread at any time, also while a turn runs: a task is cancelled only when no poll
    /// of it runs (one CAS against the poller's, `state.rs`). A task found mid-poll is waited
    /// for until `until_ns` (`CLOCK_MONOTONIC`), before any lower task is cancelled, so the
    /// order holds; one still being polled then is left to its turn, which cancels it when
    /// the poll returns (see [`Turn`](crate::task::turn::Turn)). Returns how many tasks were left that way.
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

    pub(super) fn stats(&self) -> TaskStats {
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
            timers_full: c.timers_full.load(Relaxed),
        }
    }
}

/// The argument of [`AfterDispatch::run`] for the task in slot `index`, generation `gen`.
pub(super) fn fast_path_arg(index: u32, gen: u16) -> u64 {
    (u64::from(index) << 16) | u64::from(gen)
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
            let p = self.storage.at(i);
            if s & state::COMPLETE == 0 {
                // SAFETY: unfinished: the future is initialised and nobody polls it.
                let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_future)(p) }));
            } else if s & state::OUTPUT != 0 {
                // SAFETY: the output is initialised and was not taken.
                let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (vt.drop_output)(p) }));
            }
        }
        // The slab itself is freed by `Storage`'s drop, after this.
    }
}

/// The lane's overrun settings, as its executor needs them (`budget_us`, `on_overrun`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// The lane's `budget_us`, in ns.
    pub(crate) ns: u64,
    /// `on_overrun = "demote"`: a streak over budget is kept in one dispatch, so the demotion
    /// lasts until the streak ends (see [`Turn`](crate::task::turn::Turn)).
    pub(crate) demote: bool,
}

// ---- Wakers and the current task ------------------------------------------------------
//
// A lane task's waker, the task a pool thread is polling now, and where a wake goes.
//
// **The waker** is a tagged pointer, not an allocation: the address of the task's slot with
// the slot's generation in the high 16 bits (`slot address | generation << 48`), and one strong
// count of the executor, so that its slots outlive every waker. Waking schedules the task of
// that slot *if* its generation still matches (`state.rs`: a stale waker of a finished task
// wakes nothing), with one compare-and-swap, at most one push and at most one `write(2)`;
// it never polls. Slots are checked at construction to live below 2⁴⁸ (`Executor::new`), and
// `waker_data` asserts it in every build, so the tag can never clobber an address bit.
//
// **The current task**: while a pool thread polls a task, [`current_task`] names it (as
// tokio's `CURRENT` context does). A future that must wait on its lane's timer (`lfrt::task::time`,
// a retry) finds the lane there, not through the waker it was given, which a combinator
// (`FuturesUnordered`, a `select` over a task set) may have wrapped; the timer then wakes the
// waker it was given, wrapped or not (`timers.rs`).
//
// **Where a wake goes** ([`wake`]): a lane task's waker is woken directly; any other waker
// through the relay when the caller is a pool thread (`relay.rs`), so that a lane thread never
// takes another runtime's lock.

const GEN_SHIFT_PTR: u32 = 48;
pub(super) const ADDR_MASK: usize = (1 << GEN_SHIFT_PTR) - 1;

pub(super) fn waker_data(slot: &Slot, gen: u16) -> *const () {
    let addr = slot as *const Slot as usize;
    // Checked for every slot when the executor was built; asserted here in every build, so a
    // tag can never clobber an address bit.
    assert_eq!(addr & !ADDR_MASK, 0, "a task slot above 2^48");
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

pub(super) static WAKER_VTABLE: RawWakerVTable =
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

/// A borrowed waker of the task in `slot` (generation `gen`), for its poll: it holds no
/// strong count of its own (clones take one), so the caller must not drop it as a `Waker`.
pub(super) fn borrowed(slot: &Slot, gen: u16) -> std::mem::ManuallyDrop<Waker> {
    std::mem::ManuallyDrop::new(
        // SAFETY: the data is this slot's, with the lane waker vtable.
        unsafe { Waker::from_raw(RawWaker::new(waker_data(slot, gen), &WAKER_VTABLE)) },
    )
}

/// Wakes `w`: a lane task's waker directly; any other waker through the relay on a pool thread
/// (module docs), directly elsewhere.
pub(crate) fn wake(w: Waker) {
    if w.vtable() == &WAKER_VTABLE {
        w.wake();
    } else {
        relay::wake_foreign(w);
    }
}

thread_local! {
    /// The task this thread is polling: its executor, slot and generation (null: none).
    static CURRENT: Cell<(*const Shared, u32, u16)> = const { Cell::new((std::ptr::null(), 0, 0)) };
}

/// Names the task a turn is about to poll until the guard drops (the poll's end).
pub(super) fn polling(shared: &Shared, index: u32, gen: u16) -> Polling {
    Polling(CURRENT.with(|c| c.replace((shared as *const Shared, index, gen))))
}

/// Restores the thread's previous current task (none, outside nested turns in tests).
pub(super) struct Polling((*const Shared, u32, u16));

impl Drop for Polling {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// The lane task this thread is polling: its executor, slot index and generation; `None`
/// outside a poll of a lane task (a tokio task, a plain thread, a handler).
pub(crate) fn current_task<'a>() -> Option<(&'a Shared, u32, u16)> {
    let (shared, index, gen) = CURRENT.with(Cell::get);
    // SAFETY: set by `polling` for the duration of a poll, during which the turn holds a
    // strong count of the executor; the borrow does not outlive the future's poll that asks.
    (!shared.is_null()).then(|| (unsafe { &*shared }, index, gen))
}
