//! `[threads] rx_priority`: Zenoh's receive workers at SCHED_FIFO, read back from the kernel, and
//! a lane at or below them refused. A test binary of its own: the receive runtime stays at the
//! policy for the rest of the process.
//! Run: `cargo test --release -p lfrt-zenoh --test rx_priority`.

#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_zenoh::zenoh::Wait;
use lfrt_zenoh::{Bridge, Config, Error};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

const THREADS: &str = "[threads]\nrx = 2\ntx = 1\napp = 1\nacc = 1\nnet = 1\nmax_blocking = 2\n";

fn lanes(prio: u8) -> Runtime {
    let mut g = LaneConfig::new("control", Policy::Fifo, prio);
    g.threads = 1;
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![g],
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn receive_workers_run_at_the_configured_fifo_priority_below_every_lane() {
    let test = "receive_workers_run_at_the_configured_fifo_priority_below_every_lane";
    if !util::rt_allowed(test, 30) {
        return;
    }
    let _l = util::rt_lock();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = Config::parse(&format!(
        "{THREADS}rx_priority = 10\n[session]\nlisten = [\"tcp/127.0.0.1:{port}\"]\n\
         [[route]]\nlane = \"control\"\npriorities = [\"real-time\"]\n\
         [[subscribe]]\nkey = \"rx/**\"\n"
    ))
    .unwrap();
    let mut bridge = Bridge::open(&cfg).unwrap();
    // A lane at the receive threads' priority would be held off by a flood on them.
    let err = bridge.route(&lanes(10), "control", |_, _| {}).unwrap_err();
    assert!(
        matches!(&err, Error::Config { field, .. } if field == "threads.rx_priority"),
        "{err}"
    );
    let mut rt = lanes(30);
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    bridge
        .route(&rt, "control", move |_, _| {
            g.fetch_add(1, Relaxed);
        })
        .unwrap();
    bridge.start().unwrap();
    rt.start().unwrap();
    let peer = Bridge::open(
        &Config::parse(&format!(
            "{THREADS}[session]\nconnect = [\"tcp/127.0.0.1:{port}\"]\n"
        ))
        .unwrap(),
    )
    .unwrap();
    peer.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    assert!(util::wait_until(10, || {
        let _ = peer
            .session()
            .put("rx/ping", b"x".to_vec())
            .priority(lfrt_zenoh::zenoh::qos::Priority::RealTime)
            .wait();
        std::thread::sleep(Duration::from_millis(20));
        got.load(Relaxed) > 0
    }));
    let rx: Vec<_> = lfrt_zenoh::zenoh_threads()
        .into_iter()
        .filter(|t| t.name.starts_with("rx-"))
        .collect();
    assert!(rx.len() >= 2, "two receive workers: {rx:?}");
    assert!(
        rx.iter().all(|t| t.policy == "fifo 10"),
        "read back from the kernel: {rx:?}"
    );
    assert!(util::wait_until(5, || bridge.totals().rx_fifo >= 2));
    let others = lfrt_zenoh::zenoh_threads()
        .into_iter()
        .filter(|t| !t.name.starts_with("rx-"))
        .all(|t| t.policy == "other 0");
    assert!(others, "only the receive runtime is raised");
    assert_eq!(bridge.totals().rx_errors, 0);
    let _ = rt.shutdown().unwrap();
    peer.close().unwrap();
    bridge.close().unwrap();
}
