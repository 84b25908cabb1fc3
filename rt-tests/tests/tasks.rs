//! Async tasks on lanes through a real runtime: where tasks run (thread and priority read back
//! from the kernel), wakes from other lanes and plain threads, lane time, failure semantics
//! (panic, never-yielding task, shutdown order, full table) and zero allocations per poll,
//! wake and completion after warm-up.
//! Run one at a time: `cargo test --release -p lfrt-tools --test tasks -- --test-threads=1`.

mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::task::{JoinError, SpawnError};
use lfrt::*;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

/// A runtime of best-effort lanes `(name, priority, threads)`, each with `max_tasks` task
/// slots, built but not started.
fn lanes(spec: &[(&str, u8, usize)], max_tasks: usize, budget_us: Option<u64>) -> Runtime {
    let lanes = spec
        .iter()
        .map(|&(name, prio, threads)| {
            let mut g = LaneConfig::new(name, Policy::Fifo, prio);
            g.threads = threads;
            g.buffer_bytes = 2048;
            g.max_tasks = max_tasks;
            g.budget_us = budget_us;
            g
        })
        .collect();
    Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes,
        bands: Vec::new(),
    })
    .unwrap()
}

/// A one-way signal between threads or tasks: `set` from anywhere wakes the awaiting task.
/// Its waker slot is preallocated (an `Option<Waker>` under a mutex): setting and awaiting
/// never allocate (a lane waker's clone is an `Arc` count).
#[derive(Default)]
struct Signal {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn set(&self) {
        self.set.store(true, SeqCst);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }
    fn wait(&self) -> SignalWait<'_> {
        SignalWait(self)
    }
}

struct SignalWait<'a>(&'a Signal);

impl Future for SignalWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0.set.swap(false, SeqCst) {
            return Poll::Ready(());
        }
        {
            let mut w = self.0.waker.lock().unwrap();
            match &*w {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        if self.0.set.swap(false, SeqCst) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

fn lane_tids(rt: &Runtime, lane: usize) -> Vec<i32> {
    rt.thread_ids()
        .into_iter()
        .filter(|&(g, _, _)| g == lane)
        .map(|(_, _, tid)| tid)
        .collect()
}

/// A task runs on a pool thread of its lane, at the lane's SCHED_FIFO priority (read back
/// from the kernel), and its handle gives its output to a plain thread.
#[test]
fn a_task_runs_on_its_lane_at_the_lanes_priority() {
    let _l = util::rt_lock();
    if !util::rt_allowed("a_task_runs_on_its_lane_at_the_lanes_priority", 30) {
        return;
    }
    let mut rt = lanes(&[("high", 30, 1), ("low", 10, 2)], 4, None);
    assert!(rt.start().unwrap().rt_applied);
    let (high, low) = (rt.lane("high").unwrap(), rt.lane("low").unwrap());
    let where_ = |l: &Lane| {
        l.spawn(async {
            let tid = lfrt::os::gettid();
            (tid, lfrt::os::read_back(tid).unwrap())
        })
        .unwrap()
        .wait()
        .unwrap()
    };
    let (htid, hs) = where_(&high);
    let (ltid, ls) = where_(&low);
    assert!(
        lane_tids(&rt, 0).contains(&htid),
        "{htid} is not a `high` thread"
    );
    assert!(
        lane_tids(&rt, 1).contains(&ltid),
        "{ltid} is not a `low` thread"
    );
    assert_eq!(
        (hs, ls),
        (lfrt::os::Sched::Fifo(30), lfrt::os::Sched::Fifo(10))
    );
    rt.shutdown().unwrap();
}

/// Wakes from another lane's task and from a plain thread make the task runnable on its own
/// lane: after each wake it runs on one of its lane's threads, never on the waker's.
#[test]
fn a_wake_runs_the_task_on_its_own_lane_never_on_the_wakers_thread() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("a", 20, 1), ("b", 10, 1)], 4, None);
    rt.start().unwrap();
    let (a, b) = (rt.lane("a").unwrap(), rt.lane("b").unwrap());
    let sig = Arc::new(Signal::default());
    // How many wakes `b`'s task has consumed: each wake waits for the previous one to be
    // consumed, so none coalesces.
    let progress = Arc::new(AtomicU64::new(0));
    let (s, pr) = (sig.clone(), progress.clone());
    let on_b = b
        .spawn(async move {
            let mut tids = [0i32; 3];
            for t in &mut tids {
                s.wait().await;
                *t = lfrt::os::gettid();
                pr.fetch_add(1, SeqCst);
            }
            tids
        })
        .unwrap();
    // From a task on lane `a`, twice, then from this plain thread.
    let (s, pr) = (sig.clone(), progress.clone());
    let waker_tid = a
        .spawn(async move {
            for n in 1..=2 {
                s.set();
                while pr.load(SeqCst) < n {
                    lfrt::task::time::sleep(Duration::from_millis(1)).await;
                }
            }
            lfrt::os::gettid()
        })
        .unwrap()
        .wait()
        .unwrap();
    sig.set();
    let tids = on_b.wait().unwrap();
    let b_tids = lane_tids(&rt, 1);
    for t in tids {
        assert!(
            b_tids.contains(&t),
            "woken task ran on {t}, not a `b` thread {b_tids:?}"
        );
        assert_ne!(t, waker_tid);
    }
    rt.shutdown().unwrap();
}

