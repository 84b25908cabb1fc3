//! The flight recorder (issue 31) end to end: real lanes, real timers, the window written by
//! the collector, read back, and — with the kernel recorder on — `explain` naming an injected
//! cause. Deterministic: each test waits (bounded) for the window, then checks what it holds.

mod util;
use lfrt::timer::{CallbackTimer, Expiry, TimerEvent};
use lfrt::window::{read_window, TriggerKind, Window};
use lfrt::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// A fresh directory for this test's windows.
fn trace_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A 1 ms periodic callback timer whose `slow_at`th call runs `slow`, on lane "lane".
fn timer_lane(
    policy: Policy,
    priority: u8,
    cpus: Option<Vec<usize>>,
    trace: TraceConfig,
    over_us: u64,
    slow_at: u64,
    slow: impl Fn() + Send + 'static,
) -> (Runtime, Arc<AtomicU64>) {
    let mut g = LaneConfig::new("lane", policy, priority);
    g.threads = 1;
    g.buffer_bytes = 2048;
    g.cpus = cpus;
    g.trace_over_us = Some(over_us);
    let rt = Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
        trace,
    })
    .unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let n = calls.clone();
    let (timer, _control) = CallbackTimer::periodic(
        Expiry::After(Duration::from_millis(5)),
        Duration::from_millis(1),
        move |_: &TimerEvent, _: &mut Context| {
            if n.fetch_add(1, SeqCst) + 1 == slow_at {
                slow();
            }
        },
    )
    .unwrap();
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(timer))
        .unwrap();
    (rt, calls)
}

/// Waits (at most 10 s) for the recorder's first window and reads it back.
fn first_window(rt: &Runtime) -> Window {
    let t = rt.telemetry();
    assert!(
        util::wait_until(10, || t.recorder_stats().written >= 1),
        "no window written: {:?}",
        t.recorder_stats()
    );
    let path = t.recorder_stats().last.expect("a path");
    read_window(&path).unwrap()
}

/// A handler that sleeps 5 ms makes the next expiry late by about 4 ms: past the 2 ms
/// threshold, so the recorder writes the window around it, with the late dispatch as its
/// trigger and the sleeping handler's span before it.
#[test]
fn a_handler_that_sleeps_past_the_threshold_leaves_its_span_and_the_trigger() {
    let _l = util::rt_lock();
    let dir = trace_dir("sleep");
    let trace = TraceConfig {
        window_ms: 50,
        after_ms: 5,
        dir: dir.clone(),
        ..TraceConfig::default()
    };
    let (mut rt, _calls) = timer_lane(Policy::Other, 0, None, trace, 2_000, 100, || {
        std::thread::sleep(Duration::from_millis(5))
    });
    rt.start().unwrap();
    let w = first_window(&rt);
    rt.shutdown().unwrap();

    assert_eq!(
        w.trigger.kind,
        TriggerKind::Latency {
            threshold_ns: 2 * MS
        }
    );
    let late = w.trigger.sample.expect("the late dispatch");
    assert!(late.latency_ns() > 2 * MS, "{late:?}");
    assert!(late.origin_ns != 0, "a timer's sample carries its due time");
    assert_eq!(w.to_ns - w.from_ns, 50 * MS);
    assert_eq!(w.to_ns, late.start_ns + 5 * MS);
    assert!(
        w.samples.contains(&late),
        "the trigger's own dispatch is in the window"
    );
    let sleeper = w
        .samples
        .iter()
        .find(|s| s.end_ns - s.start_ns >= 5 * MS)
        .expect("the sleeping handler's span is in the window");
    assert!(
        sleeper.end_ns <= late.start_ns,
        "it ran before the late one"
    );
    assert!(w
        .samples
        .iter()
        .all(|s| (w.from_ns..=w.to_ns).contains(&s.end_ns)));
    assert_eq!(w.overwritten, vec![0]);
    assert_eq!(w.lanes.len(), 1);
    assert_eq!(w.lanes[0].name, "lane");
    assert!(w.lanes[0].threads[0].tid > 0);
    assert!(w.kernel.is_empty(), "the kernel recorder is off by default");
    // The file is a Chrome trace: a JSON object with `traceEvents`.
    let path = rt.telemetry().recorder_stats().last.unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(json["traceEvents"]
        .as_array()
        .is_some_and(|a| !a.is_empty()));
    let _ = std::fs::remove_dir_all(dir);
}

