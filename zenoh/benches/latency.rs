//! Zenoh put → lane handler latency across two processes (issues #24, #29): a high lane alone,
//! then with a low-priority flood from the same sender, and where the time goes: the sender's
//! outbox and Zenoh's own path (put → the bridge's callback) against the hand-off (callback →
//! lane handler).
//!
//! ```sh
//! cargo bench -p lfrt-zenoh --bench latency                 # 2 modes × 20 s, loopback
//! cargo bench -p lfrt-zenoh --bench latency -- --quick      # 2 modes × 1 s (a smoke run)
//! cargo bench -p lfrt-zenoh --bench latency -- --seconds 60 --period-us 1000
//! cargo bench -p lfrt-zenoh --bench latency -- --quick --links 1   # one TCP link for all
//! cargo bench -p lfrt-zenoh --bench latency -- --quick --flood-per-ms 20  # a bounded flood
//! cargo bench -p lfrt-zenoh --bench latency -- --netns 100  # two hosts: a veth pair at 100 Mbit/s
//! cargo bench -p lfrt-zenoh --bench latency -- --rx-priority 10    # Zenoh's rx workers at FIFO 10
//! cargo bench -p lfrt-zenoh --bench latency -- --isolated   # the hard-isolation recipe
//! ```
//!
//! `--isolated` is docs/zenoh.md's hard-isolation recipe: the `real-time` link ends in a small
//! ingress process (this binary again) whose Zenoh threads all run at `SCHED_FIFO` 70 (it opens
//! its session from a FIFO thread, and Zenoh's threads inherit the policy); its callback
//! publishes each sample over iceoryx2 (`lfrt-iceoryx2`) to the high lane of this process, whose
//! own Zenoh session (`SCHED_OTHER`) takes only the bulk link. "zenoh path" is then put → the
//! ingress callback, "hand-off" the ingress callback → the lane handler through iceoryx2.
//!
//! The sender is a child process (this binary again): a peer session that connects to the
//! bridge and puts, through an lfrt-zenoh outbox, a `CLOCK_MONOTONIC` stamp and a sequence
//! number at `RealTime` priority every `--period-us` (default 1000 µs); in `flood` mode a second
//! thread puts 64-byte samples at `Background` priority as fast as the outbox takes them
//! (congestion `drop`; it backs off 20 µs when the outbox refuses). The sender's CPU share is
//! printed: where it nears 200 % (both CPUs) the flood measures the machine, not the link. With `--netns RATE`, the sender runs in a network namespace joined by a
//! veth pair whose both directions `tc` limits to RATE Mbit/s, so
//! the flood fills the link (HTB, `pfifo_fast` under it; the real-time link is marked
//! `IPTOS_LOWDELAY` with `#dscp=0x10`, so it takes the first band). The bridge routes
//! `real-time` to lane `high` (SCHED_FIFO 80) and `background` to lane `low` (SCHED_FIFO 20). The target (issue #29): the high lane's p99
//! with the flood ≤ 1.5× alone, every `RealTime` put received or counted.
//!
//! The last line is for scripts: `zenoh-priority: links L, flood/alone p99 R, realtime sent S
//! received V dropped D`, where `L` is the most TCP connections the bridge had on its
//! endpoints during the flood run (read from `/proc`), and `S`, `V`, `D` count the flood run's
//! `RealTime` puts (the sender's outbox accepted `S`; `D` = `S` − `V`).

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

#[path = "../tests/util/netns.rs"]
mod netns;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_zenoh::zenoh::Wait;
use lfrt_zenoh::{Bridge, Config};
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: &str = "[threads]\nrx = 2\ntx = 1\napp = 1\nacc = 1\nnet = 1\nmax_blocking = 2\n";

