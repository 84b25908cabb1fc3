//! Results of a run, taken from the timers' own statistics and histograms, and their text
//! forms: cyclictest's status lines and histogram, and lfrt's summary.

use super::args::{TimerSpec, Unit};
use super::timer::{Histograms, Snapshot, TimerStats};
use crate::measured;
use hdrhistogram::Histogram;
use lfrt::telemetry::{new_histogram, LatencySummary};
use lfrt::LaneMetrics;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A cyclictest-style histogram: `(bucket, count)` for non-zero buckets in increasing order,
/// bucket = latency in the output unit, truncated (latency as in [`LatencySummary`]: a histogram
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
    /// Its lane and period.
    pub spec: TimerSpec,
    /// Lane name.
    pub lane: String,
    /// Lane priority.
    pub priority: u8,
    /// Handler-entry latency (expected expiry → handler entry), from the timer's own
    /// histogram: `latency.count` = `cycles` − `unrecorded`.
    pub latency: LatencySummary,
    /// Expected expiry → leader awake.
    pub wake: LatencySummary,
    /// Leader awake → handler entry (promotion, demultiplexing).
    pub dispatch: LatencySummary,
    /// Latency histogram.
    pub buckets: Buckets,
    /// Missed periods (expirations beyond the first per cycle).
    pub missed_periods: u64,
    /// Cycles run (handler runs that consumed an expiry), whether or not the timer has
    /// histograms of its own.
    pub cycles: u64,
    /// Cycles whose sample is not in this timer's own histogram and percentiles: all of them
    /// for a timer from `T:` [`super::MAX_TIMER_HISTOGRAMS`] on (no histograms of its own;
    /// its samples are in its lane's), 0 otherwise. Its min, avg and max cover every cycle.
    pub unrecorded: u64,
    /// Kernel tid of the pool thread that ran the last cycle (0 if none).
    pub last_tid: i32,
    /// CPU the timer's lane is pinned to, or -1.
    pub cpu: i32,
}

/// The final results of one lane (its timers' samples merged).
#[derive(Debug, Clone)]
pub struct LaneResult {
    /// The runtime's counters for the lane.
    pub metrics: LaneMetrics,
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
    /// [`super::MAX_TIMER_HISTOGRAMS`]): their samples count in the lane's figures.
    pub untracked_timers: usize,
}

/// What `collect` needs to know of each registered timer.
#[derive(Debug, Clone)]
pub(crate) struct TimerKey {
    pub(crate) spec: TimerSpec,
    pub(crate) stats: Arc<TimerStats>,
}

/// Per-lane facts that are not in the timers' statistics.
#[derive(Debug, Clone)]
pub(crate) struct LaneInfo {
    pub(crate) metrics: LaneMetrics,
    pub(crate) policy: &'static str,
    pub(crate) cpus: Option<Vec<usize>>,
    /// The histograms shared by its timers beyond [`super::MAX_TIMER_HISTOGRAMS`], if any.
    pub(crate) shared: Option<Arc<Histograms>>,
}

/// The three histograms of `h` as hdrhistograms.
struct Converted {
    latency: Histogram<u64>,
    wake: Histogram<u64>,
    dispatch: Histogram<u64>,
}

impl Converted {
    fn of(h: &Histograms) -> Converted {
        Converted {
            latency: h.latency.to_histogram(),
            wake: h.wake.to_histogram(),
            dispatch: h.dispatch.to_histogram(),
        }
    }
}

