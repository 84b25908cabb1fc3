//! Async tasks on lanes (issue #23), each measurement side by side in one run.
//!
//! ```text
//! cargo bench -p lfrt-tools --bench tasks -- timer    [--secs 10] [--prio 80] [--cyclictest]
//! cargo bench -p lfrt-tools --bench tasks -- echo     [--secs 5] [--prio 50] [--ports 4]
//!                                                        [--window 8] [--threads 1] [--pin]
//!                                                        [--gen-threads 1]
//!                                                        [--server async|handler|tokio]
//! cargo bench -p lfrt-tools --bench tasks -- priority [--secs 2] [--prio 20] [--max-n 16]
//! cargo bench -p lfrt-tools --bench tasks -- relay    [--secs 5] [--prio 80] [--clients 4]
//! ```
//! * `timer`: two 1 ms loops on two threads, aligned (both loops due at the same instants) and
//!   staggered (the second loop 500 µs after the first), lateness (`lfrt cyclic` style: wake-up −
//!   due, µs) for: an `async` loop on a lane (`lfrt::task::time::interval_at`), a callback timer
//!   on a lane, tokio `interval`, tokio + timerfd (`AsyncFd`); tokio's two workers run at the
//!   same SCHED_FIFO priority. Every variant records into per-loop buffers preallocated before
//!   the run, with no lock shared with the main thread. With `--cyclictest`, cyclictest runs the
//!   same two loops beside them: `cyclictest -m -t2 -p PRIO -i1000 -d0 --aligned=0|500 -D SECS -q
//!   -h 10000 --histfile=FILE` (`-d0`: both threads 1 ms, since `-d` adds to each further
//!   thread's *interval*; `--aligned=USEC`: a common start, thread k k·USEC later), and its
//!   histogram (1 µs buckets, per thread) gives avg, p99 and p99.9.
//! * `echo`: a UDP echo on `--ports` sockets served by `async` tasks (`lfrt::task::net`, one per
//!   socket), by handlers (one `recv_from`/`send_to` per datagram) and by tokio (one task per
//!   socket), each on `--threads` server threads (SCHED_FIFO `--prio`, 0: SCHED_OTHER), against
//!   `lfrt-loadgen` with its default, unbatched clients (closed loop, `--window` independent
//!   client sockets per port, one datagram in flight each, one system call per datagram), as
//!   `benches/echo.rs` drives it: throughput, RTT percentiles, loss, the generator's CPU share
//!   (`GEN-SATURATED` above 80 %), the server's allocations, and async ÷ handler.
//! * `priority`: one high task (1 ms interval, task priority 10) and N flooding low tasks
//!   (priority 0; each 10 × (20 µs of work, yield), then 1 ms asleep: at most ~80 % of one CPU),
//!   N = 0, 1, 2, 4, 8, 16, on one lane thread and on a tokio current-thread runtime: the high
//!   task's lateness.
//!
//! * `relay`: a lane → tokio reply, and what tokio traffic does to the lane. One lane thread
//!   (SCHED_FIFO `--prio`) runs a server task (requests from a `lfrt::task::channel`, each
//!   answered through a `ReplySender`) and a 1 ms `interval` loop; a tokio runtime (2 workers,
//!   SCHED_OTHER, as tokio services run) sends requests and awaits the replies. Cells: the
//!   reply round trip with one client (tokio → lane → tokio, µs), the lane loop's lateness
//!   alone, and with `--clients` tokio clients sending back to back meanwhile. The lane's
//!   `relayed_wakes` say which path a reply's wake took (a lane thread hands tokio's wakers to
//!   the runtime's relay thread).
//!
//! Every lfrt variant prints its pool threads' allocations after warm-up (`alloc`).
//! Bounded: each cell runs `--secs` and stops.

use lfrt::task::JoinHandle;
use lfrt::timer::{CallbackTimer, Expiry};
use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

