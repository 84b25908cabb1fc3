//! Core runtime behaviour with real epoll, sockets, eventfd and (where permitted) SCHED_FIFO.
//! Run one at a time: `cargo test --test runtime -- --test-threads=1`.

mod util;

use lfrt::os::Sched;
use lfrt::*;
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

fn cfg(lanes: Vec<LaneConfig>) -> RuntimeConfig {
    RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes,
        bands: Vec::new(),
    }
}

/// Records every sequence number it sees (detecting duplicates) and echoes the datagram.
struct SeqEcho {
    sock: UdpSocket,
    seen: Arc<Vec<AtomicU8>>,
    dups: Arc<AtomicU64>,
}

impl EventHandler for SeqEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        let buf = ctx.buffer();
        while let Ok((n, from)) = self.sock.recv_from(buf) {
            if n >= 8 {
                if buf[..n] == *b"panic!!!" {
                    panic!("handler asked to panic");
                }
                let seq = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
                if self.seen[seq].fetch_add(1, SeqCst) != 0 {
                    self.dups.fetch_add(1, SeqCst);
                }
            }
            let _ = self.sock.send_to(&buf[..n], from);
        }
        Disposition::Rearm
    }
}

struct Counter {
    n: Notifier,
    total: Arc<AtomicU64>,
}

impl EventHandler for Counter {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, _ctx: &mut Context) -> Disposition {
        self.total.fetch_add(self.n.take().unwrap_or(0), SeqCst);
        Disposition::Rearm
    }
}

/// Runs `inner` and counts the dispatches that began while another dispatch of the same
/// handle was still running (the flag is outside the handler, so the count does not rely on
/// `&mut self` being exclusive: that is what it checks).
struct Exclusive<H> {
    inner: H,
    busy: Arc<AtomicBool>,
    overlaps: Arc<AtomicU64>,
}

impl<H: EventHandler> Exclusive<H> {
    fn new(inner: H, overlaps: &Arc<AtomicU64>) -> Exclusive<H> {
        Exclusive {
            inner,
            busy: Arc::default(),
            overlaps: overlaps.clone(),
        }
    }
}

impl<H: EventHandler> EventHandler for Exclusive<H> {
    fn source(&self) -> BorrowedFd<'_> {
        self.inner.source()
    }
    fn handle(&mut self, e: &Event, ctx: &mut Context) -> Disposition {
        if self.busy.swap(true, SeqCst) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        let d = self.inner.handle(e, ctx);
        self.busy.store(false, SeqCst);
        d
    }
}

fn udp_server(
    reg: &Registry,
    seen: &Arc<Vec<AtomicU8>>,
    dups: &Arc<AtomicU64>,
    overlaps: &Arc<AtomicU64>,
) -> std::net::SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    let addr = s.local_addr().unwrap();
    let h = SeqEcho {
        sock: s,
        seen: seen.clone(),
        dups: dups.clone(),
    };
    reg.register(Box::new(Exclusive::new(h, overlaps))).unwrap();
    addr
}

/// Sends `count` sequence-numbered datagrams starting at `first`, one outstanding at a time
/// (so the kernel never drops for lack of buffer), and checks each echo.
fn client(addr: std::net::SocketAddr, first: u64, count: u64) {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    for seq in first..first + count {
        c.send_to(&seq.to_le_bytes(), addr).unwrap();
        let (n, _) = c.recv_from(&mut buf).expect("echo within 10 s");
        assert_eq!(&buf[..n], &seq.to_le_bytes());
    }
}

#[test]
fn every_event_dispatched_exactly_once() {
    exactly_once(Promotion::Priority);
}

/// The same in concurrent mode (no leader: all idle threads in `epoll_wait` at once).
#[test]
fn every_event_dispatched_exactly_once_concurrent() {
    exactly_once(Promotion::Concurrent);
}

