//! `lfrt inversion`: measures priority inversion in three server architectures.
//!
//! # Experiment 1: queueing inversion
//! After Schmidt et al.'s real-time ORB experiments (one high-priority client, N low-priority
//! clients). One server process serves
//!
//! * a **high-priority stream**: a periodic timer (`--interval-us`; latency = service entry −
//!   the instant the expiry was due) and a UDP port fed at a fixed rate (`--rate`) by a
//!   generator thread (latency = service entry − the send timestamp carried in the datagram);
//! * **N low-priority UDP streams** (`--n-low`), each an independent Poisson source at
//!   `--low-rate` datagrams/s; every low datagram costs `--work-us` of CPU time in the service.
//!   A generator that falls behind sends the overdue datagrams at once (it never skips), so
//!   the offered count does not depend on how busy the client CPU is.
//!
//! The same [`Service`] runs under each architecture:
//!
//! * `lanes`: the high handles in an lfrt group at `--high-prio`, the low handles in a second
//!   group at `--low-prio` (`--threads` threads each);
//! * `single_pool`: one lfrt group at `--high-prio` with 2 × `--threads` threads holding every
//!   handle;
//! * `hsha`: the Half-Sync/Half-Reactive pool of [`crate::hsha`]: an I/O thread and
//!   2 × `--threads` workers, all at `--high-prio`.
//!
//! Each (architecture, N) pair gets a fresh server and the same load for `--duration`; the
//! first `--warmup-ms` of high events are left out of the latency figures (not of the loss
//! count). Every datagram carries `(stream, sequence, send time)`; the service counts each
//! sequence number it sees, so *lost* (sent, never served) and *duplicates* are exact per
//! stream. A timer expiry that the kernel folded into a later read (the handler was more than a
//! period late) counts as lost.
//!
//! ## CPU placement
//! On a 2-core machine the server threads of every architecture are pinned to `--server-cpu`
//! and the generators (`SCHED_OTHER`) to `--client-cpu`. A single server CPU makes the
//! competition between high and low work explicit (a high event can only run if the scheduler
//! or the architecture lets it past low work), and the generators keep sending on time because
//! they never compete with `SCHED_FIFO` threads.
//!
//! ## Bounds
//! Every run stops by itself: generators stop at the end of the run (and at a per-stream
//! count), the server is shut down after a drain of at most [`DRAIN_LIMIT`]. The offered low
//! work is capped at `--low-budget` of one CPU (default 0.6): with N streams each sends at
//! `min(--low-rate, low-budget × 10⁶ / (work-us × N))` per second, so `SCHED_FIFO` busy time on
//! the server CPU stays well below the kernel's RT throttle (950 ms per 1 s) even when
//! per-request overheads are added.
//!
//! # Experiment 1b: priority bands on one port (issue 15)
//! A real service exposes one port. `--arch bands,shared_pool` runs experiment 1 with every
//! UDP stream sent to ONE server port: the high stream's datagrams are marked DSCP EF (46,
//! `IP_TOS`), the N low streams' are not.
//!
//! * `bands`: [`lfrt::band::bind`] opens two `SO_REUSEPORT` sockets on the port with a cBPF
//!   classifier: DSCP 46 goes to the high band's socket, in the group at `--high-prio`, every
//!   other datagram to the low band's socket, in the group at `--low-prio` (`--threads` each;
//!   the timer is in the high group). The service counts a datagram served by the other band's
//!   socket as `misrouted` (must be 0).
//! * `shared_pool`: one socket on the port, in one group at `--high-prio` with 2 × `--threads`
//!   threads (with the timer): the high datagrams queue behind the low ones in the socket.
//!
//! The table's `udp_p99` column is the high datagrams' p99 alone (the port-sharing figure).
//!
//! # Experiment 2: lock inversion
//! A high-priority and a low-priority lfrt handler (two groups, one thread each, on the server
//! CPU) share a resource. Each repetition: the low handler takes the lock and does `--cs-us` of
//! CPU work inside it; the high handler is then triggered and blocks on the lock; then a
//! medium-priority thread on the same CPU spins for `--hog-ms` (wall clock). The high handler's
//! blocking time (lock request → lock held) is recorded, once with `std::sync::Mutex` (no
//! priority inheritance; used here on purpose, as the baseline) and once with [`PiMutex`]. Reps
//! are separated by [`LOCK_COOLDOWN`], so the CPU is busy at `SCHED_FIFO` well under a quarter
//! of the time.
//!
//! # Output
//! A table on stdout and, with `--json FILE`, [`Report`] as JSON:
//! `{"experiments": [{"architecture", "n_low", "high": {"min_us", "p50_us", "p99_us",
//! "p999_us", "max_us", "stddev_us", "count"}, "low_throughput", "lost", …}], "lock":
//! [{"mutex", "high_block_max_us", "high_block_p99_us", …}], "pool_allocations"}`. The fields
//! marked `…` are extra detail; readers may ignore them.

pub mod borrow;

use crate::hsha::{HshaConfig, HshaPool, Source};
use crate::measured;
use crate::service::{Request, RequestKind, Service, ServiceHandler};
use lfrt::handlers::cpu_work;
use lfrt::os::{self, Sched};
use lfrt::PiMutex;
use lfrt::Runtime;
use lfrt::{Context, Disposition, Event, EventHandler};
use lfrt::{GroupConfig, GroupMetrics, Policy, RtMode, RuntimeConfig};
use lfrt::{Notifier, Timer};
use serde::Serialize;
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of every generated datagram.
pub const DATAGRAM_BYTES: usize = 64;
/// Header: stream (u32 LE), reserved (u32), sequence (u64 LE), send time (u64 LE, ns).
const HEADER_BYTES: usize = 24;
/// Time from building a run's streams to its first event: covers server start-up, so the
/// timer's first expiry finds every thread waiting.
const LEAD: Duration = Duration::from_millis(100);
/// Longest wait after the generators stop for the server to serve what was sent.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// Pause between lock-experiment repetitions (keeps SCHED_FIFO busy time low).
pub const LOCK_COOLDOWN: Duration = Duration::from_millis(200);
/// Requested receive buffer of every server socket (best effort, capped by `rmem_max`).
const RCVBUF_BYTES: usize = 1 << 20;
/// Sends per second above which a stream is refused (keeps the run bounded).
const MAX_RATE: u64 = 20_000;