const PERIOD_NS: u64 = 1_000_000;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// Lateness samples of one loop, preallocated (pushing never allocates below capacity).
fn samples(secs: u64) -> Vec<u64> {
    Vec::with_capacity((secs * 1_000_000_000 / PERIOD_NS) as usize + 64)
}

fn report(name: &str, all: &[Vec<u64>], alloc: String) {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
    for s in all {
        for &v in s {
            h.saturating_record(v.max(1));
        }
    }
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "{name:<28} n={:>7} avg={:>8.1} p99={:>8.1} p99.9={:>8.1} max={:>8.1} µs  alloc={alloc}",
        h.len(),
        h.mean() / 1000.0,
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.max())
    );
}

fn lanes(spec: &[(&str, u8)], threads: usize, max_tasks: usize) -> Runtime {
    let lanes = spec
        .iter()
        .map(|&(n, p)| {
            let mut g = LaneConfig::new(n, if p > 0 { Policy::Fifo } else { Policy::Other }, p);
            g.threads = threads;
            g.buffer_bytes = 2048;
            g.max_tasks = max_tasks;
            g
        })
        .collect();
    Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: true,
        lanes,
        bands: Vec::new(),
    })
    .unwrap()
}

fn allocs(m: &[lfrt::LaneMetrics]) -> String {
    m.iter()
        .map(|g| g.pool_allocations.map_or("-".into(), |n| n.to_string()))
        .collect::<Vec<_>>()
        .join("/")
}

// ---- timer ----

fn timer_async(secs: u64, prio: u8, offset_ns: u64) -> (Vec<Vec<u64>>, String) {
    let mut rt = lanes(&[("t0", prio), ("t1", prio - 1)], 1, 2);
    rt.start().unwrap();
    let start = lfrt::os::now_ns() + 20_000_000;
    let n = secs * 1_000_000_000 / PERIOD_NS;
    let hs: Vec<JoinHandle<Vec<u64>>> = (0..2)
        .map(|i| {
            let lane = rt.lane(if i == 0 { "t0" } else { "t1" }).unwrap();
            let mut out = samples(secs);
            lane.spawn(async move {
                let first = start + i * offset_ns;
                let mut iv = lfrt::task::time::interval_at(first, Duration::from_nanos(PERIOD_NS));
                for _ in 0..n {
                    let t = iv.tick().await;
                    out.push(lfrt::os::now_ns() - t.due_ns);
                }
                out
            })
            .unwrap()
        })
        .collect();
    let r = hs.into_iter().map(|h| h.wait().unwrap()).collect();
    let m = rt.shutdown().unwrap();
    (r, allocs(&m))
}

/// One loop's samples, written by one thread (the callback's) and read by another without a
/// lock: a preallocated array and a published length.
struct Samples {
    v: Box<[AtomicU64]>,
    len: AtomicUsize,
}

impl Samples {
    fn new(n: usize) -> Samples {
        Samples {
            v: (0..n).map(|_| AtomicU64::new(0)).collect(),
            len: AtomicUsize::new(0),
        }
    }
    /// The writer's push (one writer only); false once full.
    fn push(&self, x: u64) -> bool {
        let i = self.len.load(Relaxed);
        if i == self.v.len() {
            return false;
        }
        self.v[i].store(x, Relaxed);
        self.len.store(i + 1, Release);
        true
    }
    fn is_full(&self) -> bool {
        self.len.load(Acquire) == self.v.len()
    }
    fn to_vec(&self) -> Vec<u64> {
        let n = self.len.load(Acquire);
        self.v[..n].iter().map(|x| x.load(Relaxed)).collect()
    }
}

