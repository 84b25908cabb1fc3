//! Real-time hygiene, proven: no allocation and no page fault on pool threads after warm-up,
//! priority inheritance, telemetry accounting, the overrun watchdog.
//! Run one at a time: `cargo test --test hygiene -- --test-threads=1`.

mod util;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::handlers::PeriodicTimer;
use lfrt::os::Sched;
use lfrt::*;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Dispatches each source/promotion combination must reach after warm-up.
const DISPATCHES: u64 = 100_000;
const THREADS: usize = 4;

fn lane(name: &str, promotion: Promotion) -> LaneConfig {
    let mut g = LaneConfig::new(name, Policy::Fifo, 10);
    g.threads = THREADS;
    g.promotion = promotion;
    g.buffer_bytes = 2048;
    // Both hand-off paths are measured: LIFO lanes promote at once (the classic hand-off),
    // the others defer their promotions (the default, `promote_after_us`).
    if promotion == Promotion::Lifo {
        g.promote_after_us = 0;
    }
    g
}

fn target(m: &LaneMetrics) -> bool {
    m.dispatched >= DISPATCHES + (THREADS as u64) * WARMUP_DISPATCHES
}

/// Drives `rt` with `load` until the lane dispatched enough, then checks the counters.
fn assert_no_allocations(what: &str, mut rt: Runtime, load: impl FnOnce(&dyn Fn() -> bool)) {
    let rep = rt.start().unwrap();
    assert!(
        rep.counting_allocations,
        "the counting allocator must be installed"
    );
    let done = || target(&rt.metrics()[0]);
    load(&done);
    let m = rt.shutdown().unwrap();
    let m = &m[0];
    assert!(target(m), "{what}: only {} dispatches", m.dispatched);
    // A concurrent lane has no leader to promote; its threads contend in epoll_wait. A LIFO
    // lane promotes at once (`lane`); the others keep the role through quick events.
    if what.ends_with("Lifo") {
        assert!(
            m.promotions > 0,
            "{what}: threads never contended (no promotion): {m:?}"
        );
    } else if !what.ends_with("Concurrent") {
        assert!(
            m.promotions_deferred > 0,
            "{what}: no promotion was deferred: {m:?}"
        );
    }
    assert_eq!(
        m.pool_allocations,
        Some(0),
        "{what}: pool threads allocated after warm-up (None: not measured): {m:?}"
    );
    eprintln!(
        "{what}: {} dispatches, {} promotions, {} vacant, 0 allocations",
        m.dispatched, m.promotions, m.promotions_no_follower
    );
}

const PROMOTIONS: [Promotion; 4] = [
    Promotion::Priority,
    Promotion::Lifo,
    Promotion::Fifo,
    Promotion::Concurrent,
];

#[test]
fn zero_allocations_udp() {
    let _l = util::rt_lock();
    for p in PROMOTIONS {
        let mut g = lane("udp", p);
        let addrs: Vec<std::net::SocketAddr> = (0..4)
            .map(|_| {
                UdpSocket::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
            })
            .collect();
        for a in &addrs {
            g.handlers.push(HandlerConfig::UdpEcho { bind: *a });
        }
        assert_no_allocations(
            &format!("udp/{p:?}"),
            util::runtime(RtMode::BestEffort, false, vec![g]),
            |done| {
                let stop = AtomicBool::new(false);
                let stop = &stop;
                std::thread::scope(|s| {
                    for a in &addrs {
                        s.spawn(move || {
                            let c = UdpSocket::bind("127.0.0.1:0").unwrap();
                            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                            let mut buf = [0u8; 64];
                            while !stop.load(Relaxed) {
                                for _ in 0..4 {
                                    c.send_to(&[7u8; 32], a).unwrap();
                                }
                                for _ in 0..4 {
                                    c.recv_from(&mut buf).expect("echo");
                                }
                            }
                        });
                    }
                    assert!(util::wait_until(120, done));
                    stop.store(true, Relaxed);
                });
            },
        );
    }
}