/// Sequence-numbered datagrams on 8 sockets and eventfd increments on 4 notifiers, from
/// parallel clients into a 4-thread lane: each datagram is seen exactly once, no increment
/// is lost or counted twice, and no handle is ever dispatched on two threads at once.
fn exactly_once(promotion: Promotion) {
    let _l = util::rt_lock();
    const SOCKETS: u64 = 8;
    const PER_SOCKET: u64 = 5_000;
    const NOTIFIERS: usize = 4;
    const NOTES: u64 = 20_000;
    let mut g = LaneConfig::new("exact", Policy::Fifo, 10);
    g.threads = 4;
    g.promotion = promotion;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let reg = rt.lane("exact").unwrap().registry();
    let seen: Arc<Vec<AtomicU8>> = Arc::new(
        (0..SOCKETS * PER_SOCKET)
            .map(|_| AtomicU8::new(0))
            .collect(),
    );
    let dups = Arc::new(AtomicU64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let addrs: Vec<_> = (0..SOCKETS)
        .map(|_| udp_server(&reg, &seen, &dups, &overlaps))
        .collect();
    let total = Arc::new(AtomicU64::new(0));
    let notifiers: Vec<Arc<EfdWriter>> = (0..NOTIFIERS)
        .map(|_| {
            let n = Notifier::new().unwrap();
            // The handler owns the notifier; the sender writes through a duplicate fd.
            let dup = Arc::new(writer_for(&n));
            let c = Counter {
                n,
                total: total.clone(),
            };
            reg.register(Box::new(Exclusive::new(c, &overlaps)))
                .unwrap();
            dup
        })
        .collect();
    rt.start().unwrap();
    std::thread::scope(|s| {
        for (i, a) in addrs.iter().enumerate() {
            s.spawn(move || client(*a, i as u64 * PER_SOCKET, PER_SOCKET));
        }
        let ns = &notifiers;
        s.spawn(move || {
            for k in 0..NOTES {
                ns[(k as usize) % NOTIFIERS].write(1);
            }
        });
    });
    assert!(
        util::wait_until(10, || total.load(SeqCst) == NOTES),
        "eventfd total {} of {NOTES}",
        total.load(SeqCst)
    );
    let m = rt.shutdown().unwrap();
    assert_eq!(dups.load(SeqCst), 0, "a datagram was dispatched twice");
    assert_eq!(
        overlaps.load(SeqCst),
        0,
        "a handle was dispatched on two threads at once"
    );
    let missing = seen.iter().filter(|s| s.load(SeqCst) == 0).count();
    assert_eq!(missing, 0, "datagrams never dispatched");
    assert_eq!(
        total.load(SeqCst),
        NOTES,
        "eventfd increments lost or double-counted"
    );
    assert!(m[0].dispatched >= SOCKETS * PER_SOCKET / 32, "{m:?}");
    if promotion == Promotion::Concurrent {
        assert_eq!(m[0].promotions, 0, "no leader, no promotion: {m:?}");
    } else {
        assert!(
            m[0].promotions > 0,
            "leaders never promoted a follower: {m:?}"
        );
    }
    assert_eq!(m[0].handler_panics, 0);
    // This test binary does not install lfrt::CountingAlloc: allocations are not measured,
    // while page faults are (every thread is far past its warm-up).
    assert_eq!(m[0].pool_allocations, None, "{:?}", m[0]);
    assert!(m[0].pool_minor_faults.is_some(), "{:?}", m[0]);
}

/// A second handle on an eventfd: writing to it wakes the registered notifier.
struct EfdWriter(std::os::fd::OwnedFd);
impl EfdWriter {
    fn write(&self, n: u64) {
        let r = nix::unistd::write(&self.0, &n.to_ne_bytes());
        assert_eq!(r.unwrap(), 8);
    }
}
fn writer_for(n: &Notifier) -> EfdWriter {
    EfdWriter(n.as_fd().try_clone_to_owned().unwrap())
}

#[test]
fn threads_run_at_configured_policy_priority_and_cpus() {
    let _l = util::rt_lock();
    if !util::rt_allowed("threads_run_at_configured_policy_priority_and_cpus", 30) {
        return;
    }
    let cpus = lfrt::os::available_cpus();
    let last = *cpus.last().unwrap();
    let mut hi = LaneConfig::new("hi", Policy::Fifo, 30);
    hi.threads = 2;
    hi.thread_priorities = Some(vec![30, 25]);
    hi.cpus = Some(vec![last]);
    let mut lo = LaneConfig::new("lo", Policy::Rr, 10);
    lo.threads = 1;
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![hi, lo],
        bands: Vec::new(),
    })
    .unwrap();
    let rep = rt.start().unwrap();
    assert!(rep.rt_applied);
    for (g, t, tid) in rt.thread_ids() {
        let sched = lfrt::os::read_back(tid).unwrap();
        let aff = lfrt::os::affinity(tid).unwrap();
        let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
        match (g, t) {
            (0, 0) => assert_eq!((sched, aff.clone()), (Sched::Fifo(30), vec![last])),
            (0, 1) => assert_eq!((sched, aff.clone()), (Sched::Fifo(25), vec![last])),
            (1, 0) => assert_eq!((sched, aff.clone()), (Sched::Rr(10), cpus.clone())),
            _ => unreachable!(),
        }
        assert_eq!(name.trim(), format!("lf-{}-{t}", ["hi", "lo"][g]));
    }
    rt.shutdown().unwrap();
}

#[test]
fn required_rt_without_privilege_names_what_is_missing() {
    // Drop CAP_SYS_NICE in a child process and make RLIMIT_RTPRIO 0; the runtime must refuse
    // with a message naming both, and start nothing.
    let _l = util::rt_lock();
    let exe = env!("CARGO_BIN_EXE_lfrt");
    let dir = std::env::temp_dir().join(format!("lfrt-noprio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("req.toml");
    std::fs::write(
        &conf,
        "[runtime]\nrt = \"required\"\n[[lane]]\nname = \"g\"\npriority = 50\nthreads = 1\n",
    )
    .unwrap();
    let test = "required_rt_without_privilege_names_what_is_missing";
    if !util::tools_installed(test, &["prlimit", "setpriv"]) {
        return;
    }
    let out = std::process::Command::new("prlimit")
        .args([
            "--rtprio=0:0",
            "setpriv",
            "--inh-caps=-sys_nice",
            "--bounding-set=-sys_nice",
            "--",
        ])
        .arg(exe)
        .args(["run", "--duration", "200ms"])
        .arg(&conf)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains("CAP_SYS_NICE") && err.contains("RLIMIT_RTPRIO"),
        "{err}"
    );
}

struct Boom(UdpSocket);
impl EventHandler for Boom {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        let buf = ctx.buffer();
        while let Ok((n, from)) = self.0.recv_from(buf) {
            if &buf[..n] == b"boom" {
                panic!("boom");
            }
            let _ = self.0.send_to(&buf[..n], from);
        }
        Disposition::Rearm
    }
}