fn timer_callback(secs: u64, prio: u8, offset_ns: u64) -> (Vec<Vec<u64>>, String) {
    let mut rt = lanes(&[("t0", prio), ("t1", prio - 1)], 1, 0);
    let start = lfrt::os::now_ns() + 50_000_000;
    let n = (secs * 1_000_000_000 / PERIOD_NS) as usize;
    let outs: Vec<Arc<Samples>> = (0..2).map(|_| Arc::new(Samples::new(n))).collect();
    let mut controls = Vec::new();
    for (i, out) in outs.iter().enumerate() {
        let out = out.clone();
        let (t, c) = CallbackTimer::periodic(
            Expiry::At(start + i as u64 * offset_ns),
            Duration::from_nanos(PERIOD_NS),
            move |ev, _| {
                let now = lfrt::os::now_ns();
                out.push(now - ev.due_ns);
            },
        )
        .unwrap();
        rt.lane(if i == 0 { "t0" } else { "t1" })
            .unwrap()
            .registry()
            .register(Box::new(t))
            .unwrap();
        controls.push(c);
    }
    rt.start().unwrap();
    // Reads only the published lengths: the lane threads take no lock of ours.
    while !outs.iter().all(|o| o.is_full()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = rt.shutdown().unwrap();
    drop(controls);
    let r = outs.iter().map(|o| o.to_vec()).collect();
    (r, allocs(&m))
}

fn tokio_rt(prio: u8) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio));
        })
        .build()
        .unwrap()
}

fn timer_tokio(secs: u64, prio: u8, offset_ns: u64) -> Vec<Vec<u64>> {
    let rt = tokio_rt(prio);
    let n = secs * 1_000_000_000 / PERIOD_NS;
    let base = tokio::time::Instant::now() + Duration::from_millis(20);
    let hs: Vec<_> = (0..2u64)
        .map(|i| {
            let mut out = samples(secs);
            rt.spawn(async move {
                let first = base + Duration::from_nanos(i * offset_ns);
                let mut iv = tokio::time::interval_at(first, Duration::from_nanos(PERIOD_NS));
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                for _ in 0..n {
                    let due = iv.tick().await;
                    out.push(due.elapsed().as_nanos() as u64);
                }
                out
            })
        })
        .collect();
    rt.block_on(async {
        let mut r = Vec::new();
        for h in hs {
            r.push(h.await.unwrap());
        }
        r
    })
}