/// `trace_now` freezes a window on demand; a second demand within `min_interval_ms` is
/// counted, not written.
#[test]
fn a_window_on_demand_and_a_second_one_suppressed() {
    let _l = util::rt_lock();
    let dir = trace_dir("demand");
    let trace = TraceConfig {
        window_ms: 20,
        after_ms: 2,
        min_interval_ms: 60_000,
        dir: dir.clone(),
        ..TraceConfig::default()
    };
    let (mut rt, calls) = timer_lane(Policy::Other, 0, None, trace, 1_000_000, 0, || {});
    rt.start().unwrap();
    assert!(util::wait_until(10, || calls.load(SeqCst) >= 30));
    rt.telemetry().trace_now();
    let w = first_window(&rt);
    assert_eq!(w.trigger.kind, TriggerKind::Demand);
    assert!(
        !w.samples.is_empty(),
        "1 ms timer: about 20 dispatches in the window"
    );
    rt.telemetry().trace_now();
    let t = rt.telemetry();
    assert!(util::wait_until(10, || t.recorder_stats().suppressed >= 1));
    rt.shutdown().unwrap();
    let stats = rt.telemetry().recorder_stats();
    assert_eq!((stats.written, stats.suppressed), (1, 1), "{stats:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// With the kernel recorder on, a busy SCHED_FIFO 50 thread on the lane's CPU (its spin
/// bounded to 8 ms) delays the FIFO 10 lane's timer; the window holds the kernel's events, and
/// `explain` names that thread as what ran instead.
#[test]
fn explain_names_a_higher_fifo_thread_that_ran_instead() {
    let _l = util::rt_lock();
    if !util::rt_allowed("explain_names_a_higher_fifo_thread_that_ran_instead", 50) {
        return;
    }
    let dir = trace_dir("hog");
    let cpu = *lfrt::os::online_cpus().last().unwrap();
    let trace = TraceConfig {
        window_ms: 40,
        after_ms: 4,
        kernel: true,
        kernel_buffer_kb: 2048,
        dir: dir.clone(),
        ..TraceConfig::default()
    };
    let hog_tid = Arc::new(AtomicU64::new(0));
    let tid = hog_tid.clone();
    // The timer's 100th call (past the warm-up) starts the hog on the lane's CPU and returns: the hog, at a
    // higher priority, holds the CPU for 8 ms, and the lane's next expiries wait.
    let (mut rt, _calls) = timer_lane(Policy::Fifo, 10, Some(vec![cpu]), trace, 2_000, 100, {
        move || {
            let tid = tid.clone();
            std::thread::Builder::new()
                .name("lfrt-hog".into())
                .spawn(move || {
                    tid.store(lfrt::os::gettid() as u64, SeqCst);
                    lfrt::os::set_current_affinity(&[cpu]).unwrap();
                    lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(50)).unwrap();
                    let until = lfrt::os::now_ns() + 8 * MS;
                    while lfrt::os::now_ns() < until {
                        std::hint::spin_loop();
                    }
                })
                .unwrap();
        }
    });
    rt.start().unwrap();
    let w = first_window(&rt);
    rt.shutdown().unwrap();
    assert!(!w.kernel.is_empty(), "the kernel recorder was on");
    let e = lfrt_tools::explain::explain(&w).expect("a dispatch to explain");
    let hog = hog_tid.load(SeqCst) as i32;
    let named = e.ran_instead.iter().any(
        |r| matches!(&r.what, lfrt_tools::explain::Occupant::Process { tid, .. } if *tid == hog),
    );
    assert!(named, "the hog (tid {hog}) is what ran instead:\n{e}");
    assert!(e.to_string().contains("lfrt-hog"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