#[test]
fn handler_panic_keeps_the_pool_serving() {
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("p", Policy::Fifo, 10);
    g.threads = 2;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    let addr = s.local_addr().unwrap();
    rt.lane("p")
        .unwrap()
        .registry()
        .register(Box::new(Boom(s)))
        .unwrap();
    rt.start().unwrap();
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the expected panics quiet
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 16];
    for round in 0..3u8 {
        c.send_to(b"boom", addr).unwrap();
        c.send_to(&[round], addr).unwrap();
        let (n, _) = c.recv_from(&mut buf).expect("still served after a panic");
        assert_eq!(&buf[..n], &[round]);
    }
    std::panic::set_hook(prev);
    let m = rt.shutdown().unwrap();
    assert_eq!(m[0].handler_panics, 3);
}

/// Issue 15 item 3: a `policy = "deadline"` lane runs its threads under SCHED_DEADLINE with the
/// configured reservation, read back from the kernel (`sched_getattr`), and serves its timer.
#[test]
fn deadline_lane_runs_under_sched_deadline_with_its_reservation() {
    if !util::rt_allowed(
        "deadline_lane_runs_under_sched_deadline_with_its_reservation",
        99,
    ) {
        return;
    }
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("ctl", Policy::Deadline, 90);
    g.threads = 2;
    g.deadline = Some(Deadline {
        runtime_us: 200,
        deadline_us: 1000,
        period_us: 1000,
    });
    g.handlers.push(HandlerConfig::Timer {
        interval_us: 1000,
        count: 1,
        distance_us: 0,
    });
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
    })
    .unwrap();
    rt.start().unwrap();
    let want = Sched::Deadline {
        runtime_ns: 200_000,
        deadline_ns: 1_000_000,
        period_ns: 1_000_000,
    };
    for (_, _, tid) in rt.thread_ids() {
        assert_eq!(lfrt::os::read_back(tid).unwrap(), want);
    }
    assert!(util::wait_until(5, || rt.metrics()[0].dispatched >= 20));
    let m = rt.shutdown().unwrap();
    assert_eq!(
        m[0].kernel_sched,
        vec!["deadline runtime 200 us"; 2],
        "{:?}",
        m[0]
    );
}

/// Issue #20 defect 6: a process affinity narrowed after validation (as `taskset` narrows it)
/// makes the kernel refuse SCHED_DEADLINE with EPERM, which was reported as a missing
/// CAP_SYS_NICE. The error now says the affinity is narrowed, and asks for no privilege.
#[test]
fn a_narrowed_affinity_is_not_reported_as_a_missing_privilege() {
    let test = "a_narrowed_affinity_is_not_reported_as_a_missing_privilege";
    if !util::rt_allowed(test, 99) || !util::two_cpus(test) {
        return;
    }
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("ctl", Policy::Deadline, 90);
    g.threads = 1;
    g.deadline = Some(Deadline {
        runtime_us: 200,
        deadline_us: 1000,
        period_us: 1000,
    });
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::Required,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
    })
    .unwrap();
    // The pool threads inherit the affinity of the thread that starts them.
    let all = lfrt::os::available_cpus();
    let started = std::thread::spawn(move || {
        lfrt::os::set_current_affinity(&all[..1]).unwrap();
        rt.start().map(drop).map_err(|e| e.to_string())
    })
    .join()
    .unwrap();
    let e = started.expect_err("SCHED_DEADLINE under a narrowed affinity");
    assert!(
        e.contains("affinity is narrowed") && !e.contains("CAP_SYS_NICE"),
        "{e}"
    );
}

/// A handler that panics in `interest()` (after a good `handle`) or in its `Drop`.
struct Fragile {
    n: Notifier,
    in_interest: Arc<AtomicBool>,
    in_drop: bool,
}
impl EventHandler for Fragile {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn interest(&self) -> Interest {
        if self.in_interest.load(SeqCst) {
            panic!("interest exploded");
        }
        Interest::READABLE
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.n.take();
        Disposition::Rearm
    }
}
impl Drop for Fragile {
    fn drop(&mut self) {
        if self.in_drop {
            panic!("drop exploded");
        }
    }
}

/// Hardening item 9: a panic in a handler's `interest()` or `Drop` killed its pool thread.
/// Both are now caught and counted like a panic in `handle()`; the handle is removed and the
/// one-thread pool keeps serving its other handles.
#[test]
fn panics_in_interest_and_drop_do_not_kill_the_pool_thread() {
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("p", Policy::Fifo, 10);
    g.threads = 1;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let reg = rt.lane("p").unwrap().registry();
    rt.start().unwrap();
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {})); // keep the expected panics quiet
                                            // The handlers own their Notifiers; the test writes to a duplicate of each eventfd.
    let flag = Arc::new(AtomicBool::new(false));
    let a = Notifier::new().unwrap();
    let a_fd = a.as_fd().try_clone_to_owned().unwrap();
    reg.register(Box::new(Fragile {
        n: a,
        in_interest: flag.clone(),
        in_drop: true,
    }))
    .unwrap();
    flag.store(true, SeqCst); // the next re-arm panics in interest(), then Drop panics
    nix_write(&a_fd);
    let before = rt.metrics()[0].dispatched;
    assert!(util::wait_until(10, || rt.metrics()[0].handles == 0));
    // The same (only) thread still serves a healthy handle.
    let b = Notifier::new().unwrap();
    let b_fd = b.as_fd().try_clone_to_owned().unwrap();
    reg.register(Box::new(Fragile {
        n: b,
        in_interest: Arc::new(AtomicBool::new(false)),
        in_drop: false,
    }))
    .unwrap();
    for _ in 0..3 {
        let d = rt.metrics()[0].dispatched;
        nix_write(&b_fd);
        assert!(util::wait_until(10, || rt.metrics()[0].dispatched > d));
    }
    std::panic::set_hook(prev);
    let m = rt.shutdown().unwrap();
    assert!(m[0].dispatched >= before + 3);
    assert_eq!(m[0].handler_panics, 2, "interest() and Drop: {:?}", m[0]);
}