/// `sleep_until` never completes early, and an interval whose task was busy for 5.5 periods
/// reports the missed ones (at least 4), as callback timers do.
#[test]
fn lane_time_sleeps_until_its_deadline_and_ticks_report_missed_periods() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("t", 10, 1)], 4, None);
    rt.start().unwrap();
    let t = rt.lane("t").unwrap();
    let (late, tick1, tick2) = t
        .spawn(async {
            let deadline = lfrt::os::now_ns() + 2_000_000;
            lfrt::task::time::sleep_until(deadline).await;
            let late = lfrt::os::now_ns() as i64 - deadline as i64;
            let mut iv = lfrt::task::time::interval(Duration::from_millis(1));
            std::thread::sleep(Duration::from_micros(5500)); // busy: blocks its lane thread
            let tick1 = iv.tick().await;
            let tick2 = iv.tick().await;
            (late, tick1, tick2)
        })
        .unwrap()
        .wait()
        .unwrap();
    assert!(late >= 0, "woke {late} ns before its deadline");
    assert!(tick1.missed >= 4, "{tick1:?}");
    assert_eq!(tick2.due_ns, tick1.due_ns + (tick1.missed + 1) * 1_000_000);
    rt.shutdown().unwrap();
}

/// A panicking task is counted, its handle says so, its slot is reused, and the lane's other
/// tasks and handlers run on; the pool counts no handler panic (the executor caught it).
#[test]
fn a_panicking_task_is_counted_and_the_lane_runs_on() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("p", 10, 1)], 1, None);
    rt.start().unwrap();
    let p = rt.lane("p").unwrap();
    let bad = p
        .spawn(async {
            if std::hint::black_box(true) {
                panic!("a task panics on purpose (test)");
            }
        })
        .unwrap();
    assert_eq!(bad.wait(), Err(JoinError::Panicked));
    // The only slot is free again.
    assert_eq!(p.spawn(async { 7 }).unwrap().wait(), Ok(7));
    let st = p.spawner().unwrap().stats();
    assert_eq!((st.panicked, st.completed), (1, 1));
    let m = rt.shutdown().unwrap();
    assert_eq!(m[0].handler_panics, 0);
    // The lane's task counters are in its metrics too.
    let t = m[0].tasks.expect("the lane has a task table");
    assert_eq!((t.panicked, t.completed), (1, 1));
}

/// A task that never yields (it spins in one poll until the watchdog has counted it, at most
/// 500 ms) is caught by the lane's overrun watchdog exactly like a handler: `budget_overruns`
/// counts it while the poll is still running.
#[test]
fn a_task_that_never_yields_is_caught_by_the_overrun_watchdog() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("w", 10, 1)], 2, Some(2_000));
    rt.start().unwrap();
    let metrics = rt.metrics_handle();
    let w = rt.lane("w").unwrap();
    let seen_in_poll = w
        .spawn(async move {
            let end = lfrt::os::now_ns() + 500_000_000;
            loop {
                let step = lfrt::os::now_ns() + 1_000_000;
                while lfrt::os::now_ns() < step {
                    std::hint::spin_loop();
                }
                if metrics.get()[0].budget_overruns >= 1 {
                    return true;
                }
                if lfrt::os::now_ns() > end {
                    return false;
                }
            }
        })
        .unwrap()
        .wait()
        .unwrap();
    assert!(
        seen_in_poll,
        "no overrun counted during a 500 ms poll (budget 2 ms)"
    );
    rt.shutdown().unwrap();
}

