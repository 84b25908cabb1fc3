//! A TCP connection per priority range, counted from the kernel: two peers (this process and a
//! child, on loopback and across two network namespaces joined by a veth pair), the bridge's
//! own count (`/proc`), `ss`'s count of the connections between them, and the bytes each
//! connection carried, which show the link each priority took.
//!
//! Its own harness (`harness = false`): the child peer is this binary again, run with `--peer`,
//! so that it can be started inside a namespace with `ip netns exec`.
//! Run: `cargo test --release -p lfrt-zenoh --test links`.

#[path = "util/netns.rs"]
mod netns;
#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_zenoh::zenoh::qos::Priority;
use lfrt_zenoh::{Bridge, Config, Error};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: &str = "[threads]\nrx = 2\ntx = 1\napp = 1\nacc = 1\nnet = 1\nmax_blocking = 2\n";
/// Samples the peer puts at each priority, and their size.
const REAL_TIME: u64 = 100;
const BULK: u64 = 2000;
const PAYLOAD: usize = 1024;

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind(format!("{ip}:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The peer (`--peer ENDPOINTS`): connects to each endpoint, checks that every link is up,
/// puts `REAL_TIME` samples at `real-time` and `BULK` at `background` through its outbox, and
/// stays connected for 5 s so the parent can count.
fn peer(endpoints: &str) {
    let cfg = Config::parse(&format!(
        "{THREADS}[session]\nconnect = [{endpoints}]\n\
         [[publish]]\nkey = \"links/rt\"\npriority = \"real-time\"\n\
         [[publish]]\nkey = \"links/bulk\"\npriority = \"background\"\ncongestion = \"block\"\n\
         [outbox]\ncapacity = 4096\nmax_payload = {PAYLOAD}\n"
    ))
    .unwrap();
    let mut bridge = Bridge::open(&cfg).unwrap();
    let outbox = bridge.start().unwrap();
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(500)); // the parent's subscription arrives
    let (rt, bulk) = (
        outbox.key("links/rt").unwrap(),
        outbox.key("links/bulk").unwrap(),
    );
    let payload = [7u8; PAYLOAD];
    for i in 0..BULK.max(REAL_TIME) {
        if i < REAL_TIME {
            while outbox.put(rt, &payload).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if i < BULK {
            while outbox.put(bulk, &payload).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    std::thread::sleep(Duration::from_secs(5));
    let t = bridge.close().unwrap();
    println!("{t}");
}

/// Established TCP connections whose local port is `port`, and the bytes they received, as
/// `ss` sees them (iproute2, independent of the bridge's own count).
fn ss(port: u16) -> (usize, u64) {
    let out = Command::new("ss")
        .args([
            "-tinH",
            "state",
            "established",
            &format!("( sport = :{port} )"),
        ])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let conns = text
        .lines()
        .filter(|l| l.contains(&format!(":{port} ")))
        .count();
    let bytes = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_received:"))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    (conns, bytes)
}

fn lanes() -> Runtime {
    let lane = |name: &str, prio| {
        let mut g = LaneConfig::new(name, Policy::Fifo, prio);
        g.threads = 1;
        g
    };
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![lane("rt", 60), lane("bulk", 20)],
        ..Default::default()
    })
    .unwrap()
}

/// The bridge listens on `ip` on two `prio=` endpoints; a child peer (`launch`) connects to
/// `connect_to` of them and puts at both priorities.
struct Setup {
    bridge: Bridge,
    rt: Runtime,
    ports: [u16; 2],
    delivered: [Arc<AtomicU64>; 2],
    child: Child,
}

fn setup(ip: &str, connect_to: usize, launch: impl Fn(&Path) -> Command) -> Setup {
    let ports = [free_port(ip), free_port(ip)];
    let endpoints = [
        format!("tcp/{ip}:{}?prio=1-3", ports[0]),
        format!("tcp/{ip}:{}?prio=4-7", ports[1]),
    ];
    let list = |e: &[String]| {
        e.iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cfg = Config::parse(&format!(
        "{THREADS}[session]\nlisten = [{}]\n\
         [[route]]\nlane = \"rt\"\npriorities = [\"real-time\"]\nmax_payload = {PAYLOAD}\n\
         [[route]]\nlane = \"bulk\"\npriorities = [\"background\"]\ncapacity = 4096\nmax_payload = {PAYLOAD}\n\
         [[subscribe]]\nkey = \"links/**\"\n",
        list(&endpoints)
    ))
    .unwrap();
    let mut rt = lanes();
    let mut bridge = Bridge::open(&cfg).unwrap();
    let delivered = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    for (lane, n) in ["rt", "bulk"].into_iter().zip(delivered.clone()) {
        bridge
            .route(&rt, lane, move |_, _| {
                n.fetch_add(1, Relaxed);
            })
            .unwrap();
    }
    bridge.start().unwrap();
    rt.start().unwrap();
    let child = launch(&std::env::current_exe().unwrap())
        .args(["--peer", &list(&endpoints[..connect_to])])
        .spawn()
        .unwrap();
    Setup {
        bridge,
        rt,
        ports,
        delivered,
        child,
    }
}

/// Both links come up, the kernel shows exactly two connections between the peers, and the
/// bulk samples crossed the `prio=4-7` one while the real-time ones crossed `prio=1-3`.
fn two_links_carry_their_priorities(ip: &str, launch: impl Fn(&Path) -> Command) {
    let mut s = setup(ip, 2, launch);
    s.bridge
        .wait_for_peers(1, Duration::from_secs(15))
        .expect("both priority links come up");
    let until = Instant::now() + Duration::from_secs(20);
    while (s.delivered[0].load(Relaxed), s.delivered[1].load(Relaxed)) != (REAL_TIME, BULK) {
        assert!(
            Instant::now() < until,
            "not all samples arrived: {}",
            s.bridge.totals()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let links = s.bridge.links();
    assert_eq!(
        links.iter().map(|l| l.established).collect::<Vec<_>>(),
        vec![1, 1],
        "one connection per priority range: {links:?}"
    );
    assert!(links[0].carries(Priority::RealTime, &links));
    assert!(links[1].carries(Priority::Background, &links));
    let (rt_conns, rt_bytes) = ss(s.ports[0]);
    let (bulk_conns, bulk_bytes) = ss(s.ports[1]);
    assert_eq!((rt_conns, bulk_conns), (1, 1), "ss counts the connections");
    let bulk_payload = BULK * PAYLOAD as u64;
    assert!(
        bulk_bytes >= bulk_payload,
        "the background samples crossed the prio=4-7 connection: {bulk_bytes} bytes"
    );
    assert!(
        rt_bytes >= REAL_TIME * PAYLOAD as u64 && rt_bytes < bulk_payload / 4,
        "only the real-time samples (and Zenoh's control) crossed prio=1-3: {rt_bytes} bytes"
    );
    let t = s.bridge.totals();
    assert_eq!(t.dropped(), 0, "{t}");
    let out = s.child.wait_with_output().unwrap();
    assert!(out.status.success(), "the peer failed");
    s.rt.shutdown().unwrap();
    s.bridge.close().unwrap();
}

fn on_loopback() {
    two_links_carry_their_priorities("127.0.0.1", |exe| Command::new(exe));
}

fn across_two_network_namespaces() {
    if !netns::available() {
        util::skip(
            "across_two_network_namespaces",
            "needs root and iproute2 for a network namespace",
        );
        return;
    }
    let hosts = netns::Hosts::new("ztest", Some(100)).expect("a namespace and a veth pair");
    two_links_carry_their_priorities(&hosts.host_ip.clone(), |exe| hosts.command(exe));
}

/// A peer that connects to one of the two `prio=` endpoints: the bridge names the other one
/// rather than let its priorities share the first link silently.
fn a_missing_link_is_named() {
    let mut s = setup("127.0.0.1", 1, |exe| Command::new(exe));
    match s.bridge.wait_for_peers(1, Duration::from_secs(3)) {
        Err(Error::MissingLinks { missing, .. }) => {
            assert_eq!(missing.len(), 1);
            assert!(
                missing[0].contains(&format!(":{}?prio=4-7", s.ports[1])),
                "{missing:?}"
            );
        }
        other => panic!("expected MissingLinks, got {other:?}"),
    }
    let _ = s.child.kill();
    let _ = s.child.wait();
    s.rt.shutdown().unwrap();
    s.bridge.close().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--peer") {
        return peer(&args[i + 1]);
    }
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let tests: [(&str, fn()); 3] = [
        ("on_loopback", on_loopback),
        (
            "across_two_network_namespaces",
            across_two_network_namespaces,
        ),
        ("a_missing_link_is_named", a_missing_link_is_named),
    ];
    let mut failed = 0;
    let mut ran = 0;
    for (name, test) in tests {
        if filter.is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        let _lock = util::rt_lock();
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!(
        "\ntest result: {}. {} passed; {failed} failed",
        if failed == 0 { "ok" } else { "FAILED" },
        ran - failed
    );
    if failed > 0 {
        std::process::exit(101);
    }
}
