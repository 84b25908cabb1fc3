//! Lane inboxes through a real runtime: every value delivered exactly once under concurrent
//! producers, refusals counted where the producers counted them, and no allocation on the
//! dispatch path after warm-up.
//! Run one at a time: `cargo test --test inbox -- --test-threads=1`.

mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::inbox::{Full, Inbox, Order, Poster};
use lfrt::*;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;

const PRODUCERS: u64 = 4;
const PER_PRODUCER: u64 = 10_000;

use util::lane;

/// Posts `value` until the inbox takes it; returns how many times it was handed back.
fn post_until_taken(poster: &Poster<u64>, mut value: u64) -> u64 {
    let mut refused = 0;
    loop {
        match poster.post(value) {
            Ok(()) => return refused,
            Err(Full(v)) => {
                refused += 1;
                value = v;
                std::thread::yield_now();
            }
        }
    }
}

/// 4 producer threads × 10,000 sequence-numbered values into one 64-slot inbox on a 2-thread
/// lane: each value arrives exactly once, and the lane's `inbox_refused` equals the `Full`
/// results the producers saw (including refusals forced before the lane started, so the count
/// is never trivially zero).
#[test]
fn every_value_is_delivered_exactly_once_and_refusals_are_counted() {
    let _l = util::rt_lock();
    let total = (PRODUCERS * PER_PRODUCER) as usize;
    // One more producer id (PRODUCERS) for the values the test thread posts before start.
    let seen: Arc<Vec<AtomicU8>> = Arc::new(
        (0..total + PER_PRODUCER as usize)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let delivered = Arc::new(AtomicU64::new(0));
    let (s, d) = (seen.clone(), delivered.clone());
    let (inbox, poster) = Inbox::new(64, 8, Order::Fifo, move |v: u64, _ctx| {
        s[v as usize].fetch_add(1, Relaxed);
        d.fetch_add(1, Release);
    })
    .unwrap();
    let mut rt = lane(2);
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(inbox))
        .unwrap();

    // Before start nothing drains: fill the inbox, then see two values handed back.
    let pre = PRODUCERS * PER_PRODUCER;
    let mut forced = 0;
    let mut prefilled = 0;
    for k in 0..66 {
        match poster.post(pre + k) {
            Ok(()) => prefilled += 1,
            Err(Full(_)) => forced += 1,
        }
    }
    assert_eq!((prefilled, forced), (64, 2));
    rt.start().unwrap();

    let refused: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let poster = poster.clone();
                s.spawn(move || {
                    (0..PER_PRODUCER)
                        .map(|i| post_until_taken(&poster, p * PER_PRODUCER + i))
                        .sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let expected = total as u64 + prefilled;
    assert!(
        util::wait_until(30, || delivered.load(Acquire) == expected),
        "delivered {} of {expected}",
        delivered.load(Acquire)
    );
    let m = rt.shutdown().unwrap();
    for (v, n) in seen.iter().enumerate() {
        let want = u8::from(v < total || (v as u64) < pre + prefilled);
        assert_eq!(
            n.load(Relaxed),
            want,
            "value {v} delivered {} times",
            n.load(Relaxed)
        );
    }
    assert_eq!(poster.refused(), refused + forced);
    assert_eq!(
        m[0].inbox_refused,
        refused + forced,
        "the lane counts what the producers were handed back"
    );
    eprintln!(
        "{expected} values delivered once each; {} refusals; {} dispatches",
        refused + forced,
        m[0].dispatched
    );
}

/// The inbox dispatch path allocates nothing after warm-up: 100,000 single-value batches on a
/// 2-thread lane, `pool_allocations == Some(0)`.
#[test]
fn zero_allocations_inbox() {
    let _l = util::rt_lock();
    const DISPATCHES: u64 = 100_000;
    let delivered = Arc::new(AtomicU64::new(0));
    let d = delivered.clone();
    let (inbox, poster) = Inbox::new(256, 1, Order::Priority, move |v: u64, ctx: &mut Context| {
        ctx.buffer()[0] = v as u8;
        d.fetch_add(1, Relaxed);
    })
    .unwrap();
    let mut rt = lane(2);
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(inbox))
        .unwrap();
    assert!(rt.start().unwrap().counting_allocations);
    let target = DISPATCHES + 2 * WARMUP_DISPATCHES;
    std::thread::scope(|s| {
        for p in 0..2u64 {
            let poster = poster.clone();
            let delivered = &delivered;
            s.spawn(move || {
                let mut i = 0u64;
                while delivered.load(Relaxed) < target {
                    if poster
                        .post_with_priority((i % 7) as u8, p << 32 | i)
                        .is_ok()
                    {
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    let m = rt.shutdown().unwrap();
    let m = &m[0];
    assert!(m.dispatched >= target, "only {} dispatches", m.dispatched);
    assert_eq!(
        m.pool_allocations,
        Some(0),
        "inbox: pool threads allocated after warm-up (None: not measured): {m:?}"
    );
}
