//! `lfrt cyclic`: a cyclictest-compatible latency harness that measures timer dispatch
//! *through the runtime*, so its figures can sit next to cyclictest's from the same machine.
//!
//! # What is measured
//! Each timer is an absolute, periodic `CLOCK_MONOTONIC` timerfd registered in a lane's handle
//! set. When it expires, the lane's leader wakes in `epoll_wait`, promotes a follower, and runs
//! the timer's handler in its own thread. The handler reads the clock on entry, and from the
//! expiry the event was due at and the instant the leader woke ([`lfrt::Event::woke_ns`]),
//! per timer:
//!
//! * **latency** = handler entry − expected expiry: what a user's handler sees, including the
//!   leader's wake-up and the promotion (the analogue of cyclictest's `now − next`);
//! * **wake** = leader awake − expected expiry (timer interrupt and scheduler wake-up);
//! * **dispatch** = handler entry − leader awake (promotion and demultiplexing: lfrt's own
//!   cost on top of what cyclictest measures).
//!
//! Overruns are expirations beyond the first consumed by one handler run (missed periods).
//! A cycle is one handler run that consumed an expiry (a loop, in cyclictest's words); `-l N`
//! closes each timer's handle after its N-th cycle, so every timer contributes exactly N
//! samples.
//!
//! # Every sample is kept
//! As in cyclictest, each timer's histograms are updated by the thread that handles its
//! expiry, with nothing in between: fixed buckets allocated and touched before the run, one
//! relaxed atomic add per value (`hist.rs`). The runtime's telemetry ring, which drops samples
//! when its collector falls behind, is not used for these figures. One bound remains: only
//! the first [`MAX_TIMER_HISTOGRAMS`] timers (`T:` order) get histograms of their own (three of
//! 200 KiB each); the samples of later timers go into histograms their lane shares, so the
//! lane's figures hold every sample, and those timers' own min, avg and max still cover
//! every cycle. The JSON says so per thread (`unrecorded`) and per lane (`untracked_timers`).
//!
//! The histograms have hdrhistogram's layout with 3 significant digits: values are exact
//! below 2.048 µs and within ±0.05% above (each is represented by its bucket's midpoint). µs
//! figures then truncate, as cyclictest's do.
//!
//! # How cyclictest's options map onto lfrt
//! | cyclictest | `lfrt cyclic` |
//! |---|---|
//! | `-t N`: N measuring threads | one lane with N timers and N pool threads (`--pool-threads` changes the pool); `-t` alone = one per CPU; no `-t` = 1 |
//! | `-p P`: every thread at P (rt-tests 2.x; `--priospread` lowers each further thread by one) | the whole lane at P: in Leader/Followers any pool thread may run any timer, so timers have no priority of their own; use `--config` for lanes at distinct priorities. `-p 0` (the default) = `SCHED_OTHER`, as in cyclictest |
//! | `-i I -d D`: thread k sleeps I + k·D µs; with `-h`, every thread I µs | timer k fires every I + k·D µs (defaults 1000 and 500); with `-h`, every timer I µs |
//! | threads start unaligned (each at its own clock reading); `-A USEC`: a common start, thread k USEC·k later | unaligned by default, deterministically: timer j of a lane's n timers starts j/n of the lane's first interval after timer 0, so equal periods do not expire together; `-A USEC` as cyclictest (`-A 0`: all at once, so one lane's leader meets them together and the later ones wait for a promotion) |
//! | `-a [CPUSET]` | the lane's threads are pinned to CPUSET (all available CPUs without a value); threads are not pinned one per CPU, since any of them may lead |
//! | `-l`, `-D`, `-m`, `-q`, `-N`, `-h US`, `--histfile`, `--json`, `--policy`, `--laptop`, `--latency` | the same meaning |
//! | `--policy deadline` (lfrt only) | the lane is a `SCHED_DEADLINE` lane: each pool thread reserves `--dl-runtime` µs (default a tenth of the period) in every `--dl-period` µs (default `-i`), within `--dl-deadline` µs (default the period); `-p` then only ranks the lane |
//! | `--config FILE` (lfrt only) | the file's lanes run at their own priorities; every `kind = "timer"` handler becomes measured timers, other handlers (e.g. an echo service) run as load |
//!
//! With `-p` > 0 the run refuses to start without `SCHED_FIFO`/`SCHED_RR` (as cyclictest
//! does). Unless `--laptop`, `/dev/cpu_dma_latency` is held at `--latency` (0) for the run,
//! as cyclictest does.
//!
//! # Output
//! * Live status lines in cyclictest's format, `T: n (tid) P:prio I:interval C:count Min Act
//!   Avg Max`, redrawn every 100 ms on a terminal (printed once a second otherwise); `tid` is
//!   the pool thread that ran the timer's last cycle. `-q` prints only the final lines.
//! * `-h US`: cyclictest's histogram (rows of per-timer counts, `# Total`, `# Min/Avg/Max
//!   Latencies`, `# Histogram Overflows`).
//! * A summary per timer and per lane (min, avg, p50, p99, p99.9, max, and the wake/dispatch
//!   split), every line starting with `#`.
//! * `--json FILE`: cyclictest's document (`file_version`, `cmdline`, `start_time`, `sysinfo`,
//!   `num_threads`, `resolution_in_ns`, `thread: {"0": {histogram, cycles, min, max, avg, cpu,
//!   node}}`) plus, per thread, `p50`, `p99`, `p999`, `missed_periods`, `hist_overflow`, `lane`,
//!   `priority`, `interval`, `wake`, `dispatch`, `unrecorded`, and a `lanes` array with the
//!   same per lane and the runtime's counters (`pool_allocations`, `pool_minor_faults`: `null`
//!   when not measured, i.e. no pool thread reached its warm-up; promotions;
//!   `untracked_timers`: timers from `T:` [`MAX_TIMER_HISTOGRAMS`] on, which have no histograms
//!   of their own). `cycles` counts loops run, as cyclictest's does. Histogram keys are the
//!   latency in µs (ns with `-N`), only non-zero buckets; a thread's counts sum to `cycles` −
//!   `unrecorded` (`unrecorded` is 0 for a timer with histograms of its own, else `cycles`:
//!   those samples are in its lane's histogram, whose counts sum to the lane's `cycles`);
//!   with `-h US`, larger values are counted in bucket US−1 and in `hist_overflow`.
//!   `histogram_limit_timers` gives the bound; `samples_dropped` counts loops whose sample is
//!   in no histogram at all (0: computed from the counts, as a check).