#[test]
fn zero_allocations_tcp_stream() {
    let _l = util::rt_lock();
    for p in PROMOTIONS {
        let mut g = lane("tcp", p);
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        g.handlers.push(HandlerConfig::TcpEcho {
            bind: addr,
            max_connections: 4,
        });
        let rt = util::runtime(RtMode::BestEffort, false, vec![g]);
        let reg = rt.lane("tcp").unwrap().registry();
        assert_no_allocations(&format!("tcp/{p:?}"), rt, |done| {
            // Connect everything, wait until every stream is registered (accepting is
            // measured on its own by `accepting_connections_allocates_nothing`).
            let clients: Vec<TcpStream> =
                (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
            assert!(
                util::wait_until(10, || reg.len() == 5),
                "streams not accepted"
            );
            let stop = AtomicBool::new(false);
            let stop = &stop;
            std::thread::scope(|s| {
                for mut c in clients {
                    s.spawn(move || {
                        c.set_nodelay(true).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut buf = [0u8; 16];
                        while !stop.load(Relaxed) {
                            c.write_all(&[3u8; 16]).unwrap();
                            c.read_exact(&mut buf).expect("echo");
                        }
                    });
                }
                assert!(util::wait_until(120, done));
                stop.store(true, Relaxed);
            });
        });
    }
}

/// The framed stream path (`lfrt::stream`): reading, framing, the handler's replies and
/// writing, with several frames per read.
#[test]
fn zero_allocations_framed_stream() {
    use lfrt::stream::{Flow, Framed, Limits, Output};
    let _l = util::rt_lock();
    for p in PROMOTIONS {
        let rt = util::runtime(RtMode::BestEffort, false, vec![lane("stream", p)]);
        let reg = rt.lane("stream").unwrap().registry();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let echo = |frame: &[u8], out: &mut Output<'_>| {
            out.send(frame).expect("one reply always fits");
            Flow::Continue
        };
        reg.register(Box::new(
            Framed::new(listener, Limits::default(), echo).unwrap(),
        ))
        .unwrap();
        assert_no_allocations(&format!("stream/{p:?}"), rt, |done| {
            // Connect everything, wait until every stream is registered (accepting is
            // measured on its own by `accepting_connections_allocates_nothing`).
            let clients: Vec<TcpStream> =
                (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
            assert!(
                util::wait_until(10, || reg.len() == 5),
                "streams not accepted"
            );
            let stop = AtomicBool::new(false);
            let stop = &stop;
            std::thread::scope(|s| {
                for mut c in clients {
                    s.spawn(move || {
                        c.set_nodelay(true).unwrap();
                        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        // Four 12-byte frames per write, so one read holds several frames.
                        let mut wire = Vec::new();
                        for k in 0..4u8 {
                            wire.extend_from_slice(&8u32.to_be_bytes());
                            wire.extend_from_slice(&[k; 8]);
                        }
                        let mut buf = [0u8; 48];
                        while !stop.load(Relaxed) {
                            c.write_all(&wire).unwrap();
                            c.read_exact(&mut buf).expect("echo");
                            assert_eq!(buf[..], wire[..]);
                        }
                    });
                }
                assert!(util::wait_until(120, done));
                stop.store(true, Relaxed);
            });
        });
    }
}

/// Accepting a connection allocates nothing: a `tcp-echo` listener and a `Framed` listener
/// each take their connections from a table preallocated with the listener, and the handle
/// set gives every entry back to its table when the connection closes. Measured by the
/// runtime's own count (`pool_allocations`) over 1000 connections, each accepted, served once
/// and closed, after the pool thread's warm-up.
#[test]
fn accepting_connections_allocates_nothing() {
    use lfrt::stream::{Flow, Framed, Limits, Output};
    const CONNECTIONS: usize = 1000;
    let _l = util::rt_lock();
    for framed in [false, true] {
        let what = if framed { "Framed" } else { "tcp-echo" };
        let mut g = lane("accept", Promotion::Priority);
        // One thread: its warm-up (WARMUP_DISPATCHES) ends after about 20 connections.
        g.threads = 1;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let framed_listener = if framed {
            Some(listener)
        } else {
            // The runtime binds the address itself.
            drop(listener);
            g.handlers.push(HandlerConfig::TcpEcho {
                bind: addr,
                max_connections: 2,
            });
            None
        };
        let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
        if let Some(listener) = framed_listener {
            let echo = |frame: &[u8], out: &mut Output<'_>| {
                out.send(frame).expect("one reply always fits");
                Flow::Continue
            };
            let limits = Limits {
                max_connections: 2,
                ..Limits::default()
            };
            rt.lane("accept")
                .unwrap()
                .registry()
                .register(Box::new(Framed::new(listener, limits, echo).unwrap()))
                .unwrap();
        }
        let rep = rt.start().unwrap();
        assert!(
            rep.counting_allocations,
            "the counting allocator must be installed"
        );
        let (request, reply_len) = if framed {
            (vec![0, 0, 0, 3, 7, 8, 9], 7)
        } else {
            (vec![7, 8, 9], 3)
        };
        for i in 0..CONNECTIONS {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(&request).unwrap();
            let mut reply = vec![0u8; reply_len];
            c.read_exact(&mut reply)
                .unwrap_or_else(|e| panic!("{what}: connection {i} not served: {e}"));
            assert_eq!(reply, request, "{what}");
            // The server closes after our end of stream; then its entry is back in its table.
            c.shutdown(std::net::Shutdown::Write).unwrap();
            assert_eq!(c.read(&mut reply).unwrap(), 0, "{what}: connection {i}");
        }
        let m = rt.shutdown().unwrap().remove(0);
        assert_eq!(m.connections_refused, 0, "{what}: {m:?}");
        assert!(
            m.dispatched >= (2 * CONNECTIONS) as u64 + WARMUP_DISPATCHES,
            "{what}: {m:?}"
        );
        assert_eq!(
            m.pool_allocations,
            Some(0),
            "{what}: accepting allocated after warm-up (None: not measured): {m:?}"
        );
        eprintln!(
            "{what}: {CONNECTIONS} connections, {} dispatches, 0 allocations",
            m.dispatched
        );
    }
}

