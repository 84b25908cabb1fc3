//! The figures an `lfrt inversion` run produces: latency per stream, each stream's accounting,
//! the results of one architecture at one N and of the lock experiment, and the [`Report`]
//! that holds them all and serialises to the documented JSON.

use super::plan::Architecture;
use serde::Serialize;

/// Latency figures of one stream (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Standard deviation.
    pub stddev_us: f64,
    /// Number of events.
    pub count: u64,
}

impl Latency {
    /// Exact figures of `ns` (nearest-rank percentiles; all zero when empty).
    pub fn of(ns: &mut [u64]) -> Latency {
        if ns.is_empty() {
            return Latency::default();
        }
        ns.sort_unstable();
        let n = ns.len();
        let rank = |q: f64| ns[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1000.0;
        let mean = ns.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = ns.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        Latency {
            min_us: ns[0] as f64 / 1000.0,
            p50_us: rank(0.50),
            p99_us: rank(0.99),
            p999_us: rank(0.999),
            max_us: ns[n - 1] as f64 / 1000.0,
            stddev_us: var.sqrt() / 1000.0,
            count: n as u64,
        }
    }
}

/// Accounting of one stream in one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCount {
    /// `timer`, `high_udp` or `low<i>`.
    pub name: String,
    /// Events produced: datagrams sent, or timer expiries due during the run.
    pub sent: u64,
    /// Distinct events the service saw.
    pub handled: u64,
    /// Timer expiries folded into a later read (never served on their own).
    pub coalesced: u64,
    /// Extra sightings of an already seen event (must be 0).
    pub duplicates: u64,
    /// Events with a sequence number outside the stream's range (must be 0).
    pub out_of_range: u64,
}

impl StreamCount {
    /// Sent but never served.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.handled)
    }
}

/// Results of one architecture at one N.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// Architecture.
    pub architecture: Architecture,
    /// Number of low streams.
    pub n_low: usize,
    /// High stream (timer and UDP together) latency after warm-up.
    pub high: Latency,
    /// Low datagrams served per second.
    pub low_throughput: f64,
    /// Events lost over every stream.
    pub lost: u64,
    /// The timer's share of `high`.
    pub high_timer: Latency,
    /// The UDP share of `high`.
    pub high_udp: Latency,
    /// Events of the high stream lost.
    pub lost_high: u64,
    /// Events seen more than once (must be 0).
    pub duplicates: u64,
    /// `bands`: datagrams served from the other band's socket (must be 0); 0 elsewhere.
    pub misrouted: u64,
    /// Offered rate of each low stream (datagrams/s) after the budget cap.
    pub low_rate_per_stream: f64,
    /// Low datagrams sent.
    pub low_sent: u64,
    /// Low datagrams served.
    pub low_handled: u64,
    /// lfrt: events dispatched by the pool threads; hsha: requests queued by the I/O thread.
    pub requests: u64,
    /// lfrt: pool-thread allocations after warm-up (`None`: not measured, no pool thread
    /// reached its warm-up); hsha: allocations of the I/O thread.
    pub allocations: Option<u64>,
    /// Every server thread got its SCHED_FIFO priority.
    pub rt_applied: bool,
    /// Per-stream accounting.
    #[serde(skip)]
    pub streams: Vec<StreamCount>,
}

/// Results of the lock experiment for one mutex kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockResult {
    /// `plain` (`std::sync::Mutex`) or `pi` ([`PiMutex`](lfrt::PiMutex)).
    pub mutex: &'static str,
    /// Longest blocking of the high handler (µs).
    pub high_block_max_us: f64,
    /// 99th percentile (nearest rank) of the high handler's blocking (µs).
    pub high_block_p99_us: f64,
    /// Median blocking (µs).
    pub high_block_p50_us: f64,
    /// Repetitions measured.
    pub reps: usize,
    /// The low critical section's CPU work (µs).
    pub cs_us: f64,
    /// The hog's spin (µs).
    pub hog_us: f64,
}

/// Everything one `lfrt inversion` measured; serialises to the documented JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Experiment 1, one entry per (architecture, N).
    pub experiments: Vec<RunResult>,
    /// Experiment 2, one entry per mutex kind.
    pub lock: Vec<LockResult>,
    /// Allocations on lfrt pool threads after warm-up, over every lanes and single_pool run
    /// that measured them (`None`: none did; see [`lfrt::LaneMetrics`]).
    pub pool_allocations: Option<u64>,
    /// Minor page faults on lfrt pool threads after warm-up, over the same runs.
    pub pool_minor_faults: Option<u64>,
}

/// lfrt pool hygiene counters summed over the runs that measured them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PoolCounters {
    pub(crate) allocations: Option<u64>,
    pub(crate) minor_faults: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_are_nearest_rank() {
        let mut v: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        let l = Latency::of(&mut v);
        assert_eq!(
            (l.min_us, l.p50_us, l.p99_us, l.p999_us, l.max_us, l.count),
            (1.0, 500.0, 990.0, 999.0, 1000.0, 1000)
        );
        assert_eq!(Latency::of(&mut []), Latency::default());
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = RunResult {
            architecture: Architecture::SinglePool,
            n_low: 4,
            high: Latency::default(),
            low_throughput: 1.0,
            lost: 2,
            high_timer: Latency::default(),
            high_udp: Latency::default(),
            lost_high: 0,
            duplicates: 0,
            misrouted: 0,
            low_rate_per_stream: 1.0,
            low_sent: 1,
            low_handled: 1,
            requests: 1,
            allocations: Some(0),
            rt_applied: true,
            streams: vec![],
        };
        let l = LockResult {
            mutex: "pi",
            high_block_max_us: 1.0,
            high_block_p99_us: 1.0,
            high_block_p50_us: 1.0,
            reps: 1,
            cs_us: 1.0,
            hog_us: 1.0,
        };
        let v = serde_json::to_value(Report {
            experiments: vec![r],
            lock: vec![l],
            pool_allocations: Some(0),
            pool_minor_faults: None,
        })
        .unwrap();
        let e = &v["experiments"][0];
        assert_eq!(e["architecture"], "single_pool");
        assert_eq!(e["n_low"], 4);
        for k in [
            "min_us",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "stddev_us",
            "count",
        ] {
            assert!(e["high"].get(k).is_some(), "high.{k}");
        }
        assert!(e["low_throughput"].is_number() && e["lost"].is_u64());
        assert_eq!(v["lock"][0]["mutex"], "pi");
        assert!(
            v["lock"][0]["high_block_max_us"].is_number()
                && v["lock"][0]["high_block_p99_us"].is_number()
        );
        assert!(v["pool_allocations"].is_u64());
        assert!(
            v["pool_minor_faults"].is_null(),
            "not measured is null, not 0"
        );
    }
}
