//! Lane borrowing (issue 15 §2, `src/engine/borrow.rs`): a busy lane's events are dispatched by idle
//! threads of the lower lane it names in `borrow_from`, at the borrowing lane's priority.
//!
//! Every test holds the high lane's only thread in a [`Blocker`] handler (released by the test),
//! so every event that reaches another handler of that lane while it is held can only have been
//! dispatched by a lent thread: the checks are on what happened, never on how long it took.
//! Run one at a time: `cargo test --release --test borrow -- --test-threads=1`.

mod util;

use lfrt::os::Sched;
use lfrt::*;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const HIGH: u8 = 60;
const LOW: u8 = 20;

/// A runtime with a 1-thread `high` lane (FIFO 60) and a `low` lane (FIFO 20) of
/// `low_threads`; `high` borrows from `low` up to `max_borrowed` threads if given.
/// `rt` is the real-time mode.
fn lanes(rt: RtMode, low_threads: usize, max_borrowed: Option<usize>) -> Runtime {
    let mut high = LaneConfig::new("high", Policy::Fifo, HIGH);
    high.threads = 1;
    high.buffer_bytes = 2048;
    if let Some(m) = max_borrowed {
        high.borrow_from = vec!["low".into()];
        high.max_borrowed = Some(m);
    }
    let mut low = LaneConfig::new("low", Policy::Fifo, LOW);
    low.threads = low_threads;
    low.buffer_bytes = 2048;
    Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt,
        lock_memory: false,
        lanes: vec![high, low],
        bands: Vec::new(),
    })
    .unwrap()
}

