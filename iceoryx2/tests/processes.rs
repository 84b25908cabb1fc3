//! Across processes, with the sensor example as the publisher: a publisher killed with
//! SIGKILL leaves no spinning handle and is counted once its node is swept; a restarted one is
//! served on the same handle; a subscriber process killed the same way (this test binary run
//! as a child) is not counted as a dead publisher; the example runs from one command without
//! allocating in its lane.
//! Run one at a time: `cargo test --release -p lfrt-iceoryx2 -- --test-threads=1`.

#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use lfrt_iceoryx2::iceoryx2::prelude::ZeroCopySend;
use lfrt_iceoryx2::{LaneSubscriber, SubscriberOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The example's sample type (same iceoryx2 type name, size and alignment).
#[derive(Debug, Clone, Copy, ZeroCopySend)]
#[repr(C)]
#[type_name("lfrt-example/Imu")]
struct Imu {
    seq: u64,
    stamp_ns: u64,
    accel: [f32; 3],
}

/// Options with `samples_per_turn` and `create`, and the default buffer.
fn opts(samples_per_turn: usize, create: bool) -> SubscriberOptions {
    SubscriberOptions {
        samples_per_turn,
        create,
        ..SubscriberOptions::default()
    }
}

/// cargo builds the examples next to the test binaries: target/<profile>/examples/.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/sensor");
    assert!(path.exists(), "{} not built", path.display());
    path
}

fn sensor(service: &str, count: u64, period_us: u64) -> Child {
    Command::new(example())
        .args([
            "sensor",
            service,
            &count.to_string(),
            &period_us.to_string(),
        ])
        .spawn()
        .unwrap()
}

#[test]
fn a_dead_publisher_is_counted_without_spinning_and_a_restarted_one_is_served() {
    let test = "a_dead_publisher_is_counted_without_spinning_and_a_restarted_one_is_served";
    if !util::rt_allowed(test, 20) {
        return;
    }
    let _l = util::rt_lock();
    let service = format!("lfrt-test/dead-publisher/{}", std::process::id());
    let mut g = LaneConfig::new("control", Policy::Fifo, 20);
    g.threads = 1;
    let mut rt = Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![g],
        ..RuntimeConfig::default()
    })
    .unwrap();
    let node = lfrt_iceoryx2::node().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    let (sub, stats) = LaneSubscriber::open(&node, &service, opts(8, true), move |_: &Imu, _| {
        r.fetch_add(1, Relaxed);
    })
    .unwrap();
    sub.register(&rt.lane("control").unwrap().registry())
        .unwrap();
    rt.start().unwrap();

    // A publisher that would run for 100 s, killed once it has delivered.
    let mut first = sensor(&service, 100_000, 1000);
    let delivered = util::wait_until(20, || received.load(Relaxed) >= 50);
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(delivered, "the first publisher delivered nothing");

    // Its death must not keep the lane busy (the gate does not stay readable).
    let turns = stats.totals().turns;
    std::thread::sleep(Duration::from_millis(300));
    let idle_turns = stats.totals().turns - turns;
    assert!(
        idle_turns <= 2,
        "{idle_turns} turns after the publisher died"
    );

    assert!(
        lfrt_iceoryx2::sweep_dead_nodes(&node) >= 1,
        "no dead node found"
    );
    assert!(
        util::wait_until(10, || stats.totals().publishers_dead == 1),
        "{:?}",
        stats.totals()
    );

    // The restarted publisher is served on the same handle.
    let before = received.load(Relaxed);
    let mut second = sensor(&service, 200, 500);
    assert!(second.wait().unwrap().success());
    assert!(
        util::wait_until(10, || received.load(Relaxed) >= before + 200),
        "restart: {} of 200",
        received.load(Relaxed) - before
    );
    let _ = rt.shutdown().unwrap();
    let t = stats.totals();
    assert_eq!(
        (t.receive_errors, t.listener_errors, t.closed_on_errors),
        (0, 0, 0),
        "{t:?}"
    );
}

