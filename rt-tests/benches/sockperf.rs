//! UDP round-trip latency measured by an independent client: Mellanox's `sockperf` (Debian
//! package `sockperf`) in `ping-pong` mode against three servers on the same port, one after
//! the other, round after round: an lfrt lane (2 threads at SCHED_FIFO, the defaults otherwise),
//! tokio's multi-thread runtime as tokio services run (SCHED_OTHER), and the same tokio runtime
//! with its workers at the lane's SCHED_FIFO priority (`tokio-fifo`).
//!
//! sockperf accepts a reply only if its server cleared the *client* bit of the message's flags
//! (byte 9, bit 0, of the header: 8 bytes of sequence number, then a big-endian 16-bit flags
//! word) and answers only messages that ask for a reply (bit 1). Each server here does that:
//! the lfrt one is a handler written against the public API, as a service would write it
//! ([`SockperfEcho`]), the tokio one the same few lines in an `async` loop.
//!
//! ```text
//! cargo bench --bench sockperf -- [--duration 10s] [--rounds 3] [--fifo 80] [--threads 2]
//!                                 [--arch lfrt,tokio,tokio-fifo] [--pin] [--size 64]
//!                                 [--mps N]   (under-load mode at N messages/s instead)
//! ```
//! Per server and round: sockperf's own percentiles of the full round trip (`--full-rtt`), the
//! number of observations, the server's CPU per round trip (this process's `getrusage`: the
//! client is another process) and the client's CPU share (in % of one CPU; near 100 the table
//! measures the client). `--pin` puts the server threads on CPU 1 and sockperf on CPU 0.
//! Bounded: every sockperf run has its own `-t` and is killed after twice that.

use lfrt::{Context, Disposition, Event, EventHandler};
use std::net::UdpSocket;
use std::os::fd::{AsFd, BorrowedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The port every server takes in turn (sockperf's default).
const PORT: u16 = 11111;
/// Flags of sockperf's message header (byte 9 of the datagram, the low byte of its flags).
const CLIENT: u8 = 1;
const PONG_REQUEST: u8 = 2;
/// With `--pin`: the server threads' CPU (sockperf gets CPU 0).
const SERVER_CPU: usize = 1;

/// Answers sockperf: every datagram that asks for a reply goes back with the client bit
/// cleared, in one `recvmmsg`/`sendmmsg` per event.
struct SockperfEcho(UdpSocket);

impl EventHandler for SockperfEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let batch = ctx.datagrams();
        if batch.recv(self.0.as_fd()).is_ok() {
            for i in 0..batch.len() {
                let mut d = batch.get(i);
                if answer(d.payload_mut()) {
                    d.answer();
                }
            }
            batch.reply(self.0.as_fd());
        }
        Disposition::Rearm
    }
}

/// Turns a sockperf request into its reply in place; false if it asks for none.
fn answer(msg: &mut [u8]) -> bool {
    if msg.len() < 14 || msg[9] & PONG_REQUEST == 0 {
        return false;
    }
    msg[9] &= !CLIENT;
    true
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arch {
    Lfrt,
    Tokio,
    TokioFifo,
}

impl Arch {
    fn name(self) -> &'static str {
        match self {
            Arch::Lfrt => "lfrt",
            Arch::Tokio => "tokio",
            Arch::TokioFifo => "tokio-fifo",
        }
    }
}

struct Opts {
    duration: Duration,
    rounds: usize,
    fifo: u8,
    threads: usize,
    archs: Vec<Arch>,
    pin: bool,
    size: usize,
    mps: Option<u64>,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        duration: Duration::from_secs(10),
        rounds: 3,
        fifo: 80,
        threads: 2,
        archs: vec![Arch::Lfrt, Arch::Tokio, Arch::TokioFifo],
        pin: false,
        size: 64,
        mps: None,
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
            "--rounds" => o.rounds = val(i).parse().expect("--rounds N"),
            "--fifo" => o.fifo = val(i).parse().expect("--fifo PRIO"),
            "--threads" => o.threads = val(i).parse().expect("--threads N"),
            "--size" => o.size = val(i).parse().expect("--size BYTES"),
            "--mps" => o.mps = Some(val(i).parse().expect("--mps N")),
            "--arch" => {
                o.archs = val(i)
                    .split(',')
                    .map(|a| match a {
                        "lfrt" => Arch::Lfrt,
                        "tokio" => Arch::Tokio,
                        "tokio-fifo" => Arch::TokioFifo,
                        other => panic!("unknown --arch {other} (lfrt, tokio, tokio-fifo)"),
                    })
                    .collect()
            }
            "--pin" | "--bench" => {
                o.pin |= args[i] == "--pin";
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
    assert!(o.size >= 14, "--size must hold sockperf's 14-byte header");
    o
}

/// A running server and how to stop it.
type Stop = Box<dyn FnOnce()>;

fn start(arch: Arch, o: &Opts) -> Stop {
    let sock = UdpSocket::bind(("127.0.0.1", PORT)).expect("bind 127.0.0.1:11111");
    sock.set_nonblocking(true).unwrap();
    match arch {
        Arch::Lfrt => {
            let mut g = lfrt::LaneConfig::new("sockperf", lfrt::Policy::Fifo, o.fifo);
            g.threads = o.threads;
            g.buffer_bytes = o.size.max(2048);
            g.cpus = o.pin.then(|| vec![SERVER_CPU]);
            let cfg = lfrt::RuntimeConfig {
                trace: Default::default(),
                rt: lfrt::RtMode::Required,
                lock_memory: false,
                lanes: vec![g],
                bands: Vec::new(),
            };
            let mut rt = lfrt::Runtime::new(cfg).expect("runtime");
            rt.lane("sockperf")
                .unwrap()
                .registry()
                .register(Box::new(SockperfEcho(sock)))
                .unwrap();
            rt.start().expect("start (needs SCHED_FIFO)");
            Box::new(move || {
                rt.shutdown().expect("shutdown");
            })
        }
        Arch::Tokio | Arch::TokioFifo => {
            let fifo = (arch == Arch::TokioFifo).then_some(o.fifo);
            let pin = o.pin;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(o.threads)
                .enable_io()
                .on_thread_start(move || {
                    if let Some(p) = fifo {
                        lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(p))
                            .expect("tokio-fifo needs SCHED_FIFO");
                    }
                    if pin {
                        let _ = lfrt::os::set_current_affinity(&[SERVER_CPU]);
                    }
                })
                .build()
                .expect("tokio runtime");
            let size = o.size.max(2048);
            rt.spawn(async move {
                let s = tokio::net::UdpSocket::from_std(sock).expect("tokio socket");
                let mut buf = vec![0u8; size];
                while let Ok((n, from)) = s.recv_from(&mut buf).await {
                    if answer(&mut buf[..n]) {
                        let _ = s.send_to(&buf[..n], from).await;
                    }
                }
            });
            Box::new(move || rt.shutdown_timeout(Duration::from_secs(2)))
        }
    }
}