/// Holds its thread from its first event until `release` is set (at most 20 s), sleeping.
struct Blocker {
    rx: UnixDatagram,
    inside: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

impl EventHandler for Blocker {
    fn source(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let mut b = [0u8; 8];
        while self.rx.recv(&mut b).is_ok() {}
        self.inside.store(true, SeqCst);
        for _ in 0..20_000 {
            if self.release.load(SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inside.store(false, SeqCst);
        Disposition::Rearm
    }
}

/// What the probes saw, shared by all of them.
#[derive(Default)]
struct Seen {
    /// Per sequence number: how many times it was dispatched.
    count: Vec<AtomicU32>,
    /// Lent threads inside a probe now, and the most ever.
    lent_inside: AtomicU32,
    lent_max: AtomicU32,
    /// Dispatches by a thread of the high lane itself, and by a lent thread.
    own: AtomicU64,
    lent: AtomicU64,
    /// A lent dispatch that read back a policy other than the high lane's.
    wrong_sched: Mutex<Option<Sched>>,
    /// Tids of the threads that dispatched lent events.
    lent_tids: Mutex<Vec<i32>>,
    /// Per lent tid, the `Context::thread_index` its lent dispatches saw.
    lent_indices: Mutex<Vec<(i32, usize)>>,
    /// A handle was found dispatched on two threads at once, or a lent thread's context named
    /// another lane's priority (recorded, not asserted: a handler's panic is caught).
    overlap: AtomicBool,
    wrong_context: AtomicBool,
}

/// Reads `u32` sequence numbers until the socket is empty, recording each, the dispatching
/// thread's policy read back from the kernel, and how many lent threads are inside at once.
struct Probe {
    rx: UnixDatagram,
    seen: Arc<Seen>,
    high_tid: Arc<AtomicI32>,
    busy: AtomicBool,
}

impl EventHandler for Probe {
    fn source(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        let s = &self.seen;
        if self.busy.swap(true, SeqCst) {
            s.overlap.store(true, SeqCst);
        }
        let tid = lfrt::os::gettid();
        let lent = tid != self.high_tid.load(SeqCst);
        if lent {
            let now = s.lent_inside.fetch_add(1, SeqCst) + 1;
            s.lent_max.fetch_max(now, SeqCst);
            let sched = lfrt::os::read_back(0).unwrap();
            if sched != Sched::Fifo(HIGH) {
                *s.wrong_sched.lock().unwrap() = Some(sched);
            }
            if ctx.priority() != HIGH || ctx.lane() != 0 {
                s.wrong_context.store(true, SeqCst);
            }
            let mut t = s.lent_tids.lock().unwrap();
            if !t.contains(&tid) {
                t.push(tid);
            }
            let mut i = s.lent_indices.lock().unwrap();
            if !i.contains(&(tid, ctx.thread_index())) {
                i.push((tid, ctx.thread_index()));
            }
        }
        let mut b = [0u8; 4];
        while let Ok(4) = self.rx.recv(&mut b) {
            s.count[u32::from_ne_bytes(b) as usize].fetch_add(1, SeqCst);
            if lent {
                s.lent.fetch_add(1, SeqCst);
            } else {
                s.own.fetch_add(1, SeqCst);
            }
        }
        if lent {
            s.lent_inside.fetch_sub(1, SeqCst);
        }
        self.busy.store(false, SeqCst);
        Disposition::Rearm
    }
}

/// The running test rig: the runtime, the blocker's sender and flags, the probes' senders.
struct Rig {
    rt: Runtime,
    block_tx: UnixDatagram,
    inside: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
    probes: Vec<UnixDatagram>,
    seen: Arc<Seen>,
}

fn rig(low_threads: usize, max_borrowed: Option<usize>, probes: usize, events: usize) -> Rig {
    rig_in(RtMode::Required, low_threads, max_borrowed, probes, events)
}

/// [`rig`] in real-time mode `rt`.
fn rig_in(
    rt: RtMode,
    low_threads: usize,
    max_borrowed: Option<usize>,
    probes: usize,
    events: usize,
) -> Rig {
    let mut rt = lanes(rt, low_threads, max_borrowed);
    let reg = rt.lane("high").unwrap().registry();
    let (block_tx, rx) = UnixDatagram::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let (inside, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    reg.register(Box::new(Blocker {
        rx,
        inside: inside.clone(),
        release: release.clone(),
    }))
    .unwrap();
    let seen = Arc::new(Seen {
        count: (0..events).map(|_| AtomicU32::new(0)).collect(),
        ..Seen::default()
    });
    let high_tid = Arc::new(AtomicI32::new(0));
    let mut txs = Vec::new();
    for _ in 0..probes {
        let (tx, rx) = UnixDatagram::pair().unwrap();
        rx.set_nonblocking(true).unwrap();
        tx.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        reg.register(Box::new(Probe {
            rx,
            seen: seen.clone(),
            high_tid: high_tid.clone(),
            busy: AtomicBool::new(false),
        }))
        .unwrap();
        txs.push(tx);
    }
    rt.start().unwrap();
    let tid = rt.thread_ids().iter().find(|t| t.0 == 0).unwrap().2;
    high_tid.store(tid, SeqCst);
    Rig {
        rt,
        block_tx,
        inside,
        release,
        probes: txs,
        seen,
    }
}

impl Rig {
    /// Occupies the high lane's only thread.
    fn block(&self) {
        self.block_tx.send(&[1]).unwrap();
        assert!(util::wait_until(10, || self.inside.load(SeqCst)));
    }

    fn unblock(&self) {
        self.release.store(true, SeqCst);
        assert!(util::wait_until(10, || !self.inside.load(SeqCst)));
    }

    /// Sends sequence numbers `range`, round robin over the probes (blocking when a socket's
    /// queue is full: nothing is dropped).
    fn send(&self, range: std::ops::Range<usize>) {
        for s in range {
            let tx = &self.probes[s % self.probes.len()];
            tx.send(&(s as u32).to_ne_bytes())
                .expect("send (a probe stalled)");
        }
    }

    /// What the handlers recorded and the final metrics: no overlap, the borrowing lane named
    /// in every lent context, no caught panic, every lent dispatch counted on both sides.
    fn check(&self, m: &[LaneMetrics]) {
        assert!(
            !self.seen.overlap.load(SeqCst),
            "a handle ran on two threads"
        );
        assert!(!self.seen.wrong_context.load(SeqCst));
        assert_eq!(*self.seen.wrong_sched.lock().unwrap(), None);
        assert_eq!((m[0].handler_panics, m[1].handler_panics), (0, 0));
        assert_eq!(m[0].borrowed_dispatches, m[1].lent_dispatches, "{m:?}");
        assert_eq!(m[1].restore_failures, 0);
    }

    fn handled(&self) -> u64 {
        self.seen.own.load(SeqCst) + self.seen.lent.load(SeqCst)
    }

    /// Every lent dispatch saw `Context::thread_index() = MAX_LANE_THREADS × (1 + lender's
    /// lane) + its own index in the lender` (the low lane is lane 1), which no thread of the
    /// borrowing lane (indices below its `threads`) has; distinct lent threads saw distinct
    /// indices. Returns the lent threads' own indices in the low lane.
    fn lent_indices_follow_the_formula(&self) -> Vec<usize> {
        let low: Vec<(usize, i32)> = self
            .rt
            .thread_ids()
            .iter()
            .filter(|t| t.0 == 1)
            .map(|t| (t.1, t.2))
            .collect();
        let high_threads = self.rt.metrics()[0].threads;
        let indices = self.seen.lent_indices.lock().unwrap().clone();
        assert!(!indices.is_empty(), "no lent dispatch");
        let mut own = Vec::new();
        for &(tid, index) in &indices {
            let &(i, _) = low
                .iter()
                .find(|l| l.1 == tid)
                .unwrap_or_else(|| panic!("lent tid {tid} is not a low-lane thread"));
            assert_eq!(
                index,
                MAX_LANE_THREADS * (1 + 1) + i,
                "lent thread lf-low-{i} (tid {tid}): {indices:?}"
            );
            assert!(
                index >= high_threads,
                "index {index} is a thread of the borrowing lane ({high_threads} threads)"
            );
            assert!(
                indices.iter().all(|&(t, x)| (t == tid) == (x == index)),
                "one index per lent thread: {indices:?}"
            );
            own.push(i);
        }
        own
    }

    /// The low lane's threads (tids) after they went back to their lane: each reads back its
    /// own policy.
    fn low_threads_back_at_own_priority(&self) {
        assert!(util::wait_until(10, || self.rt.metrics()[1].processing == 0));
        for (g, _, tid) in self.rt.thread_ids() {
            if g == 1 {
                assert_eq!(
                    lfrt::os::read_back(tid).unwrap(),
                    Sched::Fifo(LOW),
                    "tid {tid}"
                );
            }
        }
    }
}

/// The high lane's only thread is held; events on its handles are dispatched by a thread of the
/// low lane, which inside the handler runs at the high lane's policy and priority (read back
/// from the kernel) and afterwards at its own again. The metrics count each lent dispatch on
/// both sides.
#[test]
fn a_busy_lane_borrows_a_lower_thread_at_its_own_priority() {
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "a_busy_lane_borrows_a_lower_thread_at_its_own_priority",
        HIGH,
    ) {
        return;
    }
    const N: usize = 200;
    let r = rig(2, Some(1), 2, N);
    r.block();
    r.send(0..N);
    assert!(
        util::wait_until(20, || r.handled() == N as u64),
        "only {} of {N} events dispatched while the lane was busy",
        r.handled()
    );
    assert_eq!(r.seen.own.load(SeqCst), 0, "the held thread dispatched");
    assert_eq!(*r.seen.wrong_sched.lock().unwrap(), None);
    let low_tids: Vec<i32> =
        r.rt.thread_ids()
            .iter()
            .filter(|t| t.0 == 1)
            .map(|t| t.2)
            .collect();
    for t in r.seen.lent_tids.lock().unwrap().iter() {
        assert!(
            low_tids.contains(t),
            "lent tid {t} is not a low-lane thread"
        );
    }
    r.low_threads_back_at_own_priority();
    r.unblock();
    // Issue #20 defect 7: a lent dispatch's thread index aliased a thread of the high lane
    // (index 0 here); it is the lent thread's own, moved past every lane's own indices.
    r.lent_indices_follow_the_formula();
    let mut r = r;
    let m = r.rt.shutdown().unwrap();
    r.check(&m);
    assert!(r.seen.lent.load(SeqCst) == N as u64);
    assert!(m[0].borrowed_dispatches > 0 && m[0].borrowed_dispatches <= N as u64);
    assert!(r.seen.count.iter().all(|c| c.load(SeqCst) == 1));
}

/// Issue #20 defect 7, with the aliasing case forced: the low lane has one thread, so the lent
/// thread is `lf-low-0`, whose own index (0) is the index of the borrowing lane's only thread.
/// Its lent dispatches see `MAX_LANE_THREADS × 2 + 0` instead, never 0.
#[test]
fn a_lent_thread_0_never_shows_a_borrower_thread_index() {
    let _l = util::rt_lock();
    if !util::rt_allowed("a_lent_thread_0_never_shows_a_borrower_thread_index", HIGH) {
        return;
    }
    const N: usize = 50;
    let r = rig(1, Some(1), 1, N);
    r.block();
    r.send(0..N);
    assert!(
        util::wait_until(20, || r.handled() == N as u64),
        "only {} of {N} events dispatched while the lane was busy",
        r.handled()
    );
    assert_eq!(
        r.lent_indices_follow_the_formula(),
        vec![0],
        "lf-low-0 was lent"
    );
    assert!(r
        .seen
        .lent_indices
        .lock()
        .unwrap()
        .iter()
        .all(|&(_, index)| index != 0));
    r.unblock();
    let mut r = r;
    let m = r.rt.shutdown().unwrap();
    r.check(&m);
}

/// A burst on 8 handles while the lane is held, then another with its thread free: every
/// sequence number is dispatched exactly once, no handle ever runs on two threads at once, and
/// at no moment are more than `max_borrowed` lent threads inside the lane's handlers although
/// the low lane has 3 idle threads.
#[test]
fn max_borrowed_holds_and_every_event_is_dispatched_once_under_a_burst() {
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "max_borrowed_holds_and_every_event_is_dispatched_once_under_a_burst",
        HIGH,
    ) {
        return;
    }
    const N: usize = 20_000;
    let r = rig(3, Some(2), 8, N);
    r.block();
    r.send(0..N / 2);
    assert!(util::wait_until(30, || r.handled() == (N / 2) as u64));
    assert_eq!(r.seen.own.load(SeqCst), 0);
    r.unblock();
    r.send(N / 2..N);
    assert!(util::wait_until(30, || r.handled() == N as u64));
    let max = r.seen.lent_max.load(SeqCst);
    assert!((1..=2).contains(&max), "{max} lent threads inside at once");
    assert_eq!(*r.seen.wrong_sched.lock().unwrap(), None);
    let twice: Vec<usize> = (0..N)
        .filter(|&s| r.seen.count[s].load(SeqCst) != 1)
        .collect();
    assert!(twice.is_empty(), "not dispatched exactly once: {twice:?}");
    r.low_threads_back_at_own_priority();
    let mut r = r;
    let m = r.rt.shutdown().unwrap();
    r.check(&m);
}

/// Without `borrow_from` nothing is lent: events of a held lane wait for its own thread.
#[test]
fn borrowing_is_off_by_default() {
    let _l = util::rt_lock();
    if !util::rt_allowed("borrowing_is_off_by_default", HIGH) {
        return;
    }
    const N: usize = 8;
    let r = rig(2, None, 2, N);
    r.block();
    r.send(0..N);
    // The low lane is idle and could run them; give it the chance (not a timing assertion:
    // nothing may be dispatched however long this is).
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(r.handled(), 0);
    r.unblock();
    assert!(util::wait_until(10, || r.handled() == N as u64));
    assert_eq!(r.seen.lent.load(SeqCst), 0);
    let mut r = r;
    let m = r.rt.shutdown().unwrap();
    r.check(&m);
    assert_eq!((m[0].borrowed_dispatches, m[1].lent_dispatches), (0, 0));
}

/// Shutdown while the link is armed (the lane went vacant) and its thread is still held: the
/// borrower's shutdown event makes its epoll fd readable, which the armed link reports to a
/// lender; the lender sees the lane stopping and leaves it alone. Every thread returns.
#[test]
fn shutdown_with_a_borrow_armed() {
    let _l = util::rt_lock();
    if !util::rt_allowed("shutdown_with_a_borrow_armed", HIGH) {
        return;
    }
    let r = rig(2, Some(2), 1, 1);
    r.block();
    r.rt.stopper().stop();
    // The held handler finishes after the stop, as a running handler does.
    r.release.store(true, SeqCst);
    let mut r = r;
    let m = r.rt.shutdown_within(Duration::from_secs(10)).unwrap();
    r.check(&m);
    assert_eq!(m[0].borrowed_dispatches, 0, "{m:?}");
}

/// Takes CAP_SYS_NICE out of the calling thread's effective capability set (capabilities are
/// per thread: the rest of the test process keeps it). Threads this one creates inherit the
/// set. Returns false if the kernel refused.
fn drop_effective_cap_sys_nice() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_NICE: u32 = 23;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget writes two `Data` (version 3) into `d` and reads `h`; both are live.
    if unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) } != 0 {
        return false;
    }
    d[0].effective &= !(1 << CAP_SYS_NICE);
    // SAFETY: capset only reads `h` and the two `Data` in `d`.
    unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) == 0 }
}

