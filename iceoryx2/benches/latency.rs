//! iceoryx2 publish → lane handler latency across two processes (issue #24), against a bare
//! eventfd written by another process as the floor, lane against lane at two priorities, and
//! the high lane under a flood on the low lane (as `lfrt inversion` does for sockets).
//!
//! ```sh
//! cargo bench -p lfrt-iceoryx2 --bench latency                 # 4 modes × 20 s
//! cargo bench -p lfrt-iceoryx2 --bench latency -- --quick      # 4 modes × 1 s (a smoke run)
//! cargo bench -p lfrt-iceoryx2 --bench latency -- --seconds 60 --period-us 200
//! cargo bench -p lfrt-iceoryx2 --bench latency -- --publisher-fifo 90
//! ```
//!
//! The publisher is a child process (this binary again) that stamps each sample with
//! `CLOCK_MONOTONIC` and publishes one every `--period-us` (default 500 µs); the lane handler
//! records `now − stamp`. Lanes: `high` SCHED_FIFO 80 and `low` SCHED_FIFO 20, one thread each
//! (best effort: time-shared without the privilege, and the report says so).
//!
//! The stamping child runs at SCHED_OTHER unless `--publisher-fifo PRIO` (1 to 99) runs it at
//! SCHED_FIFO PRIO (the eventfd writer of the floor too, so the floor stays comparable): a
//! stamp taken by a preempted publisher counts the preemption as latency, so comparing the
//! high lane's tail under the flood with and without it attributes that tail between the
//! publisher and the lane. The flooding child always stays SCHED_OTHER. Each child runs for
//! the mode's `--seconds` and the stamping ones sleep a period between samples (a FIFO child
//! needs a `--period-us` of at least 50), so none can hold a CPU past its mode.
//!
//! | mode | what |
//! |---|---|
//! | `eventfd` | the floor: the child writes its stamp into an inherited eventfd in the high lane's handle set |
//! | `alone` | the child publishes on one service, read by the high lane |
//! | `lanes` | the child publishes on two services each period, one read by the high lane, one by the low lane |
//! | `flood` | `alone`, while a second child publishes on the low lane's service as fast as it can |

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{
    Context, Disposition, Event, EventHandler, LaneConfig, Policy, RtMode, Runtime, RuntimeConfig,
};
use lfrt_iceoryx2::{LaneSubscriber, Publisher, SubscriberOptions};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest `--period-us` with `--publisher-fifo`: a FIFO child then sleeps most of the
/// time and leaves its CPU to the lanes.
const MIN_FIFO_PERIOD_US: u64 = 50;

/// Latencies recorded by a lane handler into preallocated storage (no allocation, no lock).
struct Recorder {
    ns: Box<[AtomicU64]>,
    n: AtomicUsize,
    implausible: AtomicU64,
}

impl Recorder {
    fn new(capacity: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            ns: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            n: AtomicUsize::new(0),
            implausible: AtomicU64::new(0),
        })
    }
    fn record_since(&self, stamp_ns: u64) {
        let now = lfrt::os::now_ns();
        // A stamp from the future or older than a second is not one sample's latency (e.g. two
        // eventfd writes added up before the handler read them).
        if stamp_ns > now || now - stamp_ns > 1_000_000_000 {
            self.implausible.fetch_add(1, Relaxed);
            return;
        }
        let i = self.n.fetch_add(1, Relaxed);
        if i < self.ns.len() {
            self.ns[i].store(now - stamp_ns, Relaxed);
        }
    }
    fn row(&self, mode: &str, lane: &str) -> String {
        let n = self.n.load(Relaxed).min(self.ns.len());
        let mut v: Vec<u64> = self.ns[..n].iter().map(|a| a.load(Relaxed)).collect();
        v.sort_unstable();
        let q = |p: f64| {
            v.get(((n as f64 * p) as usize).min(n.saturating_sub(1)))
                .map_or(0.0, |&x| x as f64 / 1000.0)
        };
        format!(
            "{mode:<8} {lane:<5} {n:>8} {:>8.1} {:>8.1} {:>9.1} {:>8.1} {:>11}",
            q(0.50),
            q(0.99),
            q(0.999),
            v.last().map_or(0.0, |&x| x as f64 / 1000.0),
            self.implausible.load(Relaxed)
        )
    }
}

