//! `lfrt cyclic` end to end: the binary's options, exact loop counts, cyclictest's JSON shape,
//! histograms that sum to the cycles, and the text outputs.
//!
//! Runs are short (0.2–1 s at 1 kHz). Those at SCHED_FIFO take the machine-wide RT lock and
//! skip without the privilege.

mod util;

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    // From the repository root, as the README runs it.
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c.env("RUST_LOG", "warn");
    c
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lfrt-cyclic-test-{}-{name}", std::process::id()))
}

fn run(args: &[&str]) -> Output {
    let out = lfrt().arg("cyclic").args(args).output().expect("run lfrt");
    assert!(
        out.status.success(),
        "lfrt cyclic {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs with `--json` and returns the document and stdout.
fn run_json(name: &str, args: &[&str]) -> (Value, String) {
    let path = tmp(name);
    let json_arg = format!("--json={}", path.display());
    let mut all = args.to_vec();
    all.push(&json_arg);
    let out = run(&all);
    let text = std::fs::read_to_string(&path).expect("JSON written");
    let _ = std::fs::remove_file(&path);
    (
        serde_json::from_str(&text).expect("valid JSON"),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn threads(doc: &Value) -> Vec<&Value> {
    let n = doc["num_threads"].as_u64().unwrap() as usize;
    (0..n).map(|i| &doc["thread"][i.to_string()]).collect()
}

fn histogram(t: &Value) -> Vec<(u64, u64)> {
    let h = t["histogram"].as_object().expect("histogram object");
    let mut v: Vec<(u64, u64)> = h
        .iter()
        .map(|(k, c)| (k.parse().expect("numeric bucket"), c.as_u64().unwrap()))
        .collect();
    v.sort_unstable();
    v
}

/// Checks what every document must satisfy, whatever the latencies were: `cycles` counts
/// loops run, and every loop's sample is in its thread's histogram or (`unrecorded`, timers
/// without histograms of their own) in its lane's.
fn check_consistency(doc: &Value) {
    let mut unrecorded_total = 0;
    for t in threads(doc) {
        let h = histogram(t);
        let cycles = t["cycles"].as_u64().unwrap();
        let unrecorded = t["unrecorded"].as_u64().expect("unrecorded");
        assert!(
            unrecorded == 0 || unrecorded == cycles,
            "a timer's samples are all in its own histogram or all in its lane's: {t}"
        );
        unrecorded_total += unrecorded;
        assert_eq!(
            h.iter().map(|&(_, c)| c).sum::<u64>(),
            cycles - unrecorded,
            "histogram counts sum to the recorded cycles: {t}"
        );
        assert!(h.iter().all(|&(_, c)| c > 0), "only non-zero buckets");
        if !h.is_empty() && doc["histogram_buckets"].is_null() {
            assert_eq!(
                h[0].0,
                t["min"].as_u64().unwrap(),
                "first bucket is the minimum"
            );
            assert_eq!(
                h.last().unwrap().0,
                t["max"].as_u64().unwrap(),
                "last bucket is the maximum"
            );
        }
        let (min, avg, max) = (
            t["min"].as_f64().unwrap(),
            t["avg"].as_f64().unwrap(),
            t["max"].as_f64().unwrap(),
        );
        let (p50, p99, p999) = (
            t["p50"].as_f64().unwrap(),
            t["p99"].as_f64().unwrap(),
            t["p999"].as_f64().unwrap(),
        );
        assert!(min <= avg.ceil() && avg <= max + 1.0, "{t}");
        assert!(p50 <= p99 && p99 <= p999, "{t}");
    }
    assert_eq!(doc["unrecorded"], unrecorded_total);
    assert_eq!(doc["samples_dropped"], 0, "every loop is in a histogram");
    let lanes = doc["lanes"].as_array().unwrap();
    let total: u64 = threads(doc)
        .iter()
        .map(|t| t["cycles"].as_u64().unwrap())
        .sum();
    // Every loop of every timer is in its lane's cycles and histogram.
    assert_eq!(
        lanes
            .iter()
            .map(|g| g["cycles"].as_u64().unwrap())
            .sum::<u64>(),
        total
    );
    for g in lanes {
        assert_eq!(
            histogram(g).iter().map(|&(_, c)| c).sum::<u64>(),
            g["cycles"].as_u64().unwrap(),
            "lane histogram sums to its cycles: {g}"
        );
    }
}

/// Issue 22: every loop's sample is recorded by the thread that ran it (no telemetry ring to
/// overflow): 8 timers × 1 ms × 1 s, and each timer's JSON `cycles` = loops run = samples in
/// its histogram, the lane's likewise.
#[test]
fn every_loop_is_recorded_and_counted_in_cycles() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("every_loop_is_recorded_and_counted_in_cycles", 80) {
        return;
    }
    let loops = 1000u64;
    let (doc, stdout) = run_json(
        "every-loop",
        &[
            "-m", "-p", "80", "-t", "8", "-i", "1000", "-d", "0", "-l", "1000", "-q",
        ],
    );
    assert_eq!(doc["stopped_by"], "loops");
    for (i, t) in threads(&doc).into_iter().enumerate() {
        assert_eq!(t["cycles"], loops, "timer {i}: loops run");
        assert_eq!(t["unrecorded"], 0, "timer {i}");
        let recorded: u64 = histogram(t).iter().map(|&(_, c)| c).sum();
        assert_eq!(recorded, loops, "timer {i}: samples recorded");
    }
    let g = &doc["lanes"][0];
    assert_eq!(g["cycles"], 8 * loops);
    assert_eq!(g["dispatched"], 8 * loops);
    assert_eq!(doc["unrecorded"], 0);
    assert_eq!(doc["histogram_limit_timers"], 256);
    // The final status lines count the same loops.
    for i in 0..8 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("T:{i:2} ")))
            .unwrap_or_else(|| panic!("status line {i} missing:\n{stdout}"));
        assert!(line.contains(&format!("C:{loops:7} ")), "{line}");
    }
    check_consistency(&doc);
}