/// A task that wakes itself without end (`yield_now` in a loop) never lets its lane's ready
/// set empty. Each turn is short (16 polls, then the lane is handed back), yet the lane's
/// overrun watchdog sees the streak of turns as one dispatch: with `on_overrun = "report"` it
/// counts it in `budget_overruns`; with `"demote"` the thread running the streak is demoted
/// (the task reads its own policy back as SCHED_OTHER) until the streak ends, then restored.
/// Bounded: each task stops as soon as it saw what it waits for, or after 300 ms.
#[test]
fn a_self_waking_task_is_counted_and_demoted_like_a_runaway_handler() {
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "a_self_waking_task_is_counted_and_demoted_like_a_runaway_handler",
        10,
    ) {
        return;
    }
    for on_overrun in [OnOverrun::Report, OnOverrun::Demote] {
        let mut g = LaneConfig::new("spin", Policy::Fifo, 10);
        g.threads = 1;
        g.buffer_bytes = 2048;
        g.max_tasks = 2;
        g.budget_us = Some(2_000);
        g.on_overrun = on_overrun;
        let mut rt = Runtime::new(RuntimeConfig {
            trace: Default::default(),
            rt: RtMode::Required,
            lock_memory: false,
            lanes: vec![g],
            bands: Vec::new(),
        })
        .unwrap();
        rt.start().unwrap();
        let metrics = rt.metrics_handle();
        let lane = rt.lane("spin").unwrap();
        let demote = on_overrun == OnOverrun::Demote;
        let saw = lane
            .spawn(async move {
                let end = lfrt::os::now_ns() + 300_000_000;
                let mut next_check = 0;
                loop {
                    lfrt::task::yield_now().await;
                    let now = lfrt::os::now_ns();
                    if demote {
                        let me = lfrt::os::read_back(lfrt::os::gettid()).unwrap();
                        if me == lfrt::os::Sched::Other {
                            return true;
                        }
                    } else if now >= next_check {
                        next_check = now + 1_000_000;
                        if metrics.get()[0].budget_overruns >= 1 {
                            return true;
                        }
                    }
                    if now > end {
                        return false;
                    }
                }
            })
            .unwrap()
            .wait()
            .unwrap();
        let tid = lane_tids(&rt, 0)[0];
        // The streak ended with the task: the thread is back at its own policy.
        assert!(
            util::wait_until(5, || lfrt::os::read_back(tid).ok()
                == Some(lfrt::os::Sched::Fifo(10))),
            "{on_overrun:?}: the lane thread was not restored after the streak"
        );
        let m = rt.shutdown().unwrap();
        assert!(
            saw,
            "{on_overrun:?}: a 300 ms streak of self-wakes (budget 2 ms) was not {}: {:?}",
            if demote { "demoted" } else { "counted" },
            m[0]
        );
        assert!(m[0].budget_overruns >= 1, "{m:?}");
        if demote {
            assert!(m[0].demotions >= 1, "{m:?}");
        }
    }
}

struct DropLog(&'static str, Arc<Mutex<Vec<&'static str>>>);
impl Drop for DropLog {
    fn drop(&mut self) {
        self.1.lock().unwrap().push(self.0);
    }
}

/// Shutdown cancels every unfinished task, highest task priority first, within
/// `shutdown_within`; their handles give `Cancelled`; spawning afterwards is refused.
#[test]
fn shutdown_cancels_tasks_in_priority_order() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("s", 10, 2)], 8, None);
    rt.start().unwrap();
    let s = rt.lane("s").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let spawner = s.spawner().unwrap();
    let handles: Vec<_> = [(3, "p3"), (90, "p90"), (0, "p0"), (40, "p40")]
        .into_iter()
        .map(|(p, name)| {
            let d = DropLog(name, log.clone());
            spawner
                .spawn_with_priority(p, async move {
                    let _d = d;
                    std::future::pending::<()>().await
                })
                .unwrap()
        })
        .collect();
    assert!(util::wait_until(5, || spawner.stats().polls == 4));
    rt.shutdown_within(Duration::from_secs(2)).unwrap();
    assert_eq!(*log.lock().unwrap(), ["p90", "p40", "p3", "p0"]);
    for h in handles {
        assert_eq!(h.wait(), Err(JoinError::Cancelled));
    }
    assert!(matches!(s.spawn(async {}), Err(SpawnError::Closed(_))));
    assert_eq!(spawner.stats().cancelled, 4);
}

