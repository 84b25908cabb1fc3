//! What `lfrt-zenoh doctor CONFIG` reports: Zenoh's own threads and how the session is set up,
//! in `lfrt doctor`'s format (`ok`/`warn`/`fail`, topic, text, fix).

use crate::config::{priority_name, Config, Mode};
use crate::links::{carrier, Link};
use crate::PRIORITIES;
use std::fmt::Write;

/// A report on a bridge configuration, and whether anything in it is a `fail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doctor {
    /// The report, one finding per line (a `fix:` line under each that is not `ok`).
    pub text: String,
    /// True if a finding is a `fail` (the command then exits 2).
    pub failed: bool,
}

/// Reports what `cfg` makes Zenoh run: its worker threads and their policy, whether
/// `ZENOH_RUNTIME` (`env`, as read from the environment) agrees, how they compare with `cpus`
/// online CPUs, the session's endpoints and which link carries each priority. With `pid`, the
/// process that runs the bridge: its live Zenoh threads with their policy, and the TCP
/// connections on each endpoint.
///
/// # Examples
/// ```
/// let cfg = lfrt_zenoh::Config::parse("[threads]\nrx = 1\n")?;
/// let d = lfrt_zenoh::doctor(&cfg, None, 2, None);
/// assert!(d.text.contains("ok   zenoh-threads rx 1, tx 1, app 1, acc 1, net 1"), "{}", d.text);
/// assert!(!d.failed);
/// # Ok::<(), lfrt_zenoh::Error>(())
/// ```
pub fn doctor(cfg: &Config, env: Option<&str>, cpus: usize, pid: Option<u32>) -> Doctor {
    let mut text = String::new();
    let mut failed = false;
    let mut line = |status: &str, topic: &str, what: String, fix: Option<String>| {
        let _ = writeln!(text, "{status:<4} {topic:<13} {what}");
        if let Some(fix) = fix {
            let _ = writeln!(text, "     fix: {fix}");
        }
        failed |= status == "fail";
    };
    let t = cfg.threads;
    line(
        "ok",
        "zenoh-threads",
        format!(
            "rx {}, tx {}, app {}, acc {}, net {} worker threads ({} in all), at most {} blocking-task threads per runtime",
            t.rx, t.tx, t.app, t.acc, t.net, t.workers(), t.max_blocking
        ),
        None,
    );
    match t.rx_priority {
        Some(p) => line(
            "ok",
            "zenoh-policy",
            format!("receive workers (rx, they run the subscriber callbacks) at SCHED_FIFO {p}, below every lane (Bridge::route refuses a lane at or below it); the other {} threads at SCHED_OTHER", t.workers() - t.rx),
            None,
        ),
        None => line(
            "warn",
            "zenoh-policy",
            format!(
                "Zenoh's {} threads run at SCHED_OTHER: a sample waits for the time-shared receive thread before it reaches its lane",
                t.workers()
            ),
            Some("set [threads] rx_priority = N (below every lane) to run the receive workers at SCHED_FIFO N".into()),
        ),
    }
    let want = t.zenoh_runtime();
    match env {
        None => line(
            "ok",
            "zenoh-env",
            "ZENOH_RUNTIME unset: the bridge sets it from [threads]".into(),
            None,
        ),
        Some(e) if e == want => line(
            "ok",
            "zenoh-env",
            "ZENOH_RUNTIME agrees with [threads]".into(),
            None,
        ),
        Some(e) => line(
            "fail",
            "zenoh-env",
            format!("ZENOH_RUNTIME is `{e}`, [threads] asks for `{want}`: Bridge::open refuses"),
            Some("unset ZENOH_RUNTIME, or make [threads] say the same".into()),
        ),
    }
    if t.workers() >= cpus.max(1) {
        line(
            "warn",
            "zenoh-cpus",
            format!("{} Zenoh worker threads on {cpus} online CPUs", t.workers()),
            Some("fewer Zenoh threads (e.g. rx = 1, the rest 1) leave more CPU time to SCHED_OTHER work".into()),
        );
    }
    let s = &cfg.session;
    let mode = match s.mode {
        Mode::Peer => "peer",
        Mode::Client => "client",
    };
    let (status, fix) = if s.listen.is_empty() && s.connect.is_empty() {
        (
            "warn",
            Some("add `listen` or `connect` endpoints under [session]: with multicast scouting off, nothing else finds peers".into()),
        )
    } else {
        ("ok", None)
    };
    line(
        status,
        "zenoh-session",
        format!(
            "{mode}, listen {:?}, connect {:?}, multicast scouting and gossip off",
            s.listen, s.connect
        ),
        fix,
    );
    // Which link each priority takes, as if every endpoint were connected.
    let planned: Vec<Link> = crate::links::links(cfg, u32::MAX)
        .into_iter()
        .map(|l| Link {
            established: 1,
            ..l
        })
        .collect();
    let carried = |p| carrier(p, &planned).map(|l: &Link| l.endpoint.clone());
    let rt = carried(zenoh::qos::Priority::RealTime);
    let bulk = carried(zenoh::qos::Priority::Background);
    if planned.is_empty() {
        // No endpoints: the session finding above already says so.
    } else if rt == bulk {
        line(
            "warn",
            "zenoh-links",
            format!("real-time and background share one link ({}): real-time frames queue behind bulk bytes in its socket buffers", rt.unwrap_or_default()),
            Some("give each priority range an endpoint of its own, e.g. listen = [\"tcp/HOST:7447?prio=1-3\", \"tcp/HOST:7448?prio=4-7\"] and the peer connects to both".into()),
        );
    } else {
        let mut by = String::new();
        for p in PRIORITIES {
            let _ = write!(
                by,
                "{} → {}; ",
                priority_name(p),
                carried(p).unwrap_or_default()
            );
        }
        line(
            "ok",
            "zenoh-links",
            format!(
                "max_links {} per peer; {}bulk links' socket buffers {}",
                s.max_links,
                by,
                match s.bulk_socket_buffer {
                    0 => "the kernel's".to_string(),
                    n => format!("{n} bytes"),
                }
            ),
            None,
        );
    }
    if let Some(pid) = pid {
        let live = crate::zenoh_threads_of(pid);
        if live.is_empty() {
            line(
                "warn",
                "zenoh-live",
                format!("process {pid} runs no Zenoh threads"),
                Some("give the pid of the process that opened the bridge".into()),
            );
        }
        for z in live {
            line(
                "ok",
                "zenoh-live",
                format!("{} (tid {}): {}", z.name, z.tid, z.policy),
                None,
            );
        }
        for l in crate::links::links(cfg, pid) {
            let missing = l.priorities.is_some() && l.established == 0;
            line(
                if missing { "warn" } else { "ok" },
                "zenoh-live",
                l.to_string(),
                missing.then(|| {
                    "no connection on this priority link: its priorities go on another one; check the peer connects to it and max_links on both sides".into()
                }),
            );
        }
    }
    Doctor { text, failed }
}
