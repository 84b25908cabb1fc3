//! The task layer's unit tests, through its internals: the executor, its turns and wakers,
//! on a lane's handlers without a pool.

use crate::engine::handle_set::Token;
use crate::engine::handler::{Context as LaneContext, Event, EventHandler};
use crate::engine::handler::{Handles, Registry};
use crate::sys;
use crate::task::lane::Executor;
use crate::task::spawn::Spawner;
use crate::task::{yield_now, JoinError, SpawnError, POLLS_PER_TURN};
use std::future::Future;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::task::{Poll, Waker};
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
        let fd = self
            .spawner
            .shared
            .doorbell
            .as_fd()
            .try_clone_to_owned()
            .unwrap();
        let bell = crate::sys::fd::EventFd::from_owned(fd);
        let rung = bell.read().unwrap().is_some();
        if rung {
            bell.write(1).unwrap();
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

/// A task whose `lfrt::task::time` deadline passed is woken by the next turn itself, before
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

/// A waker around another, as a combinator (`FuturesUnordered`, a `select` over a task set)
/// gives the futures it polls: it counts its wakes and passes them on.
struct Wrapped {
    inner: Waker,
    wakes: AtomicU64,
}

impl std::task::Wake for Wrapped {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        self.inner.wake_by_ref();
    }
}

/// Polls `inner` with a wrapped waker, only when the wrapper was woken (as `FuturesUnordered`
/// polls only the futures woken through their own waker) or on the first poll.
struct Wrapper<F> {
    inner: Pin<Box<F>>,
    wrapper: Option<Arc<Wrapped>>,
    seen: u64,
    /// Polls of `inner`.
    polls: Arc<AtomicU64>,
}

impl<F: Future> Future for Wrapper<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let me = &mut *self;
        let w = me
            .wrapper
            .get_or_insert_with(|| {
                Arc::new(Wrapped {
                    inner: cx.waker().clone(),
                    wakes: AtomicU64::new(0),
                })
            })
            .clone();
        let woken = w.wakes.load(SeqCst);
        if me.polls.load(SeqCst) > 0 && woken == me.seen {
            return Poll::Pending; // not woken through its own waker: not polled
        }
        me.seen = woken;
        me.polls.fetch_add(1, SeqCst);
        let waker = Waker::from(w);
        me.inner
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
    }
}

fn wrapped<F: Future>(f: F) -> (Wrapper<F>, Arc<AtomicU64>) {
    let polls = Arc::new(AtomicU64::new(0));
    (
        Wrapper {
            inner: Box::pin(f),
            wrapper: None,
            seen: 0,
            polls: polls.clone(),
        },
        polls,
    )
}

/// Turns until `done` or `budget` runs out; each turn waits for the lane's timerfd first if
/// nothing is runnable (the lane's clock handler, as the pool would dispatch it).
fn run_until(l: &mut Lane, clock: &mut dyn EventHandler, mut done: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while !done() && std::time::Instant::now() < end {
        if !l.turn() {
            std::thread::sleep(Duration::from_micros(200));
            let ev = Event {
                token: Token::from_raw(0),
                readiness: 0,
                woke_ns: 0,
            };
            let _ = clock.handle(&ev, &mut l.ctx);
        }
    }
}

/// Issue 28, finding 3: `lfrt::task::time` under a combinator that wraps the waker. The sleep finds
/// its lane from the task being polled and wakes the wrapped waker when it is due, so the
/// combinator polls it again and it completes; the inner future is polled twice (before the
/// fix it panicked: the waker was not a lane task's).
#[test]
fn a_sleep_under_a_wrapping_combinator_completes() {
    let registry = Registry {
        set: Arc::new(Handles::new(4).unwrap()),
    };
    let ex = Executor::new("test", 2, 512, None, registry.clone()).unwrap();
    let mut clock = ex.clock;
    let mut l = Lane {
        spawner: ex.spawner,
        turn: ex.turn,
        ctx: LaneContext::new(64, 0, 0, 0, 0, registry),
    };
    let (f, polls) = wrapped(crate::task::time::sleep(Duration::from_millis(2)));
    let h = l.spawner.spawn(f).unwrap();
    run_until(&mut l, &mut *clock, || h.is_finished());
    assert!(h.is_finished(), "the sleep never completed");
    assert_eq!(
        polls.load(SeqCst),
        2,
        "polled once to wait, once when woken"
    );
    assert_eq!(h.wait(), Ok(()));
    assert_eq!(l.spawner.stats().timers_full, 0);
}

/// Issue 28, finding 3: a send on a full channel whose waiter list is full, under a wrapping
/// combinator, retries on the lane's timer (a bounded number of polls), not in a loop of
/// self-wakes at the lane's priority (before the fix: re-polled at once, every turn).
#[test]
fn a_full_channel_send_under_a_combinator_waits_on_the_lane_timer() {
    let registry = Registry {
        set: Arc::new(Handles::new(4).unwrap()),
    };
    let ex = Executor::new("test", 4, 1024, None, registry.clone()).unwrap();
    let mut clock = ex.clock;
    let mut l = Lane {
        spawner: ex.spawner,
        turn: ex.turn,
        ctx: LaneContext::new(64, 0, 0, 0, 0, registry),
    };
    let (tx, mut rx) = crate::task::channel::<u32>(1);
    tx.try_send(0).unwrap(); // full
                             // One sender waits in the list (its single place) ...
    let tx1 = tx.clone();
    let _first = l.spawner.spawn(async move { tx1.send(1).await }).unwrap();
    assert!(l.turn());
    // ... so this one finds no place and must retry later.
    let (f, polls) = wrapped(async move { tx.send(2).await });
    let _second = l.spawner.spawn(f).unwrap();
    for _ in 0..50 {
        l.turn();
    }
    assert!(
        polls.load(SeqCst) <= 2,
        "a self-wake loop: polled {} times in 50 turns",
        polls.load(SeqCst)
    );
    // Drain: every value arrives (the retry on the lane timer delivers the last one).
    let mut got = Vec::new();
    run_until(&mut l, &mut *clock, || {
        while let Some(v) = rx.try_recv() {
            got.push(v);
        }
        got.len() == 3
    });
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2]);
}