/// DSCP EF (46) in the IPv4 TOS byte, the mark of the high stream in the one-port runs.
const EF_TOS: u8 = 46 << 2;

/// A server architecture under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Architecture {
    /// High and low streams in two lfrt groups at two priorities.
    Lanes,
    /// One lfrt group at one priority holding every handle.
    SinglePool,
    /// The Half-Sync/Half-Reactive pool.
    Hsha,
    /// Experiment 1b: every UDP stream on one port, split by DSCP into two lfrt lanes by the
    /// kernel ([`lfrt::band`]).
    Bands,
    /// Experiment 1b: every UDP stream on one port, one socket in one lfrt group.
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

/// Command-line arguments of `lfrt inversion`.
#[derive(clap::Args, Debug, Clone)]
pub struct InversionArgs {
    /// Numbers of low-priority streams to run, one run per value and architecture.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,16")]
    pub n_low: Vec<usize>,
    /// CPU work per low-priority datagram, µs (thread CPU time).
    #[arg(long, default_value_t = 100)]
    pub work_us: u64,
    /// Length of each run, including the warm-up (`5`, `5s`, `1500ms`: the duration syntax of
    /// every lfrt command).
    #[arg(long, value_name = "TIME", default_value = "5", value_parser = crate::duration::parse)]
    pub duration: Duration,
    /// High-priority events left out of the latency figures at the start of each run, ms.
    #[arg(long, default_value_t = 200)]
    pub warmup_ms: u64,
    /// Rate of the high-priority UDP stream, datagrams/s (fixed period).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Period of the high-priority timer, µs.
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Mean rate of each low-priority stream (Poisson), datagrams/s; capped by --low-budget.
    #[arg(long, default_value_t = 500)]
    pub low_rate: u64,
    /// Cap on the offered low work, as a fraction of one CPU (0 < x <= 0.8).
    #[arg(long, default_value_t = 0.6)]
    pub low_budget: f64,
    /// Architectures to run (`bands,shared_pool`: experiment 1b, every stream on one port).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "lanes,single_pool,hsha"
    )]
    pub arch: Vec<Architecture>,
    /// Threads per lanes group; single_pool and hsha get twice as many (same total).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Datagrams a handler (or the HS/HA I/O thread) reads per readiness event.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// SCHED_FIFO priority of the high lane, of single_pool and of hsha.
    #[arg(long, default_value_t = 80)]
    pub high_prio: u8,
    /// SCHED_FIFO priority of the low lane (the lock experiment's hog runs halfway between).
    #[arg(long, default_value_t = 40)]
    pub low_prio: u8,
    /// CPU every server thread is pinned to.
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// CPU the generators and the controller are pinned to.
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// Lock experiment: repetitions per mutex kind (0 skips the experiment).
    #[arg(long, default_value_t = 10)]
    pub lock_reps: usize,
    /// Lock experiment: how long the medium-priority hog spins, ms.
    #[arg(long, default_value_t = 50)]
    pub hog_ms: u64,
    /// Lock experiment: CPU work of the low handler inside the lock, µs.
    #[arg(long, default_value_t = 1000)]
    pub cs_us: u64,
    /// Run everything in well under a minute: N = 0,4,16, 2 s runs, 5 lock repetitions
    /// (overrides --n-low, --duration and --lock-reps).
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run only the lane-borrowing experiment ([`borrow`]: a burst on a 1-thread high lane,
    /// without and with borrowing from a 2-thread low lane; uses --duration, --work-us,
    /// --high-prio and --low-prio).
    #[arg(long)]
    pub borrow: bool,
}

impl Default for InversionArgs {
    fn default() -> InversionArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: InversionArgs,
        }
        Wrap::parse_from(["inversion"]).args
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
    /// Threads per lanes group.
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