mod args;
mod hist;
mod json;
mod report;
mod timer;

pub use args::{
    parse_cpuset, CyclicArgs, Plan, TimerSpec, Unit, GROUP_NAME, MAX_INTERVAL_US, MIN_INTERVAL_US,
};
pub use json::FILE_VERSION;
pub use report::{Buckets, LaneResult, TimerResult};

use lfrt::Policy;
use lfrt::Timer;
use report::{LaneInfo, Status, TimerKey};
use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use timer::{CyclicTimer, Histograms, TimerStats};

/// Most timers with histograms of their own (three of 200 KiB each: this bounds them near
/// 150 MiB whatever the number of timers). Later timers record into histograms their lane
/// shares, so no sample is lost from the lane's figures.
pub const MAX_TIMER_HISTOGRAMS: usize = 256;

/// Live status refresh on a terminal.
const REFRESH_TTY: Duration = Duration::from_millis(100);
/// Live status refresh when stdout is a file or pipe (a block of lines each time).
const REFRESH_PLAIN: Duration = Duration::from_secs(1);
/// How often the main thread checks for the end of the run (loops done, duration, signal).
const POLL: Duration = Duration::from_millis(10);
/// Delay from registering the timers to their common start, so every timer is armed and
/// registered before the first period begins: a base, plus a share per timer (thousands of
/// timers take milliseconds to create, arm and register).
const START_DELAY_NS: u64 = 10_000_000;
const START_DELAY_PER_TIMER_NS: u64 = 5_000;

/// Everything a finished run measured.
#[derive(Debug, Clone)]
pub struct CyclicReport {
    /// Per timer, in `T:` order.
    pub timers: Vec<TimerResult>,
    /// Per lane, in configuration order.
    pub lanes: Vec<LaneResult>,
    /// Why the run ended: `"loops"`, `"duration"`, `"signal"` or `"breaktrace"` (`-b`).
    pub stopped_by: &'static str,
    /// With `-b`: the flight recorder's counts (its last window is the one written).
    pub recorder: Option<lfrt::window::RecorderStats>,
    /// Wall time from the timers' registration to the stop.
    pub elapsed: Duration,
    /// What the runtime's start found (RT applied, memory locked, allocation counting).
    pub started: lfrt::StartReport,
}

