//! Two processes exchanging commands and telemetry through Zenoh on loopback, priorities
//! mapped to lanes (zenoh/configs/robot.toml, zenoh/configs/operator.toml).
//!
//! `cargo run --release -p lfrt-zenoh --example robot` is the operator: it starts a copy of
//! itself as the robot (`robot robot`), sends 200 `move` commands at real-time priority (and a
//! log line at background priority with each), and its `display` lane receives the robot's
//! telemetry. The robot's `control` lane (SCHED_FIFO 80 where permitted) applies each command
//! and answers through the outbox, from the lane; log lines go to its `bulk` lane.

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_zenoh::{Bridge, Config};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const COMMANDS: u64 = 200;

fn runtime(lanes: &[(&str, u8)]) -> Result<Runtime, lfrt::Error> {
    let lanes = lanes.iter().map(|(n, p)| {
        let mut g = LaneConfig::new(*n, Policy::Fifo, *p);
        g.threads = 1;
        g
    });
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: lanes.collect(),
        ..Default::default()
    })
}

fn config(name: &str) -> Result<Config, lfrt_zenoh::Error> {
    Config::load(format!("{}/configs/{name}", env!("CARGO_MANIFEST_DIR")).as_ref())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("robot") {
        return robot();
    }
    let mut rt = runtime(&[("display", 60)])?;
    let mut bridge = Bridge::open(&config("operator.toml")?)?;
    let (seen, worst_us) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (s, w) = (seen.clone(), worst_us.clone());
    bridge.route(&rt, "display", move |t, _ctx| {
        // Telemetry: the command's send time comes back; its age is the round trip.
        let sent = u64::from_le_bytes(t.payload[..8].try_into().unwrap_or_default());
        w.fetch_max(lfrt::os::now_ns().saturating_sub(sent) / 1000, Relaxed);
        s.fetch_add(1, Relaxed);
    })?;
    let outbox = bridge.start()?;
    rt.start()?;
    let mut robot = std::process::Command::new(std::env::current_exe()?)
        .arg("robot")
        .spawn()?;
    bridge.wait_for_peers(1, Duration::from_secs(10))?;
    std::thread::sleep(Duration::from_millis(300)); // the robot's subscriptions arrive
    let (mv, log) = (
        outbox.key("robot/cmd/move").unwrap(),
        outbox.key("robot/cmd/log").unwrap(),
    );
    for _ in 0..COMMANDS {
        let _ = outbox.put(mv, &lfrt::os::now_ns().to_le_bytes());
        let _ = outbox.put(log, b"operator: moved");
        std::thread::sleep(Duration::from_millis(2));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.load(Relaxed) < COMMANDS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let robot_ok = robot.wait()?.success();
    let m = rt.shutdown()?;
    let totals = bridge.close()?;
    println!(
        "operator: telemetry={} worst_round_trip_us={} robot_exit={robot_ok}",
        seen.load(Relaxed),
        worst_us.load(Relaxed)
    );
    println!(
        "operator: display pool_allocations={:?}\n{totals}",
        m[0].pool_allocations
    );
    Ok(())
}

/// The robot: applies commands on its control lane, answers with telemetry from that lane.
fn robot() -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = runtime(&[("control", 80), ("bulk", 10)])?;
    let mut bridge = Bridge::open(&config("robot.toml")?)?;
    let outbox: Arc<OnceLock<lfrt_zenoh::Outbox>> = Arc::default();
    let (ob, moves, logs) = (
        outbox.clone(),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let (m2, l2) = (moves.clone(), logs.clone());
    bridge.route(&rt, "control", move |cmd, _ctx| {
        m2.fetch_add(1, Relaxed);
        if let Some(o) = ob.get() {
            let _ = o.put(o.key("robot/telemetry").unwrap(), cmd.payload); // counted if refused
        }
    })?;
    bridge.route(&rt, "bulk", move |_log, _ctx| {
        l2.fetch_add(1, Relaxed);
    })?;
    let _ = outbox.set(bridge.start()?);
    rt.start()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while moves.load(Relaxed) < COMMANDS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200)); // the last telemetry leaves
    let m = rt.shutdown()?;
    let totals = bridge.close()?;
    println!(
        "robot: moves={} logs={} control pool_allocations={:?} bulk pool_allocations={:?}",
        moves.load(Relaxed),
        logs.load(Relaxed),
        m[0].pool_allocations,
        m[1].pool_allocations
    );
    println!("{totals}");
    Ok(())
}