impl InversionArgs {
    /// Applies `--quick` and checks every bound against the machine.
    ///
    /// # Errors
    /// A message naming the offending flag.
    pub fn plan(&self) -> Result<Plan, String> {
        let mut a = self.clone();
        if a.quick {
            a.n_low = vec![0, 4, 16];
            a.duration = a.duration.min(Duration::from_secs(2));
            a.lock_reps = a.lock_reps.min(5);
        }
        let cpus = os::available_cpus();
        let mut arch = a.arch.clone();
        arch.dedup();
        let check = |ok: bool, msg: String| if ok { Ok(()) } else { Err(msg) };
        check(
            !arch.is_empty(),
            "--arch: name at least one architecture".into(),
        )?;
        check(
            !a.n_low.is_empty() && a.n_low.iter().all(|&n| n <= 64),
            "--n-low: 1 to many values, each at most 64".into(),
        )?;
        check(
            a.work_us <= 10_000,
            format!("--work-us {}: at most 10000", a.work_us),
        )?;
        check(
            (Duration::from_millis(500)..=Duration::from_secs(60)).contains(&a.duration),
            format!("--duration {:?}: 500ms to 60s", a.duration),
        )?;
        check(
            u128::from(a.warmup_ms) * 2 < a.duration.as_millis(),
            "--warmup-ms: less than half of --duration".into(),
        )?;
        check(
            (1..=MAX_RATE).contains(&a.rate),
            format!("--rate {}: 1 to {MAX_RATE}", a.rate),
        )?;
        check(
            (100..=1_000_000).contains(&a.interval_us),
            format!("--interval-us {}: 100 to 1000000", a.interval_us),
        )?;
        check(
            (1..=MAX_RATE).contains(&a.low_rate),
            format!("--low-rate {}: 1 to {MAX_RATE}", a.low_rate),
        )?;
        check(
            a.low_budget > 0.0 && a.low_budget <= 0.8,
            format!("--low-budget {}: above 0, at most 0.8", a.low_budget),
        )?;
        check(
            (1..=16).contains(&a.threads),
            format!("--threads {}: 1 to 16", a.threads),
        )?;
        check(
            (1..=64).contains(&a.batch),
            format!("--batch {}: 1 to 64", a.batch),
        )?;
        check(
            (1..=99).contains(&a.high_prio) && (1..=99).contains(&a.low_prio) && a.high_prio >= a.low_prio + 2,
            format!("--high-prio {} / --low-prio {}: 1..=99, high at least low + 2 (the hog runs between)", a.high_prio, a.low_prio),
        )?;
        check(
            a.server_cpu != a.client_cpu,
            "--server-cpu and --client-cpu must differ".into(),
        )?;
        for (flag, c) in [
            ("--server-cpu", a.server_cpu),
            ("--client-cpu", a.client_cpu),
        ] {
            check(
                cpus.contains(&c),
                format!("{flag} {c}: not one of this process's CPUs {cpus:?}"),
            )?;
        }
        check(
            a.lock_reps <= 100,
            format!("--lock-reps {}: at most 100", a.lock_reps),
        )?;
        check(
            (1..=200).contains(&a.hog_ms),
            format!("--hog-ms {}: 1 to 200", a.hog_ms),
        )?;
        check(
            (1..=10_000).contains(&a.cs_us) && a.cs_us < a.hog_ms * 1000,
            "--cs-us: 1 to 10000 and shorter than the hog".into(),
        )?;
        let rt = if os::RtPrivilege::probe().allows(a.high_prio) {
            RtMode::Required
        } else {
            RtMode::BestEffort
        };
        Ok(Plan {
            architectures: arch,
            n_low: a.n_low,
            work_ns: a.work_us * 1000,
            duration: a.duration,
            warmup: Duration::from_millis(a.warmup_ms),
            rate: a.rate,
            interval_ns: a.interval_us * 1000,
            low_rate: a.low_rate,
            low_budget: a.low_budget,
            threads: a.threads,
            batch: a.batch,
            high_prio: a.high_prio,
            low_prio: a.low_prio,
            server_cpu: a.server_cpu,
            client_cpu: a.client_cpu,
            lock: LockPlan {
                reps: a.lock_reps,
                hog: Duration::from_millis(a.hog_ms),
                cs_ns: a.cs_us * 1000,
            },
            rt,
        })
    }
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
    /// `plain` (`std::sync::Mutex`) or `pi` ([`PiMutex`]).
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
    /// that measured them (`None`: none did; see [`lfrt::GroupMetrics`]).
    pub pool_allocations: Option<u64>,
    /// Minor page faults on lfrt pool threads after warm-up, over the same runs.
    pub pool_minor_faults: Option<u64>,
}

