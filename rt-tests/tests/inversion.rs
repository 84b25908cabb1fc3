//! `lfrt inversion`: every architecture dispatches every event exactly once, the HS/HA
//! baseline allocates per request while lfrt lanes do not, and `--quick` writes JSON holding
//! every architecture.
//!
//! These run SCHED_FIFO threads on CPU 1 under the machine-wide RT lock; the loads are small
//! (a few hundred events per second, 20 µs of work each) and every run stops by itself.

mod util;

#[global_allocator]
static A: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt_tools::inversion::{
    run_once, table, Architecture, InversionArgs, Plan, Report, RunResult,
};
use std::time::{Duration, Instant};

/// A light, short plan: 3 low streams at 200/s with 20 µs of work, a 500/s high stream and a
/// 2 ms timer, 1 s per run.
fn short_plan() -> Option<Plan> {
    if !util::two_cpus("inversion short_plan") {
        return None;
    }
    let args = InversionArgs {
        n_low: vec![3],
        work_us: 20,
        duration: std::time::Duration::from_secs(1),
        warmup_ms: 100,
        rate: 500,
        interval_us: 2000,
        low_rate: 200,
        lock_reps: 0,
        ..InversionArgs::default()
    };
    Some(args.plan().expect("valid plan"))
}

fn check_exactly_once(r: &RunResult) {
    let arch = r.architecture.name();
    assert!(r.rt_applied, "{arch}: SCHED_FIFO not applied");
    assert_eq!(r.streams.len(), 2 + r.n_low, "{arch}: streams");
    for s in &r.streams {
        assert!(s.sent > 0, "{arch}/{}: nothing sent", s.name);
        assert_eq!(
            s.duplicates, 0,
            "{arch}/{}: an event was served twice",
            s.name
        );
        assert_eq!(
            s.out_of_range, 0,
            "{arch}/{}: a sequence number outside the stream",
            s.name
        );
        if s.name == "timer" {
            // Each expiry is served once, or reported by the kernel as folded into the next read.
            assert_eq!(s.handled + s.coalesced, s.sent, "{arch}/timer: {s:?}");
        } else {
            assert_eq!(
                s.handled, s.sent,
                "{arch}/{}: sent but never served: {s:?}",
                s.name
            );
        }
    }
    assert_eq!(r.duplicates, 0, "{arch}: duplicates or malformed datagrams");
}

#[test]
fn each_architecture_dispatches_every_event_exactly_once() {
    if !util::rt_allowed("each_architecture_dispatches_every_event_exactly_once", 80) {
        return;
    }
    let Some(plan) = short_plan() else { return };
    let _lock = util::rt_lock();
    for arch in Architecture::ALL {
        let r = run_once(&plan, arch, 3).expect("run");
        eprintln!("{arch:?}: {:?}", r.streams);
        check_exactly_once(&r);
        assert_eq!(r.low_handled, r.low_sent);
    }
}

/// Issue 15, experiment 1b (every stream on one port): both architectures, N = 0 and 4, in
/// about 5 s. Every event is served exactly once, each datagram from its own band's socket
/// (`misrouted` = 0: the kernel classified every EF-marked datagram into the high band and
/// every other into the low band), and the table has one row per run with the UDP p99.
#[test]
fn one_port_runs_serve_every_event_once_in_its_band() {
    if !util::rt_allowed("one_port_runs_serve_every_event_once_in_its_band", 80) {
        return;
    }
    let Some(plan) = short_plan() else { return };
    let _lock = util::rt_lock();
    let mut report = Report {
        experiments: Vec::new(),
        lock: Vec::new(),
        pool_allocations: None,
        pool_minor_faults: None,
    };
    for arch in Architecture::ONE_PORT {
        for n in [0, 4] {
            let r = run_once(&plan, arch, n).expect("run");
            eprintln!("{arch:?} n={n}: {:?}", r.streams);
            assert_eq!((r.architecture, r.n_low), (arch, n));
            check_exactly_once(&r);
            assert_eq!(r.low_handled, r.low_sent, "{arch:?}");
            assert_eq!(r.misrouted, 0, "{arch:?}: a datagram in the wrong band");
            assert!(r.high_udp.count > 0, "{arch:?}: no high datagram measured");
            report.experiments.push(r);
        }
    }
    let text = table(&plan, &report);
    assert!(text.lines().nth(1).unwrap().ends_with("udp_p99"), "{text}");
    for arch in ["bands", "shared_pool"] {
        assert_eq!(
            text.lines().filter(|l| l.starts_with(arch)).count(),
            2,
            "{text}"
        );
    }
}