fn nix_write(fd: &std::os::fd::OwnedFd) {
    nix::unistd::write(fd, &1u64.to_ne_bytes()).unwrap();
}

/// Hardening item 7: without RT privilege, best-effort lanes used to run at SCHED_OTHER while
/// the summary still printed their FIFO priorities. Now each lane falls back to a nice value
/// that keeps the lanes' order, the summary and JSON show what the kernel reports, and a
/// warning says the lanes are not isolated.
#[test]
fn best_effort_without_privilege_reports_the_kernels_policy_and_keeps_lane_order() {
    let test = "best_effort_without_privilege_reports_the_kernels_policy_and_keeps_lane_order";
    if !util::tools_installed(test, &["prlimit", "setpriv"]) {
        return;
    }
    let _l = util::rt_lock();
    let dir = std::env::temp_dir().join(format!("lfrt-be-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("be.json");
    let out = std::process::Command::new("prlimit")
        .args([
            "--rtprio=0:0",
            "setpriv",
            "--inh-caps=-sys_nice",
            "--bounding-set=-sys_nice",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_lfrt"))
        .args(["run", "--duration", "300ms", "--json"])
        .arg(&json)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/default.toml"
        ))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("NOT isolated"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let sched = |name: &str| -> Vec<String> {
        v["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| &g["metrics"])
            .find(|m| m["name"] == name)
            .unwrap()["kernel_sched"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let nice = |s: &str| -> i32 {
        s.strip_prefix("other nice ")
            .unwrap_or_else(|| panic!("{s}"))
            .parse()
            .unwrap()
    };
    let (control, bulk) = (sched("control"), sched("bulk"));
    assert_eq!(control.len(), 2, "{control:?}");
    // control (priority 80) stays ahead of bulk (priority 20).
    assert!(
        control
            .iter()
            .all(|c| bulk.iter().all(|b| nice(c) < nice(b))),
        "{control:?} vs {bulk:?}"
    );
    assert!(stdout.contains("other nice"), "{stdout}");
}

#[test]
fn shutdown_under_full_load_returns_and_closes_fds() {
    let _l = util::rt_lock();
    let port = {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut g = LaneConfig::new("busy", Policy::Fifo, 10);
    g.threads = 3;
    g.handlers.push(HandlerConfig::UdpEcho { bind: addr });
    // 200 µs of CPU per datagram (the `lfrt` command's `work_us`): every thread stays busy.
    let mut rt = Runtime::with_echo_work(cfg(vec![g]), |_| 200).unwrap();
    rt.start().unwrap();
    let stop = Arc::new(AtomicU64::new(0));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let c = UdpSocket::bind("127.0.0.1:0").unwrap();
            c.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 64];
            while stop.load(SeqCst) == 0 {
                for _ in 0..64 {
                    let _ = c.send_to(&[1u8; 32], addr);
                }
                while c.recv_from(&mut buf).is_ok() {}
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    assert!(
        util::wait_until(10, || rt.metrics()[0].dispatched > 200),
        "never got busy"
    );
    let m = rt.shutdown().expect("every pool thread returned");
    assert!(m[0].dispatched > 200);
    assert_eq!(m[0].handles, 0, "handles left open after shutdown");
    // The socket was closed: the port can be bound again.
    UdpSocket::bind(addr).expect("fd closed at shutdown");
    stop.store(1, SeqCst);
    flood.join().unwrap();
}

/// `Runtime::with_echo_work` (how `lfrt run` applies the command's `work_us`) gives each
/// built-in echo the busy work of its own section: a `[[lane.handler]]` by lane and handler
/// index, a `[[band]]` by band index; an echo without any answers at once.
#[test]
fn echo_work_reaches_the_echo_of_its_section() {
    let _l = util::rt_lock();
    let free = || {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let (slow, quick, band) = (free(), free(), free());
    let mut g = LaneConfig::new("w", Policy::Other, 0);
    g.threads = 2;
    g.handlers.push(HandlerConfig::UdpEcho { bind: quick });
    g.handlers.push(HandlerConfig::UdpEcho { bind: slow });
    let mut c = cfg(vec![g]);
    c.bands.push(BandConfig {
        bind: band,
        classify: BandClassify::Dscp([("default".to_string(), "w".to_string())].into()),
        handler: BandHandler::UdpEcho,
    });
    const WORK_US: u64 = 60_000;
    let mut rt = Runtime::with_echo_work(c, |at| match at {
        Section::Handler {
            lane: 0,
            handler: 1,
        }
        | Section::Band(0) => WORK_US,
        _ => 0,
    })
    .unwrap();
    rt.start().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let round_trip = |to| {
        let t0 = std::time::Instant::now();
        client.send_to(b"w", to).unwrap();
        let mut buf = [0u8; 8];
        let (n, from) = client.recv_from(&mut buf).expect("an echo");
        assert_eq!((&buf[..n], from), (&b"w"[..], to));
        t0.elapsed()
    };
    // Thread CPU time is never more than the wall-clock time it took.
    let at_least = Duration::from_micros(WORK_US);
    let (s, b, q) = (round_trip(slow), round_trip(band), round_trip(quick));
    rt.shutdown().unwrap();
    assert!(s >= at_least, "handler[1]: {s:?}");
    assert!(b >= at_least, "band[0]: {b:?}");
    assert!(q < at_least, "handler[0] burns nothing: {q:?}");
}

/// Counts its own eventfd; a dispatch that finds the eventfd empty would mean an event of
/// another (removed) handle reached this handler through a reused slot.
struct StrictCounter {
    n: Notifier,
    total: Arc<AtomicU64>,
    empty: Arc<AtomicU64>,
}

impl EventHandler for StrictCounter {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, _ctx: &mut Context) -> Disposition {
        match self.n.take().unwrap_or(0) {
            0 => self.empty.fetch_add(1, SeqCst),
            k => self.total.fetch_add(k, SeqCst),
        };
        Disposition::Rearm
    }
}

#[test]
fn handles_added_and_removed_while_running_never_see_stale_events() {
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("churn", Policy::Fifo, 10);
    g.threads = 3;
    g.max_handles = 4;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    rt.start().unwrap();
    let reg = rt.lane("churn").unwrap().registry();
    let empty = Arc::new(AtomicU64::new(0));
    for round in 0..300u64 {
        let total = Arc::new(AtomicU64::new(0));
        let n = Notifier::new().unwrap();
        let w = writer_for(&n);
        let tok = reg
            .register(Box::new(StrictCounter {
                n,
                total: total.clone(),
                empty: empty.clone(),
            }))
            .unwrap();
        w.write(round + 1);
        assert!(
            util::wait_until(10, || total.load(SeqCst) == round + 1),
            "round {round}"
        );
        // Leave readiness pending on the handle while removing it: its slot is reused by the
        // next round (4 slots, 300 rounds) and must not hand this event to the new handler.
        w.write(7);
        assert!(reg.deregister(tok));
        assert!(!reg.deregister(tok), "double deregistration");
    }
    let m = rt.shutdown().unwrap();
    assert_eq!(
        empty.load(SeqCst),
        0,
        "a handler was dispatched for another handle's event"
    );
    assert_eq!(m[0].handles, 0);
}

#[test]
fn invalid_configs_start_nothing() {
    // Each bad setting is rejected by Runtime::new with its own field, before any thread runs.
    let held = UdpSocket::bind("127.0.0.1:0").unwrap();
    let base = || LaneConfig::new("a", Policy::Fifo, 20);
    type Mutation = Box<dyn Fn(&mut RuntimeConfig)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("lane[0].priority", Box::new(|c| c.lanes[0].priority = 0)),
        (
            "lane[1].priority",
            Box::new(|c| c.lanes.push(LaneConfig::new("b", Policy::Fifo, 20))),
        ),
        (
            "lane[0].cpus",
            Box::new(|c| c.lanes[0].cpus = Some(vec![4095])),
        ),
        ("lane[0].threads", Box::new(|c| c.lanes[0].threads = 0)),
        (
            "lane[0].handler[0].bind",
            Box::new({
                let a = held.local_addr().unwrap();
                move |c| c.lanes[0].handlers.push(HandlerConfig::UdpEcho { bind: a })
            }),
        ),
    ];
    let before = std::fs::read_dir("/proc/self/task").unwrap().count();
    for (field, mutate) in cases {
        let mut c = cfg(vec![base()]);
        mutate(&mut c);
        match Runtime::new(c) {
            Err(Error::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: expected a config error, got {other:?}"),
        }
    }
    assert_eq!(
        std::fs::read_dir("/proc/self/task").unwrap().count(),
        before,
        "a thread was left running"
    );
}

/// Blocks in its handler until released (without spinning): the low lane's only thread is
/// occupied for as long as the test wants.
struct Gate {
    n: Notifier,
    entered: Arc<AtomicU64>,
    release: Arc<AtomicU64>,
}

impl EventHandler for Gate {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.n.take();
        self.entered.store(1, SeqCst);
        while self.release.load(SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Disposition::Rearm
    }
}

#[test]
fn a_busy_low_lane_does_not_hold_up_the_high_lane() {
    let _l = util::rt_lock();
    let mut high = LaneConfig::new("high", Policy::Fifo, 30);
    high.threads = 1;
    let mut low = LaneConfig::new("low", Policy::Fifo, 10);
    low.threads = 1;
    let mut rt = Runtime::new(cfg(vec![high, low])).unwrap();
    let (entered, release) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let gate = Notifier::new().unwrap();
    let gate_w = writer_for(&gate);
    rt.lane("low")
        .unwrap()
        .registry()
        .register(Box::new(Gate {
            n: gate,
            entered: entered.clone(),
            release: release.clone(),
        }))
        .unwrap();
    let total = Arc::new(AtomicU64::new(0));
    let hi = Notifier::new().unwrap();
    let hi_w = writer_for(&hi);
    rt.lane("high")
        .unwrap()
        .registry()
        .register(Box::new(Counter {
            n: hi,
            total: total.clone(),
        }))
        .unwrap();
    rt.start().unwrap();
    gate_w.write(1);
    assert!(util::wait_until(10, || entered.load(SeqCst) == 1));
    // The low lane's only thread is inside its handler; the high lane still serves every event.
    for k in 1..=100 {
        hi_w.write(1);
        assert!(
            util::wait_until(10, || total.load(SeqCst) == k),
            "high lane stalled at {k}"
        );
    }
    let low_during = rt.metrics()[1].dispatched;
    release.store(1, SeqCst);
    let m = rt.shutdown().unwrap();
    assert_eq!(low_during, 0, "the low handler had not returned yet");
    assert_eq!(m[1].dispatched, 1);
}

/// On its first event, deregisters its own handle from inside `handle` (twice) and records
/// what the calls returned and whether it was still alive; counts its drops.
struct SelfRemover {
    n: Notifier,
    handled: Arc<AtomicU64>,
    /// Bit 0: first deregister returned true; bit 1: the second returned true; bit 2: the
    /// handler had been dropped when `handle` returned (it must not be); bit 7: recorded.
    outcome: Arc<AtomicU8>,
    dropped: Arc<AtomicU64>,
}

impl EventHandler for SelfRemover {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, e: &Event, ctx: &mut Context) -> Disposition {
        let _ = self.n.take();
        self.handled.fetch_add(1, SeqCst);
        let first = ctx.registry().deregister(e.token());
        let second = ctx.registry().deregister(e.token());
        let dropped = self.dropped.load(SeqCst) != 0;
        self.outcome.store(
            0x80 | u8::from(first) | u8::from(second) << 1 | u8::from(dropped) << 2,
            SeqCst,
        );
        Disposition::Rearm
    }
}

impl Drop for SelfRemover {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, SeqCst);
    }
}

/// A handler that deregisters its own handle inside `handle` neither hangs its thread (the
/// slot lock it runs under is not taken again) nor panics: the call returns true, a second
/// call false, and the handle is removed when `handle` returns although it asked to re-arm.
#[test]
fn a_handler_deregistering_its_own_handle_is_removed_after_it_returns() {
    let _l = util::rt_lock();
    let mut g = LaneConfig::new("selfrm", Policy::Fifo, 10);
    g.threads = 2;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let reg = rt.lane("selfrm").unwrap().registry();
    let (handled, outcome, dropped) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU8::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let n = Notifier::new().unwrap();
    let w = writer_for(&n);
    let token = reg
        .register(Box::new(SelfRemover {
            n,
            handled: handled.clone(),
            outcome: outcome.clone(),
            dropped: dropped.clone(),
        }))
        .unwrap();
    rt.start().unwrap();
    w.write(1);
    assert!(
        util::wait_until(10, || outcome.load(SeqCst) != 0),
        "the handler never returned from deregistering its own handle"
    );
    assert_eq!(
        outcome.load(SeqCst),
        0x80 | 0b001,
        "first deregister true, second false, handler alive until it returned"
    );
    assert!(
        util::wait_until(10, || dropped.load(SeqCst) == 1 && reg.is_empty()),
        "the handle was not removed after its handler returned"
    );
    assert!(!reg.deregister(token), "already removed");
    w.write(1);
    std::thread::sleep(Duration::from_millis(20));
    let m = rt.shutdown().unwrap();
    assert_eq!(handled.load(SeqCst), 1, "dispatched after its removal");
    assert_eq!(m[0].handler_panics, 0, "{:?}", m[0]);
    assert_eq!(
        (m[0].handles_closed, m[0].handles_closed_by_handler),
        (1, 0)
    );
    assert_eq!(dropped.load(SeqCst), 1);
}

/// Names (`comm`) of this process's lfrt threads: pool threads (`lf-<lane>-<n>`) and helpers
/// (`lfrt-collector`, `lfrt-watchdog`). Every test that runs a runtime holds `rt_lock`, so
/// under it these can only belong to the calling test. A thread names itself when it starts,
/// so one spawned a moment ago may not show yet: the tests compare the thread count too.
fn lfrt_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .filter(|n| n.starts_with("lf-") || n.starts_with("lfrt-"))
        .collect();
    names.sort();
    names
}

/// Threads of this process (the test harness runs one test at a time: `--test-threads=1`).
fn tasks() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// `Runtime::new` starts no thread (not even the telemetry collector); a runtime that never
/// started shuts down and drops cleanly, and cannot be started after its shutdown.
#[test]
fn new_starts_no_thread() {
    let _l = util::rt_lock();
    assert_eq!(lfrt_threads(), Vec::<String>::new(), "left by another test");
    let before = tasks();
    let mut g = LaneConfig::new("idle", Policy::Fifo, 10);
    g.threads = 2;
    g.budget_us = Some(1000);
    g.handlers.push(HandlerConfig::Timer {
        interval_us: 1000,
        count: 1,
        distance_us: 0,
    });
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    assert_eq!(lfrt_threads(), Vec::<String>::new());
    assert_eq!(tasks(), before, "Runtime::new started a thread");
    let m = rt.shutdown().unwrap();
    assert_eq!((m[0].dispatched, m[0].handles), (0, 0));
    assert!(
        matches!(rt.start(), Err(Error::State(_))),
        "start after shutdown"
    );
    drop(rt);
    assert_eq!(tasks(), before);
}

/// A start that fails after its threads are running (here: the lane's only handle slot is
/// taken, so registering the built-in timer fails) stops every thread it started, pool
/// threads and helpers, before it returns the error.
#[test]
fn a_failed_start_leaves_no_thread_running() {
    let _l = util::rt_lock();
    assert_eq!(lfrt_threads(), Vec::<String>::new(), "left by another test");
    let before = tasks();
    let mut g = LaneConfig::new("startfail", Policy::Fifo, 10);
    g.threads = 2;
    g.max_handles = 1;
    g.budget_us = Some(1000); // so the watchdog runs too
    g.handlers.push(HandlerConfig::Timer {
        interval_us: 1000,
        count: 1,
        distance_us: 0,
    });
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    rt.lane("startfail")
        .unwrap()
        .registry()
        .register(Box::new(Counter {
            n: Notifier::new().unwrap(),
            total: Arc::new(AtomicU64::new(0)),
        }))
        .unwrap();
    match rt.start() {
        Err(Error::TooManyHandles { max: 1 }) => {}
        other => panic!("expected TooManyHandles, got {other:?}"),
    }
    assert_eq!(
        lfrt_threads(),
        Vec::<String>::new(),
        "threads left running after a failed start"
    );
    assert_eq!(tasks(), before, "threads left running after a failed start");
    assert!(matches!(rt.start(), Err(Error::State(_))));
    assert_eq!(rt.metrics()[0].handles, 0, "handles closed as by shutdown");
}

/// Deferred promotion keeps the leader role only after a wait that took everything that was
/// ready, for handlers that ran quickly before (`engine/dispatch.rs`). A few ready handles, each
/// run once before: the leader takes them all in one wait, keeps its role through them, and
/// wakes nobody (the watchdog would relieve it only after 1 s). More ready handles than one
/// wait takes (`MAX_BATCH`, 16): the lane has more than one thread's work, so the leader
/// promotes its follower at once.
#[test]
fn a_leader_defers_its_promotion_only_after_a_wait_that_drained_the_set() {
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "a_leader_defers_its_promotion_only_after_a_wait_that_drained_the_set",
        20,
    ) {
        return;
    }
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    for (handles, drained) in [(3u64, true), (40, false)] {
        let mut g = LaneConfig::new("defer", Policy::Fifo, 10);
        g.threads = 2;
        g.cpus = Some(vec![cpu]);
        g.promote_after_us = 1_000_000;
        let mut rt = Runtime::new(cfg(vec![g])).unwrap();
        let reg = rt.lane("defer").unwrap().registry();
        let total = Arc::new(AtomicU64::new(0));
        let writers: Vec<EfdWriter> = (0..handles)
            .map(|_| {
                let n = Notifier::new().unwrap();
                let w = writer_for(&n);
                let c = Counter {
                    n,
                    total: total.clone(),
                };
                reg.register(Box::new(c)).unwrap();
                w
            })
            .collect();
        rt.start().unwrap();
        // Every handle runs once first: a handle with no history counts as long work, which
        // is promoted at once.
        for (i, w) in writers.iter().enumerate() {
            w.write(1);
            assert!(util::wait_until(10, || total.load(SeqCst) == i as u64 + 1));
        }
        // Once a leader waits and its follower is queued, every handle becomes ready, written
        // by a thread above the lane's priority on the lane's only CPU: the leader runs again
        // only after the last write, and its wait then sees every handle at once.
        assert!(util::wait_until(10, || {
            let m = &rt.metrics()[0];
            m.leader_present && m.followers == 1
        }));
        let before = rt.metrics().remove(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                lfrt::os::set_current_affinity(&[cpu]).unwrap();
                lfrt::os::set_current_sched(Sched::Fifo(20)).unwrap();
                for w in &writers {
                    w.write(1);
                }
            });
        });
        assert!(
            util::wait_until(10, || total.load(SeqCst) == 2 * handles),
            "{handles} handles: {} of them dispatched",
            total.load(SeqCst) - handles
        );
        let mut m = rt.metrics().remove(0);
        rt.shutdown().unwrap();
        m.promotions -= before.promotions;
        m.promotions_deferred -= before.promotions_deferred;
        if drained {
            assert_eq!(m.promotions, 0, "{handles} handles: {m:?}");
            assert_eq!(m.promotions_deferred, handles, "{handles} handles: {m:?}");
            assert_eq!(m.deferred_takeovers, 0, "{handles} handles: {m:?}");
        } else {
            assert!(m.promotions > 0, "{handles} handles: {m:?}");
        }
    }
}