fn timer_tokio_timerfd(secs: u64, prio: u8, offset_ns: u64) -> Vec<Vec<u64>> {
    let rt = tokio_rt(prio);
    let n = secs * 1_000_000_000 / PERIOD_NS;
    let start = lfrt::os::now_ns() + 20_000_000;
    let hs: Vec<_> = (0..2u64)
        .map(|i| {
            let mut out = samples(secs);
            rt.spawn(async move {
                // SAFETY: timerfd_create has no memory preconditions; the fd is checked.
                let fd = unsafe {
                    libc::timerfd_create(
                        libc::CLOCK_MONOTONIC,
                        libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                    )
                };
                assert!(fd >= 0);
                // SAFETY: a new fd owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                let first = start + i * offset_ns;
                let ts = |ns: u64| libc::timespec {
                    tv_sec: (ns / 1_000_000_000) as _,
                    tv_nsec: (ns % 1_000_000_000) as _,
                };
                let spec = libc::itimerspec {
                    it_interval: ts(PERIOD_NS),
                    it_value: ts(first),
                };
                // SAFETY: valid fd and spec.
                let rc = unsafe {
                    libc::timerfd_settime(
                        fd.as_raw_fd(),
                        libc::TFD_TIMER_ABSTIME,
                        &spec,
                        std::ptr::null_mut(),
                    )
                };
                assert_eq!(rc, 0);
                // SAFETY: the fd is owned by the AsyncFd for its whole registration.
                let afd = unsafe { tokio::io::unix::AsyncFd::register(fd) }
                    .map_err(|_| "register")
                    .unwrap();
                let mut due = first;
                while (out.len() as u64) < n {
                    let mut g = afd.readable().await.unwrap();
                    let mut count = 0u64;
                    // SAFETY: reads 8 bytes into a u64.
                    let r =
                        unsafe { libc::read(afd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
                    if r != 8 {
                        g.clear_ready();
                        continue;
                    }
                    out.push(lfrt::os::now_ns() - due);
                    due += count * PERIOD_NS;
                }
                out
            })
        })
        .collect();
    rt.block_on(async {
        let mut r = Vec::new();
        for h in hs {
            r.push(h.await.unwrap());
        }
        r
    })
}

fn bench_timer() {
    let secs = arg("--secs", 10);
    let prio = arg("--prio", 80) as u8;
    for (label, offset) in [("aligned", 0u64), ("staggered", PERIOD_NS / 2)] {
        println!("# timer: 2 loops × {secs} s, 1 ms, {label}, FIFO {prio}");
        let (r, a) = timer_async(secs, prio, offset);
        report(&format!("async lane {label}"), &r, a);
        let (r, a) = timer_callback(secs, prio, offset);
        report(&format!("callback lane {label}"), &r, a);
        report(
            &format!("tokio interval {label}"),
            &timer_tokio(secs, prio, offset),
            "n/a".into(),
        );
        report(
            &format!("tokio+timerfd {label}"),
            &timer_tokio_timerfd(secs, prio, offset),
            "n/a".into(),
        );
        if flag("--cyclictest") {
            match cyclictest(secs, prio, offset) {
                Ok((r, note)) => report(&format!("cyclictest {label}"), &r, note),
                Err(e) => println!("cyclictest {label}: not run ({e})"),
            }
        }
    }
}

/// Largest latency cyclictest's histogram tracks (µs); later ones count as overflows.
const CYCLICTEST_HIST_US: u64 = 10_000;

/// cyclictest's two 1 ms loops, `offset_ns` apart (0: aligned), for `secs`: each thread's
/// latencies from its histogram, in ns at 1 µs resolution (a value in bucket k µs is recorded
/// as k µs; an overflow as `CYCLICTEST_HIST_US`, a lower bound), and a note with cyclictest's
/// own avg and max and the overflows.
fn cyclictest(secs: u64, prio: u8, offset_ns: u64) -> Result<(Vec<Vec<u64>>, String), String> {
    let hist = std::env::temp_dir().join(format!(
        "lfrt-bench-cyclictest-{}-{offset_ns}.hist",
        std::process::id()
    ));
    let out = std::process::Command::new("cyclictest")
        .args(["-m", "-t2", "-p", &prio.to_string(), "-i1000", "-d0"])
        .arg(format!("--aligned={}", offset_ns / 1000))
        .args(["-D", &secs.to_string(), "-q"])
        .args(["-h", &CYCLICTEST_HIST_US.to_string()])
        .arg(format!("--histfile={}", hist.display()))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = std::fs::read_to_string(&hist).map_err(|e| format!("{}: {e}", hist.display()))?;
    let _ = std::fs::remove_file(&hist);
    let mut threads: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
    let mut note = String::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let Some(rest) = line.strip_prefix("# Histogram Overflows:") {
            for (t, c) in rest.split_whitespace().enumerate().take(2) {
                let c: u64 = c.parse().map_err(|_| format!("bad line {line:?}"))?;
                threads[t].extend(std::iter::repeat_n(CYCLICTEST_HIST_US * 1000, c as usize));
            }
            note += &format!(" overflows(>{} µs)={}", CYCLICTEST_HIST_US, rest.trim());
        } else if let Some(rest) = line.strip_prefix("# Avg Latencies:") {
            note += &format!(" avg_us={}", rest.trim());
        } else if let Some(rest) = line.strip_prefix("# Max Latencies:") {
            note += &format!(" max_us={}", rest.trim());
        } else if !line.starts_with('#') && f.len() == 3 {
            let us: u64 = f[0].parse().map_err(|_| format!("bad line {line:?}"))?;
            for t in 0..2 {
                let c: u64 = f[t + 1].parse().map_err(|_| format!("bad line {line:?}"))?;
                threads[t].extend(std::iter::repeat_n(us * 1000, c as usize));
            }
        }
    }
    if threads.iter().any(Vec::is_empty) {
        return Err(format!("no samples in its histogram:\n{text}"));
    }
    Ok((threads, format!("n/a (1 µs buckets;{note})")))
}

// ---- echo ----

/// The handler form: one `recv_from`/`send_to` per datagram (at most `DATAGRAM_BATCH` per
/// event), as the async task and tokio make.
struct EchoHandler(std::net::UdpSocket);
impl lfrt::EventHandler for EchoHandler {
    fn source(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
    fn handle(&mut self, _: &lfrt::Event, ctx: &mut lfrt::Context) -> lfrt::Disposition {
        let buf = ctx.buffer();
        for _ in 0..lfrt::DATAGRAM_BATCH {
            match self.0.recv_from(buf) {
                Ok((n, from)) => {
                    let _ = self.0.send_to(&buf[..n], from);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock: drained
            }
        }
        lfrt::Disposition::Rearm
    }
}

/// The echo servers compared.
#[derive(Debug, Clone, Copy, PartialEq)]
enum EchoServer {
    AsyncLane,
    HandlerLane,
    Tokio,
}

impl EchoServer {
    fn name(self) -> &'static str {
        match self {
            EchoServer::AsyncLane => "async lane",
            EchoServer::HandlerLane => "handler lane",
            EchoServer::Tokio => "tokio",
        }
    }
}

/// With `--pin`: the CPU of every server thread (the load generator gets CPU 0).
const SERVER_CPU: usize = 1;

struct EchoOpts {
    secs: u64,
    /// SCHED_FIFO priority of the server threads; 0: SCHED_OTHER.
    prio: u8,
    ports: usize,
    window: usize,
    threads: usize,
    pin: bool,
    /// Threads of the load generator (its ports are split across them).
    gen_threads: usize,
}

/// A running server: its ports, and what stops it (returning its pool allocations).
struct Running {
    ports: Vec<u16>,
    stop: Box<dyn FnOnce() -> String>,
}

fn echo_server(kind: EchoServer, o: &EchoOpts) -> Running {
    let socks: Vec<std::net::UdpSocket> = (0..o.ports)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let ports = socks
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    match kind {
        EchoServer::AsyncLane | EchoServer::HandlerLane => {
            let async_ = kind == EchoServer::AsyncLane;
            let mut g = LaneConfig::new(
                "echo",
                if o.prio > 0 {
                    Policy::Fifo
                } else {
                    Policy::Other
                },
                o.prio,
            );
            g.threads = o.threads;
            g.buffer_bytes = 2048;
            g.max_tasks = if async_ { o.ports } else { 0 };
            g.task_bytes = 4096; // the echo task holds a 2048-byte buffer, as the handler's
            g.cpus = o.pin.then(|| vec![SERVER_CPU]);
            let mut rt = Runtime::new(RuntimeConfig {
                trace: Default::default(),
                rt: RtMode::BestEffort,
                lock_memory: true,
                lanes: vec![g],
                bands: Vec::new(),
            })
            .unwrap();
            let lane = rt.lane("echo").unwrap();
            if async_ {
                let sp = lane.spawner().unwrap();
                for s in socks {
                    let sock = lfrt::task::net::UdpSocket::from_std(&sp, s).unwrap();
                    lane.spawn(async move {
                        let mut buf = [0u8; 2048];
                        loop {
                            let (n, from) = sock.recv_from(&mut buf).await.unwrap();
                            let _ = sock.send_to(&buf[..n], from).await;
                        }
                    })
                    .unwrap();
                }
            } else {
                for s in socks {
                    s.set_nonblocking(true).unwrap();
                    lane.registry().register(Box::new(EchoHandler(s))).unwrap();
                }
            }
            rt.start().unwrap();
            Running {
                ports,
                stop: Box::new(move || allocs(&rt.shutdown().unwrap())),
            }
        }
        EchoServer::Tokio => {
            let (prio, pin) = (o.prio, o.pin);
            let trt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(o.threads)
                .enable_io()
                .on_thread_start(move || {
                    if prio > 0 {
                        let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio));
                    }
                    if pin {
                        let _ = lfrt::os::set_current_affinity(&[SERVER_CPU]);
                    }
                })
                .build()
                .unwrap();
            for s in socks {
                s.set_nonblocking(true).unwrap();
                trt.spawn(async move {
                    let s = tokio::net::UdpSocket::from_std(s).unwrap();
                    let mut buf = [0u8; 2048];
                    while let Ok((n, from)) = s.recv_from(&mut buf).await {
                        let _ = s.send_to(&buf[..n], from).await;
                    }
                });
            }
            Running {
                ports,
                stop: Box::new(move || {
                    trt.shutdown_timeout(Duration::from_secs(2));
                    "n/a".into()
                }),
            }
        }
    }
}

