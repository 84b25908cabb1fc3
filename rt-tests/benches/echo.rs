//! Throughput and overhead of one UDP echo service under three architectures, measured side
//! by side in one run: an lfrt Leader/Followers lane, the Half-Sync/Half-Reactive pool
//! (`lfrt_tools::hsha`), and a tokio multi-thread runtime with the same number of threads. lfrt runs
//! three times: `lfrt-cc` is `lfrt` with `promotion = "concurrent"` (no leader: every idle
//! thread waits in `epoll_wait`, issue 13); `lfrt` with its built-in `UdpEcho` (one `recvmmsg`/`sendmmsg` per event) and
//! `lfrt-dg` with one `recvfrom`/`sendto` per datagram like the other two, which separates the
//! effect of the architecture from that of syscall batching.
//!
//! The load comes from `lfrt-loadgen`, a separate process (closed loop, W outstanding per port,
//! P ports, `--gen-threads` threads), so the server process's `getrusage` counts only the
//! servers. Every cell runs with both client shapes (issue 22): the headline columns with
//! **unbatched** clients, as real clients are (W independent sockets per port, one outstanding
//! datagram each, one `sendto`/`recvfrom` per datagram), and the `b:` columns with the
//! **batched** generator (one socket per port, up to 32 datagrams per `sendmmsg`/`recvmmsg`,
//! which hands a server about 16 datagrams per wake-up). `gen%` is the generator's own CPU
//! share (its busiest thread's CPU time over its send phase, in % of one CPU); a shape whose
//! generator exceeded 80 % is flagged `GEN-SATURATED` in the `note` column: that figure
//! measures the generator, not the server.
//!
//! ```text
//! cargo bench --bench echo -- [--duration 5s] [--threads 2] [--ports 4] [--window 8]
//!                             [--work 0,5,50] [--fifo PRIO] [--pin] [--json FILE] [--quick]
//!                             [--arch lfrt,lfrt-cc,lfrt-dg,hsha,tokio,tokio-fifo]
//!                             [--gen-threads N] [--promote-after-us US]
//!                             [--clients unbatched,batched]
//! ```
//! Per architecture and handler work: throughput, RTT p50/p99/p99.9, context switches per
//! message (voluntary + involuntary), allocations per message, CPU time per message, and `fair`:
//! per-port fairness from the generator's per-port counts (least-served port / mean per port;
//! issue 13 asks for >= 0.95).
//! Servers run SCHED_OTHER by default (apples to apples, and the SCHED_OTHER load generator
//! is never starved); `--fifo PRIO` runs the lfrt and HS/HA server threads at SCHED_FIFO PRIO
//! instead. `tokio` stays at SCHED_OTHER, as tokio services run (the yardstick of issue 22);
//! `tokio-fifo` puts its workers at PRIO too.
//! When stderr is a terminal, a bar shows `cell k/n` (one cell per architecture and work) and
//! the time left ([`lfrt_tools::progress`]).

use std::alloc::{GlobalAlloc, Layout};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Counts every allocation of the process (all threads) on top of lfrt's per-thread counter.
struct Global;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
// SAFETY: forwards every call unchanged to lfrt::CountingAlloc (itself a System wrapper).
unsafe impl GlobalAlloc for Global {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { lfrt::CountingAlloc.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { lfrt::CountingAlloc.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { lfrt::CountingAlloc.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { lfrt::CountingAlloc.dealloc(p, l) }
    }
}
#[global_allocator]
static ALLOC: Global = Global;

#[derive(Debug, Clone)]
struct Opts {
    duration: Duration,
    threads: usize,
    ports: usize,
    window: usize,
    work: Vec<u64>,
    fifo: Option<u8>,
    /// Servers on CPU 1, the load generator on CPU 0 (so they do not compete for a CPU).
    pin: bool,
    json: Option<String>,
    archs: Vec<Arch>,
    /// Threads of the load generator.
    gen_threads: usize,
    /// Client shapes to run each cell with (the first is the headline).
    clients: Vec<Clients>,
    /// The lfrt lanes' `promote_after_us` (deferred promotion); `None`: the default.
    promote_after_us: Option<u64>,
}

/// The load generator's client shape (`lfrt-loadgen` without or with `--batched`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Clients {
    /// W independent sockets per port, one datagram per system call.
    Unbatched,
    /// One socket per port, `sendmmsg`/`recvmmsg`.
    Batched,
}

impl Clients {
    fn name(self) -> &'static str {
        match self {
            Clients::Unbatched => "unbatched",
            Clients::Batched => "batched",
        }
    }
}