/// Counts what it reads from its eventfd, and says it drained it (one read empties an eventfd)
/// if `drains`.
struct Reader {
    n: Notifier,
    total: Arc<AtomicU64>,
    drains: bool,
}

impl EventHandler for Reader {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        self.total.fetch_add(self.n.take().unwrap_or(0), SeqCst);
        if self.drains {
            ctx.set_drained();
        }
        Disposition::Rearm
    }
}

/// Handles are edge-triggered and stay armed: a handler that says it drained its source is kept
/// with no system call (`rearm_checks` counts every `epoll_ctl` a dispatch makes), over 2,000
/// events; one that does not is re-checked once per event, as before.
#[test]
fn a_handler_that_drains_costs_no_epoll_ctl_per_event() {
    let _l = util::rt_lock();
    if !util::rt_allowed("a_handler_that_drains_costs_no_epoll_ctl_per_event", 20) {
        return;
    }
    const EVENTS: u64 = 2_000;
    for drains in [true, false] {
        let mut g = LaneConfig::new("et", Policy::Fifo, 10);
        g.threads = 2;
        let mut rt = Runtime::new(cfg(vec![g])).unwrap();
        let total = Arc::new(AtomicU64::new(0));
        let n = Notifier::new().unwrap();
        let w = writer_for(&n);
        rt.lane("et")
            .unwrap()
            .registry()
            .register(Box::new(Reader {
                n,
                total: total.clone(),
                drains,
            }))
            .unwrap();
        rt.start().unwrap();
        for i in 1..=EVENTS {
            w.write(1);
            assert!(
                util::wait_until(10, || total.load(SeqCst) == i),
                "event {i}"
            );
        }
        let m = rt.metrics().remove(0);
        rt.shutdown().unwrap();
        assert_eq!(m.dispatched, EVENTS, "drains={drains}: {m:?}");
        if drains {
            assert_eq!(m.rearm_checks, 0, "an epoll_ctl per event: {m:?}");
        } else {
            assert_eq!(m.rearm_checks, EVENTS, "{m:?}");
        }
    }
}

