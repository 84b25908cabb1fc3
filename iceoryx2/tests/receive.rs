//! iceoryx2 subscribers in lanes: every sample arrives, in order, borrowed; turns stop at
//! `samples_per_turn` and ring themselves; the lane allocates nothing after warm-up, except to
//! connect a publisher that appears (counted); a full buffer's overwritten samples are counted;
//! a publish allocates once; missing and incompatible services, and buffers larger than the
//! service allows, are clear errors; TOML is checked.
//! Run one at a time: `cargo test --release -p lfrt-iceoryx2 -- --test-threads=1`.

#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig, WARMUP_DISPATCHES};
use lfrt_iceoryx2::{Error, LaneSubscriber, Publisher, SubscriberOptions};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A service name no other test or process uses.
fn unique(test: &str) -> String {
    format!("lfrt-test/{test}/{}", std::process::id())
}

/// Options with `samples_per_turn` and `create`, and the default buffer.
fn opts(samples_per_turn: usize, create: bool) -> SubscriberOptions {
    SubscriberOptions {
        samples_per_turn,
        create,
        ..SubscriberOptions::default()
    }
}

fn lane(threads: usize) -> Runtime {
    let mut g = LaneConfig::new("control", Policy::Fifo, 20);
    g.threads = threads;
    g.buffer_bytes = 2048;
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes: vec![g],
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// Creates the publish-subscribe service with room for `buffer` samples per subscriber (the
/// crate's `Publisher::create` opens it as it is).
/// Keep the returned factory: the service lives while a factory or port of it does.
fn service_with_buffer(node: &lfrt_iceoryx2::Node, name: &str, buffer: usize) -> impl Sized {
    node.service_builder(&name.try_into().unwrap())
        .publish_subscribe::<u64>()
        .subscriber_max_buffer_size(buffer)
        .create()
        .unwrap()
}

/// 1,000 samples one at a time (each waits for the lane), then 100 bursts of 10 published
/// while the handle is suspended, with `samples_per_turn = 3`: every sample arrives once and
/// in order, each burst takes exactly 3 turns that stop at the bound and ring themselves, and
/// after warm-up the lane's threads made no allocation.
#[test]
fn every_sample_arrives_in_order_turns_are_bounded_and_the_lane_allocates_nothing() {
    let test = "every_sample_arrives_in_order_turns_are_bounded_and_the_lane_allocates_nothing";
    if !util::rt_allowed(test, 20) {
        return;
    }
    let _l = util::rt_lock();
    let service = unique("order");
    let node = lfrt_iceoryx2::node().unwrap();
    let _service = service_with_buffer(&node, &service, 16);
    let publisher = Publisher::<u64>::create(&node, &service).unwrap();
    let (next, out_of_order) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (n, ooo) = (next.clone(), out_of_order.clone());
    let (sub, stats) =
        LaneSubscriber::open(&node, &service, opts(3, false), move |v: &u64, _ctx| {
            if *v != n.load(Relaxed) {
                ooo.fetch_add(1, Relaxed);
            }
            n.store(*v + 1, Relaxed);
        })
        .unwrap();
    let mut rt = lane(2);
    let registry = rt.lane("control").unwrap().registry();
    let token = sub.register(&registry).unwrap();
    assert!(rt.start().unwrap().counting_allocations);

    let delivered = |want: u64| util::wait_until(10, || stats.totals().samples >= want);
    let mut sent = 0u64;
    let one_by_one = 1_000u64.max(4 * WARMUP_DISPATCHES);
    for _ in 0..one_by_one {
        publisher.publish(sent).unwrap();
        sent += 1;
        assert!(delivered(sent), "sample {} not delivered", sent - 1);
    }
    let bursts = 100u64;
    let before = stats.totals();
    for _ in 0..bursts {
        assert!(registry.suspend(token));
        for _ in 0..10 {
            publisher.publish(sent).unwrap();
            sent += 1;
        }
        assert!(registry.resume(token));
        assert!(delivered(sent), "burst ending at {sent} not delivered");
    }
    let after = stats.totals();
    let m = rt.shutdown().unwrap();
    assert_eq!(after.samples, sent);
    assert_eq!(after.notifications, sent, "one notification per publish");
    assert_eq!(out_of_order.load(Relaxed), 0);
    assert_eq!(next.load(Relaxed), sent);
    assert_eq!(
        after.turns_at_bound - before.turns_at_bound,
        3 * bursts,
        "10 samples at 3 a turn: 3 turns stop at the bound: {after:?}"
    );
    assert!(
        after.coalesced - before.coalesced >= 9 * bursts,
        "a burst's 10 notifications are read at once: {after:?}"
    );
    assert_eq!(
        (
            after.receive_errors,
            after.listener_errors,
            after.resume_errors
        ),
        (0, 0, 0)
    );
    assert_eq!(
        m[0].pool_allocations,
        Some(0),
        "the lane allocated after warm-up: {:?}",
        m[0]
    );
    eprintln!("{sent} samples, {after:?}, pool_allocations = 0");
}

/// The publish path's allocations, measured: the figure the crate documents (one per publish:
/// iceoryx2's loan puts the sample's shared state behind an `Arc`). If iceoryx2 changes it, this
/// fails and the documentation must follow.
#[test]
fn a_publish_allocates_once() {
    let service = unique("publish-allocations");
    let node = lfrt_iceoryx2::node().unwrap();
    let publisher = Publisher::<u64>::create(&node, &service).unwrap();
    let (sub, _stats) =
        LaneSubscriber::open(&node, &service, opts(16, false), |_: &u64, _| {}).unwrap();
    for i in 0..100 {
        publisher.publish(i).unwrap(); // warm-up: connections, first loans
    }
    let publishes = 1_000u64;
    let before = lfrt::thread_allocations();
    for i in 0..publishes {
        publisher.publish(i).unwrap();
    }
    let per_publish = (lfrt::thread_allocations() - before) as f64 / publishes as f64;
    drop(sub);
    eprintln!("{per_publish} allocations per publish");
    assert_eq!(per_publish, 1.0, "allocations per publish changed");
}

#[test]
fn a_missing_service_is_a_clear_error() {
    let service = unique("missing");
    let node = lfrt_iceoryx2::node().unwrap();
    let err = LaneSubscriber::open(&node, &service, opts(4, false), |_: &u64, _| {}).unwrap_err();
    assert!(matches!(err, Error::ServiceMissing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&service) && text.contains("does not exist"),
        "{text}"
    );
    // With `create` the subscriber creates it instead.
    assert!(LaneSubscriber::open(&node, &service, opts(4, true), |_: &u64, _| {}).is_ok());
}

/// A service created for larger samples (`[u64; 8]`, 64 bytes) refuses a `u64` subscriber, and
/// the error names the type and size this side asked for.
#[test]
fn a_service_of_another_payload_type_or_size_is_refused() {
    let service = unique("incompatible");
    let node = lfrt_iceoryx2::node().unwrap();
    let _big = Publisher::<[u64; 8]>::create(&node, &service).unwrap();
    let err = LaneSubscriber::open(&node, &service, opts(4, false), |_: &u64, _| {}).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("u64") && text.contains("8 bytes") && text.contains("payload type"),
        "{text}"
    );
    // And the other way round: a publisher of another type is refused too.
    let err = Publisher::<u32>::create(&node, &service).unwrap_err();
    assert!(
        err.to_string().contains("u32") && err.to_string().contains("4 bytes"),
        "{err}"
    );
}

