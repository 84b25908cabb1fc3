//! A report as the table `lfrt inversion` prints on stdout: the plan's settings, one row per
//! (architecture, N), the lock experiment's rows and the pool hygiene counters.

use super::plan::Plan;
use super::results::Report;
use crate::measured;
use std::fmt::Write as _;

/// The stdout table of a report.
pub fn table(plan: &Plan, report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# lfrt inversion: work_us={} duration_s={} warmup_ms={} rate={}/s interval_us={} low_rate={}/s/stream low_budget={} threads={} batch={} prio high={} low={} server_cpu={} client_cpu={} rt={:?}",
        plan.work_ns / 1000,
        plan.duration.as_secs_f64(),
        plan.warmup.as_millis(),
        plan.rate,
        plan.interval_ns / 1000,
        plan.low_rate,
        plan.low_budget,
        plan.threads,
        plan.batch,
        plan.high_prio,
        plan.low_prio,
        plan.server_cpu,
        plan.client_cpu,
        plan.rt
    );
    let _ = writeln!(
        s,
        "{:<12} {:>5} {:>7} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>8} {:>8} {:>9}",
        "arch",
        "n_low",
        "count",
        "min_us",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "std_us",
        "low_off/s",
        "low_msg/s",
        "lost_hi",
        "lost_lo",
        "udp_p99"
    );
    for r in &report.experiments {
        let h = &r.high;
        let _ = writeln!(
            s,
            "{:<12} {:>5} {:>7} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>10.0} {:>10.0} {:>8} {:>8} {:>9.1}",
            r.architecture.name(),
            r.n_low,
            h.count,
            h.min_us,
            h.p50_us,
            h.p99_us,
            h.p999_us,
            h.max_us,
            h.stddev_us,
            r.low_rate_per_stream * r.n_low as f64,
            r.low_throughput,
            r.lost_high,
            r.lost - r.lost_high,
            r.high_udp.p99_us
        );
    }
    if !report.lock.is_empty() {
        let _ = writeln!(
            s,
            "\n# lock inversion: cs_us={} hog_ms={} prio high={} hog={} low={}",
            plan.lock.cs_ns / 1000,
            plan.lock.hog.as_millis(),
            plan.high_prio,
            plan.mid_prio(),
            plan.low_prio
        );
        let _ = writeln!(
            s,
            "{:<6} {:>5} {:>12} {:>12} {:>12}",
            "mutex", "reps", "block_p50_us", "block_p99_us", "block_max_us"
        );
        for l in &report.lock {
            let _ = writeln!(
                s,
                "{:<6} {:>5} {:>12.1} {:>12.1} {:>12.1}",
                l.mutex, l.reps, l.high_block_p50_us, l.high_block_p99_us, l.high_block_max_us
            );
        }
    }
    let _ = writeln!(
        s,
        "\npool_allocations={} pool_minor_faults={}",
        measured(report.pool_allocations),
        measured(report.pool_minor_faults)
    );
    s
}