/// One server against `lfrt-loadgen`'s default (unbatched) clients; the generator's JSON
/// report and the server's allocations.
fn echo_run(kind: EchoServer, o: &EchoOpts) -> (serde_json::Value, String) {
    let server = echo_server(kind, o);
    std::thread::sleep(Duration::from_millis(100));
    let ports: Vec<String> = server.ports.iter().map(u16::to_string).collect();
    let json = std::env::temp_dir().join(format!(
        "lfrt-bench-tasks-echo-{}-{}.json",
        std::process::id(),
        kind.name().replace(' ', "-")
    ));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt-loadgen"))
        .args(["--ports", &ports.join(","), "--mode", "closed"])
        .args(["--window", &o.window.to_string()])
        .args(["--threads", &o.gen_threads.to_string()])
        .args(["--duration", &format!("{}s", o.secs), "--size", "64"])
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spawn lfrt-loadgen");
    assert!(status.success(), "lfrt-loadgen failed: {status}");
    let alloc = (server.stop)();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    (report, alloc)
}

fn bench_echo() {
    let o = EchoOpts {
        secs: arg("--secs", 5),
        prio: arg("--prio", 50) as u8,
        ports: arg("--ports", 4) as usize,
        window: arg("--window", 8) as usize,
        threads: arg("--threads", 1) as usize,
        pin: flag("--pin"),
        gen_threads: arg("--gen-threads", 1) as usize,
    };
    if o.pin {
        // The load generator is spawned by this thread and inherits its affinity.
        lfrt::os::set_current_affinity(&[0]).expect("--pin needs CPUs 0 and 1");
    }
    println!(
        "# echo: lfrt-loadgen unbatched clients (closed loop, {} per port, one datagram in \
         flight each, {} generator thread(s)), {} ports, {} s per server, {} server thread(s) at {}, {}",
        o.window,
        o.gen_threads,
        o.ports,
        o.secs,
        o.threads,
        if o.prio > 0 {
            format!("SCHED_FIFO {}", o.prio)
        } else {
            "SCHED_OTHER".into()
        },
        if o.pin {
            "servers on CPU 1, load generator on CPU 0"
        } else {
            "unpinned"
        }
    );
    println!(
        "{:<14} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6}  alloc",
        "server", "req/s", "p50_us", "p99_us", "p999_us", "max_us", "lost", "gen%"
    );
    // `--server async|handler|tokio`: that server alone (e.g. to count its system calls from
    // outside with `perf stat -p`).
    let only = std::env::args()
        .skip_while(|a| a != "--server")
        .nth(1)
        .unwrap_or_default();
    let mut rates = Vec::new();
    for kind in [
        EchoServer::AsyncLane,
        EchoServer::HandlerLane,
        EchoServer::Tokio,
    ] {
        if !only.is_empty() && !kind.name().starts_with(only.as_str()) {
            rates.push(f64::NAN);
            continue;
        }
        let (r, alloc) = echo_run(kind, &o);
        let rate = r["throughput_msgs_per_s"].as_f64().unwrap_or(0.0);
        let gen = r["generator_cpu_pct"].as_f64().unwrap_or(0.0);
        let rtt = &r["rtt_us"];
        println!(
            "{:<14} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7} {:>6.1}  {alloc}{}",
            kind.name(),
            rate,
            rtt["p50"].as_f64().unwrap_or(0.0),
            rtt["p99"].as_f64().unwrap_or(0.0),
            rtt["p999"].as_f64().unwrap_or(0.0),
            rtt["max"].as_f64().unwrap_or(0.0),
            r["lost"].as_u64().unwrap_or(0),
            gen,
            if r["generator_saturated"].as_bool() == Some(true) {
                "  GEN-SATURATED: measures the generator"
            } else {
                ""
            }
        );
        rates.push(rate);
    }
    println!(
        "async / handler throughput: {:.2}x (target >= 0.9); async / tokio: {:.2}x",
        rates[0] / rates[1].max(1.0),
        rates[0] / rates[2].max(1.0)
    );
}