/// Reads one datagram per event and does not say it drained: the re-check after each run
/// reports the socket again while datagrams are left, so a burst is served whole (the
/// level-triggered behaviour a handler written before edge-triggered handles expects).
struct OneAtATime {
    sock: UdpSocket,
    got: Arc<AtomicU64>,
}

impl EventHandler for OneAtATime {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        if self.sock.recv(ctx.buffer()).is_ok() {
            self.got.fetch_add(1, SeqCst);
        }
        Disposition::Rearm
    }
}

#[test]
fn input_a_handler_leaves_is_reported_again() {
    let _l = util::rt_lock();
    if !util::rt_allowed("input_a_handler_leaves_is_reported_again", 20) {
        return;
    }
    const BURST: u64 = 200;
    let mut g = LaneConfig::new("level", Policy::Fifo, 10);
    g.threads = 2;
    g.buffer_bytes = 1024;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let addr = sock.local_addr().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    rt.lane("level")
        .unwrap()
        .registry()
        .register(Box::new(OneAtATime {
            sock,
            got: got.clone(),
        }))
        .unwrap();
    rt.start().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..BURST {
        client.send_to(&[7; 32], addr).unwrap();
    }
    assert!(
        util::wait_until(10, || got.load(SeqCst) == BURST),
        "{} of {BURST} datagrams served",
        got.load(SeqCst)
    );
    rt.shutdown().unwrap();
}

