//! Zenoh bridges on loopback: samples reach the lane of their priority, lanes put without
//! allocating, a full or oversized route is a counted drop and never a stall, absent and
//! departing peers are counted, bad TOML names its line.
//! Run one at a time: `cargo test --release -p lfrt-zenoh -- --test-threads=1`.
//!
//! Every session listens or connects on 127.0.0.1 only, with multicast scouting off.

#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig, WARMUP_DISPATCHES};
use lfrt_zenoh::zenoh::qos::Priority;
use lfrt_zenoh::zenoh::Wait;
use lfrt_zenoh::{Bridge, Config, Error};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The `[threads]` every test of this binary uses: Zenoh's runtimes are per process.
const THREADS: &str = "[threads]\nrx = 1\ntx = 1\napp = 1\nacc = 1\nnet = 1\nmax_blocking = 2\n";

/// A loopback port free just now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn lanes(names: &[(&str, u8)]) -> Runtime {
    let lanes = names
        .iter()
        .map(|(name, prio)| {
            let mut g = LaneConfig::new(*name, Policy::Fifo, *prio);
            g.threads = 1;
            g.buffer_bytes = 2048;
            g
        })
        .collect();
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes,
        ..RuntimeConfig::default()
    })
    .unwrap()
}

fn config(session: &str, rest: &str) -> Config {
    Config::parse(&format!("{THREADS}[session]\n{session}\n{rest}")).unwrap()
}

/// The sending side: a plain session peer of `port`, which puts at any priority.
fn sender(port: u16) -> Bridge {
    let b = Bridge::open(&config(
        &format!("connect = [\"tcp/127.0.0.1:{port}\"]"),
        "",
    ))
    .unwrap();
    b.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    b
}

fn put(b: &Bridge, key: &str, p: Priority, payload: &[u8]) {
    b.session()
        .put(key, payload.to_vec())
        .priority(p)
        .wait()
        .unwrap();
}

/// Puts a ping on `key` at `p` every 20 ms until the bridge has delivered one of that priority
/// (subscriptions reach the peer asynchronously; up to 10 s). Returns the pings delivered.
fn until_routed(bridge: &Bridge, peer: &Bridge, key: &str, p: Priority) -> u64 {
    let i = p as usize - 1;
    for _ in 0..500 {
        put(peer, key, p, b"ping");
        std::thread::sleep(Duration::from_millis(20));
        if bridge.totals().delivered[i] > 0 {
            break;
        }
    }
    // Pings still in flight arrive too: let them settle.
    std::thread::sleep(Duration::from_millis(100));
    let delivered = bridge.totals().delivered[i];
    assert!(
        delivered > 0,
        "{key} never reached the bridge: {}",
        bridge.totals()
    );
    delivered
}