/// lfrt pool hygiene counters summed over the runs that measured them.
#[derive(Debug, Default, Clone, Copy)]
struct PoolCounters {
    allocations: Option<u64>,
    minor_faults: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Accounting shared by the generators' receivers (the service) and the report.

/// Per-sequence-number sightings (and latency) of one stream. Lock-free, preallocated.
struct SeqLog {
    hits: Box<[AtomicU32]>,
    latency_ns: Box<[AtomicU64]>,
    out_of_range: AtomicU64,
}

impl SeqLog {
    fn new(capacity: usize, with_latency: bool) -> SeqLog {
        SeqLog {
            hits: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
            latency_ns: (0..if with_latency { capacity } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            out_of_range: AtomicU64::new(0),
        }
    }

    fn record(&self, seq: u64, latency_ns: u64) {
        let Some(h) = self.hits.get(seq as usize) else {
            self.out_of_range.fetch_add(1, Relaxed);
            return;
        };
        if h.fetch_add(1, Relaxed) == 0 {
            if let Some(l) = self.latency_ns.get(seq as usize) {
                l.store(latency_ns, Relaxed);
            }
        }
    }

    /// (distinct sequence numbers seen, extra sightings).
    fn counts(&self) -> (u64, u64) {
        self.hits
            .iter()
            .map(|h| h.load(Relaxed) as u64)
            .fold((0, 0), |(n, d), h| {
                (n + (h > 0) as u64, d + h.saturating_sub(1))
            })
    }

    /// Latencies of the sequence numbers from `from` on that were seen.
    fn latencies(&self, from: u64) -> Vec<u64> {
        (from as usize..self.latency_ns.len())
            .filter(|&i| self.hits[i].load(Relaxed) > 0)
            .map(|i| self.latency_ns[i].load(Relaxed))
            .collect()
    }
}

struct TimerLog {
    first_ns: u64,
    interval_ns: u64,
    count: u64,
    log: SeqLog,
    coalesced: AtomicU64,
}

impl TimerLog {
    fn record(&self, due_ns: u64, expirations: u64, entry_ns: u64) {
        let k = (due_ns.saturating_sub(self.first_ns) + self.interval_ns / 2) / self.interval_ns;
        if k < self.count {
            self.log.record(k, entry_ns.saturating_sub(due_ns));
        }
        // Expiries k+1 .. k+expirations-1 were folded into this read.
        let folded = (k + expirations)
            .min(self.count)
            .saturating_sub((k + 1).min(self.count));
        self.coalesced.fetch_add(folded, Relaxed);
    }
}

struct Streams {
    timer: TimerLog,
    high: SeqLog,
    low: Vec<SeqLog>,
    malformed: AtomicU64,
    misrouted: AtomicU64,
}

/// The service every architecture runs in experiment 1.
#[derive(Clone)]
struct Probe {
    streams: Arc<Streams>,
    work_ns: u64,
    /// `bands`: source 1 is the high band's socket, every other source a low one.
    banded: bool,
}

impl Service for Probe {
    fn serve(&mut self, request: &Request<'_>, _reply: &mut dyn FnMut(&[u8])) {
        let entry = lfrt::os::now_ns();
        // A datagram on the wrong band's socket is counted, then served as any other.
        if self.banded && matches!(request.kind, RequestKind::Datagram { .. }) {
            if let Some(h) = Header::parse(request.payload) {
                if (h.stream == 0) != (request.source == 1) {
                    self.streams.misrouted.fetch_add(1, Relaxed);
                }
            }
        }
        match request.kind {
            RequestKind::Timer {
                expirations,
                due_ns,
            } => self.streams.timer.record(due_ns, expirations, entry),
            RequestKind::Datagram { .. } => match Header::parse(request.payload) {
                Some(h) if h.stream == 0 => self
                    .streams
                    .high
                    .record(h.seq, entry.saturating_sub(h.sent_ns)),
                Some(h) => match self.streams.low.get(h.stream as usize - 1) {
                    Some(log) => {
                        log.record(h.seq, 0);
                        cpu_work(self.work_ns);
                    }
                    None => {
                        self.streams.malformed.fetch_add(1, Relaxed);
                    }
                },
                None => {
                    self.streams.malformed.fetch_add(1, Relaxed);
                }
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    stream: u32,
    seq: u64,
    sent_ns: u64,
}

impl Header {
    fn write(&self, buf: &mut [u8; DATAGRAM_BYTES]) {
        buf[0..4].copy_from_slice(&self.stream.to_le_bytes());
        buf[4..8].fill(0);
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        Some(Header {
            stream: u32::from_le_bytes(b[0..4].try_into().ok()?),
            seq: u64::from_le_bytes(b[8..16].try_into().ok()?),
            sent_ns: u64::from_le_bytes(b[16..24].try_into().ok()?),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Generators (SCHED_OTHER, on the client CPU).

/// SplitMix64: a small deterministic generator for the Poisson arrivals.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An exponentially distributed gap (ns) for a Poisson process of `rate` per second.
    fn exp_gap_ns(&mut self, rate: f64) -> u64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        (-(1.0 - u).ln() / rate * 1e9) as u64
    }
}

fn sleep_until(ns: u64) {
    use nix::sys::time::TimeSpec;
    use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};
    let ts = TimeSpec::new((ns / 1_000_000_000) as _, (ns % 1_000_000_000) as _);
    while lfrt::os::now_ns() < ns {
        if clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        )
        .is_err()
        {
            std::hint::spin_loop();
        }
    }
}

/// Pins the calling thread to one CPU until dropped, then restores its previous CPU set.
///
/// The controller is pinned to the client CPU only while a run is under way: lfrt validates a
/// group's CPUs against the *calling* thread's CPU set, so servers are built unpinned.
struct Pinned(Vec<usize>);

impl Pinned {
    fn to(cpu: usize) -> std::io::Result<Pinned> {
        let before = os::affinity(0)?;
        os::set_current_affinity(&[cpu])?;
        Ok(Pinned(before))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = os::set_current_affinity(&self.0);
    }
}

fn client_socket(to: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.connect(to)?;
    Ok(s)
}

fn generator_thread_setup(cpu: usize) {
    let _ = os::set_current_affinity(&[cpu]);
    // Pace to the microsecond rather than the default 50 µs timer slack.
    let _ = nix::sys::prctl::set_timerslack(1_000);
}

/// The high UDP generator: `count` datagrams, one every `period_ns` from `start_ns`, marked
/// DSCP EF if `mark`.
fn high_generator(
    to: SocketAddr,
    mark: bool,
    start_ns: u64,
    period_ns: u64,
    count: u64,
    stop: &AtomicBool,
) -> std::io::Result<u64> {
    let sock = client_socket(to)?;
    if mark {
        os::set_tos(&sock, EF_TOS)?;
    }
    let mut buf = [0u8; DATAGRAM_BYTES];
    let mut sent = 0;
    for seq in 0..count {
        if stop.load(Relaxed) {
            break;
        }
        sleep_until(start_ns + seq * period_ns);
        let sent_ns = lfrt::os::now_ns();
        Header {
            stream: 0,
            seq,
            sent_ns,
        }
        .write(&mut buf);
        if sock.send(&buf).is_ok() {
            sent += 1;
        }
    }
    Ok(sent)
}

/// The low generators: one thread, `to.len()` independent Poisson streams of `rate` each, from
/// `start_ns` to `end_ns`, at most `cap` datagrams per stream. Returns datagrams sent per stream.
fn low_generator(
    to: &[SocketAddr],
    rate: f64,
    start_ns: u64,
    end_ns: u64,
    cap: u64,
    stop: &AtomicBool,
) -> std::io::Result<Vec<u64>> {
    let socks = to
        .iter()
        .map(|&a| client_socket(a))
        .collect::<std::io::Result<Vec<_>>>()?;
    let n = socks.len();
    let mut sent = vec![0u64; n];
    if n == 0 {
        return Ok(sent);
    }
    let mut rngs: Vec<SplitMix> = (0..n)
        .map(|i| SplitMix(0x1F2E_3D4C_5B6A_7988 ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9)))
        .collect();
    let mut next: Vec<u64> = rngs
        .iter_mut()
        .map(|r| start_ns + r.exp_gap_ns(rate))
        .collect();
    let mut seq = vec![0u64; n];
    let mut buf = [0u8; DATAGRAM_BYTES];
    loop {
        if stop.load(Relaxed) {
            break;
        }
        let (i, due) = next
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("n > 0");
        if due >= end_ns {
            break;
        }
        sleep_until(due);
        Header {
            stream: i as u32 + 1,
            seq: seq[i],
            sent_ns: lfrt::os::now_ns(),
        }
        .write(&mut buf);
        if socks[i].send(&buf).is_ok() {
            sent[i] += 1;
        }
        seq[i] += 1;
        next[i] = if seq[i] >= cap {
            u64::MAX
        } else {
            due + rngs[i].exp_gap_ns(rate)
        };
    }
    Ok(sent)
}

// ---------------------------------------------------------------------------------------------
// Experiment 1.

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn join_generator<T>(
    h: std::io::Result<std::thread::ScopedJoinHandle<'_, std::io::Result<T>>>,
) -> Result<T, BoxError> {
    h?.join()
        .map_err(|_| -> BoxError { "a generator panicked".into() })?
        .map_err(BoxError::from)
}

/// Experiment 1b's server port: `(high socket, its address, low socket)`. `bands`: the two band
/// sockets of one port, DSCP EF to the first; `shared_pool`: one socket, and no low socket (the
/// low streams send to the same one).
fn one_port_sockets(
    arch: Architecture,
) -> std::io::Result<(UdpSocket, SocketAddr, Option<UdpSocket>)> {
    if arch != Architecture::Bands {
        let (s, a) = server_socket()?;
        return Ok((s, a, None));
    }
    let plan = lfrt::band::Bands {
        classify: lfrt::band::Classify::Dscp,
        map: vec![(EF_TOS >> 2, 0)],
        default: 1,
        count: 2,
    };
    let mut socks = lfrt::band::bind("127.0.0.1:0".parse().expect("address"), &plan)?;
    for s in &socks {
        let _ = nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF_BYTES);
    }
    let low = socks.pop().expect("two bands");
    let high = socks.pop().expect("two bands");
    let addr = high.local_addr()?;
    Ok((high, addr, Some(low)))
}

fn server_socket() -> std::io::Result<(UdpSocket, SocketAddr)> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF_BYTES);
    let a = s.local_addr()?;
    Ok((s, a))
}

enum Server {
    /// The runtime and whether its threads got SCHED_FIFO.
    Lfrt(Box<Runtime>, bool),
    Hsha(HshaPool),
}

/// What a server reported after shutdown: (requests, allocations, rt_applied).
fn stop_server(
    server: Server,
    pool: &mut PoolCounters,
) -> Result<(u64, Option<u64>, bool), BoxError> {
    Ok(match server {
        Server::Lfrt(mut rt, rt_applied) => {
            let m = rt.shutdown()?;
            let allocs = GroupMetrics::sum_measured(m.iter().map(|g| g.pool_allocations));
            pool.allocations = GroupMetrics::sum_measured([pool.allocations, allocs]);
            let faults = GroupMetrics::sum_measured(m.iter().map(|g| g.pool_minor_faults));
            pool.minor_faults = GroupMetrics::sum_measured([pool.minor_faults, faults]);
            (m.iter().map(|g| g.dispatched).sum(), allocs, rt_applied)
        }
        Server::Hsha(pool) => {
            let m = pool.shutdown()?;
            (m.enqueued, Some(m.io_allocations), m.rt_applied)
        }
    })
}

fn lfrt_group(plan: &Plan, name: &str, priority: u8, threads: usize) -> GroupConfig {
    let mut g = GroupConfig::new(name, Policy::Fifo, priority);
    g.threads = threads;
    g.cpus = Some(vec![plan.server_cpu]);
    g.max_handles = 80;
    g.buffer_bytes = 4096;
    g
}

/// Runs one architecture at one N and returns its figures. The server pins its own threads to
/// the server CPU; the generators and, during the run, the calling thread go to the client CPU.
///
/// # Errors
/// Socket, runtime or pool set-up failures.
pub fn run_once(plan: &Plan, arch: Architecture, n_low: usize) -> Result<RunResult, BoxError> {
    let mut pool = PoolCounters::default();
    run_once_counting(plan, arch, n_low, &mut pool)
}

fn run_once_counting(
    plan: &Plan,
    arch: Architecture,
    n_low: usize,
    pool: &mut PoolCounters,
) -> Result<RunResult, BoxError> {
    let duration_ns = plan.duration.as_nanos() as u64;
    let low_rate = plan.low_rate_per_stream(n_low);
    let low_cap = (low_rate * plan.duration.as_secs_f64() * 1.5) as u64 + 64;
    let (timer_count, high_count) = (plan.timer_count(), plan.high_count());
    let start_ns = lfrt::os::now_ns() + LEAD.as_nanos() as u64;
    let end_ns = start_ns + duration_ns;

    let streams = Arc::new(Streams {
        timer: TimerLog {
            first_ns: start_ns,
            interval_ns: plan.interval_ns,
            count: timer_count,
            log: SeqLog::new(timer_count as usize, true),
            coalesced: AtomicU64::new(0),
        },
        high: SeqLog::new(high_count as usize, true),
        low: (0..n_low)
            .map(|_| SeqLog::new(low_cap as usize, false))
            .collect(),
        malformed: AtomicU64::new(0),
        misrouted: AtomicU64::new(0),
    });
    let one_port = Architecture::ONE_PORT.contains(&arch);
    let probe = Probe {
        streams: streams.clone(),
        work_ns: plan.work_ns,
        banded: arch == Architecture::Bands,
    };

    let mut timer = Timer::new()?;
    timer.arm(start_ns, plan.interval_ns)?;
    let (high_sock, high_addr, low_socks, low_addrs) = if one_port {
        let (sock, addr, low) = one_port_sockets(arch)?;
        (sock, addr, low.into_iter().collect(), vec![addr; n_low])
    } else {
        let (high_sock, high_addr) = server_socket()?;
        let mut low_socks = Vec::new();
        let mut low_addrs = Vec::new();
        for _ in 0..n_low {
            let (s, a) = server_socket()?;
            low_socks.push(s);
            low_addrs.push(a);
        }
        (high_sock, high_addr, low_socks, low_addrs)
    };

    let server = match arch {
        Architecture::Lanes
        | Architecture::SinglePool
        | Architecture::Bands
        | Architecture::SharedPool => {
            let lanes = matches!(arch, Architecture::Lanes | Architecture::Bands);
            let groups = if lanes {
                vec![
                    lfrt_group(plan, "high", plan.high_prio, plan.threads),
                    lfrt_group(plan, "low", plan.low_prio, plan.threads),
                ]
            } else {
                vec![lfrt_group(plan, "pool", plan.high_prio, 2 * plan.threads)]
            };
            let (high_group, low_group) = if lanes {
                ("high", "low")
            } else {
                ("pool", "pool")
            };
            let mut rt = Runtime::new(RuntimeConfig {
                rt: plan.rt,
                lock_memory: false,
                groups,
                bands: Vec::new(),
            })?;
            let started = rt.start()?;
            let high = rt.lane(high_group)?.registry();
            let low = rt.lane(low_group)?.registry();
            high.register(Box::new(ServiceHandler::timer(timer, 0, probe.clone())))?;
            high.register(Box::new(ServiceHandler::udp(
                high_sock,
                1,
                plan.batch,
                probe.clone(),
            )?))?;
            for (i, s) in low_socks.into_iter().enumerate() {
                low.register(Box::new(ServiceHandler::udp(
                    s,
                    2 + i,
                    plan.batch,
                    probe.clone(),
                )?))?;
            }
            Server::Lfrt(Box::new(rt), started.rt_applied)
        }
        Architecture::Hsha => {
            let mut sources = vec![Source::Timer(timer), Source::Udp(high_sock)];
            sources.extend(low_socks.into_iter().map(Source::Udp));
            let cfg = HshaConfig {
                workers: 2 * plan.threads,
                priority: Some(plan.high_prio),
                rt: plan.rt,
                cpus: Some(vec![plan.server_cpu]),
                queue_capacity: 1024,
                read_batch: plan.batch,
                max_datagram: 2048,
            };
            Server::Hsha(HshaPool::start(cfg, sources, |_| probe.clone())?)
        }
    };

    let pinned = Pinned::to(plan.client_cpu)?;
    // Generators: SCHED_OTHER on the client CPU, each stops at the end of the run.
    let stop = AtomicBool::new(false);
    let period_ns = 1_000_000_000 / plan.rate;
    let client_cpu = plan.client_cpu;
    let (high_sent, low_sent) = std::thread::scope(|s| {
        let stop = &stop;
        let hi = std::thread::Builder::new()
            .name("inv-gen-high".into())
            .spawn_scoped(s, move || {
                generator_thread_setup(client_cpu);
                high_generator(high_addr, one_port, start_ns, period_ns, high_count, stop)
            });
        let addrs = &low_addrs;
        let lo = std::thread::Builder::new()
            .name("inv-gen-low".into())
            .spawn_scoped(s, move || {
                generator_thread_setup(client_cpu);
                low_generator(addrs, low_rate, start_ns, end_ns, low_cap, stop)
            });
        let hi = join_generator(hi);
        if hi.is_err() {
            stop.store(true, Relaxed);
        }
        let lo = join_generator(lo);
        Ok::<_, BoxError>((hi?, lo?))
    })?;

    // Drain: wait until everything sent was served (or the limit passes).
    let drain_end = Instant::now() + DRAIN_LIMIT;
    let all_served = || {
        let t = &streams.timer;
        t.log.counts().0 + t.coalesced.load(Relaxed) >= t.count
            && streams.high.counts().0 >= high_sent
            && streams
                .low
                .iter()
                .zip(&low_sent)
                .all(|(l, &s)| l.counts().0 >= s)
    };
    while lfrt::os::now_ns() < end_ns + plan.interval_ns
        || (!all_served() && Instant::now() < drain_end)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (requests, allocations, rt_applied) = stop_server(server, pool)?;
    drop(pinned);

    // Accounting.
    let mut counts = Vec::new();
    let (th, td) = streams.timer.log.counts();
    counts.push(StreamCount {
        name: "timer".into(),
        sent: timer_count,
        handled: th,
        coalesced: streams.timer.coalesced.load(Relaxed),
        duplicates: td,
        out_of_range: streams.timer.log.out_of_range.load(Relaxed),
    });
    let (hh, hd) = streams.high.counts();
    counts.push(StreamCount {
        name: "high_udp".into(),
        sent: high_sent,
        handled: hh,
        coalesced: 0,
        duplicates: hd,
        out_of_range: streams.high.out_of_range.load(Relaxed),
    });
    for (i, (log, &sent)) in streams.low.iter().zip(&low_sent).enumerate() {
        let (h, d) = log.counts();
        counts.push(StreamCount {
            name: format!("low{i}"),
            sent,
            handled: h,
            coalesced: 0,
            duplicates: d,
            out_of_range: log.out_of_range.load(Relaxed),
        });
    }
    let warm_k = plan.warmup.as_nanos() as u64 / plan.interval_ns;
    let warm_seq = (plan.warmup.as_secs_f64() * plan.rate as f64) as u64;
    let mut timer_lat = streams.timer.log.latencies(warm_k);
    let mut udp_lat = streams.high.latencies(warm_seq);
    let mut all: Vec<u64> = timer_lat.iter().chain(&udp_lat).copied().collect();
    let low_handled: u64 = counts[2..].iter().map(|c| c.handled).sum();
    Ok(RunResult {
        architecture: arch,
        n_low,
        high: Latency::of(&mut all),
        low_throughput: low_handled as f64 / plan.duration.as_secs_f64(),
        lost: counts.iter().map(StreamCount::lost).sum(),
        high_timer: Latency::of(&mut timer_lat),
        high_udp: Latency::of(&mut udp_lat),
        lost_high: counts[..2].iter().map(StreamCount::lost).sum(),
        duplicates: counts.iter().map(|c| c.duplicates).sum::<u64>()
            + streams.malformed.load(Relaxed),
        misrouted: streams.misrouted.load(Relaxed),
        low_rate_per_stream: low_rate,
        low_sent: low_sent.iter().sum(),
        low_handled,
        requests,
        allocations,
        rt_applied,
        streams: counts,
    })
}

// ---------------------------------------------------------------------------------------------
// Experiment 2.

/// The resource the two handlers share.
enum SharedLock {
    Plain(std::sync::Mutex<u64>),
    Pi(PiMutex<u64>),
}

impl SharedLock {
    fn with<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        match self {
            SharedLock::Plain(m) => f(&mut m.lock().unwrap_or_else(|e| e.into_inner())),
            SharedLock::Pi(m) => f(&mut m.lock()),
        }
    }
}