/// Runs `lfrt cyclic` with `args`: measures, prints status, histogram and summary to stdout,
/// writes the JSON file if asked.
///
/// # Errors
/// Invalid options, a runtime that cannot start (e.g. `-p 80` without the privilege for
/// `SCHED_FIFO`), or a file that cannot be written.
pub fn run(args: &CyclicArgs) -> Result<(), Box<dyn std::error::Error>> {
    let plan = Plan::from_args(args)?;
    let start = SystemTime::now();
    let report = measure(&plan)?;
    let end = SystemTime::now();

    let mut out = std::io::stdout().lock();
    if let Some(limit) = plan.histogram {
        match &plan.histfile {
            Some(path) => {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(path)
                        .map_err(|e| format!("--histfile {}: {e}", path.display()))?,
                );
                report::write_histogram(&mut f, &report.timers, plan.unit, limit)?;
                f.flush()?;
            }
            None => {
                let mut w = std::io::BufWriter::new(&mut out);
                report::write_histogram(&mut w, &report.timers, plan.unit, limit)?;
                w.flush()?;
            }
        }
    }
    write!(
        out,
        "{}",
        report::summary(&report.timers, &report.lanes, plan.unit)
    )?;
    out.flush()?;
    let untracked: usize = report.lanes.iter().map(|g| g.untracked_timers).sum();
    if untracked > 0 {
        eprintln!(
            "lfrt cyclic: note: {untracked} timers (from T: {MAX_TIMER_HISTOGRAMS} on) have no \
             histograms of their own, to bound memory; their samples are in their lane's \
             histogram and figures"
        );
    }
    if let (Some((us, file)), Some(rec)) = (&plan.breaktrace, &report.recorder) {
        match &rec.last {
            Some(written) => {
                std::fs::rename(written, file).map_err(|e| {
                    format!(
                        "--trace {}: moving {} there: {e}",
                        file.display(),
                        written.display()
                    )
                })?;
                let sample = lfrt::window::read_window(file)
                    .ok()
                    .and_then(|w| w.trigger.sample.map(|s| (w.lanes, s)));
                if let Some((lanes, s)) = sample {
                    let tid = lanes
                        .get(usize::from(s.lane))
                        .and_then(|l| l.threads.get(usize::from(s.thread)))
                        .map_or(0, |t| t.tid);
                    writeln!(out, "# Break thread: {tid}")?;
                    writeln!(out, "# Break value: {}", plan.unit.of(s.latency_ns()))?;
                }
                writeln!(
                    out,
                    "# Trace: {} (open it in Perfetto or chrome://tracing; `lfrt explain {0}`)",
                    file.display()
                )?;
            }
            None if report.stopped_by == "breaktrace" => {
                eprintln!("lfrt cyclic: -b {us}: the window could not be written (see the log)")
            }
            None => writeln!(out, "# No cycle exceeded -b {us} us: no trace written")?,
        }
        out.flush()?;
    }
    if let Some(path) = &plan.json {
        let info = json::RunInfo {
            cmdline: std::env::args().collect::<Vec<_>>().join(" "),
            start,
            end,
            elapsed: report.elapsed,
            stopped_by: report.stopped_by,
            started: report.started.clone(),
            unit: plan.unit,
            histogram: plan.histogram,
        };
        std::fs::write(path, json::render(&info, &report.timers, &report.lanes)?)
            .map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Holds `/dev/cpu_dma_latency` at a value while open (the kernel's PM QoS interface: deep
/// C-states with a longer exit latency are not entered).
fn hold_dma_latency(us: i32) -> Option<std::fs::File> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/cpu_dma_latency")
        .ok()?;
    f.write_all(&us.to_ne_bytes()).ok()?;
    Some(f)
}

fn policy_name(p: Policy) -> &'static str {
    match p {
        Policy::Fifo => "fifo",
        Policy::Rr => "rr",
        Policy::Other => "other",
        Policy::Deadline => "deadline",
    }
}