#[test]
fn zero_allocations_timerfd() {
    let _l = util::rt_lock();
    for p in PROMOTIONS {
        let rt = util::runtime(RtMode::BestEffort, false, vec![lane("timer", p)]);
        let reg = rt.lane("timer").unwrap().registry();
        let first = lfrt::os::now_ns() + 5_000_000;
        for k in 0..4 {
            let mut t = Timer::new().unwrap();
            // 4 timers at 40..55 µs: about 85k dispatches/s.
            t.arm(first + k * 1000, 40_000 + k * 5_000).unwrap();
            reg.register(Box::new(PeriodicTimer::new(t))).unwrap();
        }
        assert_no_allocations(&format!("timerfd/{p:?}"), rt, |done| {
            assert!(util::wait_until(120, done))
        });
    }
}

struct Take(Notifier);
impl EventHandler for Take {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.0.take();
        Disposition::Rearm
    }
}

#[test]
fn zero_allocations_eventfd() {
    let _l = util::rt_lock();
    for p in PROMOTIONS {
        let rt = util::runtime(RtMode::BestEffort, false, vec![lane("efd", p)]);
        let reg = rt.lane("efd").unwrap().registry();
        let writers: Vec<OwnedFd> = (0..4)
            .map(|_| {
                let n = Notifier::new().unwrap();
                let w = n.as_fd().try_clone_to_owned().unwrap();
                reg.register(Box::new(Take(n))).unwrap();
                w
            })
            .collect();
        assert_no_allocations(&format!("eventfd/{p:?}"), rt, |done| {
            let mut k = 0usize;
            while !done() {
                for _ in 0..256 {
                    let _ = nix::unistd::write(&writers[k % 4], &1u64.to_ne_bytes());
                    k += 1;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
    }
}

#[test]
fn locked_memory_pool_threads_do_not_fault_in_steady_state() {
    let _l = util::rt_lock();
    let mut g = lane("mlock", Promotion::Priority);
    let addr = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    g.handlers.push(HandlerConfig::UdpEcho { bind: addr });
    let mut rt = util::runtime(RtMode::BestEffort, true, vec![g]);
    let rep = rt.start().unwrap();
    assert!(
        rep.memory_locked,
        "mlockall failed (needs CAP_IPC_LOCK or RLIMIT_MEMLOCK)"
    );
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    let mut ping = |n: usize| {
        for _ in 0..n {
            c.send_to(&[1u8; 48], addr).unwrap();
            c.recv_from(&mut buf).unwrap();
        }
    };
    ping(2_000); // warm-up: every thread passes WARMUP_DISPATCHES
    let after_warmup = rt.metrics()[0].pool_minor_faults;
    ping(50_000);
    let m = rt.shutdown().unwrap();
    assert_eq!(
        m[0].pool_minor_faults, after_warmup,
        "pool threads page-faulted in steady state: {m:?}"
    );
    assert_eq!(m[0].pool_minor_faults, Some(0), "{m:?}");
}

/// Telemetry: every sample a pool thread pushed is either in the histograms or counted as
/// dropped.
#[test]
fn telemetry_samples_are_all_accounted_for() {
    let _l = util::rt_lock();
    let mut g = lane("tele", Promotion::Priority);
    g.handlers.push(HandlerConfig::Timer {
        interval_us: 100,
        count: 3,
        distance_us: 50,
    });
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    rt.start().unwrap();
    assert!(util::wait_until(30, || rt.metrics()[0].dispatched > 20_000));
    let m = rt.shutdown().unwrap();
    let recorded = rt.telemetry().with(|r| r.recorded);
    let per_lane: u64 = rt.telemetry().with(|r| r.lanes[0].latency.len());
    let per_timer: u64 = rt
        .telemetry()
        .with(|r| r.timers.values().map(|h| h.latency.len()).sum());
    assert_eq!(m[0].samples, m[0].dispatched);
    assert_eq!(m[0].samples, recorded + m[0].samples_dropped, "{m:?}");
    assert_eq!(per_lane, recorded);
    assert_eq!(
        per_timer, recorded,
        "every timer sample carries its expiry as origin"
    );
    assert_eq!(rt.telemetry().with(|r| r.timers.len()), 3);
}

fn spin_ms(ms: u64) {
    let end = lfrt::os::now_ns() + ms * 1_000_000;
    while lfrt::os::now_ns() < end {
        std::hint::spin_loop();
    }
}

/// A notifier handler that spins until it sees itself demoted to SCHED_OTHER (read back from
/// the kernel), at most `max_spin_ms`, and records the policy it ended with.
struct Spinner {
    n: Notifier,
    max_spin_ms: u64,
    policy_mid: Arc<AtomicU64>,
}
impl EventHandler for Spinner {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.n.take();
        let end = lfrt::os::now_ns() + self.max_spin_ms * 1_000_000;
        let tid = lfrt::os::gettid();
        let mut policy = lfrt::os::read_back(tid).unwrap();
        while policy != Sched::Other && lfrt::os::now_ns() < end {
            spin_ms(1);
            policy = lfrt::os::read_back(tid).unwrap();
        }
        // Keep running a little after the demotion: the thread must stay demoted until return.
        spin_ms(10);
        policy = lfrt::os::read_back(tid).unwrap();
        self.policy_mid
            .store(u64::from(policy == Sched::Other), SeqCst);
        Disposition::Rearm
    }
}

#[test]
fn watchdog_reports_and_demotes_an_overrunning_handler() {
    let _l = util::rt_lock();
    if !util::rt_allowed("watchdog_reports_and_demotes_an_overrunning_handler", 20) {
        return;
    }
    let cpus = lfrt::os::available_cpus();
    let last = *cpus.last().unwrap();
    let mut slow = LaneConfig::new("slow", Policy::Fifo, 10);
    slow.threads = 1;
    slow.cpus = Some(vec![last]);
    slow.budget_us = Some(5_000);
    slow.on_overrun = OnOverrun::Demote;
    let mut fast = LaneConfig::new("fast", Policy::Fifo, 20);
    fast.threads = 1;
    fast.cpus = Some(vec![cpus[0]]);
    fast.handlers.push(HandlerConfig::Timer {
        interval_us: 1000,
        count: 1,
        distance_us: 0,
    });
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![slow, fast],
        bands: Vec::new(),
    })
    .unwrap();
    let n = Notifier::new().unwrap();
    let w = n.as_fd().try_clone_to_owned().unwrap();
    let policy_mid = Arc::new(AtomicU64::new(u64::MAX));
    // At most 400 ms of spinning: bounded and below the RT throttle (950 ms per second).
    let spinner = Spinner {
        n,
        max_spin_ms: 400,
        policy_mid: policy_mid.clone(),
    };
    rt.lane("slow")
        .unwrap()
        .registry()
        .register(Box::new(spinner))
        .unwrap();
    rt.start().unwrap();
    assert!(util::wait_until(5, || rt.metrics()[1].dispatched > 10));
    let fast_before = rt.metrics()[1].dispatched;
    nix::unistd::write(&w, &1u64.to_ne_bytes()).unwrap();
    assert!(
        util::wait_until(5, || policy_mid.load(SeqCst) != u64::MAX),
        "spinner never ran"
    );
    let fast_after = rt.metrics()[1].dispatched;
    let slow_tid = rt
        .thread_ids()
        .into_iter()
        .find(|&(g, _, _)| g == 0)
        .unwrap()
        .2;
    assert!(
        util::wait_until(5, || lfrt::os::read_back(slow_tid).unwrap()
            == Sched::Fifo(10)),
        "not restored after the handler returned"
    );
    let m = rt.shutdown().unwrap();
    assert_eq!(
        policy_mid.load(SeqCst),
        1,
        "the overrunning handler was not demoted"
    );
    assert_eq!(m[0].budget_overruns, 1, "{:?}", m[0]);
    assert_eq!(m[0].demotions, 1);
    // The other lane's 1 ms timer kept firing while this one overran (for at least 10 ms).
    assert!(
        fast_after > fast_before + 5,
        "the other lane stopped dispatching during the overrun: {fast_before} -> {fast_after}"
    );
}

/// A thread's nice value as the kernel reports it (`/proc/self/task/<tid>/stat` field 19).
fn nice_of(tid: i32) -> std::io::Result<i32> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .nth(16)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("malformed /proc stat"))
}

