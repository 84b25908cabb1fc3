//! A lane's task turns: the doorbell's handler, which polls the lane's runnable tasks by
//! priority, and the timer's handler, which wakes the tasks whose deadline passed.

use crate::engine::handler::{
    AfterDispatch, Context as LaneContext, Disposition, Event, EventHandler,
};
use crate::sync::atomic::Ordering::*;
use crate::sys;
use crate::task::executor::{self, Budget, Shared};
use crate::task::raw::Polled;
use crate::task::state::{self, Start};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::os::fd::{AsFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

/// The most tasks one executor turn polls before it hands the lane back (see the module docs:
/// bounded work per turn).
pub const POLLS_PER_TURN: usize = 16;

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
pub(super) struct Turn {
    pub(super) shared: Arc<Shared>,
    /// The ready set, ordered by (task priority, FIFO sequence). Preallocated to `max_tasks`:
    /// it holds each scheduled task at most once.
    pub(super) heap: BinaryHeap<(u8, Reverse<u64>, u32)>,
    pub(super) seq: u64,
    /// When the current streak began (`CLOCK_MONOTONIC` ns), 0 while the ready set is empty.
    pub(super) streak_since: u64,
    pub(super) budget: Option<Budget>,
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
        run_task(&self.shared, index, true);
    }
}

/// Polls (or cancels) the task in slot `index`, which the caller scheduled (its `SCHEDULED`
/// bit is set and nobody else will take it): a turn, for a task it took from the ready set, or
/// the same-lane fast path (`Shared::run`, `AfterDispatch`). A task woken during its poll is
/// queued again; `in_turn`: the caller is a turn, which drains the ready set before it returns,
/// so the doorbell is not rung for it.
pub(super) fn run_task(s: &Shared, index: u32, in_turn: bool) {
    let slot = &s.slots[index as usize];
    let start = slot.state.start();
    if start == Start::Gone {
        return; // cancelled by shutdown while queued; the slot may be free already
    }
    // SAFETY: `start` took the task (RUNNING is ours): it was published, with its vtable,
    // before it was scheduled, and nobody writes the vtable of a live slot.
    let vt = unsafe { (*slot.vtable.get()).expect("a scheduled slot has a vtable") };
    let p = s.storage.at(index);
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
    let waker = executor::borrowed(slot, gen);
    let mut cx = std::task::Context::from_waker(&waker);
    s.counters.polls.fetch_add(1, Relaxed);
    // The task is the thread's current one for the poll (`executor::current_task`).
    let current = executor::polling(s, index, gen);
    // SAFETY: RUNNING is ours; the future is initialised and pinned in its slot.
    let polled = unsafe { (vt.poll)(p, &mut cx) };
    drop(current);
    match polled {
        Polled::Pending => {
            if slot.state.pending() {
                if in_turn {
                    let pushed = s.ready.push(index);
                    debug_assert!(pushed.is_ok(), "ready queue overflow");
                } else {
                    s.push_ready(index);
                }
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
        self.shared.doorbell.answer();
        // The doorbell was read (emptied): a ring from here on reports the handle again.
        ctx.set_drained();
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

/// The same-lane fast path (issue 28): a task woken by the handler of one of its lane's
/// sockets (`net.rs`) or by its lane's timer (`turn.rs`, `Clock`) is polled at the end of that
/// dispatch, on the thread that ran the
/// handler, instead of going through the lane's doorbell, a second `epoll_wait` and a turn
/// (tokio's LIFO slot is the model). One task per dispatch, so the lane's handlers are not
/// starved; it is polled ahead of the lane's other runnable tasks, once (a task that wakes
/// itself in that poll goes to the ready set, by priority, as always). `arg`: the slot index
/// and the waker's generation ([`fast_path_arg`](crate::task::executor::fast_path_arg)).
impl AfterDispatch for Shared {
    fn run(&self, arg: u64) {
        let (index, gen) = ((arg >> 16) as u32, arg as u16);
        if self.closed.load(SeqCst) {
            self.wake(index, gen); // the turn cancels it
        } else if self.slots[index as usize].state.wake(gen) {
            // Scheduled by us, and in no queue: nobody else takes it.
            run_task(self, index, false);
        }
    }
}

/// The lane timer's handler: wakes the tasks whose `lfrt::task::time` deadline passed.
pub(super) struct Clock {
    pub(super) shared: Arc<Shared>,
}

impl EventHandler for Clock {
    fn source(&self) -> BorrowedFd<'_> {
        self.shared.timer.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut LaneContext) -> Disposition {
        let s = &*self.shared;
        let _ = s.timer.read();
        ctx.set_drained();
        s.expire_from(sys::now_ns(), Some((&self.shared, ctx)));
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
