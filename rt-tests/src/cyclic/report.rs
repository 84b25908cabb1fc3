//! Results of a run, taken from the runtime's telemetry, and their text forms: cyclictest's
//! status lines and histogram, and lfrt's summary.

use super::args::{TimerSpec, Unit};
use crate::measured;
use hdrhistogram::Histogram;
use lfrt::telemetry::{new_histogram, Histograms, LatencySummary, Recorded};
use lfrt::GroupMetrics;
use std::fmt::Write as _;
use std::io::{self, Write};

/// A cyclictest-style histogram: `(bucket, count)` for non-zero buckets in increasing order,
/// bucket = latency in the output unit, truncated (latency as in [`LatencySummary`]: a telemetry
/// bucket's midpoint, so a value within 0.05% of a µs boundary may land one bucket off).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    /// Non-zero buckets. With a limit, values at or above it are counted in the last bucket
    /// (`limit - 1`), so the counts always sum to the number of values.
    pub counts: Vec<(u64, u64)>,
    /// Values at or above the limit (cyclictest's "Histogram Overflows").
    pub overflow: u64,
}

impl Buckets {
    /// Buckets of `h` in `unit`, clamped below `limit` if given.
    pub fn of(h: &Histogram<u64>, unit: Unit, limit: Option<u64>) -> Buckets {
        let mut b = Buckets::default();
        for v in h.iter_recorded() {
            let mut bucket = unit.of(h.median_equivalent(v.value_iterated_to()));
            let n = v.count_at_value();
            if let Some(limit) = limit {
                if bucket >= limit {
                    b.overflow += n;
                    bucket = limit - 1;
                }
            }
            match b.counts.last_mut() {
                Some((last, c)) if *last == bucket => *c += n,
                _ => b.counts.push((bucket, n)),
            }
        }
        b
    }

    /// Sum of the counts.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&(_, c)| c).sum()
    }
}

/// The final results of one timer.
#[derive(Debug, Clone)]
pub struct TimerResult {
    /// `T:` index.
    pub index: usize,
    /// Its group and period.
    pub spec: TimerSpec,
    /// Group name.
    pub group: String,
    /// Group priority.
    pub priority: u8,
    /// Handler-entry latency (expected expiry → handler entry).
    pub latency: LatencySummary,
    /// Expected expiry → leader awake.
    pub wake: LatencySummary,
    /// Leader awake → handler entry (promotion, demultiplexing).
    pub dispatch: LatencySummary,
    /// Latency histogram.
    pub buckets: Buckets,
    /// Missed periods (expirations beyond the first per cycle).
    pub missed_periods: u64,
    /// Cycles the handler counted itself (equals `latency.count` unless samples were dropped).
    pub handled: u64,
    /// Kernel tid of the pool thread that ran the last cycle (0 if none).
    pub last_tid: i32,
    /// CPU the timer's group is pinned to, or -1.
    pub cpu: i32,
}

/// The final results of one group (its timers' samples merged).
#[derive(Debug, Clone)]
pub struct GroupResult {
    /// The runtime's counters for the group.
    pub metrics: GroupMetrics,
    /// Policy name.
    pub policy: &'static str,
    /// CPUs the threads were pinned to (`None` = not pinned).
    pub cpus: Option<Vec<usize>>,
    /// `T:` indices of its timers.
    pub timers: Vec<usize>,
    /// Merged latency.
    pub latency: LatencySummary,
    /// Merged wake-up part.
    pub wake: LatencySummary,
    /// Merged dispatch part.
    pub dispatch: LatencySummary,
    /// Merged histogram.
    pub buckets: Buckets,
    /// Overruns of its timers.
    pub missed_periods: u64,
    /// Timers that ran but have no histograms of their own (beyond
    /// [`lfrt::telemetry::MAX_TIMER_HISTOGRAMS`]): their samples count only in the group's figures.
    pub untracked_timers: usize,
}

/// What `collect` needs to know of each registered timer.
#[derive(Debug, Clone)]
pub(crate) struct TimerKey {
    pub(crate) spec: TimerSpec,
    pub(crate) token: u64,
    pub(crate) handled: u64,
}