struct LockState {
    lock: SharedLock,
    cs_ns: u64,
    low_holding: AtomicBool,
    high_waiting: AtomicBool,
    high_block_ns: AtomicU64,
    high_done: AtomicU64,
    low_done: AtomicU64,
}

/// The high or low handler of the lock experiment, woken through a notifier.
struct LockUser {
    wake: Arc<Notifier>,
    state: Arc<LockState>,
    high: bool,
}

impl EventHandler for LockUser {
    fn source(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    fn handle(&mut self, _event: &Event, _ctx: &mut Context) -> Disposition {
        if self.wake.take().unwrap_or(0) == 0 {
            return Disposition::Rearm;
        }
        let s = &*self.state;
        if self.high {
            s.high_waiting.store(true, SeqCst);
            let asked = lfrt::os::now_ns();
            let got = s.lock.with(|v| {
                *v += 1;
                lfrt::os::now_ns()
            });
            s.high_block_ns.store(got - asked, SeqCst);
            s.high_done.fetch_add(1, SeqCst);
        } else {
            s.lock.with(|v| {
                s.low_holding.store(true, SeqCst);
                cpu_work(s.cs_ns);
                *v += 1;
                s.low_holding.store(false, SeqCst);
            });
            s.low_done.fetch_add(1, SeqCst);
        }
        Disposition::Rearm
    }
}

/// Spins until `cond` holds or `limit` passes; true if it held.
fn spin_until(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while !cond() {
        if Instant::now() > end {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Runs experiment 2 for one mutex kind (`pi` true: [`PiMutex`]). The calling thread drives
/// the repetitions from the client CPU.
///
/// # Errors
/// Runtime or hog set-up failures, or a repetition that did not complete in time.
pub fn lock_experiment(plan: &Plan, pi: bool) -> Result<LockResult, BoxError> {
    let lp = &plan.lock;
    let state = Arc::new(LockState {
        lock: if pi {
            SharedLock::Pi(PiMutex::new(0))
        } else {
            SharedLock::Plain(std::sync::Mutex::new(0))
        },
        cs_ns: lp.cs_ns,
        low_holding: AtomicBool::new(false),
        high_waiting: AtomicBool::new(false),
        high_block_ns: AtomicU64::new(0),
        high_done: AtomicU64::new(0),
        low_done: AtomicU64::new(0),
    });
    let groups = vec![
        lfrt_group(plan, "lock-high", plan.high_prio, 1),
        lfrt_group(plan, "lock-low", plan.low_prio, 1),
    ];
    let mut rt = Runtime::new(RuntimeConfig {
        rt: plan.rt,
        lock_memory: false,
        groups,
        bands: Vec::new(),
    })?;
    rt.start()?;
    let (wake_high, wake_low) = (Arc::new(Notifier::new()?), Arc::new(Notifier::new()?));
    rt.lane("lock-high")?
        .registry()
        .register(Box::new(LockUser {
            wake: wake_high.clone(),
            state: state.clone(),
            high: true,
        }))?;
    rt.lane("lock-low")?
        .registry()
        .register(Box::new(LockUser {
            wake: wake_low.clone(),
            state: state.clone(),
            high: false,
        }))?;

    // The medium-priority hog: SCHED_FIFO between the two, on the server CPU, spinning a fixed
    // wall-clock time per request.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let (mid, cpu, hog_us, rt_mode) = (
        plan.mid_prio(),
        plan.server_cpu,
        lp.hog.as_micros() as u64,
        plan.rt,
    );
    let hog = std::thread::Builder::new()
        .name("inv-hog".into())
        .spawn(move || {
            let r = os::set_current_sched(Sched::Fifo(mid))
                .map_err(|e| format!("hog SCHED_FIFO {mid}: {e}"));
            let r = match r {
                Err(_) if rt_mode == RtMode::BestEffort => Ok(()),
                r => r,
            };
            let r = r.and_then(|()| {
                os::set_current_affinity(&[cpu]).map_err(|e| format!("hog CPU {cpu}: {e}"))
            });
            let ok = r.is_ok();
            let _ = ready_tx.send(r);
            if ok {
                while go_rx.recv().is_ok() {
                    cpu_work(hog_us * 1000);
                    let _ = done_tx.send(());
                }
            }
        })?;
    let outcome = (|| -> Result<Vec<u64>, BoxError> {
        ready_rx.recv().map_err(|_| "hog thread died")??;
        // Off the server CPU, or the controller would wait behind the SCHED_FIFO threads.
        let _pinned = Pinned::to(plan.client_cpu)?;
        let mut blocks = Vec::with_capacity(lp.reps);
        for rep in 0..lp.reps as u64 {
            state.high_waiting.store(false, SeqCst);
            wake_low.notify(1)?;
            if !spin_until(Duration::from_secs(1), || state.low_holding.load(SeqCst)) {
                return Err(
                    "lock experiment: the low handler did not take the lock within 1 s".into(),
                );
            }
            wake_high.notify(1)?;
            if !spin_until(Duration::from_secs(1), || state.high_waiting.load(SeqCst)) {
                return Err("lock experiment: the high handler did not run within 1 s".into());
            }
            go_tx.send(()).map_err(|_| "hog thread died")?;
            let limit = lp.hog + Duration::from_secs(2);
            if !spin_until(limit, || {
                state.high_done.load(SeqCst) > rep && state.low_done.load(SeqCst) > rep
            }) {
                return Err("lock experiment: a repetition did not finish in time".into());
            }
            done_rx
                .recv_timeout(limit)
                .map_err(|_| "lock experiment: the hog did not finish in time")?;
            blocks.push(state.high_block_ns.load(SeqCst));
            std::thread::sleep(LOCK_COOLDOWN);
        }
        Ok(blocks)
    })();
    drop(go_tx);
    let _ = hog.join();
    rt.shutdown()?;
    let mut blocks = outcome?;
    let l = Latency::of(&mut blocks);
    Ok(LockResult {
        mutex: if pi { "pi" } else { "plain" },
        high_block_max_us: l.max_us,
        high_block_p99_us: l.p99_us,
        high_block_p50_us: l.p50_us,
        reps: blocks.len(),
        cs_us: lp.cs_ns as f64 / 1000.0,
        hog_us: lp.hog.as_secs_f64() * 1e6,
    })
}

// ---------------------------------------------------------------------------------------------
// Driver.

/// Runs both experiments as `plan` says, from a controller thread (the caller's own affinity
/// is left alone). `progress` gets one line per finished run.
///
/// # Errors
/// The first run that failed to set up.
pub fn measure(plan: &Plan, mut progress: impl FnMut(&str) + Send) -> Result<Report, BoxError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("inv-control".into())
            .spawn_scoped(s, || {
                let mut report = Report {
                    experiments: Vec::new(),
                    lock: Vec::new(),
                    pool_allocations: None,
                    pool_minor_faults: None,
                };
                let mut pool = PoolCounters::default();
                for &arch in &plan.architectures {
                    for &n in &plan.n_low {
                        let r = run_once_counting(plan, arch, n, &mut pool)?;
                        report.pool_allocations = pool.allocations;
                        report.pool_minor_faults = pool.minor_faults;
                        progress(&format!(
                            "{:<11} n_low={:<2} high p99={:.1} us lost={} low={:.0}/s",
                            arch.name(),
                            n,
                            r.high.p99_us,
                            r.lost,
                            r.low_throughput
                        ));
                        report.experiments.push(r);
                    }
                }
                if plan.lock.reps > 0 {
                    for pi in [false, true] {
                        let r = lock_experiment(plan, pi)?;
                        progress(&format!(
                            "lock {:<5} max={:.1} us p99={:.1} us",
                            r.mutex, r.high_block_max_us, r.high_block_p99_us
                        ));
                        report.lock.push(r);
                    }
                }
                Ok(report)
            })?
            .join()
            .map_err(|_| -> BoxError { "the controller thread panicked".into() })?
    })
}

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