/// What one sockperf run reported (µs, full round trip).
#[derive(Debug, Default)]
struct Run {
    observations: u64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    server_cpu_us_per_rtt: f64,
    client_cpu_pct: f64,
}

fn client(o: &Opts) -> Run {
    let secs = o.duration.as_secs().max(1).to_string();
    let mut cmd = Command::new("timeout");
    cmd.arg((o.duration.as_secs() * 2 + 10).to_string());
    if o.pin {
        cmd.args(["taskset", "-c", "0"]);
    }
    cmd.arg("sockperf");
    match o.mps {
        Some(mps) => cmd.args(["under-load", "--mps", &mps.to_string()]),
        None => cmd.arg("ping-pong"),
    };
    cmd.args(["-i", "127.0.0.1", "-p", &PORT.to_string(), "-t", &secs]);
    cmd.args(["-m", &o.size.to_string(), "--full-rtt"]);
    let cpu0 = lfrt::os::children_cpu_ns();
    let (_, _, server0) = lfrt::os::process_usage();
    let t0 = Instant::now();
    let out = cmd
        .stderr(Stdio::null())
        .output()
        .expect("run sockperf (Debian package sockperf)");
    let wall = t0.elapsed().as_secs_f64();
    let (_, _, server1) = lfrt::os::process_usage();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut r = Run {
        client_cpu_pct: (lfrt::os::children_cpu_ns() - cpu0) as f64 / 1e9 / wall * 100.0,
        ..Run::default()
    };
    for line in text.lines() {
        let value = || {
            line.rsplit('=')
                .next()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        if let (Some(at), true) = (line.find("Total "), line.contains("observations")) {
            // sockperf colours this line: read the number after "Total ".
            r.observations = line[at + 6..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if line.contains("percentile 50.000") {
            r.p50 = value();
        } else if line.contains("percentile 99.000") {
            r.p99 = value();
        } else if line.contains("percentile 99.900") {
            r.p999 = value();
        } else if line.contains("<MAX>") {
            r.max = value();
        }
    }
    assert!(
        r.observations > 0,
        "sockperf measured nothing (did the server answer?):\n{text}"
    );
    r.server_cpu_us_per_rtt = (server1 - server0) as f64 / 1000.0 / r.observations as f64;
    r
}

fn main() {
    let o = parse_opts();
    if o.pin {
        lfrt::os::set_current_affinity(&[0]).expect("--pin needs CPUs 0 and 1");
    }
    println!(
        "# sockperf {} against {} server threads on 127.0.0.1:{PORT}, {} B, {} s per run, {} rounds, \
         SCHED_FIFO {} (tokio: SCHED_OTHER), {} ({} CPUs, kernel {})",
        o.mps
            .map(|m| format!("under-load --mps {m}"))
            .unwrap_or_else(|| "ping-pong".into()),
        o.threads,
        o.size,
        o.duration.as_secs(),
        o.rounds,
        o.fifo,
        if o.pin {
            "servers on CPU 1, sockperf on CPU 0"
        } else {
            "unpinned"
        },
        lfrt::os::online_cpus().len(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<11} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11} {:>8}",
        "arch", "round", "rtts", "p50_us", "p99_us", "p999_us", "max_us", "srv_cpu_us", "client%"
    );
    let mut all: Vec<(Arch, Run)> = Vec::new();
    for round in 1..=o.rounds {
        for &arch in &o.archs {
            let stop = start(arch, &o);
            std::thread::sleep(Duration::from_millis(200));
            let r = client(&o);
            stop();
            println!(
                "{:<11} {:>5} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.2} {:>8.0}",
                arch.name(),
                round,
                r.observations,
                r.p50,
                r.p99,
                r.p999,
                r.max,
                r.server_cpu_us_per_rtt,
                r.client_cpu_pct
            );
            all.push((arch, r));
        }
    }
    println!("# median over the rounds");
    for &arch in &o.archs {
        let med = |f: fn(&Run) -> f64| {
            let mut v: Vec<f64> = all
                .iter()
                .filter(|(a, _)| *a == arch)
                .map(|(_, r)| f(r))
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{:<11} {:>5} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11.2} {:>8.0}",
            arch.name(),
            "med",
            "",
            med(|r| r.p50),
            med(|r| r.p99),
            med(|r| r.p999),
            med(|r| r.max),
            med(|r| r.server_cpu_us_per_rtt),
            med(|r| r.client_cpu_pct)
        );
    }
}
