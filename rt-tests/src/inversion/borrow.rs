//! `lfrt inversion --borrow`: lane borrowing (issue 15 §2) under a burst.
//!
//! A 1-thread **high** lane (FIFO `--high-prio`) receives a burst of [`BURST`] datagrams every
//! [`BURST_PERIOD`], one on each of its [`BURST`] UDP sockets. Each costs [`BLOCK`] of waiting
//! (a device or a disk, `nanosleep`) and `--work-us` of CPU, so the burst needs 3 threads to be
//! served in a third of the time one thread takes. A 2-thread **low** lane (FIFO `--low-prio`)
//! serves a steady stream of its own ([`LOW_RATE`] datagrams/s, `--work-us` CPU each, no wait).
//!
//! The same load runs twice for `--duration` each: without borrowing, and with
//! `borrow_from = ["low"]`, `max_borrowed = 2` on the high lane. Latency is the handler's entry
//! minus the send time carried in the datagram (both `CLOCK_MONOTONIC`). The table shows the
//! high lane's p50/p99/max, and what the low lane paid: its own p99 and throughput, and how many
//! of the high lane's events its threads served. Threads are not pinned: both CPUs serve, the
//! generators run `SCHED_OTHER`. Every run is bounded by `--duration` plus a drain of at most
//! 2 s; the offered FIFO work stays well under the kernel's RT throttle (the burst is 3 × 100 µs
//! of CPU per 20 ms, the low stream 20 % of a CPU at the default `--work-us`).

use super::InversionArgs;
use lfrt::handlers::cpu_work;
use lfrt::{Context, Disposition, Event, EventHandler};
use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Datagrams (and high sockets) per burst.
pub const BURST: usize = 6;
/// Time between bursts.
pub const BURST_PERIOD: Duration = Duration::from_millis(20);
/// What each high event waits for, besides its CPU work.
pub const BLOCK: Duration = Duration::from_micros(1000);
/// The low lane's steady rate, datagrams/s.
pub const LOW_RATE: u64 = 2000;

/// Latency samples (ns), preallocated; a full log counts the rest as dropped.
struct Log {
    samples: Box<[AtomicU64]>,
    len: AtomicUsize,
}

impl Log {
    fn new(cap: usize) -> Log {
        Log {
            samples: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            len: AtomicUsize::new(0),
        }
    }
    fn push(&self, v: u64) {
        let i = self.len.fetch_add(1, Relaxed);
        if let Some(s) = self.samples.get(i) {
            s.store(v, Relaxed);
        }
    }
    fn sorted(&self) -> Vec<u64> {
        let n = self.len.load(SeqCst).min(self.samples.len());
        let mut v: Vec<u64> = self.samples[..n].iter().map(|s| s.load(SeqCst)).collect();
        v.sort_unstable();
        v
    }
}

fn pct(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

/// Reads every pending datagram (an 8-byte send time), logs its latency, then waits and works.
struct Work {
    sock: UdpSocket,
    log: Arc<Log>,
    block: Duration,
    work_ns: u64,
}

impl EventHandler for Work {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let mut b = [0u8; 8];
        while let Ok(8) = self.sock.recv(&mut b) {
            let sent = u64::from_ne_bytes(b);
            self.log.push(lfrt::os::now_ns().saturating_sub(sent));
            if !self.block.is_zero() {
                std::thread::sleep(self.block);
            }
            cpu_work(self.work_ns);
        }
        Disposition::Rearm
    }
}

/// One run's figures.
struct Row {
    borrow: bool,
    high: Vec<u64>,
    low: Vec<u64>,
    low_per_s: f64,
    borrowed: u64,
    refused: u64,
}

