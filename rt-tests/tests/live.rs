//! `lfrt run` while it runs: the Prometheus endpoint, scraped and parsed by a real parser, and
//! the status blocks.

mod util;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

fn tmp(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// Two lanes of timers at normal priority: nothing here needs RT privilege, and the load is a
/// few hundred events a second.
const CONFIG: &str = r#"
[runtime]
rt = "best-effort"

[[lane]]
name = "control"
policy = "other"
threads = 2
max_tasks = 4
[[lane.handler]]
kind = "timer"
interval_us = 2000

[[lane]]
name = "bulk"
policy = "other"
threads = 1
[[lane.handler]]
kind = "timer"
interval_us = 5000
"#;

/// A free loopback TCP port (free when this returns; the test binds it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.0 request; the whole answer (head and body).
fn get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Parses an exposition with Python's prometheus_client, both its Prometheus text parser and its
/// OpenMetrics parser (lfrt serves OpenMetrics, which Prometheus reads), and prints one line per
/// sample: `family type sample {labels} value`.
const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families as prom
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
text = sys.stdin.read()
list(prom(text))
for f in om(text):
    for s in f.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f.name, f.type, s.name, "{" + labels + "}", s.value)
"#;

fn parser_available() -> bool {
    Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A scrape taken during a real `lfrt run` parses with a real parser and carries, per lane,
/// the counters, the latency histogram and the applied policy.
#[test]
fn metrics_scraped_during_a_run_parse_with_prometheus_client() {
    if !parser_available() {
        util::skip(
            "metrics_scraped_during_a_run_parse_with_prometheus_client",
            "python3 with prometheus_client missing (.ci/run installs it from PyPI)",
        );
        return;
    }
    let _l = util::rt_lock();
    let cfg = tmp("metrics.toml", CONFIG);
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = lfrt()
        .args(["run", cfg.to_str().unwrap(), "-D", "4", "--metrics", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Scrape until both lanes have dispatched (the first snapshot is taken at the start).
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut body = String::new();
    while Instant::now() < deadline {
        if let Ok(answer) = get(&addr, "/metrics") {
            let (head, b) = answer.split_once("\r\n\r\n").expect("HTTP head");
            assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
            assert!(head.contains("application/openmetrics-text"), "{head}");
            if b.contains("lfrt_lane_dispatched_total{lane=\"bulk\"}")
                && !b.contains("lfrt_lane_dispatched_total{lane=\"bulk\"} 0\n")
            {
                body = b.to_string();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let not_found = get(&addr, "/other").unwrap_or_default();
    assert!(not_found.starts_with("HTTP/1.0 404"), "{not_found}");
    assert!(child.wait().unwrap().success());
    assert!(!body.is_empty(), "no scrape with dispatched events");

    let mut py = Command::new("python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "parser refused the exposition: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples = String::from_utf8(out.stdout).unwrap();
    let value = |family: &str, sample: &str, labels: &str| -> f64 {
        samples
            .lines()
            .find(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f[0] == family && f[2] == sample && f[3] == labels
            })
            .unwrap_or_else(|| panic!("no {sample}{labels}:\n{samples}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    for g in ["control", "bulk"] {
        let lg = format!("{{lane={g}}}");
        let dispatched = value("lfrt_lane_dispatched", "lfrt_lane_dispatched_total", &lg);
        assert!(dispatched > 0.0, "{g}: {samples}");
        for counter in [
            "promotions",
            "vacant_promotions",
            "deferred_promotions",
            "deferred_takeovers",
            "handler_panics",
            "budget_overruns",
            "accept_exhausted",
            "connections_refused",
            "frames_oversize",
            "connections_reset",
            "stream_backpressure",
            "stream_idle_timeouts",
            "stream_write_timeouts",
            "datagrams_truncated",
            "inbox_refused",
            "samples_dropped",
            "stale_events",
        ] {
            let family = format!("lfrt_lane_{counter}");
            value(&family, &format!("{family}_total"), &lg);
        }
        for cause in ["handler", "preempted", "hypervisor", "blocked", "unknown"] {
            let f = "lfrt_lane_overrun_causes";
            value(
                f,
                &format!("{f}_total"),
                &format!("{{cause={cause},lane={g}}}"),
            );
        }
        let h = "lfrt_lane_dispatch_latency_seconds";
        let count = value(h, &format!("{h}_count"), &lg);
        let inf = value(h, &format!("{h}_bucket"), &format!("{{lane={g},le=+Inf}}"));
        assert_eq!(count, inf, "{g}: +Inf bucket holds every value");
        assert!(count > 0.0, "{g}");
        // Timers take no datagrams: the arrival histogram is there, and empty.
        let h = "lfrt_lane_arrival_latency_seconds";
        assert_eq!(value(h, &format!("{h}_count"), &lg), 0.0, "{g}");
        // The task table's counters, for the lane that has one only.
        for counter in [
            "spawned",
            "completed",
            "panicked",
            "cancelled",
            "refused_full",
            "refused_too_large",
            "polls",
            "turns",
        ] {
            let family = format!("lfrt_lane_tasks_{counter}");
            let sample = format!("{family}_total");
            let has = samples
                .lines()
                .any(|l| l.starts_with(&format!("{family} counter {sample} {lg} ")));
            assert_eq!(has, g == "control", "{g} {counter}: {samples}");
        }
        let sched = format!("lfrt_thread_sched info lfrt_thread_sched_info {{lane={g},sched=");
        assert!(samples.contains(&sched), "{g}: {samples}");
    }
    assert!(
        samples
            .lines()
            .any(|l| l.ends_with("{lane=control,sched=other nice 0,thread=1} 1")),
        "{samples}"
    );
}

/// `--status` to a pipe appends one block a second: a 3 s run prints at least two (at 1 s, 2 s
/// and normally 3 s; a main thread delayed past a whole second skips one), each with a line
/// per lane and numeric events/s, p99 and drops.
#[test]
fn status_to_a_pipe_prints_a_block_each_second() {
    let _l = util::rt_lock();
    let cfg = tmp("status.toml", CONFIG);
    let out = lfrt()
        .args(["run", cfg.to_str().unwrap(), "-D", "3", "--status"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\x1b'), "no terminal escapes in a pipe");
    let blocks: Vec<&str> = text.split("# status t=").skip(1).collect();
    assert!(blocks.len() >= 2, "{text}");
    for b in &blocks {
        let lines: Vec<&str> = b.lines().collect();
        assert!(lines[1]
            .split_whitespace()
            .eq(["lane", "events/s", "p99_us", "drops"]));
        for (line, g) in lines[2..4].iter().zip(["control", "bulk"]) {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f[0], g, "{b}");
            let rate: f64 = f[1].parse().unwrap();
            let _p99: f64 = f[2].parse().unwrap();
            let drops: u64 = f[3].parse().unwrap();
            assert!(rate > 0.0, "{b}");
            assert_eq!(drops, 0, "{b}");
        }
    }
}

/// The run summary and `--json` carry a lane's task counters: a line `NAME tasks: …` and
/// `metrics.tasks` for the lane with a task table, nothing (`null`) for the one without.
#[test]
fn the_run_summary_and_json_carry_task_counters() {
    let _l = util::rt_lock();
    let cfg = tmp("tasks.toml", CONFIG);
    let json = cfg.with_file_name("tasks.json");
    let out = lfrt()
        .args(["run", cfg.to_str().unwrap(), "-D", "300ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("control") && l.contains("tasks: spawned=0 completed=0")),
        "{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("bulk") && l.contains("tasks:")),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let tasks = |name: &str| {
        v["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| &g["metrics"])
            .find(|m| m["name"] == name)
            .unwrap()["tasks"]
            .clone()
    };
    assert_eq!(tasks("control")["spawned"], 0, "{v}");
    assert_eq!(tasks("control")["refused_full"], 0, "{v}");
    assert!(tasks("bulk").is_null(), "{v}");
}