#[test]
fn the_sensor_example_delivers_every_sample_without_allocating_in_its_lane() {
    let test = "the_sensor_example_delivers_every_sample_without_allocating_in_its_lane";
    if !util::rt_allowed(test, 80) {
        return;
    }
    let _l = util::rt_lock();
    let out = Command::new(example()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "samples=2000 ",
        "notifications=2000 ",
        "overwritten=0 ",
        "out_of_order=0 ",
        "sensor_exit=true",
        "pool_allocations=Some(0)",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
}

/// Set to a service name, this test binary runs as a subscriber process
/// ([`child_subscriber`]).
const CHILD_SUBSCRIBER: &str = "LFRT_IOX2_TEST_CHILD_SUBSCRIBER";

/// The child of `a_dead_subscriber_is_not_counted_as_a_dead_publisher`: with
/// `LFRT_IOX2_TEST_CHILD_SUBSCRIBER=SERVICE` set, opens a subscriber of SERVICE (served by no
/// lane), prints `ready` (after the harness's `test child_subscriber ... `) and waits to be killed (30 s at most). Otherwise it does nothing.
#[test]
fn child_subscriber() {
    let Ok(service) = std::env::var(CHILD_SUBSCRIBER) else {
        return;
    };
    let node = lfrt_iceoryx2::node().unwrap();
    let _sub = LaneSubscriber::open(&node, &service, opts(8, false), |_: &Imu, _| {}).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(30));
}

/// A subscriber process killed with SIGKILL is not a dead publisher: once its node is swept,
/// `publishers_dead` stays 0; a publisher process killed the same way then counts 1. Each
/// check follows a sample published from this process and delivered by a turn that has read
/// every event sent before it.
#[test]
fn a_dead_subscriber_is_not_counted_as_a_dead_publisher() {
    let test = "a_dead_subscriber_is_not_counted_as_a_dead_publisher";
    if !util::rt_allowed(test, 20) {
        return;
    }
    let _l = util::rt_lock();
    let service = format!("lfrt-test/dead-subscriber/{}", std::process::id());
    let mut g = LaneConfig::new("control", Policy::Fifo, 20);
    g.threads = 1;
    let mut rt = Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![g],
        ..RuntimeConfig::default()
    })
    .unwrap();
    let node = lfrt_iceoryx2::node().unwrap();
    // Samples from this process carry seq >= MARK; the sensor's count from 0.
    const MARK: u64 = 1 << 60;
    let (marks, sensed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (m, s) = (marks.clone(), sensed.clone());
    let (sub, stats) = LaneSubscriber::open(&node, &service, opts(8, true), move |imu: &Imu, _| {
        if imu.seq >= MARK {
            m.fetch_add(1, Relaxed);
        } else {
            s.fetch_add(1, Relaxed);
        }
    })
    .unwrap();
    sub.register(&rt.lane("control").unwrap().registry())
        .unwrap();
    rt.start().unwrap();
    let live = lfrt_iceoryx2::Publisher::<Imu>::create(&node, &service).unwrap();
    let mark = |n: u64| {
        live.publish(Imu {
            seq: MARK + n,
            stamp_ns: 0,
            accel: [0.0; 3],
        })
        .unwrap();
        util::wait_until(10, || marks.load(Relaxed) > n)
    };

    // A subscriber process dies.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_subscriber",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SUBSCRIBER, &service)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .any(|l| l.is_ok_and(|l| l.ends_with("ready")));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ready, "the subscriber process did not start");
    assert!(
        lfrt_iceoryx2::sweep_dead_nodes(&node) >= 1,
        "no dead node found"
    );
    assert!(mark(0), "{:?}", stats.totals());
    let t = stats.totals();
    assert_eq!(
        t.publishers_dead, 0,
        "a dead subscriber was counted as a dead publisher: {t:?}"
    );

    // A publisher process dies.
    let mut sensor = sensor(&service, 100_000, 1000);
    let delivered = util::wait_until(20, || sensed.load(Relaxed) >= 10);
    sensor.kill().unwrap();
    sensor.wait().unwrap();
    assert!(delivered, "the sensor delivered nothing");
    assert!(
        lfrt_iceoryx2::sweep_dead_nodes(&node) >= 1,
        "no dead node found"
    );
    assert!(mark(1), "{:?}", stats.totals());
    let _ = rt.shutdown().unwrap();
    let t = stats.totals();
    assert_eq!(t.publishers_dead, 1, "{t:?}");
}