/// Per-group facts that are not in the telemetry.
#[derive(Debug, Clone)]
pub(crate) struct GroupInfo {
    pub(crate) metrics: GroupMetrics,
    pub(crate) policy: &'static str,
    pub(crate) cpus: Option<Vec<usize>>,
    /// Kernel tids of the pool threads, by thread index.
    pub(crate) tids: Vec<i32>,
}

fn timer_hist(rec: &Recorded, group: usize, token: u64) -> Option<&Histograms> {
    rec.timers.get(&(group as u16, token))
}

/// Builds the per-timer and per-group results from the telemetry.
pub(crate) fn collect(
    rec: &Recorded,
    keys: &[TimerKey],
    groups: &[GroupInfo],
    unit: Unit,
    limit: Option<u64>,
) -> (Vec<TimerResult>, Vec<GroupResult>) {
    let timers: Vec<TimerResult> = keys
        .iter()
        .enumerate()
        .map(|(index, k)| {
            let g = &groups[k.spec.group];
            let mut t = TimerResult {
                index,
                spec: k.spec.clone(),
                group: g.metrics.name.clone(),
                priority: g.metrics.priority,
                latency: LatencySummary::default(),
                wake: LatencySummary::default(),
                dispatch: LatencySummary::default(),
                buckets: Buckets::default(),
                missed_periods: 0,
                handled: k.handled,
                last_tid: 0,
                cpu: match g.cpus.as_deref() {
                    Some([c]) => *c as i32,
                    _ => -1,
                },
            };
            if let Some(h) = timer_hist(rec, k.spec.group, k.token) {
                t.latency = LatencySummary::of(&h.latency);
                t.wake = LatencySummary::of(&h.wake);
                t.dispatch = LatencySummary::of(&h.dispatch);
                t.buckets = Buckets::of(&h.latency, unit, limit);
                t.missed_periods = h.missed_periods;
                t.last_tid = g.tids.get(h.last_thread as usize).copied().unwrap_or(0);
            }
            t
        })
        .collect();
    let groups = groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let (mut latency, mut wake, mut dispatch) =
                (new_histogram(), new_histogram(), new_histogram());
            let mut missed_periods = 0;
            let mut members = Vec::new();
            let mut untracked_timers = 0;
            let untracked = rec.untracked_timers.get(&(gi as u16));
            for (i, k) in keys.iter().enumerate().filter(|(_, k)| k.spec.group == gi) {
                members.push(i);
                if k.handled > 0 && timer_hist(rec, gi, k.token).is_none() {
                    untracked_timers += 1;
                }
            }
            let own = members
                .iter()
                .filter_map(|&i| timer_hist(rec, gi, keys[i].token));
            for h in own.chain(untracked) {
                // Same bounds on both sides: adding cannot fail.
                let _ = latency.add(&h.latency);
                let _ = wake.add(&h.wake);
                let _ = dispatch.add(&h.dispatch);
                missed_periods += h.missed_periods;
            }
            GroupResult {
                metrics: g.metrics.clone(),
                policy: g.policy,
                cpus: g.cpus.clone(),
                timers: members,
                latency: LatencySummary::of(&latency),
                wake: LatencySummary::of(&wake),
                dispatch: LatencySummary::of(&dispatch),
                buckets: Buckets::of(&latency, unit, limit),
                missed_periods,
                untracked_timers,
            }
        })
        .collect();
    (timers, groups)
}

/// One live or final line in cyclictest's format.
pub(crate) struct Status {
    pub(crate) index: usize,
    pub(crate) tid: i32,
    pub(crate) priority: u8,
    pub(crate) interval_us: u64,
    pub(crate) cycles: u64,
    pub(crate) min_ns: u64,
    pub(crate) act_ns: u64,
    pub(crate) avg_ns: f64,
    pub(crate) max_ns: u64,
}