/// Above this CPU share of its busiest thread the generator, not the server, is measured.
const GEN_SATURATED_PCT: f64 = lfrt_tools::loadgen::GEN_SATURATED_PCT;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arch {
    Lfrt,
    /// `Lfrt` with `promotion = "concurrent"`: no leader, no hand-off per event.
    LfrtConcurrent,
    /// The same lfrt lane with a handler that makes one `recvfrom` and one `sendto` per
    /// datagram, as HS/HA and tokio do: the difference to `Lfrt` is syscall batching alone.
    LfrtPerDatagram,
    Hsha,
    /// A tokio multi-thread runtime as tokio users run it: its workers at `SCHED_OTHER`, even
    /// with `--fifo` (the yardstick the lfrt lanes are compared with).
    Tokio,
    /// The same tokio runtime with every worker at `SCHED_FIFO` `--fifo` (same policy as the
    /// lfrt servers: what real-time priority alone does to it).
    TokioFifo,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::Lfrt => "lfrt",
            Arch::LfrtConcurrent => "lfrt-cc",
            Arch::LfrtPerDatagram => "lfrt-dg",
            Arch::Hsha => "hsha",
            Arch::Tokio => "tokio",
            Arch::TokioFifo => "tokio-fifo",
        }
    }
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        duration: Duration::from_secs(5),
        threads: 2,
        ports: 4,
        window: 8,
        work: vec![0, 5, 50],
        fifo: None,
        pin: false,
        json: None,
        archs: vec![
            Arch::Lfrt,
            Arch::LfrtConcurrent,
            Arch::LfrtPerDatagram,
            Arch::Hsha,
            Arch::Tokio,
        ],
        gen_threads: 1,
        clients: vec![Clients::Unbatched, Clients::Batched],
        promote_after_us: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let val = |i: usize| {
        args.get(i + 1)
            .cloned()
            .unwrap_or_else(|| panic!("{} needs a value", args[i]))
    };
    while i < args.len() {
        match args[i].as_str() {
            "-D" | "--duration" => {
                o.duration = lfrt_tools::duration::parse(&val(i))
                    .unwrap_or_else(|e| panic!("--duration: {e}"))
            }
            "--threads" => o.threads = val(i).parse().expect("--threads N"),
            "--ports" => o.ports = val(i).parse().expect("--ports N"),
            "--window" => o.window = val(i).parse().expect("--window W"),
            "--work" => {
                o.work = val(i)
                    .split(',')
                    .map(|w| w.parse().expect("--work 0,5,50"))
                    .collect()
            }
            "--gen-threads" => o.gen_threads = val(i).parse().expect("--gen-threads N"),
            "--clients" => {
                o.clients = val(i)
                    .split(',')
                    .map(|c| match c {
                        "unbatched" => Clients::Unbatched,
                        "batched" => Clients::Batched,
                        other => panic!("unknown --clients {other} (unbatched, batched)"),
                    })
                    .collect()
            }
            "--fifo" => o.fifo = Some(val(i).parse().expect("--fifo PRIO")),
            "--promote-after-us" => {
                o.promote_after_us = Some(val(i).parse().expect("--promote-after-us US"))
            }
            "--json" => o.json = Some(val(i)),
            "--arch" => {
                o.archs = val(i)
                    .split(',')
                    .map(|a| match a {
                        "lfrt" => Arch::Lfrt,
                        "lfrt-cc" => Arch::LfrtConcurrent,
                        "lfrt-dg" => Arch::LfrtPerDatagram,
                        "hsha" => Arch::Hsha,
                        "tokio" => Arch::Tokio,
                        "tokio-fifo" => Arch::TokioFifo,
                        other => panic!("unknown --arch {other}"),
                    })
                    .collect()
            }
            "--pin" => {
                o.pin = true;
                i += 1;
                continue;
            }
            "--quick" => {
                o.duration = Duration::from_secs(1);
                i += 1;
                continue;
            }
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    assert!(
        !o.duration.is_zero() && o.duration <= Duration::from_secs(120),
        "--duration must be in (0, 120 s]"
    );
    o
}

/// A running echo server: its ports and how to stop it.
struct Server {
    ports: Vec<u16>,
    stop: Box<dyn FnOnce() -> serde_json::Value>,
}

fn sockets(n: usize) -> Vec<UdpSocket> {
    (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect()
}

fn start(arch: Arch, o: &Opts, work_us: u64) -> Server {
    let socks = sockets(o.ports);
    let ports = socks
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect();
    match arch {
        Arch::Lfrt | Arch::LfrtConcurrent | Arch::LfrtPerDatagram => {
            let policy = if o.fifo.is_some() {
                lfrt::Policy::Fifo
            } else {
                lfrt::Policy::Other
            };
            let mut g = lfrt::LaneConfig::new("echo", policy, o.fifo.unwrap_or(0));
            g.threads = o.threads;
            if arch == Arch::LfrtConcurrent {
                g.promotion = lfrt::Promotion::Concurrent;
            }
            g.buffer_bytes = 2048;
            g.cpus = o.pin.then(|| vec![SERVER_CPU]);
            if let Some(us) = o.promote_after_us {
                g.promote_after_us = us;
            }
            let cfg = lfrt::RuntimeConfig {
                trace: Default::default(),
                rt: lfrt::RtMode::BestEffort,
                lock_memory: false,
                lanes: vec![g],
                bands: Vec::new(),
            };
            let mut rt = lfrt::Runtime::new(cfg).expect("runtime");
            let reg = rt.lane("echo").unwrap().registry();
            for s in socks {
                let h: Box<dyn lfrt::EventHandler> = if arch != Arch::LfrtPerDatagram {
                    Box::new(lfrt::handlers::UdpEcho::new(s, work_us).unwrap())
                } else {
                    s.set_nonblocking(true).unwrap();
                    Box::new(PerDatagramEcho { socket: s, work_us })
                };
                reg.register(h).unwrap();
            }
            rt.start().expect("start");
            Server {
                ports,
                stop: Box::new(move || {
                    let m = rt.shutdown().expect("shutdown");
                    // Server-side split from the runtime's telemetry: leader awake -> handler
                    // entry (promotion + demultiplexing) and handler entry -> return (service).
                    let (disp, serv, arr) = rt.telemetry().with(|r| {
                        let g = &r.lanes[0];
                        (
                            lfrt::telemetry::LatencySummary::of(&g.dispatch),
                            lfrt::telemetry::LatencySummary::of(&g.service),
                            lfrt::telemetry::LatencySummary::of(&g.arrival),
                        )
                    });
                    let us = |ns: u64| ns as f64 / 1000.0;
                    serde_json::json!({"pool_allocations": m[0].pool_allocations, "pool_minor_faults": m[0].pool_minor_faults, "promotions": m[0].promotions,
                        "promotions_no_follower": m[0].promotions_no_follower, "promotions_deferred": m[0].promotions_deferred, "deferred_takeovers": m[0].deferred_takeovers, "dispatched": m[0].dispatched,
                        "batch_overflow": m[0].batch_overflow, "coalesced_reports": m[0].coalesced_reports, "rearm_checks": m[0].rearm_checks,
                        "dispatch_us": {"p50": us(disp.p50_ns), "p99": us(disp.p99_ns), "max": us(disp.max_ns)},
                        "service_us": {"p50": us(serv.p50_ns), "p99": us(serv.p99_ns), "max": us(serv.max_ns)},
                        // Kernel receive (SO_TIMESTAMPNS) -> handler entry; none for lfrt-dg,
                        // whose handler reads without the batch.
                        "arrival_us": (arr.count > 0).then(|| serde_json::json!({"p50": us(arr.p50_ns), "p99": us(arr.p99_ns), "p999": us(arr.p999_ns), "max": us(arr.max_ns)}))})
                }),
            }
        }
        Arch::Hsha => hsha_server(socks, ports, o, work_us),
        Arch::Tokio | Arch::TokioFifo => {
            let fifo = if arch == Arch::TokioFifo {
                Some(o.fifo.expect("tokio-fifo needs --fifo PRIO"))
            } else {
                None
            };
            let pin = o.pin;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(o.threads)
                .enable_io()
                .on_thread_start(move || {
                    if let Some(p) = fifo {
                        set_fifo(p);
                    }
                    if pin {
                        let _ = lfrt::os::set_current_affinity(&[SERVER_CPU]);
                    }
                })
                .build()
                .expect("tokio runtime");
            for s in socks {
                s.set_nonblocking(true).unwrap();
                rt.spawn(async move {
                    let s = tokio::net::UdpSocket::from_std(s).expect("tokio socket");
                    let mut buf = vec![0u8; 2048];
                    while let Ok((n, from)) = s.recv_from(&mut buf).await {
                        lfrt::handlers::cpu_work(work_us * 1000);
                        let _ = s.send_to(&buf[..n], from).await;
                    }
                });
            }
            Server {
                ports,
                stop: Box::new(move || {
                    rt.shutdown_timeout(Duration::from_secs(2));
                    serde_json::json!({})
                }),
            }
        }
    }
}

/// lfrt's echo with one system call per datagram each way (at most `DATAGRAM_BATCH` per event,
/// like `UdpEcho`), replying to each datagram as soon as its work is done.
struct PerDatagramEcho {
    socket: UdpSocket,
    work_us: u64,
}

impl lfrt::EventHandler for PerDatagramEcho {
    fn source(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.socket.as_fd()
    }

    fn handle(&mut self, _event: &lfrt::Event, ctx: &mut lfrt::Context) -> lfrt::Disposition {
        let buf = ctx.buffer();
        let mut drained = false;
        for _ in 0..lfrt::DATAGRAM_BATCH {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    lfrt::handlers::cpu_work(self.work_us * 1000);
                    let _ = self.socket.send_to(&buf[..n], from);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    drained = e.kind() == std::io::ErrorKind::WouldBlock;
                    break;
                }
            }
        }
        if drained {
            ctx.set_drained(); // no re-check (`epoll_ctl`) needed
        }
        lfrt::Disposition::Rearm
    }
}

