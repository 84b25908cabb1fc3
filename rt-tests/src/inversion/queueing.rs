//! Experiment 1 and 1b, queueing inversion: one architecture at one N. Its server is built on
//! fresh sockets (one port per stream, or one port for every stream), the generators send for
//! the run's length, the server drains, and the probe's accounting becomes a [`RunResult`].

use super::generators::{generator_thread_setup, high_generator, low_generator, Pinned};
use super::plan::{lfrt_lane, Architecture, Plan};
use super::probe::{Probe, SeqLog, Streams, TimerLog, EF_TOS};
use super::results::{Latency, PoolCounters, RunResult, StreamCount};
use super::BoxError;
use crate::hsha::{HshaConfig, HshaPool, Source};
use crate::service::ServiceHandler;
use lfrt::{LaneMetrics, Runtime, RuntimeConfig, Timer};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time from building a run's streams to its first event: covers server start-up, so the
/// timer's first expiry finds every thread waiting.
pub(crate) const LEAD: Duration = Duration::from_millis(100);
/// Longest wait after the generators stop for the server to serve what was sent.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(1);
/// Requested receive buffer of every server socket (best effort, capped by `rmem_max`).
const RCVBUF_BYTES: usize = 1 << 20;

fn join_generator<T>(
    h: std::io::Result<std::thread::ScopedJoinHandle<'_, std::io::Result<T>>>,
) -> Result<T, BoxError> {
    h?.join()
        .map_err(|_| -> BoxError { "a generator panicked".into() })?
        .map_err(BoxError::from)
}

/// Experiment 1b's server port: `(high socket, its address, low socket)`. `bands`: the two band
/// sockets of one port, DSCP EF to the first; `shared_pool`: one socket, and no low socket (the
/// low streams send to the same one).
fn one_port_sockets(
    arch: Architecture,
) -> std::io::Result<(UdpSocket, SocketAddr, Option<UdpSocket>)> {
    if arch != Architecture::Bands {
        let (s, a) = server_socket()?;
        return Ok((s, a, None));
    }
    let plan = lfrt::band::Bands {
        classify: lfrt::band::Classify::Dscp,
        map: vec![(EF_TOS >> 2, 0)],
        default: 1,
        count: 2,
    };
    let mut socks = lfrt::band::bind("127.0.0.1:0".parse().expect("address"), &plan)?;
    for s in &socks {
        let _ = nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF_BYTES);
    }
    let low = socks.pop().expect("two bands");
    let high = socks.pop().expect("two bands");
    let addr = high.local_addr()?;
    Ok((high, addr, Some(low)))
}

fn server_socket() -> std::io::Result<(UdpSocket, SocketAddr)> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &RCVBUF_BYTES);
    let a = s.local_addr()?;
    Ok((s, a))
}

enum Server {
    /// The runtime and whether its threads got SCHED_FIFO.
    Lfrt(Box<Runtime>, bool),
    Hsha(HshaPool),
}

/// What a server reported after shutdown: (requests, allocations, rt_applied).
fn stop_server(
    server: Server,
    pool: &mut PoolCounters,
) -> Result<(u64, Option<u64>, bool), BoxError> {
    Ok(match server {
        Server::Lfrt(mut rt, rt_applied) => {
            let m = rt.shutdown()?;
            let allocs = LaneMetrics::sum_measured(m.iter().map(|g| g.pool_allocations));
            pool.allocations = LaneMetrics::sum_measured([pool.allocations, allocs]);
            let faults = LaneMetrics::sum_measured(m.iter().map(|g| g.pool_minor_faults));
            pool.minor_faults = LaneMetrics::sum_measured([pool.minor_faults, faults]);
            (m.iter().map(|g| g.dispatched).sum(), allocs, rt_applied)
        }
        Server::Hsha(pool) => {
            let m = pool.shutdown()?;
            (m.enqueued, Some(m.io_allocations), m.rt_applied)
        }
    })
}

/// Runs one architecture at one N and returns its figures. The server pins its own threads to
/// the server CPU; the generators and, during the run, the calling thread go to the client CPU.
///
/// # Errors
/// Socket, runtime or pool set-up failures.
pub fn run_once(plan: &Plan, arch: Architecture, n_low: usize) -> Result<RunResult, BoxError> {
    let mut pool = PoolCounters::default();
    run_once_counting(plan, arch, n_low, &mut pool)
}