// ---- priority ----

fn spin_us(us: u64) {
    let end = lfrt::os::now_ns() + us * 1000;
    while lfrt::os::now_ns() < end {
        std::hint::spin_loop();
    }
}

fn bench_priority() {
    let secs = arg("--secs", 2);
    let prio = arg("--prio", 20) as u8;
    let max_n = arg("--max-n", 16);
    let n_ticks = secs * 1_000_000_000 / PERIOD_NS;
    println!("# priority: one high task (1 ms) + N low flooding tasks, {secs} s each, one thread");
    let mut n = 0u64;
    while n <= max_n {
        // lanes
        let mut rt = lanes(&[("p", prio)], 1, 32);
        rt.start().unwrap();
        let lane = rt.lane("p").unwrap();
        let sp = lane.spawner().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let lows: Vec<_> = (0..n)
            .map(|_| {
                let d = done.clone();
                sp.spawn_with_priority(0, async move {
                    while !d.load(Relaxed) {
                        for _ in 0..10 {
                            spin_us(20);
                            lfrt::task::yield_now().await;
                        }
                        lfrt::task::time::sleep(Duration::from_millis(1)).await;
                    }
                })
                .unwrap()
            })
            .collect();
        let mut out = samples(secs);
        let high = sp
            .spawn_with_priority(10, async move {
                let mut iv = lfrt::task::time::interval(Duration::from_nanos(PERIOD_NS));
                for _ in 0..n_ticks {
                    let t = iv.tick().await;
                    out.push(lfrt::os::now_ns() - t.due_ns);
                }
                out
            })
            .unwrap();
        let r = high.wait().unwrap();
        done.store(true, Relaxed);
        for l in lows {
            let _ = l.wait();
        }
        let m = rt.shutdown().unwrap();
        report(&format!("lane  N={n:<2}"), &[r], allocs(&m));
        // tokio, one thread
        let trt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = trt.block_on(async {
            let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio));
            let done = Arc::new(AtomicBool::new(false));
            let lows: Vec<_> = (0..n)
                .map(|_| {
                    let d = done.clone();
                    tokio::spawn(async move {
                        while !d.load(Relaxed) {
                            for _ in 0..10 {
                                spin_us(20);
                                tokio::task::yield_now().await;
                            }
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    })
                })
                .collect();
            let mut out = samples(secs);
            let high = tokio::spawn(async move {
                let start = tokio::time::Instant::now() + Duration::from_millis(1);
                let mut iv = tokio::time::interval_at(start, Duration::from_nanos(PERIOD_NS));
                iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                for _ in 0..n_ticks {
                    let due = iv.tick().await;
                    out.push(due.elapsed().as_nanos() as u64);
                }
                out
            });
            let r = high.await.unwrap();
            done.store(true, Relaxed);
            for l in lows {
                let _ = l.await;
            }
            let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Other);
            r
        });
        report(&format!("tokio N={n:<2}"), &[r], "n/a".into());
        n = if n == 0 { 1 } else { n * 2 };
    }
}