/// `USER_HZ`: the unit of `/proc/stat` (100 on every Linux architecture lfrt runs on).
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// Steal time of all CPUs so far (`/proc/stat`, ticks): time this VM was runnable but the
/// hypervisor ran something else.
fn steal_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let cpu = s.lines().next()?.split_whitespace().collect::<Vec<_>>();
            cpu.get(8)?.parse().ok()
        })
        .unwrap_or(0)
}

/// With `--pin`: the CPU of every server thread (the load generator gets CPU 0).
const SERVER_CPU: usize = 1;

fn set_fifo(p: u8) {
    let _ = lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(p));
}

/// HS/HA: one I/O thread (allocates each request, queues it) + `threads` workers running the
/// same echo service. The I/O thread is inherent to the architecture and comes on top.
fn hsha_server(socks: Vec<UdpSocket>, ports: Vec<u16>, o: &Opts, work_us: u64) -> Server {
    let cfg = lfrt_tools::hsha::HshaConfig {
        workers: o.threads,
        priority: o.fifo,
        cpus: o.pin.then(|| vec![SERVER_CPU]),
        read_batch: 32,
        max_datagram: 2048,
        ..Default::default()
    };
    let sources = socks
        .into_iter()
        .map(lfrt_tools::hsha::Source::Udp)
        .collect();
    let pool =
        lfrt_tools::hsha::HshaPool::start(cfg, sources, |_| lfrt_tools::service::Echo { work_us })
            .expect("hsha pool");
    Server {
        ports,
        stop: Box::new(move || {
            let m = pool.shutdown().expect("hsha shutdown");
            serde_json::json!({"io_allocations": m.io_allocations, "worker_allocations": m.worker_allocations,
                "served": m.served, "max_queue_depth": m.max_queue_depth, "full_waits": m.full_waits})
        }),
    }
}