impl Status {
    /// The status of one timer from its telemetry (all zero before its first cycle).
    pub(crate) fn of(
        index: usize,
        h: Option<&Histograms>,
        tids: &[i32],
        priority: u8,
        interval_us: u64,
    ) -> Status {
        let mut s = Status {
            index,
            tid: 0,
            priority,
            interval_us,
            cycles: 0,
            min_ns: 0,
            act_ns: 0,
            avg_ns: 0.0,
            max_ns: 0,
        };
        if let Some(h) = h.filter(|h| !h.latency.is_empty()) {
            s.tid = tids.get(h.last_thread as usize).copied().unwrap_or(0);
            s.cycles = h.latency.len();
            s.min_ns = h.latency.median_equivalent(h.latency.min());
            s.act_ns = h.last_ns;
            s.avg_ns = h.latency.mean();
            s.max_ns = h.latency.median_equivalent(h.latency.max());
        }
        s
    }

    /// `T: 0 ( 1234) P:80 I:1000 C:   1000 Min:      3 Act:    5 Avg:    4 Max:      10`,
    /// field widths as cyclictest's (wider Act/Avg with `-N`).
    pub(crate) fn line(&self, unit: Unit) -> String {
        let (min, act, avg, max) = (
            unit.of(self.min_ns),
            unit.of(self.act_ns),
            unit.of_f(self.avg_ns) as u64,
            unit.of(self.max_ns),
        );
        // cyclictest widens Act and Avg in ns mode.
        let w = match unit {
            Unit::Us => 5,
            Unit::Ns => 8,
        };
        format!(
            "T:{:2} ({:5}) P:{:2} I:{} C:{:7} Min:{:7} Act:{act:w$} Avg:{avg:w$} Max:{:8}",
            self.index, self.tid, self.priority, self.interval_us, self.cycles, min, max
        )
    }
}

/// cyclictest's header line above the status lines: `policy: fifo: loadavg: ...`.
pub(crate) fn policy_line(policy: &str) -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!("policy: {policy}: loadavg: {}          ", load.trim())
}

/// Writes the histogram as cyclictest's `-h` does: one row per bucket below `limit` with
/// each timer's in-range count, then `#` lines with totals, min/avg/max and overflows.
pub(crate) fn write_histogram(
    out: &mut impl Write,
    timers: &[TimerResult],
    unit: Unit,
    limit: u64,
) -> io::Result<()> {
    writeln!(out, "# Histogram")?;
    let mut next: Vec<usize> = vec![0; timers.len()];
    for bucket in 0..limit {
        write!(out, "{bucket:06} ")?;
        for (j, t) in timers.iter().enumerate() {
            let mut c = 0;
            if let Some(&(b, n)) = t.buckets.counts.get(next[j]) {
                if b == bucket {
                    c = n;
                    next[j] += 1;
                    if bucket == limit - 1 {
                        c -= t.buckets.overflow;
                    }
                }
            }
            write!(out, "{c:06}")?;
            if j + 1 < timers.len() {
                write!(out, "\t")?;
            }
        }
        writeln!(out)?;
    }
    let row =
        |out: &mut dyn Write, label: &str, f: &dyn Fn(&TimerResult) -> String| -> io::Result<()> {
            write!(out, "# {label}:")?;
            for t in timers {
                write!(out, " {}", f(t))?;
            }
            writeln!(out)
        };
    row(out, "Total", &|t| {
        format!("{:09}", t.buckets.total() - t.buckets.overflow)
    })?;
    row(out, "Min Latencies", &|t| {
        format!("{:05}", unit.of(t.latency.min_ns))
    })?;
    row(out, "Avg Latencies", &|t| {
        format!("{:05}", unit.of_f(t.latency.avg_ns) as u64)
    })?;
    row(out, "Max Latencies", &|t| {
        format!("{:05}", unit.of(t.latency.max_ns))
    })?;
    row(out, "Histogram Overflows", &|t| {
        format!("{:05}", t.buckets.overflow)
    })?;
    // lfrt does not keep the cycle numbers of overflows; cyclictest prints this form when it
    // has not recorded them either.
    writeln!(out, "# Histogram Overflow at cycle number:")?;
    for t in timers {
        write!(out, "# Thread {}:", t.index)?;
        if t.buckets.overflow > 0 {
            write!(out, " # {:05} others", t.buckets.overflow)?;
        }
        writeln!(out)?;
    }
    writeln!(out)
}