pub(crate) fn run_once_counting(
    plan: &Plan,
    arch: Architecture,
    n_low: usize,
    pool: &mut PoolCounters,
) -> Result<RunResult, BoxError> {
    let duration_ns = plan.duration.as_nanos() as u64;
    let low_rate = plan.low_rate_per_stream(n_low);
    let low_cap = (low_rate * plan.duration.as_secs_f64() * 1.5) as u64 + 64;
    let (timer_count, high_count) = (plan.timer_count(), plan.high_count());
    let start_ns = lfrt::os::now_ns() + LEAD.as_nanos() as u64;
    let end_ns = start_ns + duration_ns;

    let streams = Arc::new(Streams {
        timer: TimerLog {
            first_ns: start_ns,
            interval_ns: plan.interval_ns,
            count: timer_count,
            log: SeqLog::new(timer_count as usize, true),
            coalesced: AtomicU64::new(0),
        },
        high: SeqLog::new(high_count as usize, true),
        low: (0..n_low)
            .map(|_| SeqLog::new(low_cap as usize, false))
            .collect(),
        malformed: AtomicU64::new(0),
        misrouted: AtomicU64::new(0),
    });
    let one_port = Architecture::ONE_PORT.contains(&arch);
    let probe = Probe {
        streams: streams.clone(),
        work_ns: plan.work_ns,
        banded: arch == Architecture::Bands,
    };

    let mut timer = Timer::new()?;
    timer.arm(start_ns, plan.interval_ns)?;
    let (high_sock, high_addr, low_socks, low_addrs) = if one_port {
        let (sock, addr, low) = one_port_sockets(arch)?;
        (sock, addr, low.into_iter().collect(), vec![addr; n_low])
    } else {
        let (high_sock, high_addr) = server_socket()?;
        let mut low_socks = Vec::new();
        let mut low_addrs = Vec::new();
        for _ in 0..n_low {
            let (s, a) = server_socket()?;
            low_socks.push(s);
            low_addrs.push(a);
        }
        (high_sock, high_addr, low_socks, low_addrs)
    };

    let server = match arch {
        Architecture::Lanes
        | Architecture::SinglePool
        | Architecture::Bands
        | Architecture::SharedPool => {
            let two_lanes = matches!(arch, Architecture::Lanes | Architecture::Bands);
            let lanes = if two_lanes {
                vec![
                    lfrt_lane(plan, "high", plan.high_prio, plan.threads),
                    lfrt_lane(plan, "low", plan.low_prio, plan.threads),
                ]
            } else {
                vec![lfrt_lane(plan, "pool", plan.high_prio, 2 * plan.threads)]
            };
            let (high_lane, low_lane) = if two_lanes {
                ("high", "low")
            } else {
                ("pool", "pool")
            };
            let mut rt = Runtime::new(RuntimeConfig {
                trace: Default::default(),
                rt: plan.rt,
                lock_memory: false,
                lanes,
                bands: Vec::new(),
            })?;
            let started = rt.start()?;
            let high = rt.lane(high_lane)?.registry();
            let low = rt.lane(low_lane)?.registry();
            high.register(Box::new(ServiceHandler::timer(timer, 0, probe.clone())))?;
            high.register(Box::new(ServiceHandler::udp(
                high_sock,
                1,
                plan.batch,
                probe.clone(),
            )?))?;
            for (i, s) in low_socks.into_iter().enumerate() {
                low.register(Box::new(ServiceHandler::udp(
                    s,
                    2 + i,
                    plan.batch,
                    probe.clone(),
                )?))?;
            }
            Server::Lfrt(Box::new(rt), started.rt_applied)
        }
        Architecture::Hsha => {
            let mut sources = vec![Source::Timer(timer), Source::Udp(high_sock)];
            sources.extend(low_socks.into_iter().map(Source::Udp));
            let cfg = HshaConfig {
                workers: 2 * plan.threads,
                priority: Some(plan.high_prio),
                rt: plan.rt,
                cpus: Some(vec![plan.server_cpu]),
                queue_capacity: 1024,
                read_batch: plan.batch,
                max_datagram: 2048,
            };
            Server::Hsha(HshaPool::start(cfg, sources, |_| probe.clone())?)
        }
    };

    let pinned = Pinned::to(plan.client_cpu)?;
    // Generators: SCHED_OTHER on the client CPU, each stops at the end of the run.
    let stop = AtomicBool::new(false);
    let period_ns = 1_000_000_000 / plan.rate;
    let client_cpu = plan.client_cpu;
    let (high_sent, low_sent) = std::thread::scope(|s| {
        let stop = &stop;
        let hi = std::thread::Builder::new()
            .name("inv-gen-high".into())
            .spawn_scoped(s, move || {
                generator_thread_setup(client_cpu);
                high_generator(high_addr, one_port, start_ns, period_ns, high_count, stop)
            });
        let addrs = &low_addrs;
        let lo = std::thread::Builder::new()
            .name("inv-gen-low".into())
            .spawn_scoped(s, move || {
                generator_thread_setup(client_cpu);
                low_generator(addrs, low_rate, start_ns, end_ns, low_cap, stop)
            });
        let hi = join_generator(hi);
        if hi.is_err() {
            stop.store(true, Relaxed);
        }
        let lo = join_generator(lo);
        Ok::<_, BoxError>((hi?, lo?))
    })?;

    // Drain: wait until everything sent was served (or the limit passes).
    let drain_end = Instant::now() + DRAIN_LIMIT;
    let all_served = || {
        let t = &streams.timer;
        t.log.counts().0 + t.coalesced.load(Relaxed) >= t.count
            && streams.high.counts().0 >= high_sent
            && streams
                .low
                .iter()
                .zip(&low_sent)
                .all(|(l, &s)| l.counts().0 >= s)
    };
    while lfrt::os::now_ns() < end_ns + plan.interval_ns
        || (!all_served() && Instant::now() < drain_end)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (requests, allocations, rt_applied) = stop_server(server, pool)?;
    drop(pinned);

    // Accounting.
    let mut counts = Vec::new();
    let (th, td) = streams.timer.log.counts();
    counts.push(StreamCount {
        name: "timer".into(),
        sent: timer_count,
        handled: th,
        coalesced: streams.timer.coalesced.load(Relaxed),
        duplicates: td,
        out_of_range: streams.timer.log.out_of_range.load(Relaxed),
    });
    let (hh, hd) = streams.high.counts();
    counts.push(StreamCount {
        name: "high_udp".into(),
        sent: high_sent,
        handled: hh,
        coalesced: 0,
        duplicates: hd,
        out_of_range: streams.high.out_of_range.load(Relaxed),
    });
    for (i, (log, &sent)) in streams.low.iter().zip(&low_sent).enumerate() {
        let (h, d) = log.counts();
        counts.push(StreamCount {
            name: format!("low{i}"),
            sent,
            handled: h,
            coalesced: 0,
            duplicates: d,
            out_of_range: log.out_of_range.load(Relaxed),
        });
    }
    let warm_k = plan.warmup.as_nanos() as u64 / plan.interval_ns;
    let warm_seq = (plan.warmup.as_secs_f64() * plan.rate as f64) as u64;
    let mut timer_lat = streams.timer.log.latencies(warm_k);
    let mut udp_lat = streams.high.latencies(warm_seq);
    let mut all: Vec<u64> = timer_lat.iter().chain(&udp_lat).copied().collect();
    let low_handled: u64 = counts[2..].iter().map(|c| c.handled).sum();
    Ok(RunResult {
        architecture: arch,
        n_low,
        high: Latency::of(&mut all),
        low_throughput: low_handled as f64 / plan.duration.as_secs_f64(),
        lost: counts.iter().map(StreamCount::lost).sum(),
        high_timer: Latency::of(&mut timer_lat),
        high_udp: Latency::of(&mut udp_lat),
        lost_high: counts[..2].iter().map(StreamCount::lost).sum(),
        duplicates: counts.iter().map(|c| c.duplicates).sum::<u64>()
            + streams.malformed.load(Relaxed),
        misrouted: streams.misrouted.load(Relaxed),
        low_rate_per_stream: low_rate,
        low_sent: low_sent.iter().sum(),
        low_handled,
        requests,
        allocations,
        rt_applied,
        streams: counts,
    })
}