/// Starts the runtime, registers the timers, prints live status to stdout until the run ends
/// (unless `plan.quiet`), stops the runtime, prints the final status lines and returns the
/// results.
///
/// Blocks SIGINT and SIGTERM in the calling thread (a signal ends the run).
///
/// # Errors
/// The runtime cannot be created or started, or a timer cannot be created.
pub fn measure(plan: &Plan) -> Result<CyclicReport, Box<dyn std::error::Error>> {
    // Signals are taken synchronously by this thread; every thread spawned from here on
    // inherits the mask.
    lfrt::os::block_termination()?;
    let _dma = plan.dma_latency.and_then(|us| {
        let f = hold_dma_latency(us);
        if f.is_some() {
            println!("# /dev/cpu_dma_latency set to {us}us");
        }
        f
    });

    let cfg = plan.config.clone();
    let mut rt = plan.work.runtime(cfg.clone())?;
    let started = rt.start()?;

    // Histograms first (hundreds of KiB each, written once so their pages are resident):
    // the first MAX_TIMER_HISTOGRAMS timers get their own, later ones share their lane's.
    let mut shared: Vec<Option<Arc<Histograms>>> = vec![None; cfg.lanes.len()];
    let stats: Vec<Arc<TimerStats>> = plan
        .timers
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            if i < MAX_TIMER_HISTOGRAMS {
                Arc::new(TimerStats::new(Arc::new(Histograms::new()), true))
            } else {
                let h = shared[spec.lane].get_or_insert_with(|| Arc::new(Histograms::new()));
                Arc::new(TimerStats::new(h.clone(), false))
            }
        })
        .collect();

    let began = Instant::now();
    let first_ns =
        lfrt::os::now_ns() + START_DELAY_NS + plan.timers.len() as u64 * START_DELAY_PER_TIMER_NS;
    let mut timers = Vec::with_capacity(plan.timers.len());
    for (spec, stats) in plan.timers.iter().zip(stats) {
        let mut t = Timer::new().map_err(|e| format!("timerfd_create: {e}"))?;
        let interval_ns = spec.interval_us * 1000;
        t.arm(first_ns + spec.phase_us * 1000 + interval_ns, interval_ns)
            .map_err(|e| format!("timerfd_settime: {e}"))?;
        let registry = rt.lane(&cfg.lanes[spec.lane].name)?.registry();
        registry.register(Box::new(CyclicTimer::new(t, plan.loops, stats.clone())))?;
        timers.push((spec.clone(), stats));
    }

    let deadline = plan.duration.map(|d| began + d);
    let tty = std::io::stdout().is_terminal();
    let refresh = if tty { REFRESH_TTY } else { REFRESH_PLAIN };
    let policy = cfg
        .lanes
        .iter()
        .max_by_key(|g| g.priority)
        .map_or("other", |g| policy_name(g.policy));
    let mut last_print: Option<Instant> = None;
    let mut drawn = false;
    let status = || -> Vec<String> {
        timers
            .iter()
            .enumerate()
            .map(|(i, (spec, stats))| {
                let g = &cfg.lanes[spec.lane];
                Status::of(i, stats.snapshot(), g.priority, spec.interval_us).line(plan.unit)
            })
            .collect()
    };
    let stopped_by = loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break "duration";
        }
        if plan.loops > 0 && timers.iter().all(|(_, s)| s.done.load(Acquire)) {
            break "loops";
        }
        if !plan.quiet && last_print.is_none_or(|t| now.duration_since(t) >= refresh) {
            // A failed write to stdout must not stop the measurement.
            let _ = draw_status(&status(), policy, tty && drawn, true);
            drawn = true;
            last_print = Some(now);
        }
        if plan.breaktrace.is_some() {
            let r = rt.telemetry().recorder_stats();
            if r.written + r.failed > 0 {
                break "breaktrace";
            }
        }
        let wait = deadline.map_or(POLL, |d| d.saturating_duration_since(now).min(POLL));
        match lfrt::os::wait_termination(wait)? {
            Some(lfrt::os::TRACE_SIGNAL) => rt.telemetry().trace_now(),
            Some(_) => break "signal",
            None => {}
        }
    };
    let elapsed = began.elapsed();
    let recorder = rt.telemetry().recorder_stats();
    // Joins every pool thread: from here on the timers' statistics are final.
    let metrics = rt.shutdown()?;

    let lanes: Vec<LaneInfo> = cfg
        .lanes
        .iter()
        .zip(metrics)
        .zip(shared)
        .map(|((g, m), shared)| LaneInfo {
            metrics: m,
            policy: policy_name(g.policy),
            cpus: g.cpus.clone(),
            shared,
        })
        .collect();
    let keys: Vec<TimerKey> = timers
        .iter()
        .map(|(spec, stats)| TimerKey {
            spec: spec.clone(),
            stats: stats.clone(),
        })
        .collect();
    let (timers, lanes) = report::collect(&keys, &lanes, plan.unit, plan.histogram);

    // Final status, with the figures the summary and JSON give: in place of the live lines on
    // a terminal, else a last block.
    let lines: Vec<String> = timers
        .iter()
        .zip(&keys)
        .map(|(t, k)| Status::of_result(t, k.stats.last_ns.load(Relaxed)).line(plan.unit))
        .collect();
    draw_status(&lines, policy, tty && drawn, tty && drawn)?;
    Ok(CyclicReport {
        timers,
        lanes,
        stopped_by,
        elapsed,
        started,
        recorder: plan.breaktrace.as_ref().map(|_| recorder),
    })
}

/// Writes the status block: the policy line and a blank line (`header`), then one line per
/// timer. `in_place` first moves the terminal cursor up over the block drawn last time, so the
/// live lines are rewritten where they stand.
fn draw_status(
    lines: &[String],
    policy: &str,
    in_place: bool,
    header: bool,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if in_place {
        write!(out, "\x1b[{}A", lines.len() + 2)?;
    }
    if header {
        writeln!(out, "{}\n", report::policy_line(policy))?;
    }
    for l in lines {
        writeln!(out, "{l}")?;
    }
    out.flush()
}