#[test]
fn loops_yield_exactly_n_cycles_per_timer() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("loops_yield_exactly_n_cycles_per_timer", 80) {
        return;
    }
    let (doc, _) = run_json(
        "loops",
        &["-m", "-p", "80", "-i", "1000", "-t", "2", "-l", "200", "-q"],
    );
    assert_eq!(doc["stopped_by"], "loops");
    assert_eq!(doc["num_threads"], 2);
    for (i, t) in threads(&doc).into_iter().enumerate() {
        assert_eq!(t["cycles"], 200, "timer {i}");
        assert_eq!(t["interval"], 1000 + 500 * i as u64);
        assert_eq!(
            t["phase"],
            500 * i as u64,
            "unaligned: spread over the first interval"
        );
        assert_eq!(
            (t["lane"].as_str(), t["priority"].as_u64()),
            (Some("cyclic"), Some(80))
        );
    }
    let g = &doc["lanes"][0];
    assert_eq!(
        (
            g["cycles"].as_u64(),
            g["dispatched"].as_u64(),
            g["pool_threads"].as_u64()
        ),
        (Some(400), Some(400), Some(2))
    );
    assert_eq!(doc["rt_applied"], true);
    assert_eq!(doc["memory_locked"], true);
    assert_eq!(doc["counting_allocations"], true);
    assert_eq!(
        doc["pool_allocations"], 0,
        "timer dispatch must not allocate"
    );
    check_consistency(&doc);
}

