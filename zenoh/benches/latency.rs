//! Zenoh put → lane handler latency across two processes on loopback (issue #24): a high lane
//! alone, then with a low-priority flood on the same session, and where the time goes: Zenoh's
//! own path (put → the bridge's callback) against the hand-off (callback → lane handler).
//!
//! ```sh
//! cargo bench -p lfrt-zenoh --bench latency                 # 2 modes × 20 s
//! cargo bench -p lfrt-zenoh --bench latency -- --quick      # 2 modes × 1 s (a smoke run)
//! cargo bench -p lfrt-zenoh --bench latency -- --seconds 60 --period-us 1000
//! cargo bench -p lfrt-zenoh --bench latency -- --quick --links 1   # one TCP link for all
//! cargo bench -p lfrt-zenoh --bench latency -- --quick --flood-per-ms 20  # a bounded flood
//! ```
//!
//! The sender is a child process (this binary again): a peer session that connects to the
//! bridge on 127.0.0.1 and puts a `CLOCK_MONOTONIC` stamp at `RealTime` priority every
//! `--period-us` (default 1000 µs); in `flood` mode a second thread of the same session puts
//! 64-byte samples at `Background` priority as fast as Zenoh takes them (congestion: drop).
//! The bridge routes `real-time` to lane `high` (SCHED_FIFO 80) and `background` to lane `low`
//! (SCHED_FIFO 20). The target (issue #24): the high lane's p99 with the flood ≤ 1.5× alone.

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{GroupConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_zenoh::zenoh::qos::{CongestionControl, Priority};
use lfrt_zenoh::zenoh::Wait;
use lfrt_zenoh::{Bridge, Config};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: &str = "[threads]\nrx = 1\ntx = 1\napp = 1\nacc = 1\nnet = 1\nmax_blocking = 2\n";

/// Three latencies per sample, recorded by the lane handler into preallocated storage.
struct Recorder {
    e2e: Box<[AtomicU64]>,
    zenoh: Box<[AtomicU64]>,
    handoff: Box<[AtomicU64]>,
    n: AtomicUsize,
}

impl Recorder {
    fn new(capacity: usize) -> Arc<Recorder> {
        let v = || (0..capacity).map(|_| AtomicU64::new(0)).collect();
        Arc::new(Recorder {
            e2e: v(),
            zenoh: v(),
            handoff: v(),
            n: AtomicUsize::new(0),
        })
    }
    fn record(&self, stamp: u64, received: u64) {
        let now = lfrt::os::now_ns();
        let i = self.n.fetch_add(1, Relaxed);
        if i < self.e2e.len() {
            self.e2e[i].store(now.saturating_sub(stamp), Relaxed);
            self.zenoh[i].store(received.saturating_sub(stamp), Relaxed);
            self.handoff[i].store(now.saturating_sub(received), Relaxed);
        }
    }
    fn quantiles(&self, which: &[AtomicU64]) -> [f64; 4] {
        let n = self.n.load(Relaxed).min(which.len());
        let mut v: Vec<u64> = which[..n].iter().map(|a| a.load(Relaxed)).collect();
        v.sort_unstable();
        let q = |p: f64| {
            v.get(((n as f64 * p) as usize).min(n.saturating_sub(1)))
                .map_or(0.0, |&x| x as f64 / 1000.0)
        };
        [
            q(0.5),
            q(0.99),
            q(0.999),
            v.last().map_or(0.0, |&x| x as f64 / 1000.0),
        ]
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("child") {
        return sender(&args[1..]);
    }
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let quick = args.iter().any(|a| a == "--quick");
    let secs = flag("--seconds").unwrap_or(if quick { 1 } else { 20 });
    let period_us = flag("--period-us").unwrap_or(1000);
    // One TCP link for all priorities, or (default) two: priorities 1-3 and 4-7 on links of
    // their own (Zenoh's `?prio=` endpoint metadata), so a flood's bytes queued in one socket
    // do not hold up RealTime samples.
    let links = flag("--links").unwrap_or(2);
    // Background puts per millisecond in `flood` mode; 0: as fast as Zenoh takes them.
    let flood_per_ms = flag("--flood-per-ms").unwrap_or(0);
    let rt_ok = lfrt::os::RtPrivilege::probe().allows(80);
    println!("# Zenoh put → lane latency over loopback TCP ({links} link(s)), {secs} s per mode, one RealTime put every {period_us} µs; SCHED_FIFO {}", if rt_ok { "granted" } else { "NOT granted (time-shared)" });
    println!(
        "{:<6} {:<14} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "mode", "path", "samples", "p50_us", "p99_us", "p99.9_us", "max_us"
    );
    let mut p99 = Vec::new();
    for flood in [false, true] {
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let endpoints = if links == 1 {
            vec![format!("tcp/127.0.0.1:{}", port())]
        } else {
            vec![
                format!("tcp/127.0.0.1:{}?prio=1-3", port()),
                format!("tcp/127.0.0.1:{}?prio=4-7", port()),
            ]
        };
        let quoted: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
        let endpoints = quoted.join(", ");
        let cfg = Config::parse(&format!(
            "{THREADS}[session]\nlisten = [{endpoints}]\n\
             [[route]]\nlane = \"high\"\npriorities = [\"real-time\"]\n\
             [[route]]\nlane = \"low\"\npriorities = [\"background\"]\ncapacity = 1024\n\
             [[subscribe]]\nkey = \"bench/**\"\n"
        ))
        .unwrap();
        let lane = |name: &str, prio| {
            let mut g = GroupConfig::new(name, Policy::Fifo, prio);
            g.threads = 1;
            g
        };
        let mut rt = Runtime::new(RuntimeConfig {
            rt: RtMode::BestEffort,
            groups: vec![lane("high", 80), lane("low", 20)],
            ..Default::default()
        })
        .unwrap();
        let mut bridge = Bridge::open(&cfg).unwrap();
        let rec = Recorder::new((secs * 1_000_000 / period_us.max(1)) as usize + 1024);
        let r = rec.clone();
        bridge
            .route(&rt, "high", move |s, _| {
                let stamp = u64::from_le_bytes(s.payload[..8].try_into().unwrap_or_default());
                r.record(stamp, s.received_ns);
            })
            .unwrap();
        let low = Arc::new(AtomicU64::new(0));
        let l = low.clone();
        bridge
            .route(&rt, "low", move |_, _| {
                l.fetch_add(1, Relaxed);
            })
            .unwrap();
        let _outbox = bridge.start().unwrap();
        rt.start().unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "child".to_string(),
                endpoints.clone(),
                period_us.to_string(),
                secs.to_string(),
                (if flood { flood_per_ms + 1 } else { 0 }).to_string(),
            ])
            .status()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let m = rt.shutdown().unwrap();
        let t = bridge.close().unwrap();
        let mode = if flood { "flood" } else { "alone" };
        let n = rec.n.load(Relaxed);
        for (path, which) in [
            ("put→handler", &rec.e2e),
            ("zenoh path", &rec.zenoh),
            ("hand-off", &rec.handoff),
        ] {
            let [p50, p99_, p999, max] = rec.quantiles(which);
            println!("{mode:<6} {path:<14} {n:>8} {p50:>8.1} {p99_:>8.1} {p999:>9.1} {max:>8.1}");
            if path == "put→handler" {
                p99.push(p99_);
            }
        }
        println!(
            "{mode:<6} low lane: {} delivered, {} dropped (full); child ok={}; pool_allocations high={:?} low={:?}",
            low.load(Relaxed), t.full[6], status.success(), m[0].pool_allocations, m[1].pool_allocations
        );
    }
    if let [alone, flood] = p99[..] {
        println!(
            "# high lane p99 with the flood / alone = {:.2} (target ≤ 1.5)",
            flood / alone.max(f64::MIN_POSITIVE)
        );
    }
}

