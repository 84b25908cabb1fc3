//! `--json`: cyclictest's document (rt-tests `rt_write_json`) plus lfrt's fields.
//!
//! Fields are written in declaration order (serde derives), and the `thread` and `histogram`
//! maps in increasing key order, as cyclictest writes them.

use super::args::Unit;
use super::report::{Buckets, LaneResult, TimerResult};
use lfrt::telemetry::LatencySummary;
use lfrt::{LaneMetrics, StartReport};
use serde::{Serialize, Serializer};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Version of the document's shape (cyclictest's is 1; lfrt's fields are additions).
pub const FILE_VERSION: u32 = 1;

/// A map serialized in the order of its entries.
struct Ordered<K, V>(Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Ordered<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

fn histogram(b: &Buckets) -> Ordered<u64, u64> {
    Ordered(b.counts.clone())
}

/// Rounds to 2 decimals, as cyclictest prints `avg` (`%.2f`).
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[derive(Serialize)]
struct SysInfo {
    sysname: String,
    nodename: String,
    release: String,
    version: String,
    machine: &'static str,
    realtime: u8,
}

fn proc_value(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl SysInfo {
    fn read() -> SysInfo {
        SysInfo {
            sysname: proc_value("/proc/sys/kernel/ostype"),
            nodename: proc_value("/proc/sys/kernel/hostname"),
            release: proc_value("/proc/sys/kernel/osrelease"),
            version: proc_value("/proc/sys/kernel/version"),
            machine: std::env::consts::ARCH,
            realtime: u8::from(proc_value("/sys/kernel/realtime") == "1"),
        }
    }
}

/// min/avg/percentiles/max of one latency component, in the output unit.
#[derive(Serialize)]
struct Split {
    min: f64,
    avg: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Split {
    fn of(f: &LatencySummary, unit: Unit) -> Split {
        let v = |ns: u64| round2(unit.of_f(ns as f64));
        Split {
            min: v(f.min_ns),
            avg: round2(unit.of_f(f.avg_ns)),
            p50: v(f.p50_ns),
            p99: v(f.p99_ns),
            p999: v(f.p999_ns),
            max: v(f.max_ns),
        }
    }
}

#[derive(Serialize)]
struct Thread {
    // cyclictest's fields, in its order.
    histogram: Ordered<u64, u64>,
    cycles: u64,
    min: u64,
    max: u64,
    avg: f64,
    cpu: i32,
    node: i32,
    // lfrt's.
    p50: f64,
    p99: f64,
    p999: f64,
    missed_periods: u64,
    hist_overflow: u64,
    lane: String,
    priority: u8,
    interval: u64,
    phase: u64,
    tid: i32,
    wake: Split,
    dispatch: Split,
    /// Cycles whose sample is not in this thread's `histogram` and percentiles (see
    /// [`TimerResult::unrecorded`]).
    unrecorded: u64,
}

impl Thread {
    fn of(t: &TimerResult, unit: Unit) -> Thread {
        let s = Split::of(&t.latency, unit);
        Thread {
            histogram: histogram(&t.buckets),
            cycles: t.cycles,
            min: unit.of(t.latency.min_ns),
            max: unit.of(t.latency.max_ns),
            avg: s.avg,
            cpu: t.cpu,
            node: -1,
            p50: s.p50,
            p99: s.p99,
            p999: s.p999,
            missed_periods: t.missed_periods,
            hist_overflow: t.buckets.overflow,
            lane: t.lane.clone(),
            priority: t.priority,
            interval: t.spec.interval_us,
            phase: t.spec.phase_us,
            tid: t.last_tid,
            wake: Split::of(&t.wake, unit),
            dispatch: Split::of(&t.dispatch, unit),
            unrecorded: t.unrecorded,
        }
    }
}

#[derive(Serialize)]
struct Lane {
    name: String,
    priority: u8,
    policy: &'static str,
    pool_threads: usize,
    cpus: Option<Vec<usize>>,
    timers: Vec<usize>,
    cycles: u64,
    min: u64,
    max: u64,
    avg: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    missed_periods: u64,
    hist_overflow: u64,
    histogram: Ordered<u64, u64>,
    wake: Split,
    dispatch: Split,
    dispatched: u64,
    promotions: u64,
    promotions_no_follower: u64,
    pool_allocations: Option<u64>,
    pool_minor_faults: Option<u64>,
    untracked_timers: usize,
}

impl Lane {
    /// `cycles` counts its timers' loops; every one of them is in its histogram.
    fn of(g: &LaneResult, unit: Unit) -> Lane {
        let s = Split::of(&g.latency, unit);
        let m = &g.metrics;
        Lane {
            name: m.name.clone(),
            priority: m.priority,
            policy: g.policy,
            pool_threads: m.threads,
            cpus: g.cpus.clone(),
            timers: g.timers.clone(),
            cycles: g.latency.count,
            min: unit.of(g.latency.min_ns),
            max: unit.of(g.latency.max_ns),
            avg: s.avg,
            p50: s.p50,
            p99: s.p99,
            p999: s.p999,
            missed_periods: g.missed_periods,
            hist_overflow: g.buckets.overflow,
            histogram: histogram(&g.buckets),
            wake: Split::of(&g.wake, unit),
            dispatch: Split::of(&g.dispatch, unit),
            dispatched: m.dispatched,
            promotions: m.promotions,
            promotions_no_follower: m.promotions_no_follower,
            pool_allocations: m.pool_allocations,
            pool_minor_faults: m.pool_minor_faults,
            untracked_timers: g.untracked_timers,
        }
    }
}

#[derive(Serialize)]
struct Document {
    // cyclictest's envelope and fields, in its order.
    file_version: u32,
    cmdline: String,
    lfrt_version: &'static str,
    start_time: String,
    end_time: String,
    return_code: i32,
    sysinfo: SysInfo,
    num_threads: usize,
    resolution_in_ns: u8,
    thread: Ordered<String, Thread>,
    // lfrt's.
    unit: &'static str,
    histogram_buckets: Option<u64>,
    duration_s: f64,
    stopped_by: &'static str,
    rt_applied: bool,
    memory_locked: bool,
    counting_allocations: bool,
    missed_periods: u64,
    /// Over the lanes that measured; `null` if none did (see `LaneMetrics`).
    pool_allocations: Option<u64>,
    pool_minor_faults: Option<u64>,
    /// Loops run whose sample is in no histogram at all: the timers' `cycles` minus the
    /// samples in their lanes' histograms. Every loop is recorded, so this is 0; it is
    /// computed, not assumed (before issue 22 it counted the telemetry ring's drops).
    samples_dropped: u64,
    /// Most timers with histograms of their own ([`super::MAX_TIMER_HISTOGRAMS`]).
    histogram_limit_timers: usize,
    /// Sum of the threads' `unrecorded`: samples not in their own thread's histogram (they
    /// are in their lane's).
    unrecorded: u64,
    lanes: Vec<Lane>,
}

/// How the run went, for the envelope.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub(crate) cmdline: String,
    pub(crate) start: SystemTime,
    pub(crate) end: SystemTime,
    pub(crate) elapsed: Duration,
    pub(crate) stopped_by: &'static str,
    pub(crate) started: StartReport,
    pub(crate) unit: Unit,
    pub(crate) histogram: Option<u64>,
}

/// The document as JSON text.
pub(crate) fn render(
    info: &RunInfo,
    timers: &[TimerResult],
    lanes: &[LaneResult],
) -> serde_json::Result<String> {
    let unit = info.unit;
    let loops: u64 = timers.iter().map(|t| t.cycles).sum();
    let recorded: u64 = lanes.iter().map(|g| g.latency.count).sum();
    let doc = Document {
        file_version: FILE_VERSION,
        cmdline: info.cmdline.clone(),
        lfrt_version: env!("CARGO_PKG_VERSION"),
        start_time: rfc2822(info.start),
        end_time: rfc2822(info.end),
        return_code: 0,
        sysinfo: SysInfo::read(),
        num_threads: timers.len(),
        resolution_in_ns: u8::from(unit == Unit::Ns),
        thread: Ordered(
            timers
                .iter()
                .map(|t| (t.index.to_string(), Thread::of(t, unit)))
                .collect(),
        ),
        unit: unit.name(),
        histogram_buckets: info.histogram,
        duration_s: info.elapsed.as_secs_f64(),
        stopped_by: info.stopped_by,
        rt_applied: info.started.rt_applied,
        memory_locked: info.started.memory_locked,
        counting_allocations: info.started.counting_allocations,
        missed_periods: timers.iter().map(|t| t.missed_periods).sum(),
        pool_allocations: LaneMetrics::sum_measured(
            lanes.iter().map(|g| g.metrics.pool_allocations),
        ),
        pool_minor_faults: LaneMetrics::sum_measured(
            lanes.iter().map(|g| g.metrics.pool_minor_faults),
        ),
        samples_dropped: loops.saturating_sub(recorded),
        histogram_limit_timers: super::MAX_TIMER_HISTOGRAMS,
        unrecorded: timers.iter().map(|t| t.unrecorded).sum(),
        lanes: lanes.iter().map(|g| Lane::of(g, unit)).collect(),
    };
    let mut s = serde_json::to_string_pretty(&doc)?;
    s.push('\n');
    Ok(s)
}

/// `Sun, 22 Nov 2026 00:41:07 +0000`: the date format of cyclictest's `start_time`
/// (`strftime("%a, %d %b %Y %T %z")`), in UTC.
pub(crate) fn rfc2822(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    let rem = secs % 86_400;
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} +0000",
        DAYS[((days + 4) % 7) as usize], // 1970-01-01 was a Thursday
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month 1..=12, day 1..=31), proleptic Gregorian calendar.
/// Counts in 400-year eras starting on March 1st, so the leap day ends each year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era, 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of the March-based year
    let mp = (5 * doy + 2) / 153; // March = 0
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format_like_cyclictest() {
        assert_eq!(rfc2822(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 +0000");
        // 2000-02-29 12:34:56 UTC (a leap day in a century leap year).
        assert_eq!(
            rfc2822(UNIX_EPOCH + Duration::from_secs(951_827_696)),
            "Tue, 29 Feb 2000 12:34:56 +0000"
        );
        // 2026-11-22 00:41:07 UTC, the start_time of a real cyclictest run.
        assert_eq!(
            rfc2822(UNIX_EPOCH + Duration::from_secs(1_795_308_067)),
            "Sun, 22 Nov 2026 00:41:07 +0000"
        );
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
