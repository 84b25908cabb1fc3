//! What `lfrt run` shows while it runs: live metrics in Prometheus text format and a status block
//! per second.
//!
//! ```text
//!  main thread (owns the Runtime, waits for signals, wakes once a second)
//!     │  rt.metrics() + rt.telemetry()  ──►  Snapshot::take
//!     ├──► Shared (Arc<Mutex<Snapshot>>) ──► exporter thread: GET /metrics → encode → reply
//!     └──► status block on stdout (events/s from the previous snapshot)
//! ```
//!
//! Why a snapshot published each second rather than a request from the exporter to the main
//! thread on each scrape: a scrape then never touches the runtime or the telemetry collector's
//! lock, so however often (or however many) scrapers call, the collector is delayed at most once
//! a second, by the main thread, as for the status block; the values are at most one second old,
//! well under any Prometheus scrape interval (15 s by default). The exporter is a plain thread
//! spawned by the main thread, time-shared, never a pool thread; the encoding (which allocates)
//! happens there. The mutex is a plain one: only non-RT threads take it.

use hdrhistogram::Histogram;
use lfrt::LaneMetrics;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency histogram's buckets, in seconds: 1 µs to 1 s in 1-2-5 steps,
/// then `+Inf`. The counts come from the runtime's hdrhistogram.
const BUCKETS_S: [f64; 19] = [
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,
    0.2, 0.5, 1.0,
];

/// The latency histogram of one lane in Prometheus' shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromHistogram {
    /// Sum of all values (s): the hdrhistogram's mean (bucket midpoints) × count.
    pub sum_s: f64,
    /// Values recorded.
    pub count: u64,
    /// `(upper bound in s, values in this bucket alone)`, ending with `(+Inf, …)`; the encoder
    /// makes them cumulative.
    pub buckets: Vec<(f64, u64)>,
}

impl PromHistogram {
    /// Converts a latency histogram in ns. Each hdrhistogram bucket goes to the first
    /// Prometheus bucket whose bound is at or above the hdrhistogram bucket's highest value, so
    /// a value is never counted under a bound it may exceed (hdrhistogram's buckets are exact
    /// below 2048 ns and within 0.1% above).
    pub fn of(h: &Histogram<u64>) -> PromHistogram {
        let mut buckets: Vec<(f64, u64)> = BUCKETS_S.iter().map(|&b| (b, 0)).collect();
        buckets.push((f64::INFINITY, 0));
        for v in h.iter_recorded() {
            let top_s = v.value_iterated_to() as f64 / 1e9;
            let i = BUCKETS_S
                .iter()
                .position(|&b| top_s <= b)
                .unwrap_or(BUCKETS_S.len());
            buckets[i].1 += v.count_at_value();
        }
        PromHistogram {
            sum_s: if h.is_empty() {
                0.0
            } else {
                h.mean() * h.len() as f64 / 1e9
            },
            count: h.len(),
            buckets,
        }
    }
}

/// One lane at one instant.
#[derive(Debug, Clone)]
pub struct LaneSnapshot {
    /// The runtime's counters and gauges.
    pub metrics: LaneMetrics,
    /// Dispatch latency (origin or leader wake-up → handler entry) since the start.
    pub latency: PromHistogram,
    /// 99th percentile of that latency (ns), as the final summary computes it.
    pub p99_ns: u64,
    /// Kernel receive of a stamped datagram → handler entry (empty for lanes whose handlers
    /// take none).
    pub arrival: PromHistogram,
}

/// Every lane at one instant, and when.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Seconds since the runtime started.
    pub uptime_s: f64,
    /// Per lane, in configuration order.
    pub lanes: Vec<LaneSnapshot>,
}

