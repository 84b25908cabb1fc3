//! What `lfrt-zenoh doctor CONFIG` reports: Zenoh's own threads and how the session is set up,
//! in `lfrt doctor`'s format (`ok`/`warn`/`fail`, topic, text, fix).

use crate::config::{Config, Mode};
use std::fmt::Write;

/// A report on a bridge configuration, and whether anything in it is a `fail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doctor {
    /// The report, one finding per line (a `fix:` line under each that is not `ok`).
    pub text: String,
    /// True if a finding is a `fail` (the command then exits 2).
    pub failed: bool,
}

/// Reports what `cfg` makes Zenoh run: its worker threads (always `SCHED_OTHER`: Zenoh
/// starts them with no hook to set a policy), whether `ZENOH_RUNTIME` (`env`, as read from the
/// environment) agrees, how they compare with `cpus` online CPUs, and the session's endpoints.
///
/// # Examples
/// ```
/// let cfg = lfrt_zenoh::Config::parse("[threads]\nrx = 1\n")?;
/// let d = lfrt_zenoh::doctor(&cfg, None, 2);
/// assert!(d.text.contains("ok   zenoh-threads rx 1, tx 1, app 1, acc 1, net 1"), "{}", d.text);
/// assert!(!d.failed);
/// # Ok::<(), lfrt_zenoh::Error>(())
/// ```
pub fn doctor(cfg: &Config, env: Option<&str>, cpus: usize) -> Doctor {
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
    line(
        "warn",
        "zenoh-policy",
        format!(
            "Zenoh's {} threads run at SCHED_OTHER: it starts them itself, with no hook to set a real-time policy; receive callbacks (rx) only hand samples to lanes, which run at their own priority",
            t.workers()
        ),
        Some("expected; keep [threads] small (rx carries the callbacks) and give latency-critical lanes CPUs of their own (`cpus`) if Zenoh's load disturbs them".into()),
    );
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
    Doctor { text, failed }
}