/// Three latencies per sample, recorded by the lane handler into preallocated storage, and the
/// highest sequence number seen.
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
    if args.first().map(String::as_str) == Some("ingress") {
        return ingress(&args[1..]);
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
    // their own (Zenoh's `?prio=` endpoint metadata).
    let links = flag("--links").unwrap_or(2);
    // Background puts per millisecond in `flood` mode; 0: as fast as the outbox takes them.
    let flood_per_ms = flag("--flood-per-ms").unwrap_or(0);
    let rx_priority = flag("--rx-priority");
    let isolated = args.iter().any(|a| a == "--isolated");
    let rate = flag("--netns");
    let hosts = rate.map(
        |r| match netns::Hosts::new("zbench", (r > 0).then_some(r as u32)) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("--netns: cannot make the second host: {e} (needs root and iproute2)");
                std::process::exit(2);
            }
        },
    );
    let ip = hosts
        .as_ref()
        .map_or("127.0.0.1".to_string(), |h| h.host_ip.clone());
    let rt_ok = lfrt::os::RtPrivilege::probe().allows(80);
    let path = match rate {
        Some(0) => "two hosts (veth, unshaped)".to_string(),
        Some(r) => {
            format!("two hosts (veth at {r} Mbit/s, HTB + pfifo_fast, real-time link dscp=0x10)")
        }
        None => "loopback".to_string(),
    };
    println!("# Zenoh put → lane latency over TCP, {path}, {links} link(s), rx workers at {}{}, {secs} s per mode, one RealTime put every {period_us} µs; SCHED_FIFO {}",
        rx_priority.map_or("SCHED_OTHER".to_string(), |p| format!("SCHED_FIFO {p}")),
        if isolated { "; isolated: real-time through an ingress process (Zenoh at SCHED_FIFO 70) and iceoryx2" } else { "" },
        if rt_ok { "granted" } else { "NOT granted (time-shared)" });
    println!(
        "{:<6} {:<14} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "mode", "path", "samples", "p50_us", "p99_us", "p99.9_us", "max_us"
    );
    let mut p99 = Vec::new();
    let mut last = (0usize, 0u64, 0u64);
    for flood in [false, true] {
        let port = || {
            std::net::TcpListener::bind(format!("{ip}:0"))
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        // Across the veth pair, the real-time link's packets are marked IPTOS_LOWDELAY, so the
        // shaped link's pfifo_fast sends them first.
        let mark = if hosts.is_some() { "#dscp=0x10" } else { "" };
        let endpoints = if isolated {
            vec![
                format!("tcp/{ip}:{}?prio=1-3{mark}", port()),
                format!("tcp/{ip}:{}?prio=4-7", port()),
            ]
        } else if links == 1 {
            vec![format!("tcp/{ip}:{}", port())]
        } else {
            vec![
                format!("tcp/{ip}:{}?prio=1-3{mark}", port()),
                format!("tcp/{ip}:{}?prio=4-7", port()),
            ]
        };
        let quoted: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
        // Isolated: this process listens on the bulk link only; the ingress on the real-time one.
        let listen = if isolated {
            quoted[1].clone()
        } else {
            quoted.join(", ")
        };
        let endpoints = quoted.join(", ");
        let rx = rx_priority.map_or(String::new(), |p| format!("rx_priority = {p}\n"));
        let high_route = if isolated {
            ""
        } else {
            "[[route]]\nlane = \"high\"\npriorities = [\"real-time\"]\n"
        };
        let cfg = Config::parse(&format!(
            "{THREADS}{rx}[session]\nlisten = [{listen}]\n{high_route}\
             [[route]]\nlane = \"low\"\npriorities = [\"background\"]\ncapacity = 1024\n\
             [[subscribe]]\nkey = \"bench/**\"\n"
        ))
        .unwrap();
        let lane = |name: &str, prio| {
            let mut g = LaneConfig::new(name, Policy::Fifo, prio);
            g.threads = 1;
            g
        };
        let mut rt = Runtime::new(RuntimeConfig {
            rt: RtMode::BestEffort,
            lanes: vec![lane("high", 80), lane("low", 20)],
            ..Default::default()
        })
        .unwrap();
        let mut bridge = Bridge::open(&cfg).unwrap();
        let rec = Recorder::new((secs * 1_000_000 / period_us.max(1)) as usize + 1024);
        let r = rec.clone();
        let service = format!("lfrt-bench/zenoh-isolated-{}", std::process::id());
        let mut ingress_child = None;
        if isolated {
            let node = lfrt_iceoryx2::node().unwrap();
            let options = lfrt_iceoryx2::SubscriberOptions {
                create: true,
                buffer: Some(64),
                ..Default::default()
            };
            let (sub, _stats) = lfrt_iceoryx2::LaneSubscriber::open(
                &node,
                &service,
                options,
                move |v: &[u64; 2], _| r.record(v[0], v[1]),
            )
            .unwrap();
            sub.register(&rt.lane("high").unwrap().registry()).unwrap();
            // The node stays alive as long as the process: the subscriber needs it.
            std::mem::forget(node);
            let rt_endpoint = endpoints.split(", ").next().unwrap().to_string();
            let exe = std::env::current_exe().unwrap();
            ingress_child = Some(
                std::process::Command::new(exe)
                    .args([
                        "ingress".to_string(),
                        rt_endpoint,
                        service.clone(),
                        (secs + 30).to_string(),
                    ])
                    .spawn()
                    .unwrap(),
            );
        } else {
            bridge
                .route(&rt, "high", move |s, _| {
                    let stamp = u64::from_le_bytes(s.payload[..8].try_into().unwrap_or_default());
                    r.record(stamp, s.received_ns);
                })
                .unwrap();
        }
        let low = Arc::new(AtomicU64::new(0));
        let l = low.clone();
        bridge
            .route(&rt, "low", move |_, _| {
                l.fetch_add(1, Relaxed);
            })
            .unwrap();
        let _outbox = bridge.start().unwrap();
        rt.start().unwrap();
        let child_args = [
            "child".to_string(),
            endpoints.clone(),
            period_us.to_string(),
            secs.to_string(),
            (if flood { flood_per_ms + 1 } else { 0 }).to_string(),
        ];
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match &hosts {
            Some(h) => h.command(&exe),
            None => std::process::Command::new(&exe),
        };
        let (cpu_before, started) = (lfrt::os::children_cpu_ns(), Instant::now());
        let mut child = cmd
            .args(child_args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The TCP connections the bridge holds on its endpoints, while the child runs.
        let mut most_links = 0;
        let deadline = Instant::now() + Duration::from_secs(secs + 30);
        while child.try_wait().unwrap().is_none() {
            let up: usize = bridge.links().iter().map(|l| l.established).sum();
            most_links = most_links.max(up);
            if Instant::now() > deadline {
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut out = String::new();
        let _ = child.stdout.take().unwrap().read_to_string(&mut out);
        let ok = child.wait().unwrap().success();
        let sender_cpu = (lfrt::os::children_cpu_ns() - cpu_before) as f64
            / started.elapsed().as_nanos() as f64
            * 100.0;
        if let Some(mut i) = ingress_child.take() {
            let _ = i.kill();
            let _ = i.wait();
        }
        std::thread::sleep(Duration::from_millis(100));
        let m = rt.shutdown().unwrap();
        let t = bridge.close().unwrap();
        let sent: u64 = out
            .split_whitespace()
            .find_map(|w| w.strip_prefix("realtime_sent="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let refused: u64 = out
            .split_whitespace()
            .find_map(|w| w.strip_prefix("realtime_refused="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
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
            "{mode:<6} links {most_links}; realtime: sender outbox accepted {sent} refused {refused}, received {n}, gaps seen by the bridge {}, full {}; low lane: {} delivered, {} dropped (full), {} gaps; child ok={ok}; pool_allocations high={:?} low={:?}",
            t.gaps[0], t.full[0], low.load(Relaxed), t.full[6], t.gaps[6], m[0].pool_allocations, m[1].pool_allocations
        );
        for line in out.lines().filter(|l| l.starts_with("sender ")) {
            println!("{mode:<6} {line}; sender CPU {sender_cpu:.0} % of one CPU");
        }
        if flood {
            last = (most_links, sent, n as u64);
        }
    }
    if let [alone, flood] = p99[..] {
        let ratio = flood / alone.max(f64::MIN_POSITIVE);
        println!("# high lane p99 with the flood / alone = {ratio:.2} (target ≤ 1.5)");
        let (l, s, v) = last;
        println!(
            "zenoh-priority: links {l}, flood/alone p99 {ratio:.2}, realtime sent {s} received {v} dropped {}",
            s.saturating_sub(v)
        );
    }
}

/// The sending process: RealTime stamps at a period, and optionally a Background flood, both
/// through an lfrt-zenoh outbox and bounded by time. Prints its counts for the parent.
fn sender(args: &[String]) {
    let endpoints = &args[0];
    let period = Duration::from_micros(args[1].parse().unwrap());
    let secs: u64 = args[2].parse().unwrap();
    // 0: no flood; 1: as fast as the outbox takes them; n + 1: n puts per millisecond.
    let flood_arg: u64 = args[3].parse().unwrap();
    let cfg = Config::parse(&format!(
        "{THREADS}[session]\nconnect = [{endpoints}]\n\
         [[publish]]\nkey = \"bench/high\"\npriority = \"real-time\"\n\
         [[publish]]\nkey = \"bench/low\"\npriority = \"background\"\n\
         [outbox]\nmax_payload = 64\n"
    ))
    .unwrap();
    let mut bridge = Bridge::open(&cfg).unwrap();
    let outbox = bridge.start().unwrap();
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // the bridge's subscription arrives
    let end = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let flooder = (flood_arg > 0).then(|| {
        let (outbox, stop) = (outbox.clone(), stop.clone());
        std::thread::spawn(move || {
            let low = outbox.key("bench/low").unwrap();
            let payload = [0u8; 64];
            while !stop.load(Relaxed) {
                if flood_arg == 1 {
                    // A producer that finds its queue full backs off a little: spinning on the
                    // refusal would measure the spin (a whole CPU) instead of the flood.
                    if outbox.put(low, &payload).is_err() {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                } else {
                    for _ in 0..flood_arg - 1 {
                        let _ = outbox.put(low, &payload);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    });
    let high = outbox.key("bench/high").unwrap();
    let (mut sent, mut refused, mut seq) = (0u64, 0u64, 0u64);
    while Instant::now() < end {
        seq += 1;
        let mut payload = [0u8; 16];
        payload[..8].copy_from_slice(&lfrt::os::now_ns().to_le_bytes());
        payload[8..].copy_from_slice(&seq.to_le_bytes());
        match outbox.put(high, &payload) {
            Ok(()) => sent += 1,
            Err(_) => refused += 1,
        }
        std::thread::sleep(period);
    }
    stop.store(true, Relaxed);
    if let Some(f) = flooder {
        f.join().unwrap();
    }
    let t = bridge.close().unwrap();
    println!("realtime_sent={sent} realtime_refused={refused}");
    println!(
        "sender outbox: real-time sent {} full {}; background sent {} full {}; put_errors {}",
        t.outbox_sent[0], t.outbox_full[0], t.outbox_sent[6], t.outbox_full[6], t.put_errors
    );
}

/// The isolated ingress (`ingress ENDPOINT SERVICE SECS`): opens its Zenoh session from a thread
/// at SCHED_FIFO 70, so all of Zenoh's threads here run at FIFO 70, listens on the real-time
/// endpoint and publishes each `bench/high` sample's stamp, with the time its callback ran, over
/// iceoryx2. Ends after SECS (the parent kills it sooner).
fn ingress(args: &[String]) {
    let (endpoint, service) = (&args[0], &args[1]);
    let secs: u64 = args[2].parse().unwrap();
    if let Err(e) = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(70)) {
        eprintln!("ingress: SCHED_FIFO 70 refused ({e}); running time-shared");
    }
    let node = lfrt_iceoryx2::node().unwrap();
    let publisher = lfrt_iceoryx2::Publisher::<[u64; 2]>::create(&node, service).unwrap();
    let cfg = Config::parse(&format!("{THREADS}[session]\nlisten = [{endpoint}]\n")).unwrap();
    let bridge = Bridge::open(&cfg).unwrap();
    let _sub = bridge
        .session()
        .declare_subscriber("bench/high")
        .callback(move |s| {
            let now = lfrt::os::now_ns();
            let bytes = s.payload().to_bytes();
            let stamp = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
            let _ = publisher.publish([stamp, now]);
        })
        .wait()
        .unwrap();
    std::thread::sleep(Duration::from_secs(secs));
}
