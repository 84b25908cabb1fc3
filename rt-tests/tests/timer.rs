//! Callback timers through a real runtime: missed periods, cancel, one-shot, re-arm, and no
//! allocation on the dispatch path after warm-up.
//! Run one at a time: `cargo test --test timer -- --test-threads=1`.

mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::timer::{CallbackTimer, Expiry, TimerEvent};
use lfrt::*;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use util::lane;

/// Occupies the pool thread that handles its notification until released (at most 10 s).
struct Blocker {
    bell: Notifier,
    blocking: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl EventHandler for Blocker {
    fn source(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
    fn handle(&mut self, _ev: &Event, _ctx: &mut Context) -> Disposition {
        let _ = self.bell.take();
        self.blocking.store(true, SeqCst);
        let end = os::now_ns() + 10_000_000_000;
        while !self.release.load(SeqCst) && os::now_ns() < end {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.blocking.store(false, SeqCst);
        Disposition::Rearm
    }
}

fn counter() -> (Arc<AtomicU64>, impl FnMut(&TimerEvent, &mut Context) + Send) {
    let n = Arc::new(AtomicU64::new(0));
    let m = n.clone();
    (n, move |_: &TimerEvent, _: &mut Context| {
        m.fetch_add(1, SeqCst);
    })
}

/// The lane's only thread is held for at least 4 whole periods past the first expiry: the
/// first callback reports the first due instant and at least 4 missed periods, and the next
/// callback's due instant is exactly the periods reported later.
#[test]
fn missed_periods_are_reported() {
    let _l = util::rt_lock();
    const PERIOD: u64 = 5_000_000;
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    // Disarmed until the lane is blocked.
    let (timer, control) =
        CallbackTimer::one_shot(Expiry::After(Duration::from_secs(3600)), move |ev, _| {
            e.lock().unwrap().push(*ev);
        })
        .unwrap();
    control.cancel().unwrap();
    let (blocking, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let bell = Notifier::new().unwrap();
    let mut rt = lane(1);
    let reg = rt.lane("lane").unwrap().registry();
    reg.register(Box::new(timer)).unwrap();
    let blocker = Blocker {
        bell,
        blocking: blocking.clone(),
        release: release.clone(),
    };
    // Rung before registration: the eventfd stays readable, so it fires once registered.
    blocker.bell.notify(1).unwrap();
    rt.start().unwrap();
    reg.register(Box::new(blocker)).unwrap();
    assert!(
        util::wait_until(10, || blocking.load(SeqCst)),
        "blocker never ran"
    );
    let t0 = os::now_ns() + PERIOD;
    control
        .arm_periodic(Expiry::At(t0), Duration::from_nanos(PERIOD))
        .unwrap();
    assert!(util::wait_until(10, || os::now_ns() >= t0 + 4 * PERIOD));
    assert!(blocking.load(SeqCst), "the lane was held throughout");
    release.store(true, SeqCst);
    assert!(util::wait_until(10, || events.lock().unwrap().len() >= 2));
    control.cancel().unwrap();
    rt.shutdown().unwrap();
    let ev = events.lock().unwrap();
    assert_eq!(
        ev[0].due_ns, t0,
        "the first event is due at the first expiry"
    );
    assert!(
        ev[0].missed >= 4,
        "at least 5 expirations while blocked: {:?}",
        ev[0]
    );
    assert_eq!(
        ev[1].due_ns,
        t0 + (ev[0].missed + 1) * PERIOD,
        "the missed periods are exactly the ones skipped"
    );
}

/// After `cancel` returns no callback runs, though the timer was firing every 200 µs and
/// callbacks were running on two threads' lane when it was called.
#[test]
fn no_callback_after_cancel_returns() {
    let _l = util::rt_lock();
    let (count, cb) = counter();
    let (timer, control) = CallbackTimer::periodic(
        Expiry::After(Duration::ZERO),
        Duration::from_micros(200),
        cb,
    )
    .unwrap();
    let mut rt = lane(2);
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(timer))
        .unwrap();
    rt.start().unwrap();
    assert!(util::wait_until(10, || count.load(SeqCst) >= 20));
    control.cancel().unwrap();
    let at_cancel = count.load(SeqCst);
    std::thread::sleep(Duration::from_millis(20)); // 100 periods
    assert_eq!(
        count.load(SeqCst),
        at_cancel,
        "a callback ran after cancel returned"
    );
    rt.shutdown().unwrap();
}

/// A one-shot timer fires once; re-armed once it fires once more; re-armed periodic it keeps
/// firing.
#[test]
fn one_shot_fires_once_and_rearms() {
    let _l = util::rt_lock();
    let (count, cb) = counter();
    let (timer, control) =
        CallbackTimer::one_shot(Expiry::After(Duration::from_millis(1)), cb).unwrap();
    let mut rt = lane(1);
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(timer))
        .unwrap();
    rt.start().unwrap();
    assert!(util::wait_until(10, || count.load(SeqCst) == 1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(count.load(SeqCst), 1, "one-shot fired more than once");
    control
        .arm_once(Expiry::At(os::now_ns() + 1_000_000))
        .unwrap();
    assert!(util::wait_until(10, || count.load(SeqCst) == 2));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(count.load(SeqCst), 2);
    control
        .arm_periodic(
            Expiry::After(Duration::from_millis(1)),
            Duration::from_millis(1),
        )
        .unwrap();
    assert!(util::wait_until(10, || count.load(SeqCst) >= 7));
    control.cancel().unwrap();
    rt.shutdown().unwrap();
}

/// The callback-timer dispatch path allocates nothing after warm-up.
#[test]
fn zero_allocations_callback_timer() {
    let _l = util::rt_lock();
    const DISPATCHES: u64 = 20_000;
    let mut rt = lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let mut controls = Vec::new();
    for _ in 0..4 {
        let (timer, control) = CallbackTimer::periodic(
            Expiry::After(Duration::from_millis(1)),
            Duration::from_micros(50),
            |ev, ctx: &mut Context| ctx.buffer()[0] = ev.missed as u8,
        )
        .unwrap();
        reg.register(Box::new(timer)).unwrap();
        controls.push(control);
    }
    assert!(rt.start().unwrap().counting_allocations);
    let target = DISPATCHES + 2 * WARMUP_DISPATCHES;
    assert!(util::wait_until(60, || rt.metrics()[0].dispatched >= target));
    for c in &controls {
        c.cancel().unwrap();
    }
    let m = rt.shutdown().unwrap();
    assert_eq!(
        m[0].pool_allocations,
        Some(0),
        "callback timers: pool threads allocated after warm-up (None: not measured): {:?}",
        m[0]
    );
}

/// Issue #20 defect 7: durations passed through `as u64`, so a period or delay of 2^64 ns and
/// more wrapped around: a period of 2^64 + 1 ns became a 1 ns period, a delay of 2^64 ns +
/// 1 ms a 1 ms delay. A period beyond u64 ns is refused (`InvalidInput`); a delay beyond it
/// saturates (the timer does not expire in this process's life).
#[test]
fn durations_beyond_u64_nanoseconds_do_not_wrap() {
    let _l = util::rt_lock();
    let beyond = |extra: Duration| Duration::from_nanos(u64::MAX) + Duration::from_nanos(1) + extra;
    let later = Expiry::After(Duration::from_secs(3600));
    let e = CallbackTimer::periodic(later, beyond(Duration::ZERO), |_, _| {})
        .map(drop)
        .expect_err("a period of 2^64 ns is refused, not taken as 0 ns");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let e = CallbackTimer::periodic(later, beyond(Duration::from_nanos(1)), |_, _| {})
        .map(drop)
        .expect_err("a period of 2^64 + 1 ns is refused, not taken as 1 ns");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let (_, control) = CallbackTimer::one_shot(later, |_, _| {}).unwrap();
    assert_eq!(
        control
            .arm_periodic(later, beyond(Duration::ZERO))
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::InvalidInput
    );

    // A delay of 2^64 ns + 1 ms: wrapped, it expired after 1 ms.
    let (fired, callback) = counter();
    let (timer, _control) =
        CallbackTimer::one_shot(Expiry::After(beyond(Duration::from_millis(1))), callback).unwrap();
    let (ran, probe) = counter();
    let (check, _c2) = CallbackTimer::periodic(
        Expiry::After(Duration::from_millis(1)),
        Duration::from_millis(1),
        probe,
    )
    .unwrap();
    let mut rt = lane(1);
    let reg = rt.lane("lane").unwrap().registry();
    reg.register(Box::new(timer)).unwrap();
    reg.register(Box::new(check)).unwrap();
    rt.start().unwrap();
    // 50 expiries of a 1 ms timer on the same lane: the wrapped delay would have expired.
    assert!(util::wait_until(10, || ran.load(SeqCst) >= 50));
    rt.shutdown().unwrap();
    assert_eq!(fired.load(SeqCst), 0, "the saturated delay expired");
}
