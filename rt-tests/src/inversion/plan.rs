//! The scenario model: the server architectures under test and a run's validated [`Plan`]
//! (loads, priorities, CPUs, the lock experiment's settings), with the figures derived from it
//! (each low stream's capped rate, the high stream's event counts) and the lfrt lanes the
//! experiments build from it.

use lfrt::{LaneConfig, Policy, RtMode};
use serde::Serialize;
use std::time::Duration;

/// Sends per second above which a stream is refused (keeps the run bounded).
pub(crate) const MAX_RATE: u64 = 20_000;

/// A server architecture under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Architecture {
    /// High and low streams in two lfrt lanes at two priorities.
    Lanes,
    /// One lfrt lane at one priority holding every handle.
    SinglePool,
    /// The Half-Sync/Half-Reactive pool.
    Hsha,
    /// Experiment 1b: every UDP stream on one port, split by DSCP into two lfrt lanes by the
    /// kernel ([`lfrt::band`]).
    Bands,
    /// Experiment 1b: every UDP stream on one port, one socket in one lfrt lane.
    SharedPool,
}

impl Architecture {
    /// The architectures of experiment 1 (one port per stream), in report order: the default.
    pub const ALL: [Architecture; 3] = [
        Architecture::Lanes,
        Architecture::SinglePool,
        Architecture::Hsha,
    ];

    /// The architectures of experiment 1b (every stream on one port).
    pub const ONE_PORT: [Architecture; 2] = [Architecture::Bands, Architecture::SharedPool];

    /// The name used in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Lanes => "lanes",
            Architecture::SinglePool => "single_pool",
            Architecture::Hsha => "hsha",
            Architecture::Bands => "bands",
            Architecture::SharedPool => "shared_pool",
        }
    }
}

/// The lock experiment's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LockPlan {
    /// Repetitions per mutex kind (0 = skip).
    pub reps: usize,
    /// Hog spin time.
    pub hog: Duration,
    /// CPU work inside the low handler's critical section (ns).
    pub cs_ns: u64,
}

/// A validated, resolved experiment plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Architectures, in run order.
    pub architectures: Vec<Architecture>,
    /// Values of N.
    pub n_low: Vec<usize>,
    /// CPU work per low datagram (ns).
    pub work_ns: u64,
    /// Run length.
    pub duration: Duration,
    /// High events left out of latency figures at the start.
    pub warmup: Duration,
    /// High UDP rate (datagrams/s).
    pub rate: u64,
    /// High timer period (ns).
    pub interval_ns: u64,
    /// Requested low rate per stream (datagrams/s), before the budget cap.
    pub low_rate: u64,
    /// Cap on offered low work (fraction of one CPU).
    pub low_budget: f64,
    /// Threads per lane.
    pub threads: usize,
    /// Datagrams per readiness event.
    pub batch: usize,
    /// High priority.
    pub high_prio: u8,
    /// Low priority.
    pub low_prio: u8,
    /// Server CPU.
    pub server_cpu: usize,
    /// Client CPU.
    pub client_cpu: usize,
    /// Lock experiment.
    pub lock: LockPlan,
    /// Whether SCHED_FIFO is required (it is, whenever the process may use it).
    pub rt: RtMode,
}

impl Plan {
    /// Mean rate of each of `n` low streams: `--low-rate`, or less so that the offered low work
    /// stays within `--low-budget` of one CPU.
    pub fn low_rate_per_stream(&self, n: usize) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let requested = self.low_rate as f64;
        if self.work_ns == 0 {
            return requested.min(MAX_RATE as f64 / n as f64);
        }
        let budget_total = self.low_budget * 1e9 / self.work_ns as f64;
        requested
            .min(budget_total / n as f64)
            .min(MAX_RATE as f64 / n as f64)
    }

    /// Expiries of the high timer in one run.
    pub fn timer_count(&self) -> u64 {
        (self.duration.as_nanos() as u64 / self.interval_ns).max(1)
    }

    /// Datagrams of the high UDP stream in one run.
    pub fn high_count(&self) -> u64 {
        ((self.rate as f64 * self.duration.as_secs_f64()) as u64).max(1)
    }

    /// Priority of the lock experiment's medium hog.
    pub fn mid_prio(&self) -> u8 {
        (self.high_prio + self.low_prio) / 2
    }
}

/// An lfrt lane of `threads` threads at `SCHED_FIFO` `priority`, pinned to the server CPU.
pub(crate) fn lfrt_lane(plan: &Plan, name: &str, priority: u8, threads: usize) -> LaneConfig {
    let mut g = LaneConfig::new(name, Policy::Fifo, priority);
    g.threads = threads;
    g.cpus = Some(vec![plan.server_cpu]);
    g.max_handles = 80;
    g.buffer_bytes = 4096;
    g
}

#[cfg(test)]
mod tests {
    use crate::inversion::InversionArgs;
    use lfrt::os;

    #[test]
    fn low_rate_is_capped_by_the_budget() {
        let a = InversionArgs {
            server_cpu: 0,
            client_cpu: 1,
            ..Default::default()
        };
        if os::available_cpus().len() < 2 {
            return;
        }
        let p = a.plan().unwrap();
        assert_eq!(p.low_rate_per_stream(0), 0.0);
        assert_eq!(p.low_rate_per_stream(1), 500.0);
        // 0.6 CPU / 100 µs = 6000/s in total.
        assert!((p.low_rate_per_stream(16) * 16.0 - 6000.0).abs() < 1e-6);
        for n in [1, 2, 4, 8, 16, 64] {
            assert!(
                p.low_rate_per_stream(n) * n as f64 * p.work_ns as f64 / 1e9 <= p.low_budget + 1e-9
            );
        }
    }
}