/// Kernel thread id of this process's thread named `name` (its `comm`), if there is one.
fn thread_named(name: &str) -> Option<i32> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name)
            .then(|| e.file_name().to_str()?.parse().ok())
            .flatten()
    })
}

/// Issue #20 defect 1: demoting a runaway handler must change the runaway's policy only. The
/// watchdog (which calls the demotion) keeps its own nice value, so it still gets its share of
/// the CPU to contain the next runaway.
#[test]
fn watchdog_keeps_its_own_nice_after_a_demotion() {
    let _l = util::rt_lock();
    if !util::rt_allowed("watchdog_keeps_its_own_nice_after_a_demotion", 10) {
        return;
    }
    let mut slow = LaneConfig::new("slow", Policy::Fifo, 10);
    slow.threads = 1;
    slow.cpus = Some(vec![*lfrt::os::available_cpus().last().unwrap()]);
    slow.budget_us = Some(5_000);
    slow.on_overrun = OnOverrun::Demote;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![slow],
        bands: Vec::new(),
    })
    .unwrap();
    let n = Notifier::new().unwrap();
    let w = n.as_fd().try_clone_to_owned().unwrap();
    let policy_mid = Arc::new(AtomicU64::new(u64::MAX));
    let spinner = Spinner {
        n,
        max_spin_ms: 400,
        policy_mid: policy_mid.clone(),
    };
    rt.lane("slow")
        .unwrap()
        .registry()
        .register(Box::new(spinner))
        .unwrap();
    rt.start().unwrap();
    // The watchdog names itself once it runs.
    let mut watchdog = None;
    assert!(
        util::wait_until(5, || {
            watchdog = thread_named("lfrt-watchdog");
            watchdog.is_some()
        }),
        "the watchdog thread runs"
    );
    let watchdog = watchdog.unwrap();
    let before = nice_of(watchdog).unwrap();
    nix::unistd::write(&w, &1u64.to_ne_bytes()).unwrap();
    assert!(
        util::wait_until(5, || policy_mid.load(SeqCst) != u64::MAX),
        "spinner never ran"
    );
    let after = nice_of(watchdog).unwrap();
    let slow_tid = rt.thread_ids()[0].2;
    assert!(util::wait_until(5, || lfrt::os::read_back(slow_tid)
        .unwrap()
        == Sched::Fifo(10)));
    let slow_nice = nice_of(slow_tid).unwrap();
    // What a thread of this process starts with (0, or more under `nice cargo test`).
    let inherited = nice_of(lfrt::os::gettid()).unwrap();
    let m = rt.shutdown().unwrap();
    assert_eq!(m[0].demotions, 1, "{:?}", m[0]);
    assert_eq!(policy_mid.load(SeqCst), 1, "the handler was not demoted");
    assert_eq!(
        after, before,
        "the watchdog's own nice value changed when it demoted another thread"
    );
    assert_eq!(
        slow_nice, inherited,
        "the demoted thread's nice value changed"
    );
}