// ---- relay ----

type Request = (u64, lfrt::task::ReplySender<u64>);

/// The lane of `bench_relay`: a server task answering requests and a 1 ms loop; returns the
/// loop's lateness samples (once `secs` have passed), the relayed wakes and the allocations.
fn relay_cell(secs: u64, prio: u8, clients: usize) -> (Vec<u64>, Vec<u64>, u64, String) {
    let mut rt = lanes(&[("srv", prio)], 1, 4);
    rt.start().unwrap();
    let lane = rt.lane("srv").unwrap();
    let (tx, mut rx) = lfrt::task::channel::<Request>(64);
    lane.spawn(async move {
        while let Some((t0, reply)) = rx.recv().await {
            reply.send(t0);
        }
    })
    .unwrap();
    let n = secs * 1_000_000_000 / PERIOD_NS;
    let mut out = samples(secs);
    let ticker = lane
        .spawn(async move {
            let first = lfrt::os::now_ns() + 20_000_000;
            let mut iv = lfrt::task::time::interval_at(first, Duration::from_nanos(PERIOD_NS));
            for _ in 0..n {
                let t = iv.tick().await;
                out.push(lfrt::os::now_ns() - t.due_ns);
            }
            out
        })
        .unwrap();
    let tokio = tokio_rt_other();
    let stop = Arc::new(AtomicBool::new(false));
    let replies = Arc::new(lfrt::task::ReplySlots::<u64>::new(clients.max(1) * 2));
    let rtts: Vec<_> = (0..clients)
        .map(|_| {
            let (tx, stop, replies) = (tx.clone(), stop.clone(), replies.clone());
            tokio.spawn(async move {
                let mut rtt = Vec::with_capacity(1 << 20);
                while !stop.load(Relaxed) {
                    let (reply, answer) = replies.take().expect("a reply slot per client");
                    let t0 = lfrt::os::now_ns();
                    tx.send((t0, reply)).await;
                    let _ = answer.await;
                    if rtt.len() < rtt.capacity() {
                        rtt.push(lfrt::os::now_ns() - t0);
                    }
                }
                rtt
            })
        })
        .collect();
    let loop_lateness = ticker.wait().unwrap();
    stop.store(true, Relaxed);
    let rtt = tokio.block_on(async {
        let mut all = Vec::new();
        for h in rtts {
            all.extend(h.await.unwrap());
        }
        all
    });
    drop(tx);
    let m = rt.shutdown().unwrap();
    (loop_lateness, rtt, m[0].relayed_wakes, allocs(&m))
}