fn run_one(arch: Arch, o: &Opts, work_us: u64, clients: Clients) -> serde_json::Value {
    let server = start(arch, o, work_us);
    std::thread::sleep(Duration::from_millis(100));
    let ports: Vec<String> = server.ports.iter().map(u16::to_string).collect();
    let json_path = std::env::temp_dir().join(format!(
        "lfrt-echo-{}-{}-{}-{}.json",
        std::process::id(),
        arch.name(),
        work_us,
        clients.name()
    ));
    let shape: Vec<String> = match clients {
        // One outstanding datagram per client: as many clients per port as the window.
        Clients::Unbatched => vec!["--clients-per-port".into(), o.window.to_string()],
        Clients::Batched => vec!["--batched".into()],
    };
    let steal0 = steal_ticks();
    let gen_cpu0 = lfrt::os::children_cpu_ns();
    let t0 = std::time::Instant::now();
    let (csw0, icsw0, cpu0) = lfrt::os::process_usage();
    let allocs0 = ALLOCATIONS.load(Relaxed);
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt-loadgen"))
        .args([
            "--ports",
            &ports.join(","),
            "--mode",
            "closed",
            "--window",
            &o.window.to_string(),
            "--threads",
            &o.gen_threads.to_string(),
        ])
        .args(&shape)
        .args([
            "--duration",
            &format!("{}ms", o.duration.as_millis()),
            "--size",
            "64",
            "--json",
        ])
        .arg(&json_path)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spawn lfrt-loadgen");
    assert!(status.success(), "lfrt-loadgen failed: {status}");
    let (csw1, icsw1, cpu1) = lfrt::os::process_usage();
    // The load generator process's CPU use over the whole run (start-up and drain included),
    // in % of one CPU. The figure that decides saturation is the report's own
    // `generator_cpu_pct`: its busiest thread over the send phase.
    let gen_process_cpu_pct =
        (lfrt::os::children_cpu_ns() - gen_cpu0) as f64 / 1e9 / t0.elapsed().as_secs_f64() * 100.0;
    // Share of the machine's CPU time the hypervisor gave to other guests during the run: a
    // cell with visible steal was disturbed from outside and its figures are not comparable.
    let steal_pct = (steal_ticks() - steal0) as f64
        / CLOCK_TICKS_PER_S
        / (t0.elapsed().as_secs_f64() * lfrt::os::online_cpus().len() as f64)
        * 100.0;
    let allocs = ALLOCATIONS.load(Relaxed) - allocs0;
    let extra = (server.stop)();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json_path);
    let received = report["received"].as_u64().unwrap_or(0).max(1) as f64;
    let gen_cpu_pct = report["generator_cpu_pct"].as_f64().unwrap_or(0.0);
    serde_json::json!({
        "architecture": arch.name(),
        "clients": clients.name(),
        "clients_per_port": report["config"]["clients_per_port"],
        "work_us": work_us,
        "threads": o.threads,
        "throughput_msgs_per_s": report["throughput_msgs_per_s"],
        "rtt_us": report["rtt_us"],
        // Issue 13 target: >= 0.95 (least-served port / mean per port, from the generator).
        "port_fairness": report["port_fairness"],
        "received_per_port": report["received_per_port"],
        "sent": report["sent"], "received": report["received"], "lost": report["lost"],
        "duplicates": report["duplicates"], "corrupt": report["corrupt"],
        "ctx_switches_per_msg": ((csw1 - csw0) + (icsw1 - icsw0)) as f64 / received,
        "voluntary_ctx_switches_per_msg": (csw1 - csw0) as f64 / received,
        "allocations_per_msg": allocs as f64 / received,
        "cpu_us_per_msg": (cpu1 - cpu0) as f64 / 1000.0 / received,
        "steal_pct": steal_pct,
        "generator_cpu_pct": gen_cpu_pct,
        "generator_cpu_total_pct": report["generator_cpu_total_pct"],
        "generator_saturated": gen_cpu_pct > GEN_SATURATED_PCT,
        "loadgen_process_cpu_pct": gen_process_cpu_pct,
        "send_calls": report["send_calls"], "recv_calls": report["recv_calls"],
        "server": extra,
    })
}