/// A waker that counts its wakes.
struct Counting(AtomicU64);
impl std::task::Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Issue 28, finding 4: a sender that stopped waiting (dropped while pending, or sent on its
/// retry) leaves no waker behind, so the pop that frees a place wakes the sender that still
/// waits (before the fix the pop woke the stale waker, and the live sender was never woken).
#[test]
fn a_pop_wakes_a_sender_that_still_waits() {
    let (tx, mut rx) = crate::task::channel::<u32>(2);
    tx.try_send(0).unwrap();
    tx.try_send(1).unwrap(); // full
    let (a, b) = (
        Arc::new(Counting(AtomicU64::new(0))),
        Arc::new(Counting(AtomicU64::new(0))),
    );
    let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
    // A waits, then is dropped; B waits.
    let mut send_a = tx.send(10);
    assert_eq!(
        Pin::new(&mut send_a).poll(&mut std::task::Context::from_waker(&wa)),
        Poll::Pending
    );
    drop(send_a);
    let mut send_b = tx.send(11);
    assert_eq!(
        Pin::new(&mut send_b).poll(&mut std::task::Context::from_waker(&wb)),
        Poll::Pending
    );
    assert_eq!(rx.try_recv(), Some(0));
    assert_eq!(a.0.load(SeqCst), 0, "the dropped sender's waker was woken");
    assert_eq!(b.0.load(SeqCst), 1, "the waiting sender was not woken");
    assert_eq!(
        Pin::new(&mut send_b).poll(&mut std::task::Context::from_waker(&wb)),
        Poll::Ready(())
    );
    // A sender that found its place on a retry leaves the list too: the next pop wakes none.
    let c = Arc::new(Counting(AtomicU64::new(0)));
    let wc = Waker::from(c.clone());
    let mut send_c = tx.send(12);
    assert_eq!(
        Pin::new(&mut send_c).poll(&mut std::task::Context::from_waker(&wc)),
        Poll::Pending
    );
    assert_eq!(rx.try_recv(), Some(1));
    assert_eq!(c.0.load(SeqCst), 1);
    assert_eq!(
        Pin::new(&mut send_c).poll(&mut std::task::Context::from_waker(&wc)),
        Poll::Ready(())
    );
    assert_eq!(rx.try_recv(), Some(11));
    assert_eq!(
        c.0.load(SeqCst),
        1,
        "woken again after it had sent: a stale entry"
    );
}

/// Issue 28, finding 2: a lane thread that replies to a foreign waiter (here a plain thread's
/// waker; in a service, a tokio task's, whose wake takes tokio's ordinary mutex) does not call
/// its waker: the runtime's relay thread does, and the lane counts it (before the fix the
/// waker ran on the lane's own thread).
#[test]
fn a_lane_threads_wake_of_a_foreign_waker_goes_through_the_relay() {
    use crate::task::{ReplySender, ReplySlots};
    use crate::{Context, Disposition, LaneConfig, Notifier, Policy, RtMode, Runtime};
    struct Replier(Notifier, Option<ReplySender<u32>>);
    impl EventHandler for Replier {
        fn source(&self) -> std::os::fd::BorrowedFd<'_> {
            self.0.as_fd()
        }
        fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
            let _ = self.0.take();
            if let Some(tx) = self.1.take() {
                tx.send(42);
            }
            Disposition::Rearm
        }
    }
    struct Named(StdMutex<Option<String>>);
    impl std::task::Wake for Named {
        fn wake(self: Arc<Self>) {
            *self.0.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        }
    }
    let mut g = LaneConfig::new("relay", Policy::Other, 0);
    g.threads = 1;
    let mut rt = Runtime::new(crate::RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
    })
    .unwrap();
    let replies = ReplySlots::<u32>::new(1);
    let (tx, mut rx) = replies.take().unwrap();
    let n = Notifier::new().unwrap();
    let bell = n.as_fd().try_clone_to_owned().unwrap();
    rt.lane("relay")
        .unwrap()
        .registry()
        .register(Box::new(Replier(n, Some(tx))))
        .unwrap();
    rt.start().unwrap();
    let named = Arc::new(Named(StdMutex::new(None)));
    let waker = Waker::from(named.clone());
    assert_eq!(
        Pin::new(&mut rx).poll(&mut std::task::Context::from_waker(&waker)),
        Poll::Pending
    );
    crate::sys::fd::EventFd::from_owned(bell).write(1).unwrap();
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while named.0.lock().unwrap().is_none() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        named.0.lock().unwrap().as_deref(),
        Some("lfrt-relay"),
        "the foreign waker ran on the wrong thread"
    );
    assert_eq!(
        Pin::new(&mut rx).poll(&mut std::task::Context::from_waker(&waker)),
        Poll::Ready(Some(42))
    );
    let m = rt.shutdown().unwrap();
    assert_eq!((m[0].relayed_wakes, m[0].relay_full), (1, 0));
}