#[test]
fn json_has_cyclictests_shape() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("json_has_cyclictests_shape", 80) {
        return;
    }
    let (doc, _) = run_json(
        "shape",
        &[
            "-p", "80", "-t", "3", "-i", "500", "-d", "250", "-l", "100", "-q",
        ],
    );
    // cyclictest's envelope.
    assert_eq!(doc["file_version"], 1);
    assert!(doc["cmdline"]
        .as_str()
        .unwrap()
        .contains("cyclic -p 80 -t 3"));
    for k in ["start_time", "end_time"] {
        assert!(
            doc[k].as_str().unwrap().ends_with(" +0000"),
            "{k}: {}",
            doc[k]
        );
    }
    assert_eq!(doc["return_code"], 0);
    for k in ["sysname", "nodename", "release", "version", "machine"] {
        assert!(doc["sysinfo"][k].is_string(), "sysinfo.{k}");
    }
    assert!(doc["sysinfo"]["realtime"].is_u64());
    assert_eq!(doc["num_threads"], 3);
    assert_eq!(doc["resolution_in_ns"], 0);
    // cyclictest's per-thread fields, then lfrt's.
    let fields = ["histogram", "cycles", "min", "max", "avg", "cpu", "node"];
    let extra = [
        "p50",
        "p99",
        "p999",
        "missed_periods",
        "hist_overflow",
        "lane",
        "priority",
        "interval",
        "phase",
        "tid",
        "wake",
        "dispatch",
    ];
    for t in threads(&doc) {
        for k in fields.iter().chain(&extra) {
            assert!(!t[k].is_null(), "thread field {k} missing: {t}");
        }
        assert_eq!(t["cycles"], 100);
        for part in ["wake", "dispatch"] {
            for k in ["min", "avg", "p50", "p99", "p999", "max"] {
                assert!(t[part][k].is_number(), "{part}.{k}");
            }
        }
    }
    // The thread keys are "0".."n-1" in order, as cyclictest writes them.
    let keys: Vec<&String> = doc["thread"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["0", "1", "2"]);
    for k in [
        "pool_allocations",
        "pool_minor_faults",
        "missed_periods",
        "lanes",
    ] {
        assert!(!doc[k].is_null(), "{k}");
    }
    assert_eq!(doc["lanes"][0]["timers"], serde_json::json!([0, 1, 2]));
    check_consistency(&doc);
}

#[test]
fn histogram_overflows_clamp_into_the_last_bucket() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("histogram_overflows_clamp_into_the_last_bucket", 80) {
        return;
    }
    let (doc, stdout) = run_json(
        "hist",
        &[
            "-p", "80", "-t", "2", "-l", "100", "-h", "5", "-A", "0", "-q",
        ],
    );
    assert_eq!(doc["histogram_buckets"], 5);
    for t in threads(&doc) {
        assert_eq!(
            (t["interval"].as_u64(), t["phase"].as_u64()),
            (Some(1000), Some(0)),
            "-h: one interval; -A 0: one start"
        );
    }
    check_consistency(&doc);
    // The text histogram: 5 rows, then cyclictest's # lines; Total + Overflows = cycles.
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "# Histogram")
        .skip(1)
        .take_while(|l| !l.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter()
            .enumerate()
            .all(|(i, r)| r.starts_with(&format!("{i:06} "))),
        "{rows:?}"
    );
    let field = |label: &str| -> Vec<u64> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("{label} missing:\n{stdout}"));
        line[label.len()..]
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (total, overflows) = (field("# Total:"), field("# Histogram Overflows:"));
    for (i, t) in threads(&doc).into_iter().enumerate() {
        assert_eq!(total[i] + overflows[i], 100);
        assert_eq!(t["hist_overflow"], overflows[i]);
        let h = histogram(t);
        assert!(h.iter().all(|&(b, _)| b < 5));
        // In JSON the last bucket holds its in-range count plus the overflows.
        let last_row: u64 = rows[4]
            .split_whitespace()
            .nth(1 + i)
            .unwrap()
            .parse()
            .unwrap();
        let last_json = h.iter().find(|&&(b, _)| b == 4).map_or(0, |&(_, c)| c);
        assert_eq!(last_json, last_row + overflows[i]);
    }
}

#[test]
fn nsecs_switches_every_output_to_ns() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("nsecs_switches_every_output_to_ns", 80) {
        return;
    }
    let (doc, stdout) = run_json("nsecs", &["-p", "80", "-l", "100", "-N", "-q"]);
    assert_eq!(
        (doc["resolution_in_ns"].as_u64(), doc["unit"].as_str()),
        (Some(1), Some("ns"))
    );
    check_consistency(&doc);
    let t = &doc["thread"]["0"];
    let line = stdout
        .lines()
        .find(|l| l.starts_with("T: 0 "))
        .expect("final status line");
    let value = |label: &str| -> u64 {
        line.split(label)
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("C:"), 100);
    assert_eq!(value("Min:"), t["min"].as_u64().unwrap());
    assert_eq!(value("Max:"), t["max"].as_u64().unwrap());
    assert!(stdout.contains("# lfrt cyclic summary (ns)"));
}