/// Shutdown cancels lane by lane, the highest lane first whatever the order the lanes were
/// added in, and within a lane by task priority.
#[test]
fn shutdown_cancels_the_highest_lane_first() {
    let _l = util::rt_lock();
    // Added low first: lane order is the reverse of lane priority.
    let mut rt = lanes(&[("low", 10, 1), ("high", 30, 1)], 4, None);
    rt.start().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for (lane, tasks) in [
        ("low", [(1, "low-1"), (7, "low-7")]),
        ("high", [(2, "high-2"), (9, "high-9")]),
    ] {
        let sp = rt.lane(lane).unwrap().spawner().unwrap();
        for (p, name) in tasks {
            let d = DropLog(name, log.clone());
            handles.push(
                sp.spawn_with_priority(p, async move {
                    let _d = d;
                    std::future::pending::<()>().await
                })
                .unwrap(),
            );
        }
        assert!(util::wait_until(5, || sp.stats().polls == 2));
    }
    rt.shutdown_within(Duration::from_secs(2)).unwrap();
    assert_eq!(*log.lock().unwrap(), ["high-9", "high-2", "low-7", "low-1"]);
    for h in handles {
        assert_eq!(h.wait(), Err(JoinError::Cancelled));
    }
}

/// A task stuck in one poll past `shutdown_within`'s deadline does not keep the other tasks
/// from being cancelled: those of other lanes and the stuck lane's other tasks are cancelled
/// before `shutdown_within` returns `Unfinished` (naming the lane); the stuck task is cancelled
/// by its lane thread as soon as its poll returns. The stuck lane is time-shared and the task
/// spins at most 5 s (the test releases it long before).
#[test]
fn a_stuck_task_does_not_keep_the_others_from_being_cancelled() {
    let _l = util::rt_lock();
    let mut stuck = LaneConfig::new("stuck", Policy::Other, 0);
    stuck.threads = 1;
    stuck.buffer_bytes = 2048;
    stuck.max_tasks = 4;
    let mut other = LaneConfig::new("other", Policy::Fifo, 20);
    other.threads = 1;
    other.buffer_bytes = 2048;
    other.max_tasks = 4;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![stuck, other],
        bands: Vec::new(),
    })
    .unwrap();
    rt.start().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let pending = |lane: &str, p: u8, name: &'static str| {
        let d = DropLog(name, log.clone());
        rt.lane(lane)
            .unwrap()
            .spawner()
            .unwrap()
            .spawn_with_priority(p, async move {
                let _d = d;
                std::future::pending::<()>().await
            })
            .unwrap()
    };
    let waiting = [
        pending("stuck", 9, "stuck-lane-9"),
        pending("stuck", 1, "stuck-lane-1"),
        pending("other", 5, "other-5"),
    ];
    let (spinning, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (sp, rl, d) = (
        spinning.clone(),
        release.clone(),
        DropLog("stuck", log.clone()),
    );
    let stuck_task = rt
        .lane("stuck")
        .unwrap()
        .spawner()
        .unwrap()
        .spawn_with_priority(5, async move {
            let _d = d;
            sp.store(true, SeqCst);
            let end = lfrt::os::now_ns() + 5_000_000_000;
            while !rl.load(SeqCst) && lfrt::os::now_ns() < end {
                std::hint::spin_loop();
            }
            std::future::pending::<()>().await
        })
        .unwrap();
    assert!(util::wait_until(5, || spinning.load(SeqCst)));
    let e = rt.shutdown_within(Duration::from_millis(100)).unwrap_err();
    let released_at_return = release.load(SeqCst);
    release.store(true, SeqCst);
    assert!(!released_at_return);
    match &e {
        Error::Unfinished { tasks, .. } => {
            assert!(
                tasks.len() == 1 && tasks[0].contains("lane `stuck`: 1 task"),
                "{e}"
            );
        }
        other => panic!("expected Unfinished, got {other:?}"),
    }
    // Cancelled before shutdown_within returned, the higher lane first: everything but the
    // task whose poll was running.
    assert_eq!(
        *log.lock().unwrap(),
        ["other-5", "stuck-lane-9", "stuck-lane-1"],
        "{e}"
    );
    for h in waiting {
        assert_eq!(h.wait(), Err(JoinError::Cancelled));
    }
    // Released, its poll returns and its lane thread cancels it.
    assert_eq!(stuck_task.wait(), Err(JoinError::Cancelled));
    assert_eq!(log.lock().unwrap().last(), Some(&"stuck"));
}