/// The sending process: RealTime stamps at a period, and optionally a Background flood on the
/// same session, both bounded by time.
fn sender(args: &[String]) {
    let endpoints = &args[0];
    let period = Duration::from_micros(args[1].parse().unwrap());
    let secs: u64 = args[2].parse().unwrap();
    // 0: no flood; 1: as fast as Zenoh takes them; n + 1: n puts per millisecond.
    let flood_arg: u64 = args[3].parse().unwrap();
    let flood = flood_arg > 0;
    let cfg = Config::parse(&format!("{THREADS}[session]\nconnect = [{endpoints}]\n")).unwrap();
    let bridge = Bridge::open(&cfg).unwrap();
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the bridge's subscription arrives
    let end = Instant::now() + Duration::from_secs(secs);
    let session = bridge.session().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let flooder = flood.then(|| {
        let (session, stop) = (session.clone(), stop.clone());
        std::thread::spawn(move || {
            let low = session
                .declare_publisher("bench/low")
                .priority(Priority::Background)
                .congestion_control(CongestionControl::Drop)
                .wait()
                .unwrap();
            while !stop.load(Relaxed) {
                let burst = if flood_arg == 1 { 64 } else { flood_arg - 1 };
                for _ in 0..burst {
                    let _ = low.put(vec![0u8; 64]).wait();
                }
                if flood_arg > 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    });
    let high = session
        .declare_publisher("bench/high")
        .priority(Priority::RealTime)
        .express(true)
        .wait()
        .unwrap();
    while Instant::now() < end {
        let _ = high.put(lfrt::os::now_ns().to_le_bytes().to_vec()).wait();
        std::thread::sleep(period);
    }
    stop.store(true, Relaxed);
    if let Some(f) = flooder {
        f.join().unwrap();
    }
    drop(high);
    let _ = bridge.close();
}
