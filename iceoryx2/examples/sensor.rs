//! A sensor process publishing through iceoryx2 to a control lane.
//!
//! `cargo run --release -p lfrt-iceoryx2 --example sensor` runs both sides: this process serves
//! the `control` lane (SCHED_FIFO 80 where permitted) with the subscriber of
//! iceoryx2/configs/sensor.toml, and starts a copy of itself as the sensor
//! (`sensor sensor SERVICE COUNT PERIOD_US`), which publishes COUNT samples.

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_iceoryx2::iceoryx2::prelude::ZeroCopySend;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One sample: plain old data in shared memory, read in place by the control lane. The
/// `type_name` is what iceoryx2 compares (with size and alignment) when a process opens the
/// service.
#[derive(Debug, Clone, Copy, ZeroCopySend)]
#[repr(C)]
#[type_name("lfrt-example/Imu")]
struct Imu {
    seq: u64,
    stamp_ns: u64,
    accel: [f32; 3],
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, service, count, period_us] = args.as_slice() {
        if role == "sensor" {
            return sensor(service, count.parse()?, period_us.parse()?);
        }
    }
    let count: u64 = 2000;
    let mut control = LaneConfig::new("control", Policy::Fifo, 80);
    control.threads = 1;
    let mut rt = Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![control],
        ..RuntimeConfig::default()
    })?;
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/sensor.toml");
    let cfg = lfrt_iceoryx2::Config::load(file.as_ref())?;
    let sub = &cfg.subscribers[0];
    let node = lfrt_iceoryx2::node()?;
    let (out_of_order, worst_ns) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (ooo, worst, mut next) = (out_of_order.clone(), worst_ns.clone(), 0u64);
    let stats = sub.register(&rt, &node, move |imu: &Imu, _ctx| {
        // Runs on the control lane's thread, on the sample in shared memory: no copy.
        ooo.fetch_add(u64::from(imu.seq != next), Relaxed);
        next = imu.seq + 1;
        worst.fetch_max(lfrt::os::now_ns().saturating_sub(imu.stamp_ns), Relaxed);
    })?;
    rt.start()?;
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args(["sensor", &sub.service, &count.to_string(), "500"])
        .spawn()?;
    let status = child.wait()?;
    let deadline = Instant::now() + Duration::from_secs(2);
    while stats.totals().samples < count && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let m = rt.shutdown()?;
    let t = stats.totals();
    println!(
        "control: samples={} notifications={} coalesced={} overwritten={} turns={} out_of_order={} worst_latency_us={} sensor_exit={}",
        t.samples, t.notifications, t.coalesced, t.overwritten, t.turns,
        out_of_order.load(Relaxed), worst_ns.load(Relaxed) / 1000, status.success()
    );
    println!(
        "control: pool_allocations={:?} dispatched={}",
        m[0].pool_allocations, m[0].dispatched
    );
    Ok(())
}

/// The sensor: publishes `count` samples, one every `period_us`.
fn sensor(service: &str, count: u64, period_us: u64) -> Result<(), Box<dyn std::error::Error>> {
    let node = lfrt_iceoryx2::node()?;
    let imu = lfrt_iceoryx2::Publisher::<Imu>::create(&node, service)?;
    for seq in 0..count {
        let stamp_ns = lfrt::os::now_ns();
        imu.publish(Imu {
            seq,
            stamp_ns,
            accel: [0.0, 0.0, 9.81],
        })?;
        std::thread::sleep(Duration::from_micros(period_us));
    }
    Ok(())
}