/// A full task table is a counted refusal that hands the future back; a lane without a task
/// table refuses with `Closed`; a future larger than a slot is refused naming both sizes.
#[test]
fn refusals_are_counted_and_explained() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("f", 10, 1)], 2, None);
    let mut none = LaneConfig::new("none", Policy::Fifo, 5);
    none.threads = 1;
    none.buffer_bytes = 2048;
    let none = rt.add_lane(none).unwrap();
    rt.start().unwrap();
    let f = rt.lane("f").unwrap();
    let gate = Arc::new(Signal::default());
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let g = gate.clone();
            f.spawn(async move { g.wait().await }).unwrap()
        })
        .collect();
    let e = f.spawn(async { 1 }).unwrap_err();
    assert!(matches!(e, SpawnError::Full(_)), "{e}");
    let big = [1u8; 4096];
    let e = f.spawn(async move { big[0] }).unwrap_err();
    assert!(e.to_string().contains("task_bytes"), "{e}");
    assert!(matches!(none.spawn(async {}), Err(SpawnError::Closed(_))));
    assert!(none.spawner().is_none());
    let st = f.spawner().unwrap().stats();
    assert_eq!((st.refused_full, st.refused_too_large), (1, 1));
    gate.set();
    drop(hs);
    rt.shutdown().unwrap();
}

/// `max_tasks` and `task_bytes` come from TOML; a bad value names its lane and field.
#[test]
fn task_table_keys_are_read_from_toml() {
    let cfg = lfrt::parse_config(
        r#"
        [runtime]
        rt = "best-effort"
        [[lane]]
        name = "control"
        policy = "fifo"
        priority = 80
        max_tasks = 32
        task_bytes = 1024
        "#,
    )
    .unwrap();
    assert_eq!(
        (cfg.lanes[0].max_tasks, cfg.lanes[0].task_bytes),
        (32, 1024)
    );
    let e = lfrt::parse_config(
        r#"
        [[lane]]
        name = "control"
        policy = "fifo"
        priority = 80
        max_tasks = 4
        task_bytes = 8
        "#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("task_bytes") && e.contains("64..=1048576"),
        "{e}"
    );
}

/// Polling, waking (from a plain thread, from another task, by the lane timer, from a tokio
/// worker thread through a lane channel), spawning from a task, completing, joining and
/// `lfrt::task::net` receiving and sending allocate nothing on the pool threads after warm-up:
/// `pool_allocations == Some(0)` over 20,000 wake-ups, then 2,000 UDP echoes and 2,000
/// values sent from tokio.
#[test]
fn zero_allocations_tasks() {
    let _l = util::rt_lock();
    const ROUNDS: u64 = 20_000;
    let mut rt = lanes(&[("z", 10, 2)], 16, None);
    assert!(rt.start().unwrap().counting_allocations);
    let z = rt.lane("z").unwrap();
    let spawner = z.spawner().unwrap();
    let (ping, pong) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
    let done = Arc::new(AtomicU64::new(0));
    // Task A: woken by this thread (ping), wakes task B (pong) — a task-to-task wake —, every
    // 64th round spawns a child on its own lane and awaits it, every 256th sleeps 100 µs.
    let (p, q, d, sp) = (ping.clone(), pong.clone(), done.clone(), spawner.clone());
    let a = z
        .spawn(async move {
            for i in 0..ROUNDS {
                p.wait().await;
                d.store(i + 1, Release);
                q.set();
                if i.is_multiple_of(64) {
                    let child = sp
                        .spawn_with_priority(5, async move { i * 2 })
                        .ok()
                        .unwrap();
                    assert_eq!(child.await, Ok(i * 2));
                }
                if i.is_multiple_of(256) {
                    lfrt::task::time::sleep(Duration::from_micros(100)).await;
                }
            }
        })
        .unwrap();
    // Task B: woken by A until A is done (wakes may coalesce: A stores its progress before
    // it sets the signal, so B's last wake-up sees the final count).
    let (q, d) = (pong.clone(), done.clone());
    let b = z
        .spawn(async move {
            let mut wakes = 0u64;
            while d.load(Acquire) < ROUNDS {
                q.wait().await;
                wakes += 1;
            }
            wakes
        })
        .unwrap();
    for i in 0..ROUNDS {
        ping.set();
        while done.load(Acquire) <= i {
            std::thread::yield_now();
        }
    }
    assert_eq!(a.wait(), Ok(()));
    let b_wakes = b.wait().unwrap();
    assert!(b_wakes >= 1);

    // lfrt::task::net: a UDP echo task; each datagram's readiness comes from the lane's handle set.
    const NET_ROUNDS: u32 = 2_000;
    let sock = lfrt::task::net::UdpSocket::bind(&spawner, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sock.local_addr().unwrap();
    let echo = z
        .spawn(async move {
            let mut buf = [0u8; 64];
            for _ in 0..NET_ROUNDS {
                let (n, from) = sock.recv_from(&mut buf).await.unwrap();
                sock.send_to(&buf[..n], from).await.unwrap();
            }
        })
        .unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    for i in 0..NET_ROUNDS {
        client.send_to(&i.to_le_bytes(), addr).unwrap();
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &i.to_le_bytes());
    }
    assert_eq!(echo.wait(), Ok(()));

    // Wakes from a tokio worker thread: a tokio task sends through a lane channel, one value
    // at a time (it waits for the lane task's progress), so every value wakes the lane task
    // from the tokio thread.
    const TOKIO_ROUNDS: u64 = 2_000;
    let (tx, mut rx) = lfrt::task::channel::<u64>(4);
    let progress = Arc::new(AtomicU64::new(0));
    let pr = progress.clone();
    let receiver = z
        .spawn(async move {
            let mut sum = 0u64;
            while let Some(v) = rx.recv().await {
                sum += v;
                pr.store(v + 1, Release);
            }
            sum
        })
        .unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async move {
            for i in 0..TOKIO_ROUNDS {
                tx.send(i).await;
                while progress.load(Acquire) <= i {
                    tokio::task::yield_now().await;
                }
            }
        });
    assert_eq!(receiver.wait(), Ok(TOKIO_ROUNDS * (TOKIO_ROUNDS - 1) / 2));
    let st = spawner.stats();
    let m = rt.shutdown().unwrap();
    assert_eq!(
        m[0].pool_allocations,
        Some(0),
        "tasks: pool threads allocated after warm-up (None: not measured): {m:?}; {st:?}"
    );
    eprintln!(
        "{} polls in {} turns ({} dispatches); task B woken {b_wakes} times",
        st.polls, st.turns, m[0].dispatched
    );
}