/// A `tracing` writer into a shared buffer, installed once as the process's global subscriber,
/// so a test can read what pool threads logged.
#[derive(Clone)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Issue #20 defect 5: the kernel refuses a lent thread's raise to the borrower's priority (the
/// lender runs at FIFO 20 without CAP_SYS_NICE and with RLIMIT_RTPRIO 0, which keeps a
/// priority but forbids raising it; validation saw the privilege of the whole process). Every
/// lent dispatch is counted in the lender's `raise_failures`, and the failure is logged once,
/// not once per event.
#[test]
fn a_refused_raise_is_counted_and_said_once() {
    let test = "a_refused_raise_is_counted_and_said_once";
    let _l = util::rt_lock();
    if !util::rt_allowed(test, HIGH) {
        return;
    }
    if lfrt::os::RtPrivilege::probe().rlimit_rtprio >= u64::from(HIGH) {
        util::skip(test, "RLIMIT_RTPRIO allows the raise without CAP_SYS_NICE");
        return;
    }
    let log = LogBuf(Arc::new(Mutex::new(Vec::new())));
    let writer = log.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .expect("no other test of this file installs a subscriber");
    const N: usize = 40;
    let (m, lent) = std::thread::spawn(|| {
        // Taken with the capability; kept without it, and inherited by the pool threads.
        lfrt::os::set_current_sched(Sched::Fifo(LOW)).unwrap();
        assert!(drop_effective_cap_sys_nice(), "capset refused");
        let r = rig_in(RtMode::BestEffort, 1, Some(1), 1, N);
        r.block();
        // One event at a time, each dispatched by the lent thread before the next is sent:
        // N lent dispatches, N raises.
        for s in 0..N {
            r.send(s..s + 1);
            assert!(
                util::wait_until(10, || r.handled() == s as u64 + 1),
                "event {s} not dispatched while the lane was busy"
            );
        }
        r.unblock();
        let lent = r.seen.lent.load(SeqCst);
        let mut r = r;
        (r.rt.shutdown().unwrap(), lent)
    })
    .join()
    .unwrap();
    assert_eq!(lent, N as u64, "{m:?}");
    assert_eq!(m[1].lent_dispatches, N as u64, "{m:?}");
    assert_eq!(m[1].raise_failures, N as u64, "{m:?}");
    assert_eq!(m[1].restore_failures, 0, "{m:?}");
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert_eq!(
        text.matches("could not raise").count(),
        1,
        "the refused raise is logged once:\n{text}"
    );
}