/// `os::set_current_sched(Sched::Other)` gives SCHED_OTHER at nice 0 as documented ("priority
/// 0"), not nice 19.
#[test]
fn set_current_sched_other_leaves_nice_alone() {
    let _l = util::rt_lock();
    if !util::rt_allowed("set_current_sched_other_leaves_nice_alone", 10) {
        return;
    }
    let (sched, nice) = std::thread::spawn(|| {
        let before = nice_of(lfrt::os::gettid()).unwrap();
        lfrt::os::set_current_sched(Sched::Fifo(10)).unwrap();
        lfrt::os::set_current_sched(Sched::Other).unwrap();
        let tid = lfrt::os::gettid();
        (
            lfrt::os::read_back(tid).unwrap(),
            nice_of(lfrt::os::gettid()).unwrap() - before,
        )
    })
    .join()
    .unwrap();
    assert_eq!(sched, Sched::Other);
    assert_eq!(nice, 0, "SCHED_OTHER changed the caller's nice value");
}

/// Priority inheritance, read back from the kernel: while a SCHED_FIFO 50 thread waits for
/// lfrt's PiMutex held by a SCHED_FIFO 10 thread, the holder runs at effective priority 50;
/// with a plain (non-PI) std mutex it stays at 10.
#[test]
fn pi_mutex_boosts_the_holder() {
    let _l = util::rt_lock();
    if !util::rt_allowed("pi_mutex_boosts_the_holder", 50) {
        return;
    }
    fn boost_seen(pi: bool) -> i32 {
        let pim = Arc::new(PiMutex::new(()));
        let stdm = Arc::new(std::sync::Mutex::new(()));
        let held = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let low_tid = Arc::new(AtomicU64::new(0));
        let set = |p: u8| lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(p)).unwrap();
        let low = {
            let (pim, stdm, held, release, low_tid) = (
                pim.clone(),
                stdm.clone(),
                held.clone(),
                release.clone(),
                low_tid.clone(),
            );
            std::thread::spawn(move || {
                set(10);
                low_tid.store(lfrt::os::gettid() as u64, SeqCst);
                // Holds the lock while sleeping: the boost applies to a blocked holder too.
                let g1 = pi.then(|| pim.lock());
                let g2 = (!pi).then(|| stdm.lock().unwrap());
                held.store(true, SeqCst);
                while !release.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                drop((g1, g2));
            })
        };
        while !held.load(SeqCst) {
            std::thread::yield_now();
        }
        let high = {
            let (pim, stdm) = (pim.clone(), stdm.clone());
            std::thread::spawn(move || {
                set(50);
                if pi {
                    drop(pim.lock());
                } else {
                    drop(stdm.lock().unwrap());
                }
            })
        };
        let tid = low_tid.load(SeqCst) as i32;
        let mut seen = 0;
        // Poll until the high thread is blocked and the kernel shows the boost (bounded).
        for _ in 0..500 {
            seen = lfrt::os::effective_rt_priority(tid).unwrap();
            if seen == 50 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        release.store(true, SeqCst);
        low.join().unwrap();
        high.join().unwrap();
        seen
    }
    assert_eq!(
        boost_seen(true),
        50,
        "PiMutex holder not boosted to the waiter's priority"
    );
    assert_eq!(
        boost_seen(false),
        10,
        "a plain mutex unexpectedly boosted its holder"
    );
}