fn tokio_rt_other() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn bench_relay() {
    let secs = arg("--secs", 5);
    let prio = arg("--prio", 80) as u8;
    let clients = arg("--clients", 4) as usize;
    println!(
        "# relay: one lane thread (SCHED_FIFO {prio}) serving tokio requests (2 SCHED_OTHER \
         workers) beside a 1 ms loop; {secs} s per cell"
    );
    let (alone, _, _, a) = relay_cell(secs, prio, 0);
    report("lane 1 ms loop, no tokio", &[alone], a);
    let (late, rtt, relayed, a) = relay_cell(secs, prio, 1);
    report("lane 1 ms loop, 1 client", &[late], a.clone());
    report("reply rtt, 1 client", &[rtt], a);
    println!("{:<28} relayed_wakes={relayed}", "");
    let (late, rtt, relayed, a) = relay_cell(secs, prio, clients);
    report(
        &format!("lane 1 ms loop, {clients} clients"),
        &[late],
        a.clone(),
    );
    report(&format!("reply rtt, {clients} clients"), &[rtt], a);
    println!("{:<28} relayed_wakes={relayed}", "");
}

fn main() {
    let what = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a.parse::<u64>().is_err());
    match what.as_deref() {
        Some("timer") => bench_timer(),
        Some("echo") => bench_echo(),
        Some("priority") => bench_priority(),
        Some("relay") => bench_relay(),
        _ => {
            eprintln!("usage: cargo bench -p lfrt-tools --bench tasks -- timer|echo|priority|relay [options]");
            eprintln!("(see the header of rt-tests/benches/tasks.rs)");
        }
    }
}