/// Real-time samples reach the control lane, data samples the bulk lane, an unrouted priority
/// is counted; the control lane answers each command through the outbox, from the lane; after
/// warm-up neither lane allocated, the outbox put included.
#[test]
fn samples_reach_the_lane_of_their_priority_and_lanes_put_without_allocating() {
    let test = "samples_reach_the_lane_of_their_priority_and_lanes_put_without_allocating";
    if !util::rt_allowed(test, 30) {
        return;
    }
    let _l = util::rt_lock();
    let port = free_port();
    let cfg = config(
        &format!("listen = [\"tcp/127.0.0.1:{port}\"]"),
        r#"
[[route]]
lane = "control"
priorities = ["real-time"]
capacity = 64
[[route]]
lane = "bulk"
priorities = ["data", "data-low", "background"]
capacity = 64
[[subscribe]]
key = "test/cmd/**"
[[publish]]
key = "test/ack"
priority = "interactive-high"
"#,
    );
    let mut rt = lanes(&[("control", 30), ("bulk", 10)]);
    let mut bridge = Bridge::open(&cfg).unwrap();
    let wrong_lane = Arc::new(AtomicU64::new(0));
    let (w1, w2) = (wrong_lane.clone(), wrong_lane.clone());
    let outbox_slot: Arc<std::sync::OnceLock<lfrt_zenoh::Outbox>> = Arc::default();
    let ob = outbox_slot.clone();
    let acks_refused = Arc::new(AtomicU64::new(0));
    let refused = acks_refused.clone();
    bridge
        .route(&rt, "control", move |s, _ctx| {
            w1.fetch_add(u64::from(s.priority != Priority::RealTime), Relaxed);
            // Answer from the lane: a copy into a preallocated slot, no allocation.
            if let Some(outbox) = ob.get() {
                let ack = outbox.key("test/ack").unwrap();
                if outbox.put(ack, s.payload).is_err() {
                    refused.fetch_add(1, Relaxed);
                }
            }
        })
        .unwrap();
    bridge
        .route(&rt, "bulk", move |s, _ctx| {
            w2.fetch_add(u64::from(s.priority == Priority::RealTime), Relaxed);
        })
        .unwrap();
    let outbox = bridge.start().unwrap();
    let _ = outbox_slot.set(outbox);
    assert!(rt.start().unwrap().counting_allocations);

    let peer = sender(port);
    let acks = Arc::new(AtomicU64::new(0));
    let a = acks.clone();
    let _ack_sub = peer
        .session()
        .declare_subscriber("test/ack")
        .callback(move |_| {
            a.fetch_add(1, Relaxed);
        })
        .wait()
        .unwrap();
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    let pings = [
        until_routed(&bridge, &peer, "test/cmd/ping", Priority::RealTime),
        until_routed(&bridge, &peer, "test/cmd/ping", Priority::Data),
        until_routed(&bridge, &peer, "test/cmd/ping", Priority::Background),
    ];
    // The control lane acks every real-time sample, pings included, once the ack subscription
    // has reached it.
    assert!(util::wait_until(10, || acks.load(Relaxed) > 0));
    let acks_before = acks.load(Relaxed);

    let n = 300u64.max(3 * WARMUP_DISPATCHES);
    for i in 0..n {
        let cmd = i.to_le_bytes();
        put(&peer, "test/cmd/move", Priority::RealTime, &cmd);
        put(&peer, "test/cmd/log", Priority::Data, &cmd);
        put(&peer, "test/cmd/log", Priority::Background, &cmd);
        // One at a time: each waits for its lane (a liveness bound, not a timing check).
        assert!(
            util::wait_until(10, || {
                let t = bridge.totals();
                t.delivered[0] > pings[0] + i
                    && t.delivered[4] > pings[1] + i
                    && t.delivered[6] > pings[2] + i
            }),
            "round {i}: {}",
            bridge.totals()
        );
    }
    put(
        &peer,
        "test/cmd/chat",
        Priority::InteractiveLow,
        b"nobody routes this",
    );
    assert!(util::wait_until(10, || bridge.totals().unrouted[2] == 1));
    assert!(
        util::wait_until(10, || acks.load(Relaxed) == acks_before + n),
        "acks {} of {n}",
        acks.load(Relaxed) - acks_before
    );
    let t = bridge.totals();
    let m = rt.shutdown().unwrap();
    let t_final = bridge.close().unwrap();
    drop(peer);
    eprintln!("{t_final}");
    assert_eq!(
        wrong_lane.load(Relaxed),
        0,
        "a sample reached the wrong lane"
    );
    assert_eq!(
        (t.delivered[0], t.delivered[4], t.delivered[6]),
        (pings[0] + n, pings[1] + n, pings[2] + n)
    );
    assert_eq!(t.dropped(), 1, "only the unrouted sample: {t}");
    assert_eq!(
        (
            t.outbox_sent.iter().sum::<u64>(),
            acks_refused.load(Relaxed)
        ),
        (pings[0] + n, 0)
    );
    assert_eq!(t.lanes[0].as_deref(), Some("control"));
    for g in &m {
        assert_eq!(
            g.pool_allocations,
            Some(0),
            "lane {} allocated after warm-up: {g:?}",
            g.name
        );
    }
}