/// The instrument itself: a handler that allocates on every event is caught.
struct Allocating(Notifier);
impl EventHandler for Allocating {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.0.take();
        std::hint::black_box(vec![0u8; 64]);
        Disposition::Rearm
    }
}

#[test]
fn an_allocating_handler_is_reported() {
    let _l = util::rt_lock();
    let mut g = lane("alloc", Promotion::Priority);
    g.threads = 1;
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    let n = Notifier::new().unwrap();
    let w = n.as_fd().try_clone_to_owned().unwrap();
    rt.lane("alloc")
        .unwrap()
        .registry()
        .register(Box::new(Allocating(n)))
        .unwrap();
    rt.start().unwrap();
    for _ in 0..(WARMUP_DISPATCHES + 500) {
        let before = rt.metrics()[0].dispatched;
        nix::unistd::write(&w, &1u64.to_ne_bytes()).unwrap();
        assert!(util::wait_until(5, || rt.metrics()[0].dispatched > before));
    }
    let m = rt.shutdown().unwrap();
    assert!(m[0].pool_allocations.is_some_and(|n| n >= 500), "{m:?}");
}

/// Before any pool thread of a lane has made `WARMUP_DISPATCHES` dispatches, its allocation
/// and page-fault counters are "not measured" (`None`, JSON `null`), never a zero that looks
/// like a clean measurement.
#[test]
fn hygiene_counters_before_warmup_are_not_measured() {
    let _l = util::rt_lock();
    let mut g = lane("cold", Promotion::Priority);
    g.threads = 2;
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    let n = Notifier::new().unwrap();
    let w = n.as_fd().try_clone_to_owned().unwrap();
    rt.lane("cold")
        .unwrap()
        .registry()
        .register(Box::new(Allocating(n)))
        .unwrap();
    assert!(rt.start().unwrap().counting_allocations);
    let m = rt.metrics();
    assert_eq!(
        (m[0].pool_allocations, m[0].pool_minor_faults),
        (None, None)
    );
    // Fewer dispatches than one thread's warm-up, even if one thread handles them all; the
    // handler allocates on each, so a counter that wrongly started would show it.
    let events = WARMUP_DISPATCHES - 1;
    for _ in 0..events {
        let before = rt.metrics()[0].dispatched;
        nix::unistd::write(&w, &1u64.to_ne_bytes()).unwrap();
        assert!(util::wait_until(5, || rt.metrics()[0].dispatched > before));
    }
    let m = rt.shutdown().unwrap();
    assert_eq!(m[0].dispatched, events);
    assert_eq!(
        (m[0].pool_allocations, m[0].pool_minor_faults),
        (None, None),
        "{m:?}"
    );
    let json = serde_json::to_value(&m[0]).unwrap();
    assert!(
        json["pool_allocations"].is_null() && json["pool_minor_faults"].is_null(),
        "{json}"
    );
}