fn fmt_value(unit: Unit, ns: f64) -> String {
    match unit {
        Unit::Us => format!("{:.1}", ns / 1000.0),
        Unit::Ns => format!("{:.0}", ns),
    }
}

fn figure_cells(
    s: &mut String,
    unit: Unit,
    f: &LatencySummary,
    wake: &LatencySummary,
    dispatch: &LatencySummary,
) {
    for v in [
        f.min_ns as f64,
        f.avg_ns,
        f.p50_ns as f64,
        f.p99_ns as f64,
        f.p999_ns as f64,
        f.max_ns as f64,
    ] {
        let _ = write!(s, " {:>8}", fmt_value(unit, v));
    }
    for v in [
        wake.avg_ns,
        wake.p99_ns as f64,
        dispatch.avg_ns,
        dispatch.p99_ns as f64,
    ] {
        let _ = write!(s, " {:>8}", fmt_value(unit, v));
    }
}

/// lfrt's summary: per timer and per group, min/avg/p50/p99/p99.9/max and the split into
/// wake-up and dispatch. Every line starts with `#`, so tools reading cyclictest's output
/// skip it.
pub(crate) fn summary(timers: &[TimerResult], groups: &[GroupResult], unit: Unit) -> String {
    let mut s = String::new();
    let u = unit.name();
    let _ = writeln!(s, "# lfrt cyclic summary ({u}): latency = expected expiry -> handler entry = wake (expiry -> leader awake) + dispatch (leader awake -> handler entry)");
    let head = format!(
        "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "min", "avg", "p50", "p99", "p99.9", "max", "wake_avg", "wake_p99", "disp_avg", "disp_p99"
    );
    let _ = writeln!(
        s,
        "# {:>3} {:<12} {:>4} {:>8} {:>9} {:>8} {head}",
        "T", "group", "prio", "interval", "cycles", "missed_periods"
    );
    for t in timers {
        let _ = write!(
            s,
            "# {:>3} {:<12} {:>4} {:>8} {:>9} {:>8}",
            t.index, t.group, t.priority, t.spec.interval_us, t.latency.count, t.missed_periods
        );
        figure_cells(&mut s, unit, &t.latency, &t.wake, &t.dispatch);
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "# {:<16} {:>4} {:>7} {:>6} {:>9} {:>8} {head}",
        "group", "prio", "policy", "pool", "cycles", "missed_periods"
    );
    for g in groups {
        let m = &g.metrics;
        let _ = write!(
            s,
            "# {:<16} {:>4} {:>7} {:>6} {:>9} {:>8}",
            m.name, m.priority, g.policy, m.threads, g.latency.count, g.missed_periods
        );
        figure_cells(&mut s, unit, &g.latency, &g.wake, &g.dispatch);
        s.push('\n');
    }
    for g in groups {
        let m = &g.metrics;
        let _ = writeln!(
            s,
            "# group {}: dispatched={} promotions={} no_follower={} pool_allocations={} pool_minor_faults={} samples_dropped={}",
            m.name, m.dispatched, m.promotions, m.promotions_no_follower, measured(m.pool_allocations), measured(m.pool_minor_faults), m.samples_dropped
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = new_histogram();
        for &v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn buckets_truncate_to_the_unit_and_sum_to_the_count() {
        let h = hist(&[999, 1000, 1999, 2000, 2500, 7_000, 15_300, 15_900, 250_000]);
        let b = Buckets::of(&h, Unit::Us, None);
        assert_eq!(
            b.counts,
            [(0, 1), (1, 2), (2, 2), (7, 1), (15, 2), (250, 1)]
        );
        // 98,990 ns shares a 64 ns telemetry bucket (98,944..99,008) with 99,000 ns; the
        // bucket's midpoint decides.
        assert_eq!(
            Buckets::of(&hist(&[98_990, 99_000]), Unit::Us, None).counts,
            [(98, 2)]
        );
        assert_eq!((b.total(), b.overflow), (9, 0));
        let ns = Buckets::of(&h, Unit::Ns, None);
        assert_eq!(ns.total(), 9);
        assert_eq!(ns.counts[0], (999, 1), "exact below 2048 ns");
    }

    #[test]
    fn overflows_clamp_into_the_last_bucket_and_are_counted() {
        let h = hist(&[1000, 3000, 4000, 5500, 90_000]);
        let b = Buckets::of(&h, Unit::Us, Some(4));
        assert_eq!(b.counts, [(1, 1), (3, 4)]);
        assert_eq!((b.total(), b.overflow), (5, 3));
    }

    #[test]
    fn figures_agree_with_buckets() {
        let values: Vec<u64> = (1..=1000).map(|i| i * 100).collect();
        let f = LatencySummary::of(&hist(&values));
        assert_eq!(f.count, 1000);
        assert_eq!(f.min_ns, 100);
        assert!((f.avg_ns - 50_050.0).abs() < 50.0, "{}", f.avg_ns);
        assert_eq!(f.p50_ns, 50_000);
        assert_eq!(
            f.p99_ns, 98_976,
            "99,000 ns is in the 64 ns bucket 98,944..99,008"
        );
        assert_eq!(f.max_ns, 100_000);
        let b = Buckets::of(&hist(&values), Unit::Us, None);
        assert_eq!(
            (b.counts[0].0, b.counts.last().unwrap().0),
            (Unit::Us.of(f.min_ns), Unit::Us.of(f.max_ns))
        );
        assert_eq!(
            LatencySummary::of(&new_histogram()),
            LatencySummary::default()
        );
    }

    fn result(index: usize, values: &[u64], limit: Option<u64>) -> TimerResult {
        let h = hist(values);
        TimerResult {
            index,
            spec: TimerSpec {
                group: 0,
                interval_us: 1000 + 500 * index as u64,
                phase_us: 0,
            },
            group: "cyclic".into(),
            priority: 80,
            latency: LatencySummary::of(&h),
            wake: LatencySummary::default(),
            dispatch: LatencySummary::default(),
            buckets: Buckets::of(&h, Unit::Us, limit),
            missed_periods: 0,
            handled: values.len() as u64,
            last_tid: 100 + index as i32,
            cpu: -1,
        }
    }

    #[test]
    fn text_histogram_has_cyclictests_layout() {
        let timers = [
            result(0, &[1200, 2100, 2900], Some(4)),
            result(1, &[3100, 3900, 8000], Some(4)),
        ];
        let mut out = Vec::new();
        write_histogram(&mut out, &timers, Unit::Us, 4).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected = "# Histogram\n\
                        000000 000000\t000000\n\
                        000001 000001\t000000\n\
                        000002 000002\t000000\n\
                        000003 000000\t000002\n\
                        # Total: 000000003 000000002\n\
                        # Min Latencies: 00001 00003\n\
                        # Avg Latencies: 00002 00005\n\
                        # Max Latencies: 00002 00008\n\
                        # Histogram Overflows: 00000 00001\n\
                        # Histogram Overflow at cycle number:\n\
                        # Thread 0:\n\
                        # Thread 1: # 00001 others\n\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn status_lines_have_cyclictests_widths() {
        let s = Status {
            index: 0,
            tid: 4242,
            priority: 80,
            interval_us: 1000,
            cycles: 300,
            min_ns: 6_100,
            act_ns: 8_900,
            avg_ns: 11_500.0,
            max_ns: 102_000,
        };
        assert_eq!(
            s.line(Unit::Us),
            "T: 0 ( 4242) P:80 I:1000 C:    300 Min:      6 Act:    8 Avg:   11 Max:     102"
        );
        assert_eq!(
            s.line(Unit::Ns),
            "T: 0 ( 4242) P:80 I:1000 C:    300 Min:   6100 Act:    8900 Avg:   11500 Max:  102000"
        );
    }
}