/// A route of 4 slots whose lane is held up: the sender's 50 samples are all accounted for
/// (forwarded or dropped as `full`) while the lane is still held, so Zenoh's thread never
/// waited for it; then the held samples are delivered.
#[test]
fn a_full_route_is_a_counted_drop_never_a_stall() {
    let test = "a_full_route_is_a_counted_drop_never_a_stall";
    if !util::rt_allowed(test, 30) {
        return;
    }
    let _l = util::rt_lock();
    let port = free_port();
    let cfg = config(
        &format!("listen = [\"tcp/127.0.0.1:{port}\"]"),
        "[[route]]\nlane = \"control\"\npriorities = [\"real-time\"]\ncapacity = 4\nbatch = 1\n[[subscribe]]\nkey = \"test/full\"\n",
    );
    let mut rt = lanes(&[("control", 30)]);
    let mut bridge = Bridge::open(&cfg).unwrap();
    let (hold, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (h, r) = (hold.clone(), release.clone());
    bridge
        .route(&rt, "control", move |_, _| {
            // Once holding, held until released (bounded: 10 s), sleeping, not spinning.
            for _ in 0..10_000 {
                if !h.load(Relaxed) || r.load(Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    let _outbox = bridge.start().unwrap();
    rt.start().unwrap();
    let peer = sender(port);
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    let pings = until_routed(&bridge, &peer, "test/full", Priority::RealTime);
    hold.store(true, Relaxed);
    for i in 0..50u32 {
        put(&peer, "test/full", Priority::RealTime, &i.to_le_bytes());
    }
    let accounted = util::wait_until(10, || {
        let t = bridge.totals();
        t.forwarded[0] + t.full[0] == pings + 50
    });
    let held = bridge.totals();
    release.store(true, Relaxed);
    assert!(accounted, "Zenoh's thread stalled: {held}");
    assert!(
        held.full[0] >= 50 - 5,
        "at most 4 slots + 1 in the handler: {held}"
    );
    assert!(util::wait_until(10, || bridge.totals().delivered[0] == held.forwarded[0]));
    let _ = rt.shutdown().unwrap();
    let t = bridge.close().unwrap();
    assert_eq!(t.delivered[0] + t.full[0], pings + 50, "{t}");
}

/// A payload above `max_payload` is dropped and counted as `oversize`; the next fits and
/// arrives.
#[test]
fn an_oversized_sample_is_counted() {
    let _l = util::rt_lock();
    let port = free_port();
    let cfg = config(
        &format!("listen = [\"tcp/127.0.0.1:{port}\"]"),
        "[[route]]\nlane = \"bulk\"\npriorities = [\"data\"]\nmax_payload = 16\n[[subscribe]]\nkey = \"test/size\"\n",
    );
    let mut rt = lanes(&[("bulk", 10)]);
    let mut bridge = Bridge::open(&cfg).unwrap();
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    bridge
        .route(&rt, "bulk", move |s, _| {
            g.lock().unwrap().push(s.payload.to_vec())
        })
        .unwrap();
    let _outbox = bridge.start().unwrap();
    rt.start().unwrap();
    let peer = sender(port);
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    let pings = until_routed(&bridge, &peer, "test/size", Priority::Data);
    put(&peer, "test/size", Priority::Data, &[7u8; 100]);
    put(&peer, "test/size", Priority::Data, &[1u8; 16]);
    assert!(util::wait_until(10, || bridge.totals().delivered[4] == pings + 1));
    let t = bridge.totals();
    let _ = rt.shutdown().unwrap();
    assert_eq!(t.oversize[4], 1, "{t}");
    let got = got.lock().unwrap();
    assert!(got[..pings as usize].iter().all(|p| p == b"ping"));
    assert_eq!(got[pings as usize..], [vec![1u8; 16]]);
}

/// A peer that is not there: waiting for it is a clear error and puts are counted as reaching
/// nobody; when it comes, the join is counted; when it goes away, the loss is counted.
#[test]
fn an_absent_or_departing_peer_is_counted() {
    let _l = util::rt_lock();
    let port = free_port();
    let cfg = config(
        &format!("connect = [\"tcp/127.0.0.1:{port}\"]"),
        "[[publish]]\nkey = \"test/lonely\"\n",
    );
    let mut bridge = Bridge::open(&cfg).expect("peer mode opens without its peer");
    let outbox = bridge.start().unwrap();
    let err = bridge
        .wait_for_peers(1, Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, Error::NoPeer { .. }), "{err:?}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    outbox
        .put(outbox.key("test/lonely").unwrap(), b"anyone?")
        .unwrap();
    assert!(util::wait_until(5, || bridge.totals().put_without_peer == 1));

    let other = Bridge::open(&config(&format!("listen = [\"tcp/127.0.0.1:{port}\"]"), "")).unwrap();
    assert!(
        util::wait_until(30, || bridge.totals().peers_joined == 1),
        "{}",
        bridge.totals()
    );
    drop(other.close().unwrap());
    assert!(
        util::wait_until(30, || bridge.totals().peers_lost == 1),
        "{}",
        bridge.totals()
    );
    assert_eq!(bridge.totals().peers, 0);
    bridge.close().unwrap();
}

/// In client mode a router is required: with none listening, opening fails with Zenoh's
/// reason instead of running disconnected.
#[test]
fn a_missing_router_fails_to_open_in_client_mode() {
    let port = free_port();
    let cfg = config(
        &format!("mode = \"client\"\nconnect = [\"tcp/127.0.0.1:{port}\"]"),
        "",
    );
    let err = Bridge::open(&cfg).unwrap_err();
    assert!(matches!(err, Error::Zenoh { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("zenoh: opening the session failed"),
        "{err}"
    );
}

/// Zenoh's threads are the configured ones, at SCHED_OTHER; a second configuration that asks
/// for other counts in the same process is refused.
#[test]
fn zenoh_threads_are_configured_and_reported() {
    let port = free_port();
    let bridge =
        Bridge::open(&config(&format!("listen = [\"tcp/127.0.0.1:{port}\"]"), "")).unwrap();
    let threads = lfrt_zenoh::zenoh_threads();
    // Worker threads, plus blocking-task threads started on demand (named alike, and kept a
    // while after earlier tests' sessions): rx = 1 and max_blocking = 2 allow 1 to 3.
    let rx = threads.iter().filter(|t| t.name.starts_with("rx-")).count();
    assert!(
        (1..=3).contains(&rx),
        "[threads] rx = 1, max_blocking = 2: {threads:?}"
    );
    assert!(threads.len() <= 5 + 5 * 2, "{threads:?}");
    assert!(threads.iter().all(|t| t.policy == "other 0"), "{threads:?}");
    let other = Config::parse("[threads]\nrx = 3\n").unwrap();
    let err = Bridge::open(&other).unwrap_err();
    assert!(matches!(err, Error::Threads { .. }), "{err:?}");
    // Without the variable, while Zenoh's runtimes run: setting it now would change nothing,
    // so the bridge refuses rather than let [threads] silently not apply.
    let env = std::env::var("ZENOH_RUNTIME").unwrap();
    std::env::remove_var("ZENOH_RUNTIME");
    let err = Bridge::open(&config("", "")).unwrap_err();
    std::env::set_var("ZENOH_RUNTIME", env);
    assert!(
        err.to_string().contains("Zenoh's runtimes already run"),
        "{err}"
    );
    bridge.close().unwrap();
}

/// A route that carries two priorities delivers what waits in its inbox highest first: a
/// real-time sample put after ten background ones, while the lane was held, comes out first.
#[test]
fn a_route_of_several_priorities_delivers_the_highest_first() {
    let test = "a_route_of_several_priorities_delivers_the_highest_first";
    if !util::rt_allowed(test, 30) {
        return;
    }
    let _l = util::rt_lock();
    let port = free_port();
    let cfg = config(
        &format!("listen = [\"tcp/127.0.0.1:{port}\"]"),
        "[[route]]\nlane = \"mixed\"\npriorities = [\"real-time\", \"background\"]\ncapacity = 64\n[[subscribe]]\nkey = \"test/mixed\"\n",
    );
    let mut rt = lanes(&[("mixed", 30)]);
    let mut bridge = Bridge::open(&cfg).unwrap();
    let order = Arc::new(lfrt::PiMutex::new(Vec::<u8>::with_capacity(1024)));
    let (hold, holding) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (o, h, hg) = (order.clone(), hold.clone(), holding.clone());
    bridge
        .route(&rt, "mixed", move |s, _| {
            o.lock().push(s.priority as u8);
            // Held while `hold` is set (bounded: 10 s), sleeping, not spinning.
            for _ in 0..10_000 {
                if !h.load(Relaxed) {
                    break;
                }
                hg.store(true, Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .unwrap();
    let _outbox = bridge.start().unwrap();
    rt.start().unwrap();
    let peer = sender(port);
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    until_routed(&bridge, &peer, "test/mixed", Priority::Background);
    hold.store(true, Relaxed);
    put(&peer, "test/mixed", Priority::Background, b"blocker");
    assert!(
        util::wait_until(10, || holding.load(Relaxed)),
        "the lane never held"
    );
    let before = bridge.totals();
    let seen = order.lock().len();
    for _ in 0..10 {
        put(&peer, "test/mixed", Priority::Background, b"bulk");
    }
    // The real-time sample only once the background ones wait in the inbox, so it is posted
    // after them.
    let bulk_in = util::wait_until(10, || {
        bridge.totals().forwarded[6] == before.forwarded[6] + 10
    });
    assert!(bulk_in, "the background samples never reached the inbox");
    put(&peer, "test/mixed", Priority::RealTime, b"urgent");
    let queued = util::wait_until(10, || {
        let t = bridge.totals();
        t.forwarded[0] + t.forwarded[6] == before.forwarded[0] + before.forwarded[6] + 11
    });
    hold.store(false, Relaxed);
    assert!(
        queued,
        "the 11 samples never reached the inbox: {}",
        bridge.totals()
    );
    assert!(util::wait_until(10, || order.lock().len() == seen + 11));
    let after: Vec<u8> = order.lock()[seen..].to_vec();
    let _ = rt.shutdown().unwrap();
    bridge.close().unwrap();
    assert_eq!(
        after[0],
        Priority::RealTime as u8,
        "the real-time sample waits behind background ones: {after:?}"
    );
    assert_eq!(
        after
            .iter()
            .filter(|&&p| p == Priority::Background as u8)
            .count(),
        10
    );
}

#[test]
fn toml_errors_name_the_line_and_field() {
    let cases = [
        (
            "[[route]]\nlane = \"a\"\npriorities = [\"real-time\"]\n[[route]]\nlane = \"b\"\npriorities = [\"data\", \"real-time\"]\n",
            "6: route[1].priorities: `real-time` is already routed by route[0]",
        ),
        (
            "[threads]\nrx = 0\n",
            "2: threads.rx: must be 1 to 64, not 0",
        ),
        (
            "[session]\nmode = \"router\"\n",
            "2: session.mode: `router`: must be \"peer\" or \"client\"",
        ),
        (
            "[[publish]]\nkey = \"a/*\"\n",
            "2: publish[0].key: `a/*`: a publication key has no wildcards",
        ),
        (
            "[[route]]\nlane = \"a\"\npriorities = [\"data\"]\ncapacity = 1048576\nmax_payload = 4096\n",
            "2: route[0].capacity: capacity × (max_payload + 256 key bytes) is 4352 MiB, above the 1024 MiB a route may preallocate",
        ),
        (
            "[[publish]]\nkey = \"a\"\ncongestion = \"wait\"\n",
            "3: publish[0].congestion: `wait`: must be \"drop\" or \"block\"",
        ),
        (
            "[[subscribe]]\nkey = \"a/**\"\n[[subscribe]]\nkey = \"a/b\"\n",
            "4: subscribe[1].key: `a/b` overlaps subscribe[0] (`a/**`): a sample both match would reach its lane twice; subscribe once to a key that covers both",
        ),
        (
            "[session]\nlisten = [\"tcp/127.0.0.1:1?prio=0-3\"]\n",
            "2: session.listen[0]: `tcp/127.0.0.1:1?prio=0-3`: prio=0-3 is not a range of Zenoh priorities (`prio=1-3`: 1 is real-time, 7 background)",
        ),
        (
            "[session]\nconnect = [\"udp/127.0.0.1:1\"]\n",
            "2: session.connect[0]: `udp/127.0.0.1:1`: only `tcp/` endpoints (this build of lfrt-zenoh has Zenoh's TCP transport only)",
        ),
        (
            "[session]\nlisten = [\"tcp/127.0.0.1:1?prio=1-3\", \"tcp/127.0.0.1:2?prio=4-7\"]\n[threads]\nrx = 1\n",
            "4: threads.rx: 1 receive worker(s) for 2 links per peer: a link's reads would wait behind another link's turn; set rx = 2 or more",
        ),
        (
            "[session]\nlisten = [\"tcp/127.0.0.1:1?prio=1-3\", \"tcp/127.0.0.1:2?prio=4-7\"]\nmax_links = 1\n",
            "3: session.max_links: 1 is fewer than the 2 `prio=` endpoints: a peer's links past the limit are refused, and their priorities then share a connection",
        ),
        (
            "[threads]\nrx_priority = 99\n",
            "2: threads.rx_priority: must be 1 to 98, not 99",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(Config::parse(src).unwrap_err().to_string(), want);
    }
}