/// A tokio task posts requests into a lane task's channel (`send().await` waits while the
/// 2-value channel is full) and awaits each reply, computed on the lane, through a
/// preallocated reply slot. Every request is answered exactly once, on a lane thread.
#[test]
fn a_tokio_task_sends_to_a_lane_and_awaits_replies_computed_there() {
    use lfrt::task::{channel, ReplySender, ReplySlots};
    let _l = util::rt_lock();
    const N: u64 = 2_000;
    let mut rt = lanes(&[("rt", 10, 1)], 4, None);
    rt.start().unwrap();
    let lane = rt.lane("rt").unwrap();
    let lane_tids = lane_tids(&rt, 0);
    let (tx, mut rx) = channel::<(u64, ReplySender<(u64, i32)>)>(2);
    let server = lane
        .spawn(async move {
            let mut served = 0u64;
            while let Some((x, reply)) = rx.recv().await {
                reply.send((x * 3, lfrt::os::gettid()));
                served += 1;
            }
            served
        })
        .unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let replies = ReplySlots::<(u64, i32)>::new(8);
    let sum = tokio.block_on(async move {
        let clients: Vec<_> = (0..4u64)
            .map(|c| {
                let (tx, replies) = (tx.clone(), replies.clone());
                tokio::spawn(async move {
                    let mut tids = Vec::new();
                    let mut sum = 0;
                    for i in 0..N / 4 {
                        let (rtx, rrx) = replies.take().expect("a free reply slot");
                        tx.send((c * N + i, rtx)).await;
                        let (v, tid) = rrx.await.expect("answered");
                        assert_eq!(v, 3 * (c * N + i));
                        sum += v;
                        tids.push(tid);
                    }
                    (sum, tids)
                })
            })
            .collect();
        drop(tx);
        let mut sum = 0;
        for c in clients {
            let (s, tids) = c.await.unwrap();
            sum += s;
            assert!(
                tids.iter().all(|t| lane_tids.contains(t)),
                "a reply computed off the lane"
            );
        }
        sum
    });
    let want: u64 = (0..4u64)
        .flat_map(|c| (0..N / 4).map(move |i| 3 * (c * N + i)))
        .sum();
    assert_eq!(sum, want);
    assert_eq!(
        server.wait(),
        Ok(N),
        "the channel ended when the senders were dropped"
    );
    rt.shutdown().unwrap();
}