#[test]
fn hsha_allocates_per_request_and_lanes_do_not() {
    if !util::rt_allowed("hsha_allocates_per_request_and_lanes_do_not", 80) {
        return;
    }
    assert!(
        lfrt::counting_alloc_active(),
        "the counting allocator must be installed"
    );
    let Some(plan) = short_plan() else { return };
    let _lock = util::rt_lock();

    let hsha = run_once(&plan, Architecture::Hsha, 3).expect("hsha run");
    check_exactly_once(&hsha);
    assert!(
        hsha.requests > 1000,
        "hsha queued only {} requests",
        hsha.requests
    );
    assert!(
        hsha.allocations.is_some_and(|a| a >= hsha.requests),
        "HS/HA I/O thread made {:?} allocations for {} requests; expected at least one per request",
        hsha.allocations,
        hsha.requests
    );

    let lanes = run_once(&plan, Architecture::Lanes, 3).expect("lanes run");
    check_exactly_once(&lanes);
    // Enough dispatches (about 1600) that the 4 pool threads are well past their warm-up
    // (64 dispatches each), so the allocation baseline was taken.
    assert!(
        lanes.requests >= 4 * lfrt::WARMUP_DISPATCHES * 4,
        "lanes dispatched only {}",
        lanes.requests
    );
    assert_eq!(
        lanes.allocations,
        Some(0),
        "lfrt pool threads allocated after warm-up (None: not measured)"
    );
}

#[test]
fn quick_json_holds_every_architecture() {
    // Runs the real `lfrt inversion --quick` (about 25 s: 9 runs of 2 s plus the lock
    // experiment) rather than a reduced in-process configuration, because the JSON that
    // `lfrt plot` reads is the command's output.
    if !util::rt_allowed("quick_json_holds_every_architecture", 80) {
        return;
    }
    if !util::two_cpus("quick_json_holds_every_architecture") {
        return;
    }
    let _lock = util::rt_lock();
    let out =
        std::env::temp_dir().join(format!("lfrt-inversion-quick-{}.json", std::process::id()));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt"))
        .args(["inversion", "--quick", "--json"])
        .arg(&out)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn lfrt");
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("lfrt inversion --quick did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut table = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut table).unwrap();
    eprintln!("{table}");
    assert!(status.success(), "lfrt inversion --quick failed: {status}");

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("JSON written"))
            .expect("JSON parses");
    let _ = std::fs::remove_file(&out);
    let exps = v["experiments"].as_array().expect("experiments");
    let mut seen = std::collections::BTreeSet::new();
    for e in exps {
        let arch = e["architecture"]
            .as_str()
            .expect("architecture")
            .to_string();
        let n = e["n_low"].as_u64().expect("n_low");
        for k in [
            "min_us",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "stddev_us",
        ] {
            assert!(e["high"][k].is_number(), "{arch}/{n}: high.{k}");
        }
        assert!(
            e["high"]["count"].as_u64().expect("high.count") > 0,
            "{arch}/{n}: no high events"
        );
        assert!(
            e["low_throughput"].is_number(),
            "{arch}/{n}: low_throughput"
        );
        assert!(e["lost"].is_u64(), "{arch}/{n}: lost");
        seen.insert((arch, n));
    }
    for arch in ["lanes", "single_pool", "hsha"] {
        for n in [0, 4, 16] {
            assert!(
                seen.contains(&(arch.to_string(), n)),
                "missing {arch} n_low={n}: {seen:?}"
            );
        }
    }
    let lock = v["lock"].as_array().expect("lock");
    let kinds: Vec<&str> = lock
        .iter()
        .map(|l| l["mutex"].as_str().expect("mutex"))
        .collect();
    assert_eq!(kinds, ["plain", "pi"]);
    for l in lock {
        assert!(l["high_block_max_us"].is_number() && l["high_block_p99_us"].is_number());
    }
    assert_eq!(
        v["pool_allocations"].as_u64(),
        Some(0),
        "lfrt pool threads allocated"
    );
}

/// With stderr a pipe, `lfrt inversion` writes each experiment's line and nothing of its
/// progress bar (`experiment k/n`, cursor movements, carriage returns): the bar is for a
/// terminal only (lfrt_tools::progress, which the echo benchmark shares).
#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    if !util::rt_allowed("no_progress_bar_when_stderr_is_not_a_terminal", 80) {
        return;
    }
    if !util::two_cpus("no_progress_bar_when_stderr_is_not_a_terminal") {
        return;
    }
    let _lock = util::rt_lock();
    // One experiment of 500 ms at light load.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt"))
        .args([
            "inversion",
            "--arch",
            "lanes",
            "--n-low",
            "0",
            "--duration",
            "500ms",
            "--warmup-ms",
            "100",
            "--lock-reps",
            "0",
            "--rate",
            "200",
        ])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run lfrt inversion");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("\n  lanes "), "the experiment's line: {err:?}");
    assert!(!err.contains("experiment 1/1"), "a bar in a pipe: {err:?}");
    assert!(
        !err.contains('\x1b') && !err.contains('\r'),
        "terminal control bytes in a pipe: {err:?}"
    );
}

/// `--borrow` gets the same flag checks as the other experiments, plus its own work bound: a
/// load that would hold both CPUs at SCHED_FIFO for the whole run is refused before anything
/// starts, naming the flag.
#[test]
fn borrow_experiment_refuses_unbounded_load_naming_the_flag() {
    for (args, flag) in [
        (vec!["--work-us", "5000"], "--work-us 5000"),
        (vec!["--duration", "1h"], "--duration"),
        (vec!["--high-prio", "20", "--low-prio", "60"], "--high-prio"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt"))
            .args(["inversion", "--borrow"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("2 runs of"), "{args:?} started: {err}");
    }
}