/// The floor: an eventfd another process writes its stamp into.
struct Floor(OwnedFd, Arc<Recorder>);

impl EventHandler for Floor {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from an eventfd this handler owns.
        let n = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            self.1.record_since(v);
        }
        Disposition::Rearm
    }
}

fn runtime() -> Runtime {
    let lane = |name: &str, prio| {
        let mut g = LaneConfig::new(name, Policy::Fifo, prio);
        g.threads = 1;
        g
    };
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![lane("high", 80), lane("low", 20)],
        ..RuntimeConfig::default()
    })
    .expect("runtime")
}

fn child(args: &[String]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(args)
        .spawn()
        .expect("child")
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("child-eventfd") => return child_eventfd(&args[1..]),
        Some("child-pub") => return child_pub(&args[1..]),
        Some("child-flood") => return child_flood(&args[1..]),
        _ => {}
    }
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let quick = args.iter().any(|a| a == "--quick");
    let secs = flag("--seconds").unwrap_or(if quick { 1 } else { 20 });
    let period_us = flag("--period-us").unwrap_or(500);
    // 0: the stamping child stays SCHED_OTHER.
    let publisher_fifo = match args.iter().position(|a| a == "--publisher-fifo") {
        None => 0,
        Some(i) => match args.get(i + 1).and_then(|v| v.parse::<u8>().ok()) {
            Some(p @ 1..=99) if period_us >= MIN_FIFO_PERIOD_US => p,
            Some(1..=99) => {
                eprintln!("--publisher-fifo needs a --period-us of at least {MIN_FIFO_PERIOD_US}: a SCHED_FIFO child that hardly sleeps would hold a CPU above the lanes for the whole mode");
                std::process::exit(2);
            }
            _ => {
                eprintln!("--publisher-fifo takes a priority from 1 to 99");
                std::process::exit(2);
            }
        },
    };
    let capacity = (secs * 1_000_000 / period_us.max(1)) as usize + 1024;
    let rt_ok = lfrt::os::RtPrivilege::probe().allows(80);
    println!("# iceoryx2 → lane latency, {secs} s per mode, one sample every {period_us} µs; SCHED_FIFO {}", if rt_ok { "granted" } else { "NOT granted (time-shared: figures are not real-time)" });
    println!(
        "# stamping publisher: {}; flooding publisher: SCHED_OTHER",
        if publisher_fifo > 0 {
            format!("SCHED_FIFO {publisher_fifo} (a child that is refused it says so on stderr)")
        } else {
            "SCHED_OTHER".to_owned()
        }
    );
    println!(
        "{:<8} {:<5} {:>8} {:>8} {:>8} {:>9} {:>8} {:>11}",
        "mode", "lane", "samples", "p50_us", "p99_us", "p99.9_us", "max_us", "implausible"
    );
    let node = lfrt_iceoryx2::node().expect("node");
    let base = format!("lfrt-bench/{}", std::process::id());
    let (s, p, f) = (
        secs.to_string(),
        period_us.to_string(),
        publisher_fifo.to_string(),
    );

    // The floor: an eventfd, inherited by the child (no CLOEXEC).
    {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
        assert!(fd >= 0, "eventfd");
        // SAFETY: `fd` was just created and is owned by nobody else in this process.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let high = Recorder::new(capacity);
        let mut rt = runtime();
        let raw = fd.as_raw_fd().to_string();
        rt.lane("high")
            .unwrap()
            .registry()
            .register(Box::new(Floor(fd, high.clone())))
            .unwrap();
        rt.start().unwrap();
        child(&["child-eventfd".into(), raw, p.clone(), s.clone(), f.clone()])
            .wait()
            .unwrap();
        let m = rt.shutdown().unwrap();
        println!(
            "{}  pool_allocations={:?}",
            high.row("eventfd", "high"),
            m[0].pool_allocations
        );
    }

    // Creates the services if the publisher has not yet; 16 samples a turn, 16 buffered.
    let create = SubscriberOptions {
        create: true,
        ..SubscriberOptions::default()
    };
    for mode in ["alone", "lanes", "flood"] {
        let (hs, ls) = (format!("{base}/{mode}/high"), format!("{base}/{mode}/low"));
        let (high, low) = (Recorder::new(capacity), Recorder::new(capacity * 64));
        let mut rt = runtime();
        let h = high.clone();
        let (sub, _) =
            LaneSubscriber::open(&node, &hs, create, move |v: &u64, _| h.record_since(*v)).unwrap();
        sub.register(&rt.lane("high").unwrap().registry()).unwrap();
        let l = low.clone();
        let (sub, _) =
            LaneSubscriber::open(&node, &ls, create, move |v: &u64, _| l.record_since(*v)).unwrap();
        sub.register(&rt.lane("low").unwrap().registry()).unwrap();
        rt.start().unwrap();
        let services = if mode == "lanes" {
            format!("{hs},{ls}")
        } else {
            hs.clone()
        };
        let flood =
            (mode == "flood").then(|| child(&["child-flood".into(), ls.clone(), s.clone()]));
        child(&[
            "child-pub".into(),
            services,
            p.clone(),
            s.clone(),
            f.clone(),
        ])
        .wait()
        .unwrap();
        if let Some(mut f) = flood {
            f.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        let m = rt.shutdown().unwrap();
        println!(
            "{}  pool_allocations={:?}",
            high.row(mode, "high"),
            m[0].pool_allocations
        );
        if mode != "alone" {
            println!(
                "{}  pool_allocations={:?}",
                low.row(mode, "low"),
                m[1].pool_allocations
            );
        }
    }
}