/// UDP and TCP echo as lane tasks (`lfrt::task::net`): every datagram and every byte comes back,
/// and an idle socket does not fire (the lane's dispatch count stays put while no client
/// sends: the handle is suspended while no task waits).
#[test]
fn net_echo_tasks_serve_loopback_clients_and_idle_sockets_stay_quiet() {
    use std::io::{Read, Write};
    let _l = util::rt_lock();
    let mut rt = lanes(&[("net", 10, 2)], 8, None);
    rt.start().unwrap();
    let lane = rt.lane("net").unwrap();
    let sp = lane.spawner().unwrap();
    let udp = lfrt::task::net::UdpSocket::bind(&sp, "127.0.0.1:0".parse().unwrap()).unwrap();
    let udp_addr = udp.local_addr().unwrap();
    let _udp_task = lane
        .spawn(async move {
            let mut buf = [0u8; 256];
            loop {
                let (n, from) = udp.recv_from(&mut buf).await.unwrap();
                udp.send_to(&buf[..n], from).await.unwrap();
            }
        })
        .unwrap();
    let listener = lfrt::task::net::TcpListener::bind(&sp, "127.0.0.1:0".parse().unwrap()).unwrap();
    let tcp_addr = listener.local_addr().unwrap();
    let _tcp_task = lane
        .spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            loop {
                let n = conn.read(&mut buf).await.unwrap();
                if n == 0 {
                    return;
                }
                conn.write_all(&buf[..n]).await.unwrap();
            }
        })
        .unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    for i in 0..500u32 {
        client.send_to(&i.to_le_bytes(), udp_addr).unwrap();
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &i.to_le_bytes());
    }
    let mut tcp = std::net::TcpStream::connect(tcp_addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..200u32 {
        let msg = format!("line {i}\n");
        tcp.write_all(msg.as_bytes()).unwrap();
        let mut got = vec![0u8; msg.len()];
        tcp.read_exact(&mut got).unwrap();
        assert_eq!(got, msg.as_bytes());
    }
    let before = rt.metrics()[0].dispatched;
    std::thread::sleep(Duration::from_millis(50));
    let idle = rt.metrics()[0].dispatched - before;
    assert!(
        idle <= 2,
        "{idle} dispatches while idle: a socket handle keeps firing"
    );
    drop(tcp);
    rt.shutdown().unwrap();
}

/// Two tasks receiving on one `lfrt::task::net` socket: the second is refused at once
/// (`ResourceBusy`) instead of the two replacing and waking each other's wakers without end (a
/// livelock: the lane polled them in a loop while no datagram came). The first one receives on,
/// and once it finished another task may receive. The lane is time-shared, so a regression
/// spins at normal priority for the test's bounded wait.
#[test]
fn a_second_reader_on_a_socket_is_refused_not_livelocked() {
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("net", Policy::Other, 0);
    g.threads = 1;
    g.buffer_bytes = 2048;
    g.max_tasks = 4;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
    })
    .unwrap();
    rt.start().unwrap();
    let lane = rt.lane("net").unwrap();
    let sp = lane.spawner().unwrap();
    let sock =
        Arc::new(lfrt::task::net::UdpSocket::bind(&sp, "127.0.0.1:0".parse().unwrap()).unwrap());
    let addr = sock.local_addr().unwrap();
    let receive = |sock: Arc<lfrt::task::net::UdpSocket>| async move {
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf)
            .await
            .map(|(n, _)| buf[..n].to_vec())
    };
    let first = lane.spawn(receive(sock.clone())).unwrap();
    assert!(util::wait_until(5, || sp.stats().polls >= 1));
    let second = lane.spawn(receive(sock.clone())).unwrap();
    assert!(
        util::wait_until(2, || second.is_finished()),
        "the second reader neither received nor was refused: {:?}",
        sp.stats()
    );
    let polls = sp.stats().polls;
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        sp.stats().polls,
        polls,
        "the lane polls while no datagram comes: the readers wake each other"
    );
    let e = second.wait().unwrap().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ResourceBusy, "{e}");
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(b"one", addr).unwrap();
    assert_eq!(first.wait().unwrap().unwrap(), b"one");
    // The first reader is done: the socket takes a new one.
    let third = lane.spawn(receive(sock.clone())).unwrap();
    client.send_to(b"two", addr).unwrap();
    assert_eq!(third.wait().unwrap().unwrap(), b"two");
    rt.shutdown().unwrap();
}