fn run_one(args: &InversionArgs, borrow: bool) -> Result<Row, Box<dyn std::error::Error>> {
    let mut high = LaneConfig::new("high", Policy::Fifo, args.high_prio);
    high.threads = 1;
    high.buffer_bytes = 2048;
    if borrow {
        high.borrow_from = vec!["low".into()];
        high.max_borrowed = Some(2);
    }
    let mut low = LaneConfig::new("low", Policy::Fifo, args.low_prio);
    low.threads = 2;
    low.buffer_bytes = 2048;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![high, low],
        bands: Vec::new(),
    })?;
    let secs = args.duration.as_secs_f64();
    let high_log = Arc::new(Log::new((secs * 1e3 / 20.0 * BURST as f64) as usize + 1024));
    let low_log = Arc::new(Log::new((secs * LOW_RATE as f64 * 1.5) as usize + 1024));
    let work_ns = args.work_us * 1000;
    let mut high_addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..BURST {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        s.set_nonblocking(true)?;
        high_addrs.push(s.local_addr()?);
        rt.lane("high")
            .expect("lane")
            .registry()
            .register(Box::new(Work {
                sock: s,
                log: high_log.clone(),
                block: BLOCK,
                work_ns,
            }))?;
    }
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.set_nonblocking(true)?;
    let low_addr = s.local_addr()?;
    rt.lane("low")
        .expect("lane")
        .registry()
        .register(Box::new(Work {
            sock: s,
            log: low_log.clone(),
            block: Duration::ZERO,
            work_ns,
        }))?;
    let report = rt.start()?;
    let stop = AtomicBool::new(false);
    let low_sent = AtomicU64::new(0);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let c = UdpSocket::bind("127.0.0.1:0").expect("client socket");
            let mut next = lfrt::os::now_ns();
            while !stop.load(Relaxed) {
                for a in &high_addrs {
                    let _ = c.send_to(&lfrt::os::now_ns().to_ne_bytes(), a);
                }
                next += BURST_PERIOD.as_nanos() as u64;
                sleep_until(next);
            }
        });
        sc.spawn(|| {
            let c = UdpSocket::bind("127.0.0.1:0").expect("client socket");
            let period = 1_000_000_000 / LOW_RATE;
            let mut next = lfrt::os::now_ns();
            while !stop.load(Relaxed) {
                // Behind schedule: send what is due at once (the offered count stays fixed).
                while next <= lfrt::os::now_ns() {
                    if c.send_to(&lfrt::os::now_ns().to_ne_bytes(), low_addr)
                        .is_ok()
                    {
                        low_sent.fetch_add(1, Relaxed);
                    }
                    next += period;
                }
                sleep_until(next);
            }
        });
        std::thread::sleep(args.duration);
        stop.store(true, Relaxed);
    });
    // Drain: at most 2 s for what is still queued.
    let handled = |l: &Log| l.len.load(SeqCst) as u64;
    let end = std::time::Instant::now() + Duration::from_secs(2);
    while handled(&low_log) < low_sent.load(Relaxed) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let m = rt.shutdown()?;
    if !report.rt_applied {
        eprintln!("lfrt inversion --borrow: SCHED_FIFO refused; the figures mean little");
    }
    Ok(Row {
        borrow,
        high: high_log.sorted(),
        low: low_log.sorted(),
        low_per_s: handled(&low_log) as f64 / secs,
        borrowed: m[0].borrowed_dispatches,
        refused: m[0].borrow_refused,
    })
}

fn sleep_until(t: u64) {
    let now = lfrt::os::now_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}

/// The largest `--work-us` the borrow experiment accepts (see [`run`]).
pub const MAX_WORK_US: u64 = 200;

/// Runs the experiment without and with borrowing and prints one table.
pub fn run(args: &InversionArgs) -> Result<(), Box<dyn std::error::Error>> {
    // The shared flags (duration, priorities, CPUs) get the same checks as every experiment.
    args.plan()?;
    // The steady low load is LOW_RATE × work of SCHED_FIFO time and the burst BURST × work per
    // BURST_PERIOD: at 200 µs that is 40 % of one CPU and 6 %, far under the RT throttle on two
    // CPUs. More would let one experiment hold both CPUs at SCHED_FIFO for its whole duration.
    if args.work_us > MAX_WORK_US {
        return Err(format!(
            "--work-us {}: at most {MAX_WORK_US} with --borrow",
            args.work_us
        )
        .into());
    }
    eprintln!(
        "lfrt inversion --borrow: 2 runs of {:.1} s (burst of {BURST} every {} ms, {} µs wait + \
         {} µs work each; low lane {LOW_RATE}/s × {} µs)",
        args.duration.as_secs_f64(),
        BURST_PERIOD.as_millis(),
        BLOCK.as_micros(),
        args.work_us,
        args.work_us
    );
    let rows = [run_one(args, false)?, run_one(args, true)?];
    println!(
        "| borrowing | high p50 µs | high p99 µs | high max µs | high events | low p99 µs | \
         low handled/s | high events served by low threads | refused |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | {:.0} | {:.0} | {} | {} |",
            if r.borrow {
                "borrow_from = [\"low\"], max_borrowed = 2"
            } else {
                "off"
            },
            pct(&r.high, 0.5),
            pct(&r.high, 0.99),
            pct(&r.high, 1.0),
            r.high.len(),
            pct(&r.low, 0.99),
            r.low_per_s,
            r.borrowed,
            r.refused
        );
    }
    Ok(())
}