/// Issue 15: the banded sockets of a `[[band]]` (one `SO_REUSEPORT` socket per lane, steered by
/// the kernel's classifier) allocate nothing on either lane's pool threads after warm-up.
#[test]
fn zero_allocations_banded_sockets() {
    let _l = util::rt_lock();
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut control = lane("control", Promotion::Priority);
    control.priority = 20;
    let bulk = lane("bulk", Promotion::Priority);
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![control, bulk],
        bands: vec![BandConfig {
            bind: addr,
            classify: BandClassify::Dscp(
                [("46", "control"), ("default", "bulk")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            handler: BandHandler::UdpEcho,
        }],
    })
    .unwrap();
    assert!(rt.start().unwrap().counting_allocations);
    // Each lane must pass its warm-up and then serve this many dispatches.
    let per_lane = DISPATCHES / 4 + THREADS as u64 * WARMUP_DISPATCHES;
    let done = |rt: &Runtime| rt.metrics().iter().all(|m| m.dispatched >= per_lane);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for tos in [46u8 << 2, 0, 46 << 2, 0] {
            let stop = &stop;
            s.spawn(move || {
                let c = UdpSocket::bind("127.0.0.1:0").unwrap();
                lfrt::os::set_tos(&c, tos).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 64];
                while !stop.load(Relaxed) {
                    for _ in 0..4 {
                        c.send_to(&[7u8; 32], addr).unwrap();
                    }
                    for _ in 0..4 {
                        c.recv_from(&mut buf).expect("echo");
                    }
                }
            });
        }
        assert!(util::wait_until(120, || done(&rt)));
        stop.store(true, Relaxed);
    });
    let m = rt.shutdown().unwrap();
    for g in &m {
        assert!(g.dispatched >= per_lane, "{}: {}", g.name, g.dispatched);
        assert_eq!(
            g.pool_allocations,
            Some(0),
            "{}: banded pool threads allocated after warm-up (None: not measured): {g:?}",
            g.name
        );
    }
}

