//! Async tasks on lanes (issue #23), each measurement side by side in one run.
//!
//! ```text
//! cargo bench -p lfrt-rt-tests --bench tasks -- timer    [--secs 10] [--prio 80] [--cyclictest]
//! cargo bench -p lfrt-rt-tests --bench tasks -- echo     [--requests 50000] [--prio 50]
//! cargo bench -p lfrt-rt-tests --bench tasks -- priority [--secs 2] [--prio 20] [--max-n 16]
//! ```
//! * `timer`: two 1 ms loops on two threads, aligned (same instants) and staggered (500 µs
//!   apart), lateness (`lfrt cyclic` style: wake-up − due, µs) for: an `async` loop on a lane
//!   (`lfrt::time::interval_at`), a callback timer on a lane, tokio `interval`, tokio +
//!   timerfd (`AsyncFd`); tokio's two workers run at the same SCHED_FIFO priority. With
//!   `--cyclictest`, runs `cyclictest -m -t2 -p PRIO -i1000 [-d500] -D SECS -q` beside them.
//! * `echo`: a UDP echo served by an `async` task (`lfrt::net`), by a handler (one `recv_from`/
//!   `send_to` per datagram) and by tokio, one server thread each, against the unbatched
//!   closed-loop client (one datagram in flight): requests/s and RTT.
//! * `priority`: one high task (1 ms interval, task priority 10) and N flooding low tasks
//!   (priority 0; each 10 × (20 µs of work, yield), then 1 ms asleep: at most ~80 % of one CPU),
//!   N = 0, 1, 2, 4, 8, 16, on one lane thread and on a tokio current-thread runtime: the high
//!   task's lateness.
//!
//! Every lfrt variant prints its pool threads' allocations after warm-up (`alloc`).
//! Bounded: each cell runs `--secs` (timer, priority) or `--requests` (echo) and stops.

use lfrt::task::JoinHandle;
use lfrt::timer::{CallbackTimer, Expiry};
use lfrt::{GroupConfig, Policy, RtMode, Runtime, RuntimeConfig};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};
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
    let groups = spec
        .iter()
        .map(|&(n, p)| {
            let mut g = GroupConfig::new(n, if p > 0 { Policy::Fifo } else { Policy::Other }, p);
            g.threads = threads;
            g.buffer_bytes = 2048;
            g.max_tasks = max_tasks;
            g
        })
        .collect();
    Runtime::new(RuntimeConfig {
        rt: RtMode::BestEffort,
        lock_memory: true,
        groups,
        bands: Vec::new(),
    })
    .unwrap()
}

