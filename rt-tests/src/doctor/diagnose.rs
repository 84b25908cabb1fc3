//! The checks as a list: which findings a report holds, in which order, with or without a
//! configuration, and the verdict line they end with.

use super::host::{
    cpuidle, governor, irqbalance, isolcpus, kernel, lock_privilege, nohz_full, preempt,
    rt_privilege, smt, throttle, timerslack,
};
use super::machine::{lane_sched, size, Machine};
use super::needs::{
    busy_time, cpus_need, default_need, lock_need, promotion, rt_need, LockEstimate,
};
use super::report::{ok, Finding, Report, Status};
use lfrt::os::Sched;
use lfrt::RuntimeConfig;
use std::path::Path;

/// The report for `m`, with the configuration's needs if one is given.
pub(crate) fn diagnose(m: &Machine, cfg: Option<(&Path, &RuntimeConfig)>) -> Report {
    let c = cfg.map(|(_, c)| c);
    let top_rt = c.map_or(1, |c| {
        c.lanes
            .iter()
            .filter_map(lane_sched)
            .map(|s| match s {
                Sched::Fifo(p) | Sched::Rr(p) => p,
                Sched::Other => 0,
                // SCHED_DEADLINE needs CAP_SYS_NICE (no RLIMIT_RTPRIO grants it); the probe
                // thread finds out. Ranked as the top RT priority here.
                Sched::Deadline { .. } => 99,
            })
            .max()
            .unwrap_or(0)
    });
    let lock = c.filter(|c| c.lock_memory).map(|c| LockEstimate::new(m, c));
    let mut f = vec![kernel(m), preempt(m)];
    f.extend(rt_privilege(m, top_rt));
    f.extend(lock_privilege(m, lock.as_ref()));
    f.push(throttle(m));
    f.push(timerslack(m));
    f.push(isolcpus(m));
    f.push(nohz_full(m));
    f.push(governor(m));
    f.push(smt(m));
    f.extend(cpuidle(m));
    f.push(irqbalance(m));
    match cfg {
        None => f.push(default_need(m)),
        Some((_, c)) => {
            f.push(rt_need(m, c));
            f.push(cpus_need(m, c));
            f.push(match &lock {
                Some(e) => lock_need(m, c, e),
                None => ok(
                    "lock_memory",
                    format!(
                        "lock_memory = false: pool memory is pre-faulted, not locked (locking it would need about {})",
                        size(LockEstimate::new(m, c).total())
                    ),
                ),
            });
            f.push(busy_time(m, c));
            f.push(promotion(c));
        }
    }
    f.push(verdict(&f, cfg.map(|(p, _)| p)));
    Report { findings: f }
}

fn verdict(f: &[Finding], config: Option<&Path>) -> Finding {
    let topics = |s: Status| {
        f.iter()
            .filter(|x| x.status == s)
            .map(|x| x.topic)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (fails, warns) = (topics(Status::Fail), topics(Status::Warn));
    let warned = if warns.is_empty() {
        String::new()
    } else {
        format!(" (warnings: {warns})")
    };
    let what = match config {
        Some(p) => p.display().to_string(),
        None => "SCHED_FIFO (the default need, no configuration given)".into(),
    };
    let flattened = f
        .iter()
        .filter(|x| x.flattens)
        .map(|x| x.topic)
        .collect::<Vec<_>>()
        .join(", ");
    if !fails.is_empty() {
        Finding {
            status: Status::Fail,
            topic: "verdict",
            text: format!("{what} cannot run as intended here: {fails}{warned}"),
            fix: None,
            flattens: false,
        }
    } else if !flattened.is_empty() {
        Finding {
            status: Status::Warn,
            topic: "verdict",
            text: format!(
                "{what} runs here, but not as intended: its real-time lanes are flattened to \
                 time-sharing ({flattened}){warned}"
            ),
            fix: None,
            flattens: false,
        }
    } else {
        ok(
            "verdict",
            format!("{what} can run as intended here{warned}"),
        )
    }
}