#[test]
fn config_lanes_run_at_their_own_priorities() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("config_lanes_run_at_their_own_priorities", 80) {
        return;
    }
    let cfg = tmp("lanes.toml");
    std::fs::write(
        &cfg,
        r#"
[runtime]
rt = "required"

[[lane]]
name = "hi"
priority = 80
threads = 2
[[lane.handler]]
kind = "timer"
interval_us = 1000
count = 2
distance_us = 250

[[lane]]
name = "lo"
priority = 70
threads = 1
[[lane.handler]]
kind = "timer"
interval_us = 2000
"#,
    )
    .unwrap();
    let (doc, _) = run_json(
        "config",
        &["--config", cfg.to_str().unwrap(), "-l", "50", "-q"],
    );
    let _ = std::fs::remove_file(&cfg);
    let t = threads(&doc);
    let got: Vec<(&str, u64, u64, u64)> = t
        .iter()
        .map(|t| {
            (
                t["lane"].as_str().unwrap(),
                t["priority"].as_u64().unwrap(),
                t["interval"].as_u64().unwrap(),
                t["cycles"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("hi", 80, 1000, 50),
            ("hi", 80, 1250, 50),
            ("lo", 70, 2000, 50)
        ]
    );
    let lanes = doc["lanes"].as_array().unwrap();
    assert_eq!(lanes[0]["timers"], serde_json::json!([0, 1]));
    assert_eq!(lanes[1]["timers"], serde_json::json!([2]));
    assert_eq!(
        (lanes[1]["name"].as_str(), lanes[1]["pool_threads"].as_u64()),
        (Some("lo"), Some(1))
    );
    check_consistency(&doc);
}

#[test]
fn duration_and_signal_end_a_run() {
    let _lock = util::rt_lock();
    if !util::rt_allowed("duration_and_signal_end_a_run", 80) {
        return;
    }
    let (doc, _) = run_json("duration", &["-p", "80", "-D", "1s", "-q"]);
    assert_eq!(doc["stopped_by"], "duration");
    check_consistency(&doc);

    let path = tmp("signal");
    let mut child = lfrt()
        .args([
            "cyclic",
            "-p",
            "80",
            "-q",
            &format!("--json={}", path.display()),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(
        child.wait().unwrap().success(),
        "SIGINT ends the run cleanly"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(doc["stopped_by"], "signal");
    check_consistency(&doc);
}

/// SCHED_OTHER (`-p 0`, cyclictest's default) needs no privilege and no RT lock.
#[test]
fn sched_other_runs_unprivileged() {
    let (doc, stdout) = run_json("other", &["-l", "50", "-i", "2000"]);
    assert_eq!(doc["lanes"][0]["policy"], "other");
    assert_eq!(doc["thread"]["0"]["cycles"], 50);
    assert_eq!(doc["thread"]["0"]["priority"], 0);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("policy: other: loadavg: ")),
        "{stdout}"
    );
    check_consistency(&doc);
}

#[test]
fn help_and_invalid_options() {
    let out = lfrt().args(["cyclic", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "-p, --priority",
        "-i, --interval",
        "-d, --distance",
        "-t, --threads",
        "-l, --loops",
        "-D, --duration",
        "-m, --mlockall",
        "-a, --affinity",
        "-h, --histogram",
        "-q, --quiet",
        "--json",
        "-N, --nsecs",
        "--config",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    let no_timer = tmp("no-timer.toml");
    std::fs::write(&no_timer, "[[lane]]\nname = \"echo\"\npriority = 10\n[[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:0\"\n").unwrap();
    let no_timer = no_timer.to_str().unwrap();
    for (args, message) in [
        (&["-D", "10x"][..], "unit must be"),
        (
            &["--config", "configs/default.toml", "-p", "80"][..],
            "cannot be combined with --config",
        ),
        (&["-i", "10"][..], "intervals must stay within"),
        (&["--config", no_timer][..], "no `kind = \"timer\"` handler"),
        (&["--histfile", "/tmp/x"][..], "--histfile needs"),
    ] {
        let out = lfrt().arg("cyclic").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
    }
    let _ = std::fs::remove_file(no_timer);
}

/// Issue 13: the 256-timer cap is gone. 4096 timers run in one lane (SCHED_OTHER: no privilege
/// needed, 8192 events in well under a second); per-timer histograms stop at
/// `MAX_TIMER_HISTOGRAMS`, later timers record into their lane's shared histogram, so the
/// lane sees every cycle. Issue 22: every timer's `cycles` still counts its loops run, and
/// `unrecorded` says which timers' samples are not in their own histogram.
#[test]
fn four_thousand_timers_run_in_one_lane() {
    let _lock = util::rt_lock();
    let n = 4096u64;
    let (doc, _) = run_json(
        "many",
        &[
            "-t",
            "4096",
            "-d",
            "0",
            "-i",
            "200000",
            "-l",
            "2",
            "-D",
            "60s", // a backstop only: the loops end the run
            "-q",
            "--pool-threads",
            "2",
        ],
    );
    assert_eq!(doc["stopped_by"], "loops");
    assert_eq!(doc["num_threads"], n);
    let g = &doc["lanes"][0];
    assert_eq!(g["cycles"], 2 * n, "every cycle of every timer: {g}");
    assert_eq!(g["dispatched"], 2 * n);
    let kept = lfrt_tools::cyclic::MAX_TIMER_HISTOGRAMS as u64;
    for (i, t) in threads(&doc).into_iter().enumerate() {
        assert_eq!(t["cycles"], 2, "T:{i}: cycles counts loops run");
    }
    for (i, t) in threads(&doc).into_iter().enumerate() {
        let unrecorded = if (i as u64) < kept { 0 } else { 2 };
        assert_eq!(
            t["unrecorded"], unrecorded,
            "timers T:0..{kept} have histograms of their own, the others none: T:{i}"
        );
    }
    assert_eq!(doc["histogram_limit_timers"], kept);
    assert_eq!(g["untracked_timers"], n - kept);
    assert_eq!(doc["unrecorded"], 2 * (n - kept));
    check_consistency(&doc);
}

/// More timers than RLIMIT_NOFILE allows descriptors: a clear error naming the limit before
/// anything starts, not an EMFILE halfway through registering them.
#[test]
fn timers_beyond_rlimit_nofile_are_refused_naming_the_limit() {
    let out = Command::new("sh")
        .args([
            "-c",
            r#"ulimit -n 256 && exec "$0" cyclic -t 1000 -d 0 -l 1 -q"#,
            env!("CARGO_BIN_EXE_lfrt"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RLIMIT_NOFILE") && err.contains("soft limit 256") && err.contains("-t"),
        "{err}"
    );
    // Within the limit (a timer and its thread's parker: 4 descriptors), the same run starts.
    let out = Command::new("sh")
        .args([
            "-c",
            r#"ulimit -n 256 && exec "$0" cyclic -t 40 -d 0 -i 10000 -l 1 -q"#,
            env!("CARGO_BIN_EXE_lfrt"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 15 item 3: `--policy deadline` puts the cyclic lane's threads under SCHED_DEADLINE
/// with the --dl-* reservation, as the kernel reports it (`sched_getattr` on each thread).
#[test]
fn deadline_policy_runs_the_cyclic_threads_under_sched_deadline() {
    let _lock = util::rt_lock();
    if !util::rt_allowed(
        "deadline_policy_runs_the_cyclic_threads_under_sched_deadline",
        99,
    ) {
        return;
    }
    let mut child = lfrt()
        .args([
            "cyclic",
            "--policy",
            "deadline",
            "--dl-runtime",
            "100",
            "--dl-deadline",
            "500",
            "--dl-period",
            "1000",
            "-i",
            "1000",
            "-t",
            "2",
            "-D",
            "3s",
            "-q",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let want = lfrt::os::Sched::Deadline {
        runtime_ns: 100_000,
        deadline_ns: 500_000,
        period_ns: 1_000_000,
    };
    let task_dir = format!("/proc/{}/task", child.id());
    let pool_threads = || -> Vec<i32> {
        std::fs::read_dir(&task_dir)
            .map(|d| {
                d.filter_map(|e| {
                    let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                    let comm = std::fs::read_to_string(format!("{task_dir}/{tid}/comm")).ok()?;
                    comm.starts_with("lf-cyclic").then_some(tid)
                })
                .collect()
            })
            .unwrap_or_default()
    };
    let mut seen = Vec::new();
    let all_deadline = util::wait_until(3, || {
        seen = pool_threads()
            .into_iter()
            .map(|tid| lfrt::os::read_back(tid).ok())
            .collect();
        seen.len() == 2 && seen.iter().all(|s| *s == Some(want))
    });
    let status = child.wait().unwrap();
    assert!(
        all_deadline,
        "pool threads read back as {seen:?}, want {want:?}"
    );
    assert!(status.success());
}