fn allocs(m: &[lfrt::GroupMetrics]) -> String {
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
                let mut iv = lfrt::time::interval_at(first, Duration::from_nanos(PERIOD_NS));
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

fn timer_callback(secs: u64, prio: u8, offset_ns: u64) -> (Vec<Vec<u64>>, String) {
    let mut rt = lanes(&[("t0", prio), ("t1", prio - 1)], 1, 0);
    let start = lfrt::os::now_ns() + 50_000_000;
    let n = (secs * 1_000_000_000 / PERIOD_NS) as usize;
    let outs: Vec<Arc<Mutex<Vec<u64>>>> = (0..2)
        .map(|_| Arc::new(Mutex::new(samples(secs))))
        .collect();
    let mut controls = Vec::new();
    for (i, out) in outs.iter().enumerate() {
        let out = out.clone();
        let (t, c) = CallbackTimer::periodic(
            Expiry::At(start + i as u64 * offset_ns),
            Duration::from_nanos(PERIOD_NS),
            move |ev, _| {
                let now = lfrt::os::now_ns();
                let mut o = out.lock().unwrap();
                if o.len() < n {
                    o.push(now - ev.due_ns);
                }
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
    while outs.iter().any(|o| o.lock().unwrap().len() < n) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = rt.shutdown().unwrap();
    drop(controls);
    let r = outs.iter().map(|o| o.lock().unwrap().clone()).collect();
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
            let mut cmd = std::process::Command::new("cyclictest");
            cmd.args(["-m", "-t2", "-p", &prio.to_string(), "-i1000", "-q"]);
            cmd.args(["-D", &format!("{secs}")]);
            cmd.arg(if offset > 0 { "-d500" } else { "-d0" });
            match cmd.output() {
                Ok(o) => print!(
                    "cyclictest {label}:\n{}",
                    String::from_utf8_lossy(&o.stdout)
                ),
                Err(e) => println!("cyclictest {label}: not run ({e})"),
            }
        }
    }
}

// ---- echo ----

struct EchoHandler(std::net::UdpSocket);
impl lfrt::EventHandler for EchoHandler {
    fn source(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
    fn handle(&mut self, _: &lfrt::Event, ctx: &mut lfrt::Context) -> lfrt::Disposition {
        let buf = ctx.buffer();
        while let Ok((n, from)) = self.0.recv_from(buf) {
            let _ = self.0.send_to(&buf[..n], from);
        }
        lfrt::Disposition::Rearm
    }
}

/// The unbatched closed-loop client: one datagram in flight; returns (req/s, RTTs).
fn client(addr: std::net::SocketAddr, requests: u64) -> (f64, Vec<u64>) {
    let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut rtts = Vec::with_capacity(requests as usize);
    let mut buf = [0u8; 64];
    let t0 = lfrt::os::now_ns();
    for i in 0..requests {
        let s = lfrt::os::now_ns();
        c.send_to(&i.to_le_bytes(), addr).unwrap();
        let _ = c.recv_from(&mut buf).expect("echo");
        rtts.push(lfrt::os::now_ns() - s);
    }
    let secs = (lfrt::os::now_ns() - t0) as f64 / 1e9;
    (requests as f64 / secs, rtts)
}

fn bench_echo() {
    let requests = arg("--requests", 50_000);
    let prio = arg("--prio", 50) as u8;
    println!("# echo: {requests} requests, one in flight, one server thread, FIFO {prio}");
    // async
    let mut rt = lanes(&[("echo", prio)], 1, 2);
    rt.start().unwrap();
    let lane = rt.lane("echo").unwrap();
    let sock = lfrt::net::UdpSocket::bind(&lane.spawner().unwrap(), "127.0.0.1:0".parse().unwrap())
        .unwrap();
    let addr = sock.local_addr().unwrap();
    let _task = lane
        .spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                let (n, from) = sock.recv_from(&mut buf).await.unwrap();
                let _ = sock.send_to(&buf[..n], from).await;
            }
        })
        .unwrap();
    let (rate, rtts) = client(addr, requests);
    let m = rt.shutdown().unwrap();
    report(
        &format!("async lane {rate:>9.0} req/s"),
        &[rtts],
        allocs(&m),
    );
    // handler
    let mut rt = lanes(&[("echo", prio)], 1, 0);
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    let addr = s.local_addr().unwrap();
    rt.lane("echo")
        .unwrap()
        .registry()
        .register(Box::new(EchoHandler(s)))
        .unwrap();
    rt.start().unwrap();
    let (rate, rtts) = client(addr, requests);
    let m = rt.shutdown().unwrap();
    report(
        &format!("handler lane {rate:>9.0} req/s"),
        &[rtts],
        allocs(&m),
    );
    // tokio
    let trt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_start(move || {
            let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio));
        })
        .build()
        .unwrap();
    let s = trt
        .block_on(tokio::net::UdpSocket::bind("127.0.0.1:0"))
        .unwrap();
    let addr = s.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    trt.spawn(async move {
        let mut buf = [0u8; 64];
        loop {
            let (n, from) = s.recv_from(&mut buf).await.unwrap();
            let _ = s.send_to(&buf[..n], from).await;
        }
    });
    let (rate, rtts) = client(addr, requests);
    stop.store(true, Relaxed);
    report(&format!("tokio {rate:>9.0} req/s"), &[rtts], "n/a".into());
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
                        lfrt::time::sleep(Duration::from_millis(1)).await;
                    }
                })
                .unwrap()
            })
            .collect();
        let mut out = samples(secs);
        let high = sp
            .spawn_with_priority(10, async move {
                let mut iv = lfrt::time::interval(Duration::from_nanos(PERIOD_NS));
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

fn main() {
    let what = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a.parse::<u64>().is_err());
    match what.as_deref() {
        Some("timer") => bench_timer(),
        Some("echo") => bench_echo(),
        Some("priority") => bench_priority(),
        _ => {
            eprintln!("usage: cargo bench -p lfrt-rt-tests --bench tasks -- timer|echo|priority [options]");
            eprintln!("(see the header of rt-tests/benches/tasks.rs)");
        }
    }
}