#[test]
fn samples_per_turn_of_zero_is_refused() {
    let service = unique("zero");
    let node = lfrt_iceoryx2::node().unwrap();
    let err = LaneSubscriber::open(&node, &service, opts(0, true), |_: &u64, _| {}).unwrap_err();
    assert_eq!(err.to_string(), "samples_per_turn: must be at least 1");
}

#[test]
fn toml_errors_name_the_line_and_field() {
    let cases = [
        (
            "[[subscriber]]\nservice = \"a\"\nlane = \"c\"\nsamples_per_turn = 100000\n",
            "4: subscriber[0].samples_per_turn: must be 1 to 65536, not 100000",
        ),
        (
            "[[subscriber]]\nservice = \"a\"\nlane = \"c\"\n[[subscriber]]\nservice = \"a\"\nlane = \"d\"\n",
            "5: subscriber[1].service: `a` is already subscribed by subscriber[0]",
        ),
        (
            "[[subscriber]]\nservice = \"a\"\nlane = \"\"\n",
            "3: subscriber[0].lane: must name a lane",
        ),
    ];
    for (src, want) in cases {
        assert_eq!(
            lfrt_iceoryx2::Config::parse(src).unwrap_err().to_string(),
            want
        );
    }
    let unknown =
        lfrt_iceoryx2::Config::parse("[[subscriber]]\nservice = \"a\"\nlane = \"c\"\nbatch = 3\n")
            .unwrap_err()
            .to_string();
    assert!(
        unknown.starts_with("4: ") && unknown.contains("batch"),
        "{unknown}"
    );
}