/// `n` lanes `l0` (FIFO 50) … `l{n-1}`, each borrowing from the next lower one: the longest
/// borrowing chain of `n` lanes. `l0`, at its top, has a `tcp-echo` handler on `echo`.
fn chain(n: usize, echo: std::net::SocketAddr) -> RuntimeConfig {
    let lanes = (0..n)
        .map(|i| {
            let mut g = LaneConfig::new(format!("l{i}"), Policy::Fifo, 50 - i as u8);
            g.threads = 1;
            g.buffer_bytes = 2048;
            if i + 1 < n {
                g.borrow_from = vec![format!("l{}", i + 1)];
            }
            if i == 0 {
                g.handlers.push(HandlerConfig::TcpEcho {
                    bind: echo,
                    max_connections: 4,
                });
            }
            g
        })
        .collect();
    RuntimeConfig {
        rt: RtMode::BestEffort,
        lanes,
        ..Default::default()
    }
}

/// Issue 20: each borrower's epoll set is nested in its lender's, and a listener's gate (a
/// `tcp-echo` or `Framed` listener, and each `Framed` connection) is one more epoll set inside
/// its lane's; the kernel nests 5 at most. The deepest chain validation allows, 4 lanes, starts
/// with gates on its top lane (the innermost set): the `tcp-echo` listener of the
/// configuration, and a `Framed` listener and its connection registered in code, all serve.
#[test]
fn the_deepest_allowed_chain_starts_with_gates_on_its_top_lane() {
    use lfrt::stream::{Flow, Framed, Limits, Output};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let _l = util::rt_lock();
    let echo = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut rt = Runtime::new(chain(4, echo)).expect("4 lanes pass validation");
    let framed = TcpListener::bind("127.0.0.1:0").unwrap();
    let framed_addr = framed.local_addr().unwrap();
    let reverse = |frame: &[u8], out: &mut Output<'_>| {
        let body = out.frame(frame.len()).expect("fits");
        body.copy_from_slice(frame);
        body.reverse();
        Flow::Continue
    };
    rt.lane("l0")
        .unwrap()
        .registry()
        .register(Box::new(
            Framed::new(framed, Limits::default(), reverse).unwrap(),
        ))
        .expect("a Framed listener's gate on the top lane");
    rt.start()
        .expect("the chain starts with the tcp-echo gate on its top lane");

    let mut c = TcpStream::connect(echo).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"ping").unwrap();
    let mut got = [0u8; 4];
    c.read_exact(&mut got)
        .expect("tcp-echo on the top lane answers");
    assert_eq!(&got, b"ping");

    let mut f = TcpStream::connect(framed_addr).unwrap();
    f.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    f.write_all(&[0, 0, 0, 3, 1, 2, 3]).unwrap();
    let mut reply = [0u8; 7];
    f.read_exact(&mut reply)
        .expect("a Framed connection (its own gate) on the top lane is served");
    assert_eq!(reply, [0, 0, 0, 3, 3, 2, 1]);
    let m = rt.shutdown().unwrap();
    assert_eq!(m[0].connections_refused, 0, "{:?}", m[0]);
}

/// One lane more than the deepest allowed chain is refused before anything starts, naming
/// the limit and why.
#[test]
fn a_chain_one_lane_deeper_is_refused_naming_the_limit() {
    let echo = "127.0.0.1:0".parse().unwrap();
    let Err(e) = Runtime::new(chain(5, echo)) else {
        panic!("5 lanes passed validation");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("lane[0].borrow_from")
            && msg.contains("5 lanes deep")
            && msg.contains("at most 4 lanes")
            && msg.contains("EP_MAX_NESTS"),
        "{msg}"
    );
}