/// Builds the per-timer and per-lane results from the timers' statistics (read after the
/// runtime's shutdown, so they are final).
pub(crate) fn collect(
    keys: &[TimerKey],
    lanes: &[LaneInfo],
    unit: Unit,
    limit: Option<u64>,
) -> (Vec<TimerResult>, Vec<LaneResult>) {
    let own: Vec<Option<Converted>> = keys
        .iter()
        .map(|k| {
            k.stats
                .own_histograms
                .then(|| Converted::of(&k.stats.histograms))
        })
        .collect();
    let timers: Vec<TimerResult> = keys
        .iter()
        .zip(&own)
        .enumerate()
        .map(|(index, (k, own))| {
            let g = &lanes[k.spec.lane];
            let s = &k.stats;
            let cycles = s.cycles.load(Relaxed);
            let mut t = TimerResult {
                index,
                spec: k.spec.clone(),
                lane: g.metrics.name.clone(),
                priority: g.metrics.priority,
                latency: LatencySummary::default(),
                wake: LatencySummary::default(),
                dispatch: LatencySummary::default(),
                buckets: Buckets::default(),
                missed_periods: s.missed_periods.load(Relaxed),
                cycles,
                unrecorded: cycles,
                last_tid: s.last_tid.load(Relaxed),
                cpu: match g.cpus.as_deref() {
                    Some([c]) => *c as i32,
                    _ => -1,
                },
            };
            if let Some(h) = own {
                t.latency = LatencySummary::of(&h.latency);
                t.wake = LatencySummary::of(&h.wake);
                t.dispatch = LatencySummary::of(&h.dispatch);
                t.buckets = Buckets::of(&h.latency, unit, limit);
                t.unrecorded = cycles - t.latency.count;
            } else if cycles > 0 {
                // No histogram of its own: the exact figures it kept itself, min and max
                // reported as the histograms would report them.
                let snap = s.snapshot();
                t.latency = LatencySummary {
                    count: 0,
                    min_ns: snap.min_ns,
                    avg_ns: snap.avg_ns,
                    max_ns: snap.max_ns,
                    ..LatencySummary::default()
                };
            }
            t
        })
        .collect();
    let lanes = lanes
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let (mut latency, mut wake, mut dispatch) =
                (new_histogram(), new_histogram(), new_histogram());
            let mut missed_periods = 0;
            let mut members = Vec::new();
            let mut untracked_timers = 0;
            let shared = g.shared.as_deref().map(Converted::of);
            for (i, k) in keys.iter().enumerate().filter(|(_, k)| k.spec.lane == gi) {
                members.push(i);
                missed_periods += timers[i].missed_periods;
                if !k.stats.own_histograms && timers[i].cycles > 0 {
                    untracked_timers += 1;
                }
            }
            let own = members.iter().filter_map(|&i| own[i].as_ref());
            for h in own.chain(shared.as_ref()) {
                // Same bounds on both sides: adding cannot fail.
                let _ = latency.add(&h.latency);
                let _ = wake.add(&h.wake);
                let _ = dispatch.add(&h.dispatch);
            }
            LaneResult {
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
    (timers, lanes)
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
    /// The status of one timer (all zero before its first cycle).
    pub(crate) fn of(index: usize, snap: Snapshot, priority: u8, interval_us: u64) -> Status {
        Status {
            index,
            tid: snap.tid,
            priority,
            interval_us,
            cycles: snap.cycles,
            min_ns: snap.min_ns,
            act_ns: snap.act_ns,
            avg_ns: snap.avg_ns,
            max_ns: snap.max_ns,
        }
    }

    /// The final status of a timer: its figures as the summary and JSON give them.
    pub(crate) fn of_result(t: &TimerResult, last_ns: u64) -> Status {
        Status {
            index: t.index,
            tid: t.last_tid,
            priority: t.priority,
            interval_us: t.spec.interval_us,
            cycles: t.cycles,
            min_ns: t.latency.min_ns,
            act_ns: last_ns,
            avg_ns: t.latency.avg_ns,
            max_ns: t.latency.max_ns,
        }
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

/// lfrt's summary: per timer and per lane, min/avg/p50/p99/p99.9/max and the split into
/// wake-up and dispatch. Every line starts with `#`, so tools reading cyclictest's output
/// skip it.
pub(crate) fn summary(timers: &[TimerResult], lanes: &[LaneResult], unit: Unit) -> String {
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
        "T", "lane", "prio", "interval", "cycles", "missed_periods"
    );
    for t in timers {
        let _ = write!(
            s,
            "# {:>3} {:<12} {:>4} {:>8} {:>9} {:>8}",
            t.index, t.lane, t.priority, t.spec.interval_us, t.cycles, t.missed_periods
        );
        figure_cells(&mut s, unit, &t.latency, &t.wake, &t.dispatch);
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "# {:<16} {:>4} {:>7} {:>6} {:>9} {:>8} {head}",
        "lane", "prio", "policy", "pool", "cycles", "missed_periods"
    );
    for g in lanes {
        let m = &g.metrics;
        let _ = write!(
            s,
            "# {:<16} {:>4} {:>7} {:>6} {:>9} {:>8}",
            m.name, m.priority, g.policy, m.threads, g.latency.count, g.missed_periods
        );
        figure_cells(&mut s, unit, &g.latency, &g.wake, &g.dispatch);
        s.push('\n');
    }
    for g in lanes {
        let m = &g.metrics;
        let _ = writeln!(
            s,
            "# lane {}: dispatched={} promotions={} no_follower={} pool_allocations={} pool_minor_faults={} untracked_timers={}",
            m.name, m.dispatched, m.promotions, m.promotions_no_follower, measured(m.pool_allocations), measured(m.pool_minor_faults), g.untracked_timers
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
                lane: 0,
                interval_us: 1000 + 500 * index as u64,
                phase_us: 0,
            },
            lane: "cyclic".into(),
            priority: 80,
            latency: LatencySummary::of(&h),
            wake: LatencySummary::default(),
            dispatch: LatencySummary::default(),
            buckets: Buckets::of(&h, Unit::Us, limit),
            missed_periods: 0,
            cycles: values.len() as u64,
            unrecorded: 0,
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