/// `inbox.recv().await` between lanes: three producer tasks on a high lane send 1,000 values
/// each through a 1-value channel (so `send().await` waits nearly every time, and more
/// senders wait than the channel has places) to a consumer task on a lower lane; every value
/// arrives once, each producer's in order, and the channel ends when the producers finish.
#[test]
fn lane_tasks_send_through_a_full_channel_without_loss_or_spin() {
    use lfrt::task::channel;
    let _l = util::rt_lock();
    let mut rt = lanes(&[("hi", 30, 1), ("lo", 10, 1)], 8, None);
    rt.start().unwrap();
    let (hi, lo) = (rt.lane("hi").unwrap(), rt.lane("lo").unwrap());
    let (tx, mut rx) = channel::<(u32, u32)>(1);
    let consumer = lo
        .spawn(async move {
            let mut next = [0u32; 3];
            while let Some((p, v)) = rx.recv().await {
                assert_eq!(v, next[p as usize], "producer {p} out of order");
                next[p as usize] += 1;
            }
            next
        })
        .unwrap();
    let producers: Vec<_> = (0..3u32)
        .map(|p| {
            let tx = tx.clone();
            hi.spawn(async move {
                for v in 0..1000 {
                    tx.send((p, v)).await;
                }
            })
            .unwrap()
        })
        .collect();
    drop(tx);
    for p in producers {
        p.wait().unwrap();
    }
    assert_eq!(consumer.wait(), Ok([1000, 1000, 1000]));
    rt.shutdown().unwrap();
}

/// A waker around another, as a combinator (`FuturesUnordered`, a `select` over a task set)
/// gives the futures it polls.
struct Wrapped(Waker);

impl std::task::Wake for Wrapped {
    fn wake(self: Arc<Self>) {
        self.0.wake_by_ref();
    }
}

/// Polls `F` with a waker of its own, as a combinator does.
struct Wrapping<F>(Pin<Box<F>>);

impl<F: Future> Future for Wrapping<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let w = Waker::from(Arc::new(Wrapped(cx.waker().clone())));
        self.0.as_mut().poll(&mut TaskContext::from_waker(&w))
    }
}

/// Issue 28, finding 3, through a real lane: `lfrt::task::time` under a combinator's waker finds
/// its lane from the task being polled and completes (before the fix it panicked: "must be
/// polled by a lane task"), no earlier than its deadline.
#[test]
fn lane_time_works_under_a_combinators_waker() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("t", 10, 1)], 4, None);
    rt.start().unwrap();
    let late = rt
        .lane("t")
        .unwrap()
        .spawn(Wrapping(Box::pin(async {
            let deadline = lfrt::os::now_ns() + 2_000_000;
            lfrt::task::time::sleep_until(deadline).await;
            lfrt::os::now_ns() as i64 - deadline as i64
        })))
        .unwrap()
        .wait()
        .expect("the sleep under a wrapped waker completed");
    assert!(late >= 0, "woke {late} ns before its deadline");
    rt.shutdown().unwrap();
}

/// Issue 28, the socket path: a datagram that wakes a task on its own lane costs no
/// `epoll_ctl` (the socket stays registered, edge-triggered: no re-check after its handler)
/// and no executor turn (the same-lane fast path polls the task at the end of the socket's
/// dispatch, not through the doorbell). 300 echoes, one at a time.
#[test]
fn a_socket_wakes_its_task_with_no_epoll_ctl_and_no_turn() {
    let _l = util::rt_lock();
    let mut rt = lanes(&[("net", 10, 1)], 4, None);
    rt.start().unwrap();
    let lane = rt.lane("net").unwrap();
    let sp = lane.spawner().unwrap();
    let udp = lfrt::task::net::UdpSocket::bind(&sp, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = udp.local_addr().unwrap();
    let _task = lane
        .spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                let (n, from) = udp.recv_from(&mut buf).await.unwrap();
                udp.send_to(&buf[..n], from).await.unwrap();
            }
        })
        .unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    let mut echo = |i: u32| {
        client.send_to(&i.to_le_bytes(), addr).unwrap();
        let (n, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &i.to_le_bytes());
    };
    echo(0); // the task is waiting on its socket from here on
    let before = rt.metrics();
    let turns = before[0].tasks.as_ref().map_or(0, |t| t.turns);
    let checks = before[0].rearm_checks;
    for i in 1..=300 {
        echo(i);
    }
    let after = rt.metrics();
    assert_eq!(
        after[0].rearm_checks - checks,
        0,
        "epoll_ctl re-checks of the socket's handle"
    );
    let turned = after[0].tasks.as_ref().map_or(0, |t| t.turns) - turns;
    assert!(
        turned <= 3,
        "{turned} executor turns for 300 datagrams: the fast path was not taken"
    );
    rt.shutdown().unwrap();
}