fn main() {
    let o = parse_opts();
    if o.pin {
        // The load generator is spawned by this thread and inherits its affinity.
        lfrt::os::set_current_affinity(&[0]).expect("--pin needs CPUs 0 and 1");
    }
    let shapes: Vec<&str> = o.clients.iter().map(|c| c.name()).collect();
    println!(
        "# UDP echo: {} server threads, {} ports, closed loop window {} per port, clients {} (headline first), {} generator thread(s), {} s per run, {}, {} ({} CPUs, kernel {})",
        o.threads,
        o.ports,
        o.window,
        shapes.join(" + "),
        o.gen_threads,
        o.duration.as_secs_f64(),
        o.fifo.map(|p| format!("SCHED_FIFO {p}")).unwrap_or_else(|| "SCHED_OTHER".into()),
        if o.pin { "servers on CPU 1, load generator on CPU 0" } else { "unpinned" },
        lfrt::os::online_cpus().len(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
    );
    println!(
        "# headline columns: {} clients; b: columns: {}; gen% = generator's busiest thread, % of one CPU; GEN-SATURATED: gen% > {GEN_SATURATED_PCT:.0} (that figure measures the generator)",
        shapes[0],
        shapes.get(1).copied().unwrap_or("-")
    );
    println!(
        "{:<7} {:>5} {:>12} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>9} {:>6} {:>12} {:>9} {:>6} {:>7} {:>6} {:>8} {:>8}  note",
        "arch",
        "work",
        "msgs/s",
        "p50_us",
        "p99_us",
        "p999_us",
        "lost",
        "csw/msg",
        "alloc/msg",
        "cpu_us/m",
        "gen%",
        "b:msgs/s",
        "b:p99_us",
        "b:gen%",
        "steal%",
        "fair",
        "arr50_us",
        "arr99_us"
    );
    let mut rows = Vec::new();
    // Cell k of n with the time left, on stderr when it is a terminal (nothing otherwise); the
    // rows go to stdout with the bar out of the way.
    let progress = lfrt_tools::progress::Progress::new(
        (o.work.len() * o.archs.len() * o.clients.len()) as u64,
        "cell",
    );
    for &work in &o.work {
        for &arch in &o.archs {
            let results: Vec<serde_json::Value> = o
                .clients
                .iter()
                .map(|&c| {
                    let r = run_one(arch, &o, work, c);
                    progress.inc();
                    r
                })
                .collect();
            let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
            let h = &results[0];
            // A figure of the second shape, or "-" when only one shape runs.
            let second = |p: &dyn Fn(&serde_json::Value) -> f64, w: usize, prec: usize| {
                results
                    .get(1)
                    .map_or(format!("{:>w$}", "-"), |r| format!("{:>w$.prec$}", p(r)))
            };
            let note: Vec<String> = results
                .iter()
                .enumerate()
                .filter(|(_, r)| r["generator_saturated"] == true)
                .map(|(i, r)| {
                    if i == 0 {
                        "GEN-SATURATED".to_string()
                    } else {
                        format!("GEN-SATURATED({})", r["clients"].as_str().unwrap_or("?"))
                    }
                })
                .collect();
            // Kernel receive -> handler entry, for the lfrt servers that stamp arrivals.
            let arrival = |q: &str| {
                h["server"]["arrival_us"][q]
                    .as_f64()
                    .map_or(format!("{:>8}", "-"), |v| format!("{v:>8.1}"))
            };
            progress.suspend(|| println!(
                "{:<7} {:>5} {:>12.0} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>10.3} {:>10.3} {:>9.2} {:>6.0} {} {} {} {:>7.2} {:>6.3} {} {}  {}",
                arch.name(),
                work,
                f(h, "throughput_msgs_per_s"),
                h["rtt_us"]["p50"].as_f64().unwrap_or(0.0),
                h["rtt_us"]["p99"].as_f64().unwrap_or(0.0),
                h["rtt_us"]["p999"].as_f64().unwrap_or(0.0),
                h["lost"].as_u64().unwrap_or(0),
                f(h, "ctx_switches_per_msg"),
                f(h, "allocations_per_msg"),
                f(h, "cpu_us_per_msg"),
                f(h, "generator_cpu_pct"),
                second(&|r| f(r, "throughput_msgs_per_s"), 12, 0),
                second(&|r| r["rtt_us"]["p99"].as_f64().unwrap_or(0.0), 9, 1),
                second(&|r| f(r, "generator_cpu_pct"), 6, 0),
                f(h, "steal_pct"),
                f(h, "port_fairness"),
                arrival("p50"),
                arrival("p99"),
                note.join(","),
            ));
            rows.extend(results);
        }
    }
    drop(progress);
    if let Some(p) = &o.json {
        let v = serde_json::json!({"benchmark": "udp-echo", "threads": o.threads, "ports": o.ports, "window": o.window,
            "duration_s": o.duration.as_secs_f64(), "fifo": o.fifo, "pinned": o.pin, "gen_threads": o.gen_threads,
            "clients": shapes, "gen_saturated_pct": GEN_SATURATED_PCT, "results": rows});
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap()).expect("write --json");
        println!("# wrote {p}");
    }
}