/// A table naming a lane the runtime does not have is refused at registration, pointing at the
/// table's `lane` line and listing the lanes.
#[test]
fn an_unknown_lane_points_at_its_line() {
    let cfg = lfrt_iceoryx2::Config::parse(&format!(
        "# x\n[[subscriber]]\nservice = \"{}\"\nlane = \"contrl\"\ncreate = true\n",
        unique("unknown-lane")
    ))
    .unwrap();
    let rt = lane(1);
    let node = lfrt_iceoryx2::node().unwrap();
    let err = cfg.subscribers[0]
        .register(&rt, &node, |_: &u64, _| {})
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "4: subscriber[0].lane: no lane named `contrl`; the lanes are: `control`"
    );
}

/// A buffer of 4 in a service that allows 16: 100 samples one at a time (each notification
/// read on its own) overwrite nothing; 10 published while the handle is suspended (their
/// notifications read at once) leave the newest 4, and the 6 iceoryx2 overwrote are counted.
#[test]
fn a_full_buffer_overwrites_the_oldest_samples_and_counts_them() {
    let test = "a_full_buffer_overwrites_the_oldest_samples_and_counts_them";
    if !util::rt_allowed(test, 20) {
        return;
    }
    let _l = util::rt_lock();
    let service = unique("overwritten");
    let node = lfrt_iceoryx2::node().unwrap();
    let _service = service_with_buffer(&node, &service, 16);
    let publisher = Publisher::<u64>::create(&node, &service).unwrap();
    let (next, skipped) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (n, sk) = (next.clone(), skipped.clone());
    let options = SubscriberOptions {
        buffer: Some(4),
        ..SubscriberOptions::default()
    };
    let (sub, stats) = LaneSubscriber::open(&node, &service, options, move |v: &u64, _| {
        sk.fetch_add(v.saturating_sub(n.load(Relaxed)), Relaxed);
        n.store(*v + 1, Relaxed);
    })
    .unwrap();
    let mut rt = lane(1);
    let registry = rt.lane("control").unwrap().registry();
    let token = sub.register(&registry).unwrap();
    rt.start().unwrap();

    for v in 0..100u64 {
        publisher.publish(v).unwrap();
        assert!(
            util::wait_until(10, || stats.totals().samples > v),
            "sample {v} not delivered"
        );
    }
    let t = stats.totals();
    assert_eq!((t.samples, t.overwritten), (100, 0), "{t:?}");

    assert!(registry.suspend(token));
    for v in 100..110u64 {
        publisher.publish(v).unwrap();
    }
    assert!(registry.resume(token));
    let settled = util::wait_until(10, || {
        let t = stats.totals();
        t.samples >= 104 && t.notifications >= 110 && t.overwritten >= 6
    });
    let _ = rt.shutdown().unwrap();
    let t = stats.totals();
    assert!(settled, "{t:?}");
    assert_eq!(
        (t.notifications, t.samples, t.overwritten),
        (110, 104, 6),
        "{t:?}"
    );
    assert_eq!(
        (skipped.load(Relaxed), next.load(Relaxed)),
        (6, 110),
        "the newest 4 arrive, the oldest 6 were overwritten"
    );
}

/// iceoryx2 fixes the largest subscriber buffer when a service is created: a subscriber that
/// asks for more is refused, naming the service and both numbers; the default (16) takes
/// what the service allows if that is less.
#[test]
fn a_buffer_larger_than_the_service_allows_is_refused() {
    let service = unique("buffer-too-large");
    let node = lfrt_iceoryx2::node().unwrap();
    let _service = service_with_buffer(&node, &service, 8);
    let open = |buffer| {
        let options = SubscriberOptions {
            buffer,
            ..SubscriberOptions::default()
        };
        LaneSubscriber::open(&node, &service, options, |_: &u64, _| {})
    };
    assert_eq!(
        open(Some(9)).unwrap_err().to_string(),
        format!(
            "iceoryx2 service `{service}`: a subscriber buffer of 9 samples was asked for, but the \
             service allows at most 8 (its `subscriber_max_buffer_size`, fixed when it was created)"
        )
    );
    assert!(open(Some(8)).is_ok());
    assert!(open(None).is_ok());
    assert_eq!(
        open(Some(0)).unwrap_err().to_string(),
        "buffer: must be 1 to 4096, not 0"
    );
}