/// `lfrt inversion`: plan, measure, print the table, write the JSON.
///
/// # Errors
/// An invalid flag, a set-up failure, or the JSON file not being writable.
pub fn run(args: &InversionArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.borrow {
        return borrow::run(args);
    }
    let plan = args.plan()?;
    if plan.rt != RtMode::Required {
        eprintln!("lfrt inversion: SCHED_FIFO {} not permitted; running at normal priority, the figures mean little", plan.high_prio);
    }
    let runs = plan.architectures.len() * plan.n_low.len();
    eprintln!(
        "lfrt inversion: {runs} runs of {:.1} s{}",
        plan.duration.as_secs_f64(),
        if plan.lock.reps > 0 {
            format!(" + lock experiment ({} reps x 2)", plan.lock.reps)
        } else {
            String::new()
        }
    );
    // Experiment k of n with the time left, on a terminal only (indicatif estimates it from the
    // experiments done so far); elsewhere each experiment's line alone.
    let experiments = runs + if plan.lock.reps > 0 { 2 } else { 0 };
    let progress = crate::progress::Progress::new(experiments as u64, "experiment");
    let report = measure(&plan, |line| {
        progress.println(&format!("  {line}"));
        progress.inc();
    })
    .map_err(|e| e as Box<dyn std::error::Error>)?;
    drop(progress);
    print!("{}", table(&plan, &report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> InversionArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: InversionArgs,
        }
        let mut v = vec!["inversion"];
        v.extend_from_slice(extra);
        Wrap::parse_from(v).args
    }

    #[test]
    fn quick_plan_holds_every_architecture_and_is_short() {
        let mut a = args(&["--quick"]);
        a.server_cpu = 1;
        a.client_cpu = 0;
        if os::available_cpus().len() < 2 {
            return; // one-CPU machine: the plan is refused, which another test checks
        }
        let p = a.plan().unwrap();
        assert_eq!(p.architectures, Architecture::ALL.to_vec());
        assert_eq!(p.n_low, vec![0, 4, 16]);
        assert!(p.duration <= Duration::from_secs(2));
        assert!(p.lock.reps <= 5);
        // Upper bound of the quick wall time: runs + lead + drain + lock reps.
        let runs = (p.architectures.len() * p.n_low.len()) as f64;
        let bound = runs * (p.duration + LEAD + DRAIN_LIMIT).as_secs_f64()
            + 2.0 * p.lock.reps as f64 * (p.lock.hog + LOCK_COOLDOWN).as_secs_f64();
        assert!(bound < 60.0, "{bound}");
    }

    #[test]
    fn bad_flags_name_themselves() {
        let a = InversionArgs {
            server_cpu: 0,
            client_cpu: 0,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--server-cpu"));
        let a = InversionArgs {
            low_budget: 0.95,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--low-budget"));
        let a = InversionArgs {
            high_prio: 41,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--high-prio"));
        let a = args(&["--n-low", "0,65"]);
        assert!(a.plan().unwrap_err().contains("--n-low"));
    }

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
    fn seq_log_counts_distinct_duplicates_and_range() {
        let log = SeqLog::new(4, true);
        log.record(0, 10);
        log.record(2, 30);
        log.record(2, 99);
        log.record(7, 1);
        assert_eq!(log.counts(), (2, 1));
        assert_eq!(log.out_of_range.load(Relaxed), 1);
        assert_eq!(log.latencies(0), vec![10, 30]);
        assert_eq!(log.latencies(1), vec![30]);
    }

    #[test]
    fn timer_log_maps_due_times_and_counts_folded_expiries() {
        let t = TimerLog {
            first_ns: 1_000,
            interval_ns: 100,
            count: 5,
            log: SeqLog::new(5, true),
            coalesced: AtomicU64::new(0),
        };
        t.record(1_000, 1, 1_010); // k = 0
        t.record(1_100, 3, 1_350); // k = 1, folds 2 and 3
        t.record(1_400, 4, 1_420); // k = 4, folds 5..7: out of the run
        assert_eq!(t.log.counts(), (3, 0));
        assert_eq!(t.coalesced.load(Relaxed), 2);
        assert_eq!(t.log.latencies(0), vec![10, 250, 20]);
    }

    #[test]
    fn header_round_trips() {
        let mut b = [0u8; DATAGRAM_BYTES];
        let h = Header {
            stream: 3,
            seq: 77,
            sent_ns: 123_456_789,
        };
        h.write(&mut b);
        assert_eq!(Header::parse(&b), Some(h));
        assert_eq!(Header::parse(&b[..10]), None);
    }

    #[test]
    fn poisson_gaps_have_the_requested_mean() {
        let mut r = SplitMix(42);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exp_gap_ns(1000.0) as f64).sum::<f64>() / n as f64;
        assert!((mean - 1e6).abs() < 0.05e6, "{mean}");
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
