//! A run split over threads: the ports dealt round-robin to the threads, each thread's share of
//! the open-loop rate and of the message budget, its worker started, and their results merged.

use super::config::{invalid, LoadConfig, Mode};
use super::report::{merge, LoadReport};
use super::sockets::{open_target, Target};
use super::wire::now_ns;
use super::worker::{Worker, WorkerResult};
use std::io;

/// Runs the load described by `cfg` on the calling thread and returns the
/// report. Equivalent to `run_threaded(cfg, 1)`.
pub fn run(cfg: &LoadConfig) -> io::Result<LoadReport> {
    run_threaded(cfg, 1)
}

/// Runs the load with the ports split round-robin over `threads` threads
/// (capped at the number of ports). The open-loop rate and `max_messages`
/// are divided in proportion to each thread's ports; sequence numbers stay
/// unique across threads.
pub fn run_threaded(cfg: &LoadConfig, threads: usize) -> io::Result<LoadReport> {
    cfg.validate()?;
    if threads == 0 {
        return Err(invalid("thread count must be at least 1"));
    }
    let threads = threads.min(cfg.ports.len());
    let nports = cfg.ports.len() as u64;

    // Thread k takes ports k, k + threads, …; its sockets are ordered client by client, port
    // by port, so that round-robin over them alternates between ports.
    let per_port = cfg.clients.per_port();
    let mut lanes: Vec<Vec<Target>> = (0..threads).map(|_| Vec::new()).collect();
    for (ti, lane) in lanes.iter_mut().enumerate() {
        for client in 0..per_port {
            for (i, &port) in cfg.ports.iter().enumerate().skip(ti).step_by(threads) {
                lane.push(open_target(cfg.target, port, i as u32, client as u32)?);
            }
        }
    }

    let start_ns = now_ns();
    let mut workers = Vec::with_capacity(threads);
    let mut ports_before = 0u64;
    for (ti, targets) in lanes.into_iter().enumerate() {
        let mine = (targets.len() / per_port) as u64;
        let share = |total: u64| {
            split(total, ports_before + mine, nports) - split(total, ports_before, nports)
        };
        let mode = match cfg.mode {
            Mode::Closed { window } => Mode::Closed { window },
            Mode::Open { rate_per_s } => Mode::Open {
                rate_per_s: share(rate_per_s),
            },
        };
        let max_attempts = cfg.max_messages.map_or(u64::MAX, share);
        ports_before += mine;
        workers.push(Worker::new(
            cfg,
            mode,
            targets,
            ti as u64,
            threads as u64,
            max_attempts,
            start_ns,
        )?);
    }

    let results: Vec<WorkerResult> = if workers.len() == 1 {
        vec![workers.pop().expect("one worker").run()?]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .map(|w| s.spawn(move || w.run()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<io::Result<Vec<_>>>()
        })?
    };
    merge(results, start_ns)
}

/// `floor(total * num / den)` without overflow.
fn split(total: u64, num: u64, den: u64) -> u64 {
    (u128::from(total) * u128::from(num) / u128::from(den)) as u64
}