/// `buffer` in TOML: range-checked at parse, and checked against the service at
/// registration, both errors naming the file, line and field.
#[test]
fn the_buffer_key_is_range_checked_and_checked_against_the_service() {
    let table = |service: &str, buffer: &str| {
        format!("[[subscriber]]\nservice = \"{service}\"\nlane = \"control\"\n{buffer}\n")
    };
    assert!(lfrt_iceoryx2::Config::parse(&table("a", "buffer = 64")).is_ok());
    for (buffer, want) in [
        (
            "buffer = 0",
            "4: subscriber[0].buffer: must be 1 to 4096, not 0",
        ),
        (
            "buffer = 5000",
            "4: subscriber[0].buffer: must be 1 to 4096, not 5000",
        ),
    ] {
        assert_eq!(
            lfrt_iceoryx2::Config::parse(&table("a", buffer))
                .unwrap_err()
                .to_string(),
            want
        );
    }
    let service = unique("toml-buffer");
    let node = lfrt_iceoryx2::node().unwrap();
    let _service = service_with_buffer(&node, &service, 8);
    let file =
        std::env::temp_dir().join(format!("lfrt-iceoryx2-buffer-{}.toml", std::process::id()));
    std::fs::write(&file, table(&service, "buffer = 32")).unwrap();
    let cfg = lfrt_iceoryx2::Config::load(&file);
    std::fs::remove_file(&file).unwrap();
    let rt = lane(1);
    let err = cfg.unwrap().subscribers[0]
        .register(&rt, &node, |_: &u64, _| {})
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}:4: subscriber[0].buffer: iceoryx2 service `{service}`: a subscriber buffer of 32 \
             samples was asked for, but the service allows at most 8 (its \
             `subscriber_max_buffer_size`, fixed when it was created)",
            file.display()
        )
    );
}

/// Publishers appearing and leaving change the set the subscriber receives from, and its
/// next receive sets up or tears down a connection on the lane thread: each change is counted
/// in `connections_updated` (two publishers created, one dropped). The set-up is the one
/// allocation a turn makes: a publisher that appears after the lane's warm-up shows in
/// `pool_allocations`.
#[test]
fn publishers_joining_and_leaving_are_counted() {
    let test = "publishers_joining_and_leaving_are_counted";
    if !util::rt_allowed(test, 20) {
        return;
    }
    let _l = util::rt_lock();
    let service = unique("joining");
    let node = lfrt_iceoryx2::node().unwrap();
    let _service = service_with_buffer(&node, &service, 16);
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let (sub, stats) = LaneSubscriber::open(&node, &service, opts(16, false), move |_: &u64, _| {
        g.fetch_add(1, Relaxed);
    })
    .unwrap();
    let mut rt = lane(1);
    sub.register(&rt.lane("control").unwrap().registry())
        .unwrap();
    assert!(rt.start().unwrap().counting_allocations);
    // Each sample is delivered by a turn that has read every event sent before it.
    let delivered = |n: u64| util::wait_until(10, || got.load(Relaxed) >= n);
    let first = Publisher::<u64>::create(&node, &service).unwrap();
    let warm_up = 4 * WARMUP_DISPATCHES;
    for v in 0..warm_up {
        first.publish(v).unwrap();
        assert!(delivered(v + 1), "sample {v} not delivered");
    }
    let second = Publisher::<u64>::create(&node, &service).unwrap();
    second.publish(1).unwrap();
    assert!(delivered(warm_up + 1));
    drop(first);
    second.publish(2).unwrap();
    assert!(delivered(warm_up + 2));
    let m = rt.shutdown().unwrap();
    let t = stats.totals();
    assert_eq!(
        (t.connections_updated, t.publishers_dead, t.samples),
        (3, 0, warm_up + 2),
        "{t:?}"
    );
    assert!(
        m[0].pool_allocations.is_some_and(|n| n > 0),
        "the second publisher's connection was set up on the lane: {:?}",
        m[0]
    );
}