/// The borrowed path allocates nothing: the high lane's only thread is held in a handler, so
/// each of 100,000 events on its other handles is dispatched by a lent thread of the low lane
/// (link report, priority raise, `epoll_wait` on the borrower's set, dispatch, restore, re-arm).
#[test]
fn zero_allocations_borrowed() {
    let _l = util::rt_lock();
    if !util::rt_allowed("zero_allocations_borrowed", 60) {
        return;
    }
    let mut high = LaneConfig::new("high", Policy::Fifo, 60);
    high.threads = 1;
    high.buffer_bytes = 2048;
    high.borrow_from = vec!["low".into()];
    high.max_borrowed = Some(2);
    let mut low = LaneConfig::new("low", Policy::Fifo, 20);
    low.threads = 2;
    low.buffer_bytes = 2048;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![high, low],
        bands: Vec::new(),
    })
    .unwrap();
    let reg = rt.lane("high").unwrap().registry();
    /// Holds its thread (sleeping) from its first event until released, at most 120 s.
    struct Hold(Notifier, Arc<AtomicBool>, Arc<AtomicBool>);
    impl EventHandler for Hold {
        fn source(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
        fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
            let _ = self.0.take();
            self.1.store(true, SeqCst);
            for _ in 0..120_000 {
                if self.2.load(SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Disposition::Rearm
        }
    }
    let (inside, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let hold = Notifier::new().unwrap();
    let hold_w = hold.as_fd().try_clone_to_owned().unwrap();
    reg.register(Box::new(Hold(hold, inside.clone(), release.clone())))
        .unwrap();
    let writers: Vec<OwnedFd> = (0..4)
        .map(|_| {
            let n = Notifier::new().unwrap();
            let w = n.as_fd().try_clone_to_owned().unwrap();
            reg.register(Box::new(Take(n))).unwrap();
            w
        })
        .collect();
    assert!(rt.start().unwrap().counting_allocations);
    let _ = nix::unistd::write(&hold_w, &1u64.to_ne_bytes());
    assert!(util::wait_until(10, || inside.load(SeqCst)));
    let target = DISPATCHES + 2 * WARMUP_DISPATCHES;
    let done = || rt.metrics()[0].borrowed_dispatches >= target;
    let mut k = 0usize;
    let end = std::time::Instant::now() + Duration::from_secs(120);
    while !done() && std::time::Instant::now() < end {
        for _ in 0..256 {
            let _ = nix::unistd::write(&writers[k % 4], &1u64.to_ne_bytes());
            k += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    release.store(true, SeqCst);
    let m = rt.shutdown().unwrap();
    assert!(
        m[0].borrowed_dispatches >= target,
        "only {} borrowed dispatches",
        m[0].borrowed_dispatches
    );
    assert_eq!(m[1].lent_dispatches, m[0].borrowed_dispatches);
    assert_eq!(
        m[1].pool_allocations,
        Some(0),
        "lent threads allocated after warm-up (None: not measured): {m:?}"
    );
    eprintln!(
        "borrowed: {} lent dispatches, 0 allocations",
        m[1].lent_dispatches
    );
}