/// Blocks, on its first event after `armed`, until the other handler has run (bounded), then
/// records that it did.
struct Blocker {
    n: Notifier,
    armed: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    other_ran: Arc<AtomicU64>,
    saw_other: Arc<AtomicBool>,
}

impl EventHandler for Blocker {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        let _ = self.n.take();
        ctx.set_drained();
        if self.armed.swap(false, SeqCst) {
            self.running.store(true, SeqCst);
            let saw = util::wait_until(5, || self.other_ran.load(SeqCst) > 1);
            self.saw_other.store(saw, SeqCst);
            self.running.store(false, SeqCst);
        }
        Disposition::Rearm
    }
}

/// Deferred promotion's bound: a leader keeps its role for a handler that was quick before
/// (no follower woken); this time the handler blocks until a second handle of its lane has
/// been served. Only the idle follower can serve it, and nothing woke it: the watchdog must
/// relieve the leader once `promote_after_us` has passed, and the follower takes the role and
/// the second handle. Without the relief the first handler waits its full 5 s and fails.
#[test]
fn a_leader_that_keeps_its_role_too_long_is_relieved() {
    let _l = util::rt_lock();
    if !util::rt_allowed("a_leader_that_keeps_its_role_too_long_is_relieved", 20) {
        return;
    }
    let mut g = LaneConfig::new("relief", Policy::Fifo, 10);
    g.threads = 2;
    g.promote_after_us = 2_000;
    let mut rt = Runtime::new(cfg(vec![g])).unwrap();
    let reg = rt.lane("relief").unwrap().registry();
    let (a, b) = (Notifier::new().unwrap(), Notifier::new().unwrap());
    let (wa, wb) = (writer_for(&a), writer_for(&b));
    let armed = Arc::new(AtomicBool::new(false));
    let running = Arc::new(AtomicBool::new(false));
    let saw = Arc::new(AtomicBool::new(false));
    let other_ran = Arc::new(AtomicU64::new(0));
    reg.register(Box::new(Blocker {
        n: a,
        armed: armed.clone(),
        running: running.clone(),
        other_ran: other_ran.clone(),
        saw_other: saw.clone(),
    }))
    .unwrap();
    reg.register(Box::new(Reader {
        n: b,
        total: other_ran.clone(),
        drains: true,
    }))
    .unwrap();
    rt.start().unwrap();
    // Both handlers run once, quickly: they have a history of quick work.
    wa.write(1);
    wb.write(1);
    assert!(util::wait_until(10, || other_ran.load(SeqCst) == 1));
    assert!(util::wait_until(10, || {
        let m = &rt.metrics()[0];
        m.dispatched == 2 && m.leader_present && m.followers == 1
    }));
    armed.store(true, SeqCst);
    wa.write(1);
    assert!(util::wait_until(10, || running.load(SeqCst)));
    wb.write(1);
    assert!(util::wait_until(10, || !running.load(SeqCst)));
    let m = rt.metrics().remove(0);
    rt.shutdown().unwrap();
    assert!(
        saw.load(SeqCst),
        "the second handle waited for the kept leader: {m:?}"
    );
    assert!(m.deferred_takeovers >= 1, "{m:?}");
}