/// A stamping child's scheduling: SCHED_FIFO `args[3]` if that is not 0 (a refusal is reported
/// on stderr, and the child goes on at SCHED_OTHER).
fn stamping_sched(args: &[String], who: &str) {
    let prio: u8 = args[3].parse().unwrap();
    if prio > 0 {
        if let Err(e) = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio)) {
            eprintln!("{who}: SCHED_FIFO {prio} refused ({e}): stamping at SCHED_OTHER");
        }
    }
}

fn child_eventfd(args: &[String]) {
    stamping_sched(args, "child-eventfd");
    let fd: i32 = args[0].parse().unwrap();
    let (period, end) = (
        Duration::from_micros(args[1].parse().unwrap()),
        Instant::now() + Duration::from_secs(args[2].parse().unwrap()),
    );
    while Instant::now() < end {
        let stamp = lfrt::os::now_ns();
        // SAFETY: writes 8 bytes from `stamp` to the inherited eventfd.
        let _ = unsafe { libc::write(fd, (&stamp as *const u64).cast(), 8) };
        std::thread::sleep(period);
    }
}

fn child_pub(args: &[String]) {
    stamping_sched(args, "child-pub");
    let node = lfrt_iceoryx2::node().unwrap();
    let pubs: Vec<Publisher<u64>> = args[0]
        .split(',')
        .map(|s| Publisher::create(&node, s).unwrap())
        .collect();
    let (period, end) = (
        Duration::from_micros(args[1].parse().unwrap()),
        Instant::now() + Duration::from_secs(args[2].parse().unwrap()),
    );
    while Instant::now() < end {
        for p in &pubs {
            let _ = p.publish(lfrt::os::now_ns());
        }
        std::thread::sleep(period);
    }
}

fn child_flood(args: &[String]) {
    let node = lfrt_iceoryx2::node().unwrap();
    let p = Publisher::<u64>::create(&node, &args[0]).unwrap();
    let end = Instant::now() + Duration::from_secs(args[1].parse().unwrap());
    // As fast as it can, bounded by time: the low lane is FIFO 20, so the high lane must still
    // preempt both it and this process (always SCHED_OTHER, even with --publisher-fifo).
    while Instant::now() < end {
        for _ in 0..64 {
            let _ = p.publish(lfrt::os::now_ns());
        }
    }
}