impl Snapshot {
    /// Reads the runtime's metrics and histograms (takes the telemetry lock once, briefly).
    pub fn take(rt: &lfrt::Runtime, uptime: Duration) -> Snapshot {
        let metrics = rt.metrics();
        let (latency, p99, arrival) = rt.telemetry().with(|r| {
            let mut out = (Vec::new(), Vec::new(), Vec::new());
            for h in &r.lanes {
                out.0.push(PromHistogram::of(&h.latency));
                out.1
                    .push(lfrt::telemetry::LatencySummary::of(&h.latency).p99_ns);
                out.2.push(PromHistogram::of(&h.arrival));
            }
            out
        });
        Snapshot {
            uptime_s: uptime.as_secs_f64(),
            lanes: metrics
                .into_iter()
                .enumerate()
                .map(|(gi, metrics)| LaneSnapshot {
                    metrics,
                    latency: latency.get(gi).cloned().unwrap_or_default(),
                    p99_ns: p99.get(gi).copied().unwrap_or(0),
                    arrival: arrival.get(gi).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// The snapshot the main thread publishes and the exporter reads.
pub type Shared = Arc<Mutex<Snapshot>>;

/// Work the runtime dropped or refused, per lane: the sum shown as `drops` in the status.
pub fn drops(m: &LaneMetrics) -> u64 {
    m.accept_exhausted
        + m.connections_refused
        + m.frames_oversize
        + m.connections_reset
        + m.stream_idle_timeouts
        + m.stream_write_timeouts
        + m.datagrams_truncated
        + m.inbox_refused
        + m.samples_dropped
        + m.stale_events
        + m.tasks.map_or(0, |t| t.refused_full + t.refused_too_large)
}

/// A lane's overruns per cause (`cause` label, count), in the order the docs give them.
pub fn overrun_causes(m: &LaneMetrics) -> [(&'static str, u64); 5] {
    let c = m.overrun_causes;
    [
        ("handler", c.handler),
        ("preempted", c.preempted),
        ("hypervisor", c.hypervisor),
        ("blocked", c.blocked),
        ("unknown", c.unknown),
    ]
}

/// Encodes the snapshot on each scrape (prometheus-client's [`Collector`]).
#[derive(Debug)]
struct SnapshotCollector(Shared);

/// A counter of [`LaneMetrics`]: name (without `lfrt_lane_` and `_total`), help, field.
type CounterOf = (&'static str, &'static str, fn(&LaneMetrics) -> u64);

const COUNTERS: [CounterOf; 28] = [
    ("dispatched", "Events dispatched to handlers", |m| {
        m.dispatched
    }),
    (
        "promotions",
        "Leaderships handed to a waiting follower",
        |m| m.promotions,
    ),
    (
        "vacant_promotions",
        "Times a leader found no follower to promote",
        |m| m.promotions_no_follower,
    ),
    (
        "deferred_promotions",
        "Events a leader processed keeping its role (promote_after_us)",
        |m| m.promotions_deferred,
    ),
    (
        "deferred_takeovers",
        "Kept roles the watchdog handed to a follower after promote_after_us",
        |m| m.deferred_takeovers,
    ),
    (
        "batch_overflow",
        "Events a leader could not leave in its batch (always 0: a broken invariant)",
        |m| m.batch_overflow,
    ),
    (
        "coalesced_reports",
        "Reports of a handle another thread was dispatching, folded into one more run",
        |m| m.coalesced_reports,
    ),
    (
        "rearm_checks",
        "Handles kept after their handler with an epoll_ctl readiness re-check",
        |m| m.rearm_checks,
    ),
    ("handler_panics", "Panics caught in handlers", |m| {
        m.handler_panics
    }),
    (
        "budget_overruns",
        "Handler runs that exceeded budget_us",
        |m| m.budget_overruns,
    ),
    (
        "accept_exhausted",
        "Episodes a listener could not accept for lack of fds or memory",
        |m| m.accept_exhausted,
    ),
    (
        "connections_refused",
        "Accepted connections closed unserved",
        |m| m.connections_refused,
    ),
    (
        "borrowed_dispatches",
        "Events of this lane dispatched by a thread lent from a lower lane",
        |m| m.borrowed_dispatches,
    ),
    (
        "lent_dispatches",
        "Events of higher lanes dispatched by this lane's threads while lent",
        |m| m.lent_dispatches,
    ),
    (
        "raise_failures",
        "Lent dispatches whose raise to the borrower's priority the kernel refused",
        |m| m.raise_failures,
    ),
    (
        "borrow_refused",
        "Times a lender found max_borrowed threads already lent to this lane",
        |m| m.borrow_refused,
    ),
    (
        "relayed_wakes",
        "Wakes of another runtime's wakers this lane's threads handed to the relay thread",
        |m| m.relayed_wakes,
    ),
    (
        "relay_full",
        "Foreign wakes a lane thread made itself because the relay's queue was full",
        |m| m.relay_full,
    ),
    (
        "frames_oversize",
        "Stream connections closed for a frame above max_frame",
        |m| m.frames_oversize,
    ),
    (
        "connections_reset",
        "Stream connections reset by the peer or ended inside a frame",
        |m| m.connections_reset,
    ),
    (
        "stream_backpressure",
        "Times a stream connection stopped reading until its replies drained",
        |m| m.stream_backpressure,
    ),
    (
        "stream_idle_timeouts",
        "Stream connections closed after idle_timeout with nothing received",
        |m| m.stream_idle_timeouts,
    ),
    (
        "stream_write_timeouts",
        "Stream connections closed after write_timeout with their output stalled",
        |m| m.stream_write_timeouts,
    ),
    (
        "datagrams_truncated",
        "Datagrams dropped for being longer than a slot",
        |m| m.datagrams_truncated,
    ),
    (
        "inbox_refused",
        "Values a full lane inbox handed back to their senders",
        |m| m.inbox_refused,
    ),
    (
        "samples_dropped",
        "Telemetry samples dropped because a ring was full",
        |m| m.samples_dropped,
    ),
    (
        "stale_events",
        "Events whose handle had been removed before dispatch",
        |m| m.stale_events,
    ),
    (
        "demotions",
        "Threads demoted to SCHED_OTHER by the watchdog",
        |m| m.demotions,
    ),
];

/// A counter of [`TaskStats`](lfrt::task::TaskStats), for lanes with a task table: name
/// (without `lfrt_lane_tasks_` and `_total`), help, field.
type TaskCounterOf = (
    &'static str,
    &'static str,
    fn(&lfrt::task::TaskStats) -> u64,
);

const TASK_COUNTERS: [TaskCounterOf; 9] = [
    ("spawned", "Async tasks accepted by spawn", |t| t.spawned),
    (
        "completed",
        "Async tasks whose future returned Ready",
        |t| t.completed,
    ),
    (
        "panicked",
        "Async tasks whose future panicked (caught; the slot was freed)",
        |t| t.panicked,
    ),
    (
        "cancelled",
        "Async tasks dropped unfinished: cancelled, or at shutdown",
        |t| t.cancelled,
    ),
    (
        "refused_full",
        "Spawns refused because every task slot (max_tasks) was taken",
        |t| t.refused_full,
    ),
    (
        "refused_too_large",
        "Spawns refused because the future did not fit a task slot (task_bytes)",
        |t| t.refused_too_large,
    ),
    ("polls", "Async task polls", |t| t.polls),
    (
        "timers_full",
        "Waits on the lane timer refused because every timer entry was armed",
        |t| t.timers_full,
    ),
    (
        "turns",
        "Executor turns run (events of the lane's task doorbell)",
        |t| t.turns,
    ),
];

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        {
            let mut m = enc.encode_descriptor(
                "lfrt_uptime",
                "Time since the runtime started",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            m.encode_gauge(&snap.uptime_s)?;
        }
        for (name, help, get) in COUNTERS {
            let full = format!("lfrt_lane_{name}");
            let mut m = enc.encode_descriptor(&full, help, None, MetricType::Counter)?;
            for g in &snap.lanes {
                let labels = [("lane", g.metrics.name.as_str())];
                m.encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, f64>(&get(&g.metrics), None)?;
            }
        }
        {
            // The same overruns by the cause the watchdog measured, a sample per cause.
            let mut m = enc.encode_descriptor(
                "lfrt_lane_overrun_causes",
                "Budget overruns by cause: the handler ran, was preempted, lost its CPU to the \
                 hypervisor (steal), blocked, or unknown",
                None,
                MetricType::Counter,
            )?;
            for g in &snap.lanes {
                for (cause, n) in overrun_causes(&g.metrics) {
                    let labels = [("lane", g.metrics.name.as_str()), ("cause", cause)];
                    m.encode_family(&labels)?
                        .encode_counter::<NoLabelSet, _, f64>(&n, None)?;
                }
            }
        }
        // Only lanes with a task table have these (a family with no sample is left out).
        if snap.lanes.iter().any(|g| g.metrics.tasks.is_some()) {
            for (name, help, get) in TASK_COUNTERS {
                let full = format!("lfrt_lane_tasks_{name}");
                let mut m = enc.encode_descriptor(&full, help, None, MetricType::Counter)?;
                for g in &snap.lanes {
                    if let Some(t) = &g.metrics.tasks {
                        let labels = [("lane", g.metrics.name.as_str())];
                        m.encode_family(&labels)?
                            .encode_counter::<NoLabelSet, _, f64>(&get(t), None)?;
                    }
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "lfrt_lane_dispatch_latency",
                "Latency from an event's origin (a timer's due time, else the leader's wake-up) to handler entry",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for g in &snap.lanes {
                let labels = [("lane", g.metrics.name.as_str())];
                let l = &g.latency;
                m.encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(l.sum_s, l.count, &l.buckets, None)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "lfrt_lane_arrival_latency",
                "Latency from the kernel's receive of a datagram (SO_TIMESTAMPNS) to handler entry",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for g in &snap.lanes {
                let labels = [("lane", g.metrics.name.as_str())];
                let l = &g.arrival;
                m.encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(l.sum_s, l.count, &l.buckets, None)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "lfrt_lane_configured_priority",
                "The lane's configured priority",
                None,
                MetricType::Gauge,
            )?;
            for g in &snap.lanes {
                let labels = [("lane", g.metrics.name.as_str())];
                m.encode_family(&labels)?
                    .encode_gauge(&i64::from(g.metrics.priority))?;
            }
        }
        {
            // The applied policy and priority of each pool thread, as the kernel reports it.
            let mut m = enc.encode_descriptor(
                "lfrt_thread_sched",
                "Scheduling policy and priority each pool thread runs with, as the kernel reports it",
                None,
                MetricType::Info,
            )?;
            for g in &snap.lanes {
                for (t, sched) in g.metrics.kernel_sched.iter().enumerate() {
                    let thread = t.to_string();
                    let labels = [
                        ("lane", g.metrics.name.as_str()),
                        ("thread", thread.as_str()),
                        ("sched", sched.as_str()),
                    ];
                    m.encode_info(&labels)?;
                }
            }
        }
        Ok(())
    }
}

/// The exposition of a snapshot: OpenMetrics text (which Prometheus reads), ending in `# EOF`.
pub fn encode(shared: &Shared) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector(shared.clone())));
    let mut body = String::new();
    // Writing to a String cannot fail; a collector error would leave a truncated body.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, &registry) {
        tracing::warn!("metrics encoding failed: {e}");
    }
    body
}

/// Longest request the exporter reads: a GET with ordinary headers fits easily.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds `addr` and serves `GET /metrics` from a new thread (`lfrt-metrics`), one request per
/// connection (HTTP/1.0 style, `Connection: close`), one connection at a time, and `GET /trace`:
/// asks the flight recorder of `telemetry` for a window (as `kill -USR2` does). Returns the
/// bound address. The thread runs until the process exits.
pub fn serve(
    addr: SocketAddr,
    shared: Shared,
    telemetry: Arc<lfrt::telemetry::Telemetry>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("lfrt-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &shared, &telemetry) {
                            tracing::debug!("metrics client: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("metrics listener: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })?;
    Ok(local)
}

/// Reads one request (bounded in size and time) and answers it.
fn answer(
    mut stream: TcpStream,
    shared: &Shared,
    telemetry: &lfrt::telemetry::Telemetry,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut req = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if req.windows(4).any(|w| w == b"\r\n\r\n") || req.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if req.len() >= MAX_REQUEST {
            break false;
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break !req.is_empty();
        }
        req.extend_from_slice(&buf[..n.min(MAX_REQUEST - req.len())]);
    };
    let line = req.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (status, ctype, body) = match (complete, parts.next(), parts.next()) {
        (false, _, _) => (
            "431 Request Header Fields Too Large",
            "text/plain",
            String::new(),
        ),
        (true, Some("GET"), Some(path)) if path == "/metrics" || path.starts_with("/metrics?") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            encode(shared),
        ),
        (true, Some("GET"), Some("/trace")) => {
            let before = telemetry.recorder_stats();
            telemetry.trace_now();
            (
                "202 Accepted",
                "text/plain",
                format!(
                    "flight recorder: window requested; it is written after [trace] after_ms \
                     unless one was written less than min_interval_ms ago ({} written so far, \
                     last: {})\n",
                    before.written,
                    before
                        .last
                        .as_ref()
                        .map_or("none".into(), |p| p.display().to_string())
                ),
            )
        }
        (true, Some("GET"), Some(_)) => (
            "404 Not Found",
            "text/plain",
            "lfrt serves /metrics and /trace\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".into(),
        ),
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// The status block `lfrt run` prints each second, as cyclictest does: one line per lane.
#[derive(Debug)]
pub struct Status {
    /// Move the cursor back over the previous block and overwrite it (a terminal).
    redraw: bool,
    /// Lines of the previous block, to move back over.
    lines: usize,
}

impl Status {
    /// A status printer that redraws in place (`redraw`, for a terminal) or appends blocks.
    pub fn new(redraw: bool) -> Status {
        Status { redraw, lines: 0 }
    }

    /// The block for `now`, with rates over the time since `prev`:
    ///
    /// ```text
    /// # status t=3.0s
    /// lane           events/s     p99_us      drops
    /// control           1000.0       61.2          0
    /// ```
    ///
    /// `p99_us` is over the whole run so far (as cyclictest's Max); `drops` is the run's total of
    /// [`drops`].
    pub fn block(&mut self, prev: &Snapshot, now: &Snapshot) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        if self.redraw && self.lines > 0 {
            // Cursor up over the previous block, then clear to the end of the screen.
            let _ = write!(s, "\x1b[{}A\x1b[J", self.lines);
        }
        let dt = (now.uptime_s - prev.uptime_s).max(1e-9);
        let _ = writeln!(s, "# status t={:.1}s", now.uptime_s);
        let _ = writeln!(
            s,
            "{:<12} {:>12} {:>10} {:>10}",
            "lane", "events/s", "p99_us", "drops"
        );
        for g in &now.lanes {
            let before = prev
                .lanes
                .iter()
                .find(|p| p.metrics.name == g.metrics.name)
                .map_or(0, |p| p.metrics.dispatched);
            let rate = g.metrics.dispatched.saturating_sub(before) as f64 / dt;
            let _ = writeln!(
                s,
                "{:<12} {:>12.1} {:>10.1} {:>10}",
                g.metrics.name,
                rate,
                g.p99_ns as f64 / 1000.0,
                drops(&g.metrics)
            );
        }
        self.lines = 2 + now.lanes.len();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_hold_every_value_under_its_bound() {
        let mut h = lfrt::telemetry::new_histogram();
        for v in [500u64, 1_000, 1_500, 19_000, 20_000, 3_000_000_000] {
            h.record(v).unwrap();
        }
        let p = PromHistogram::of(&h);
        assert_eq!(p.count, 6);
        assert_eq!(p.buckets.iter().map(|b| b.1).sum::<u64>(), 6);
        let at = |bound: f64| p.buckets.iter().find(|b| b.0 == bound).unwrap().1;
        assert_eq!(at(1e-6), 2, "500 ns and 1 µs");
        assert_eq!(at(2e-6), 1);
        assert_eq!(at(2e-5), 1, "19 µs");
        // 20 µs falls in an hdrhistogram bucket that reaches 20.015 µs: counted under the next
        // bound, never under one it may exceed.
        assert_eq!(at(5e-5), 1, "20 µs");
        assert_eq!(at(f64::INFINITY), 1, "3 s");
        assert!((p.sum_s - h.mean() * 6.0 / 1e9).abs() < 1e-12);
    }

    /// A lane's task counters reach the exposition (one family per counter, a sample for each
    /// lane with a task table only) and its refusals count in the status block's drops.
    #[test]
    fn task_counters_are_exported_for_lanes_with_a_task_table() {
        use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
        let mut rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let mut g = LaneConfig::new("tasks", Policy::Other, 0);
        g.max_tasks = 2;
        let lane = rt.add_lane(g).unwrap();
        rt.add_lane(LaneConfig::new("plain", Policy::Other, 0))
            .unwrap();
        // Not started: the tasks wait in the table; a third spawn finds it full.
        let held: Vec<_> = (0..2).map(|_| lane.spawn(async {}).unwrap()).collect();
        assert!(lane.spawn(async {}).is_err());
        let metrics = rt.metrics();
        let t = metrics[0].tasks.expect("a task table");
        assert_eq!((t.spawned, t.refused_full), (2, 1));
        assert_eq!(metrics[1].tasks, None);
        assert_eq!(drops(&metrics[0]), 1);
        let shared: Shared = Arc::new(Mutex::new(Snapshot {
            uptime_s: 1.0,
            lanes: metrics
                .into_iter()
                .map(|metrics| LaneSnapshot {
                    metrics,
                    latency: PromHistogram::default(),
                    p99_ns: 0,
                    arrival: PromHistogram::default(),
                })
                .collect(),
        }));
        let text = encode(&shared);
        assert!(
            text.contains("lfrt_lane_tasks_spawned_total{lane=\"tasks\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("lfrt_lane_tasks_refused_full_total{lane=\"tasks\"} 1\n"),
            "{text}"
        );
        assert!(
            !text.contains("lfrt_lane_tasks_spawned_total{lane=\"plain\"}"),
            "{text}"
        );
        drop(held);
        rt.shutdown().unwrap();
    }
}
