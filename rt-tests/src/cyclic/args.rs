//! The command line (cyclictest's options) and the plan it maps to: lanes and timers.

use crate::overrides::EchoWork;
use lfrt::MAX_LANE_THREADS;
use lfrt::{Deadline, HandlerConfig, LaneConfig, Policy, Promotion, RtMode, RuntimeConfig};
use std::path::PathBuf;
use std::time::Duration;

/// Shortest timer interval accepted (µs), as for `kind = "timer"` handlers in configuration
/// files: shorter periods at a real-time priority leave too little CPU to anything else.
pub const MIN_INTERVAL_US: u64 = 50;
/// Longest timer interval accepted (µs).
pub const MAX_INTERVAL_US: u64 = 10_000_000;
/// Descriptors a run needs besides its timerfds and its threads' parkers, per lane (epoll set,
/// wake-up eventfds), on top of those already open when the plan is made: a generous estimate,
/// so the check errs towards a clear message.
const FDS_PER_LANE: u64 = 8;
const FDS_SPARE: u64 = 32;
/// Descriptors of one Leader/Followers pool thread's parker (epoll set, eventfd, timerfd).
const FDS_PER_PARKER: u64 = 3;
/// Name of the lane built from the flags (thread names are `lf-cyclic-<n>`).
pub const GROUP_NAME: &str = "cyclic";
/// Per-thread buffer of the flag-built lane: timer handlers read 8 bytes, so the runtime's
/// 64 KiB default would only add memory to lock and pre-fault.
const BUFFER_BYTES: usize = 4096;

/// `lfrt cyclic`: cyclictest's options, measuring timer dispatch through the lfrt runtime.
///
/// Options keep cyclictest's letters, units and defaults where they apply (see the module
/// docs of [`crate::cyclic`] for how cyclictest's threads map onto a Leader/Followers lane).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(disable_help_flag = true)]
pub struct CyclicArgs {
    /// Print help (-h is --histogram, as in cyclictest).
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,

    /// Priority of the timer lane (SCHED_FIFO 1..=99; 0 = SCHED_OTHER) [default: 0].
    #[arg(short = 'p', long = "priority", value_name = "PRIO", value_parser = clap::value_parser!(u8).range(0..=99))]
    pub priority: Option<u8>,

    /// Scheduling policy of the lane: other, fifo, rr or deadline [default: fifo for PRIO
    /// 1..=99, other for 0]. With deadline, PRIO only ranks the lane (default 1) and the
    /// --dl-* options give each pool thread's reservation.
    #[arg(long = "policy", value_name = "NAME", value_parser = parse_policy)]
    pub policy: Option<Policy>,

    /// --policy deadline: CPU time each pool thread may use per period, in µs
    /// [default: a tenth of the period].
    #[arg(long = "dl-runtime", value_name = "US")]
    pub dl_runtime: Option<u64>,

    /// --policy deadline: relative deadline in µs [default: the period].
    #[arg(long = "dl-deadline", value_name = "US")]
    pub dl_deadline: Option<u64>,

    /// --policy deadline: reservation period in µs [default: INTV, the -i interval].
    #[arg(long = "dl-period", value_name = "US")]
    pub dl_period: Option<u64>,

    /// Base interval of the timers in µs [default: 1000].
    #[arg(short = 'i', long = "interval", value_name = "INTV")]
    pub interval: Option<u64>,

    /// Distance of the timer intervals in µs: timer k fires every INTV + k*DIST; ignored
    /// with -h, as in cyclictest [default: 500].
    #[arg(short = 'd', long = "distance", value_name = "DIST")]
    pub distance: Option<u64>,

    /// Align the timers: all start together, timer k USEC later than timer 0
    /// [default: unaligned, timer k of n offset by k/n of its lane's first interval].
    #[arg(short = 'A', long = "aligned", value_name = "USEC")]
    pub aligned: Option<u64>,

    /// Number of timers; without NUM, one per available CPU; as many as RLIMIT_NOFILE leaves
    /// descriptors for [default: 1].
    #[arg(short = 't', long = "threads", value_name = "NUM", num_args = 0..=1, default_missing_value = "0")]
    pub threads: Option<usize>,

    /// Pool threads of the lane [default: the number of timers, at most 64].
    #[arg(long = "pool-threads", value_name = "N")]
    pub pool_threads: Option<usize>,

    /// How the lane's threads share its events: priority, lifo, fifo (a leader promotes the
    /// next follower) or concurrent (every idle thread waits in epoll_wait) [default: priority].
    #[arg(long = "promotion", value_name = "NAME", value_parser = parse_promotion)]
    pub promotion: Option<Promotion>,

    /// Pin the lane's threads to CPUSET (e.g. 1 or 0-1,3); without CPUSET, to every
    /// available CPU [default: not pinned].
    #[arg(short = 'a', long = "affinity", value_name = "CPUSET", num_args = 0..=1, default_missing_value = "")]
    pub affinity: Option<String>,

    /// Number of cycles per timer; 0 = endless [default: 0].
    #[arg(
        short = 'l',
        long = "loops",
        value_name = "LOOPS",
        default_value_t = 0,
        hide_default_value = true
    )]
    pub loops: u64,

    /// Length of the run: seconds, or append s, m, h or d (30, 30s, 10m, 1h, 1d)
    /// [default: until the loops are done or SIGINT/SIGTERM].
    #[arg(short = 'D', long = "duration", value_name = "TIME", value_parser = crate::duration::parse)]
    pub duration: Option<Duration>,

    /// Lock current and future memory allocations (mlockall).
    #[arg(short = 'm', long = "mlockall")]
    pub mlockall: bool,

    /// Dump a latency histogram after the run; US is the number of buckets (1 µs each, 1 ns
    /// with -N); larger latencies count as overflows.
    #[arg(short = 'h', long = "histogram", value_name = "US", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub histogram: Option<u64>,

    /// Write the -h histogram to PATH instead of stdout.
    #[arg(long = "histfile", value_name = "PATH")]
    pub histfile: Option<PathBuf>,

    /// Print only the final status and summary.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// Write the final results to FILE as JSON (cyclictest's shape plus lfrt's fields).
    #[arg(long = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Print results in ns instead of µs.
    #[arg(short = 'N', long = "nsecs")]
    pub nsecs: bool,

    /// Do not hold /dev/cpu_dma_latency (deep C-states stay allowed).
    #[arg(long = "laptop")]
    pub laptop: bool,

    /// Value written to /dev/cpu_dma_latency for the run, in µs [default: 0].
    #[arg(
        long = "latency",
        value_name = "PM_QOS",
        default_value_t = 0,
        hide_default_value = true
    )]
    pub latency: i32,

    /// Stop the run when a cycle's latency exceeds US and write the flight recorder's window
    /// around it (cyclictest's --breaktrace): lfrt's samples of every lane and, as root, the
    /// kernel's scheduling, IRQ and timer events for the lanes' CPUs.
    #[arg(short = 'b', long = "breaktrace", value_name = "US", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub breaktrace: Option<u64>,

    /// Where -b writes the window, as a Chrome trace (Perfetto, chrome://tracing,
    /// `lfrt explain`, `lfrt plot`) [default: lfrt-cyclic-trace.json].
    #[arg(long = "trace", value_name = "FILE", requires = "breaktrace")]
    pub trace: Option<PathBuf>,

    /// Run the lanes of a configuration file instead: each `kind = "timer"` handler's timers
    /// are measured in their own lane, at that lane's priority.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Where `-b` writes its window without `--trace`.
pub const DEFAULT_TRACE: &str = "lfrt-cyclic-trace.json";

fn parse_promotion(s: &str) -> Result<Promotion, String> {
    match s {
        "priority" => Ok(Promotion::Priority),
        "lifo" => Ok(Promotion::Lifo),
        "fifo" => Ok(Promotion::Fifo),
        "concurrent" => Ok(Promotion::Concurrent),
        _ => Err(format!("`{s}`: use priority, lifo, fifo or concurrent")),
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    match s {
        "fifo" => Ok(Policy::Fifo),
        "rr" => Ok(Policy::Rr),
        "other" | "normal" => Ok(Policy::Other),
        "deadline" => Ok(Policy::Deadline),
        _ => Err(format!("`{s}`: use other, fifo, rr or deadline")),
    }
}

/// Parses a CPU list such as `1`, `0-1,3`.
pub fn parse_cpuset(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("`{part}`: expected a CPU number or a range such as 0-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    if cpus.is_empty() {
        return Err(format!("`{s}`: no CPU given"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Output unit: cyclictest's µs, or ns with `-N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Microseconds (values truncated, as cyclictest's `calcdiff`).
    Us,
    /// Nanoseconds.
    Ns,
}

impl Unit {
    /// Nanoseconds per unit.
    pub fn ns(self) -> u64 {
        match self {
            Unit::Us => 1000,
            Unit::Ns => 1,
        }
    }

    /// `ns` in this unit, truncated.
    pub fn of(self, ns: u64) -> u64 {
        ns / self.ns()
    }

    /// `ns` in this unit, as a fraction.
    pub fn of_f(self, ns: f64) -> f64 {
        ns / self.ns() as f64
    }

    /// `"us"` or `"ns"`.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Us => "us",
            Unit::Ns => "ns",
        }
    }
}

/// One measured timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerSpec {
    /// Index of its lane in the runtime configuration.
    pub lane: usize,
    /// Period (µs).
    pub interval_us: u64,
    /// Start offset (µs): the first expiry is at the common start + `phase_us` + `interval_us`.
    pub phase_us: u64,
}

/// What a run does: the runtime configuration (without timer handlers: the harness registers
/// its own, counting timers), the timers, and the reporting options.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Lanes to start; their `kind = "timer"` handlers moved into `timers`.
    pub config: RuntimeConfig,
    /// The busy work of `config`'s echoes (`work_us` in a `--config` file).
    pub work: EchoWork,
    /// The timers, in report order (`T: 0`, `T: 1`, ...).
    pub timers: Vec<TimerSpec>,
    /// Cycles per timer (0 = endless).
    pub loops: u64,
    /// Run length (`None` = until the loops are done or a signal).
    pub duration: Option<Duration>,
    /// Output unit.
    pub unit: Unit,
    /// `-h` bucket count.
    pub histogram: Option<u64>,
    /// `--histfile`.
    pub histfile: Option<PathBuf>,
    /// `-q`.
    pub quiet: bool,
    /// `--json`.
    pub json: Option<PathBuf>,
    /// Value to hold in `/dev/cpu_dma_latency`, unless `--laptop`.
    pub dma_latency: Option<i32>,
    /// `-b`: the threshold in µs, and the file the window goes to.
    pub breaktrace: Option<(u64, PathBuf)>,
}

impl Plan {
    /// Maps the options onto lanes and timers (see the module docs), and checks them.
    ///
    /// # Errors
    /// A message naming the offending option.
    pub fn from_args(a: &CyclicArgs) -> Result<Plan, String> {
        let (mut config, mut timers, work) = match &a.config {
            Some(path) => from_file(a, path)?,
            None => {
                let (config, timers) = from_flags(a, &lfrt::os::available_cpus())?;
                (config, timers, EchoWork::default())
            }
        };
        let breaktrace = a.breaktrace.map(|us| {
            let file = a
                .trace
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_TRACE));
            (us, file)
        });
        if let Some((us, file)) = &breaktrace {
            // Every lane triggers at the threshold; the window is written next to FILE and
            // renamed to it. The kernel's events are recorded when tracefs is writable (root),
            // as cyclictest's -b uses ftrace.
            for g in &mut config.lanes {
                g.trace_over_us = Some(*us);
            }
            let dir = file
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), PathBuf::from);
            if !dir.is_dir() {
                return Err(format!(
                    "--trace {}: no directory {}",
                    file.display(),
                    dir.display()
                ));
            }
            config.trace.dir = dir;
            config.trace.kernel = lfrt::os::KernelTrace::may_open().is_ok();
            config.trace.window_ms = config.trace.window_ms.max(1);
        }
        assign_phases(&mut timers, a.aligned);
        check_open_files(&config, timers.len())?;
        if a.histfile.is_some() && a.histogram.is_none() {
            return Err("--histfile needs -h/--histogram".into());
        }
        Ok(Plan {
            config,
            work,
            timers,
            loops: a.loops,
            duration: a.duration.filter(|d| !d.is_zero()),
            unit: if a.nsecs { Unit::Ns } else { Unit::Us },
            histogram: a.histogram,
            histfile: a.histfile.clone(),
            quiet: a.quiet,
            json: a.json.clone(),
            dma_latency: if a.laptop { None } else { Some(a.latency) },
            breaktrace,
        })
    }
}

/// Without `--config`: one lane at `-p` with `-t` timers and as many pool threads.
pub(crate) fn from_flags(
    a: &CyclicArgs,
    cpus: &[usize],
) -> Result<(RuntimeConfig, Vec<TimerSpec>), String> {
    let policy = a.policy.unwrap_or(if a.priority.unwrap_or(0) > 0 {
        Policy::Fifo
    } else {
        Policy::Other
    });
    // A deadline lane's priority only ranks it: any valid one will do when none is given.
    let priority = match (policy, a.priority) {
        (Policy::Deadline, None | Some(0)) => 1,
        (_, p) => p.unwrap_or(0),
    };
    let dl_flags = [
        (a.dl_runtime.is_some(), "--dl-runtime"),
        (a.dl_deadline.is_some(), "--dl-deadline"),
        (a.dl_period.is_some(), "--dl-period"),
    ];
    if policy != Policy::Deadline {
        if let Some((_, flag)) = dl_flags.iter().find(|(set, _)| *set) {
            return Err(format!("{flag} needs --policy deadline"));
        }
    }
    match policy {
        Policy::Other if priority > 0 => {
            return Err(format!(
                "-p {priority} needs --policy fifo or rr (SCHED_OTHER has no priority)"
            ))
        }
        Policy::Fifo | Policy::Rr if priority == 0 => {
            return Err("--policy fifo/rr needs -p 1..=99".into())
        }
        _ => {}
    }
    let timers = match a.threads {
        None => 1,
        Some(0) => cpus.len().max(1),
        Some(n) => n,
    };
    let interval = a.interval.unwrap_or(1000);
    // cyclictest gives every thread the same interval when it records a histogram.
    let distance = if a.histogram.is_some() {
        0
    } else {
        a.distance.unwrap_or(500)
    };
    let last = interval.saturating_add(distance.saturating_mul(timers as u64 - 1));
    if interval < MIN_INTERVAL_US || last > MAX_INTERVAL_US {
        return Err(format!("-i {interval} -d {distance} -t {timers}: intervals must stay within {MIN_INTERVAL_US}..={MAX_INTERVAL_US} µs"));
    }
    let pool = a.pool_threads.unwrap_or(timers.min(MAX_LANE_THREADS));
    if pool == 0 || pool > MAX_LANE_THREADS {
        return Err(format!(
            "--pool-threads {pool}: must be 1..={MAX_LANE_THREADS}"
        ));
    }
    let mut g = LaneConfig::new(GROUP_NAME, policy, priority);
    g.threads = pool;
    g.promotion = a.promotion.unwrap_or_default();
    g.buffer_bytes = BUFFER_BYTES;
    // The handle table holds exactly the timers: it grows with -t, not with a fixed cap.
    g.max_handles = timers;
    if policy == Policy::Deadline {
        let period_us = a.dl_period.unwrap_or(interval);
        g.deadline = Some(Deadline {
            runtime_us: a.dl_runtime.unwrap_or(period_us / 10),
            deadline_us: a.dl_deadline.unwrap_or(period_us),
            period_us,
        });
    }
    g.cpus = match a.affinity.as_deref() {
        None => None,
        Some("") => Some(cpus.to_vec()),
        Some(set) => Some(parse_cpuset(set).map_err(|e| format!("-a {e}"))?),
    };
    let config = RuntimeConfig {
        trace: Default::default(),
        // cyclictest refuses to run when it cannot get the policy it was asked for.
        rt: if policy == Policy::Other {
            RtMode::BestEffort
        } else {
            RtMode::Required
        },
        lock_memory: a.mlockall,
        lanes: vec![g],
        bands: Vec::new(),
    };
    config.validate_with_cpus(cpus).map_err(|e| {
        let flags = match e.field {
            "deadline" => " (--dl-runtime, --dl-deadline, --dl-period)",
            "max_handles" => " (-t)",
            _ => "",
        };
        format!("{}{flags}: {}", e.path(), e.message)
    })?;
    let timers = (0..timers as u64)
        .map(|k| TimerSpec {
            lane: 0,
            interval_us: interval + k * distance,
            phase_us: 0,
        })
        .collect();
    Ok((config, timers))
}

/// Sets each timer's start offset. With `-A USEC`, cyclictest's aligned mode: timer k (global
/// `T:` index) starts k·USEC after timer 0. Without it, the timers are unaligned, as
/// cyclictest's threads (each starts at its own clock reading): here deterministically, timer j
/// of a lane's n timers starts j/n of the lane's first interval later, so timers of equal
/// period do not expire at the same instant.
pub(crate) fn assign_phases(timers: &mut [TimerSpec], aligned: Option<u64>) {
    if let Some(usec) = aligned {
        for (k, t) in timers.iter_mut().enumerate() {
            t.phase_us = k as u64 * usec;
        }
        return;
    }
    let lanes = timers.iter().map(|t| t.lane).max().map_or(0, |g| g + 1);
    for g in 0..lanes {
        let members: Vec<usize> = (0..timers.len()).filter(|&i| timers[i].lane == g).collect();
        let (n, base) = match members.first() {
            Some(&first) => (members.len() as u64, timers[first].interval_us),
            None => continue,
        };
        for (j, &i) in members.iter().enumerate() {
            timers[i].phase_us = j as u64 * base / n;
        }
    }
}

/// With `--config`: the file's lanes; each timer handler becomes measured timers. The other
/// handlers stay, with their busy work.
fn from_file(
    a: &CyclicArgs,
    path: &std::path::Path,
) -> Result<(RuntimeConfig, Vec<TimerSpec>, EchoWork), String> {
    let conflicting = [
        (a.priority.is_some(), "-p"),
        (a.policy.is_some(), "--policy"),
        (a.dl_runtime.is_some(), "--dl-runtime"),
        (a.dl_deadline.is_some(), "--dl-deadline"),
        (a.dl_period.is_some(), "--dl-period"),
        (a.interval.is_some(), "-i"),
        (a.distance.is_some(), "-d"),
        (a.threads.is_some(), "-t"),
        (a.pool_threads.is_some(), "--pool-threads"),
        (a.promotion.is_some(), "--promotion"),
        (a.affinity.is_some(), "-a"),
    ];
    if let Some((_, flag)) = conflicting.iter().find(|(set, _)| *set) {
        return Err(format!("{flag} cannot be combined with --config: lanes, priorities and timers come from the file"));
    }
    // The command's loader, so a file `lfrt run` takes (with its `[runtime] metrics` and
    // `work_us`) is taken here too; cyclic serves no metrics, and its echoes burn their work.
    let loaded = crate::overrides::load(path, &[]).map_err(|e| e.to_string())?;
    let mut work = loaded.work;
    let (mut cfg, timers) = split_timers(loaded.config, &mut work);
    if timers.is_empty() {
        return Err(format!(
            "{}: no `kind = \"timer\"` handler to measure",
            path.display()
        ));
    }
    cfg.lock_memory |= a.mlockall;
    Ok((cfg, timers, work))
}

/// Checks that `timers` timerfds, with the runtime's own descriptors and those already open,
/// fit the soft `RLIMIT_NOFILE`: otherwise the run would fail halfway through registering its
/// timers with a bare `EMFILE`.
fn check_open_files(config: &RuntimeConfig, timers: usize) -> Result<(), String> {
    use nix::sys::resource::{getrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Ok(());
    };
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    // A Leader/Followers thread parks on its own epoll set, eventfd and timerfd.
    let parkers: u64 = config
        .lanes
        .iter()
        .filter(|g| g.promotion != lfrt::Promotion::Concurrent)
        .map(|g| FDS_PER_PARKER * g.threads as u64)
        .sum();
    let others = open + FDS_SPARE + FDS_PER_LANE * config.lanes.len() as u64 + parkers;
    let needed = timers as u64 + others;
    if needed > soft {
        return Err(format!(
            "{timers} timers need {timers} timerfds plus about {others} other descriptors \
             ({needed}), more than RLIMIT_NOFILE allows (open files: soft limit {soft}, hard \
             limit {hard}); raise it (ulimit -n {needed}, or prlimit --nofile={needed}) or use \
             fewer timers (-t)"
        ));
    }
    Ok(())
}

/// Moves every `kind = "timer"` handler out of the configuration, as timer specs in lane
/// order; other handlers (e.g. an echo service as background load) stay, and `work` follows
/// them to their new indices.
pub(crate) fn split_timers(
    mut cfg: RuntimeConfig,
    work: &mut EchoWork,
) -> (RuntimeConfig, Vec<TimerSpec>) {
    let mut timers = Vec::new();
    for (gi, g) in cfg.lanes.iter_mut().enumerate() {
        let mut hi = 0;
        while hi < g.handlers.len() {
            let HandlerConfig::Timer {
                interval_us,
                count,
                distance_us,
            } = g.handlers[hi]
            else {
                hi += 1;
                continue;
            };
            timers.extend((0..count as u64).map(|k| TimerSpec {
                lane: gi,
                interval_us: interval_us + k * distance_us,
                phase_us: 0,
            }));
            g.handlers.remove(hi);
            work.remove_handler(gi, hi);
        }
    }
    (cfg, timers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{FromArgMatches, Parser, Subcommand};

    /// The same wiring as the `lfrt` binary: `lfrt cyclic ...`.
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(Subcommand)]
    enum Cmd {
        Cyclic(CyclicArgs),
    }

    fn parse(args: &str) -> Result<CyclicArgs, clap::Error> {
        let argv = ["lfrt", "cyclic"]
            .into_iter()
            .chain(args.split_whitespace());
        let m = <Cli as clap::CommandFactory>::command().try_get_matches_from(argv)?;
        let Cmd::Cyclic(a) = Cli::from_arg_matches(&m)?.cmd;
        Ok(a)
    }

    fn plan(args: &str) -> Result<(RuntimeConfig, Vec<TimerSpec>), String> {
        from_flags(&parse(args).unwrap(), &[0, 1])
    }

    #[test]
    fn dash_h_is_the_histogram_not_help() {
        assert_eq!(parse("-h 100").unwrap().histogram, Some(100));
        assert_eq!(parse("-h100").unwrap().histogram, Some(100));
        assert_eq!(parse("--histogram=250").unwrap().histogram, Some(250));
        assert_eq!(parse("--histogram 250").unwrap().histogram, Some(250));
        assert!(parse("-h 0").is_err());
        let e = parse("--help").map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(e.to_string().contains("--histogram"), "{e}");
    }

    #[test]
    fn each_flag_parses() {
        let a = parse("-p 80 -i 250 -d 100 -t 3 -l 200 -D 10m -m -a 1 -q --json=/tmp/x.json -N")
            .unwrap();
        assert_eq!(a.priority, Some(80));
        assert_eq!(a.interval, Some(250));
        assert_eq!(a.distance, Some(100));
        assert_eq!(a.threads, Some(3));
        assert_eq!(a.loops, 200);
        assert_eq!(a.duration, Some(Duration::from_secs(600)));
        assert!(a.mlockall && a.quiet && a.nsecs);
        assert_eq!(a.affinity.as_deref(), Some("1"));
        assert_eq!(a.json, Some(PathBuf::from("/tmp/x.json")));
        let long = parse(
            "--priority=70 --interval=2000 --distance=0 --threads=2 --loops=5 --duration=30s --mlockall --affinity=0-1 --quiet --json /tmp/y --nsecs",
        )
        .unwrap();
        assert_eq!(
            (
                long.priority,
                long.interval,
                long.distance,
                long.threads,
                long.loops
            ),
            (Some(70), Some(2000), Some(0), Some(2), 5)
        );
        assert_eq!(long.duration, Some(Duration::from_secs(30)));
        assert!(long.mlockall && long.quiet && long.nsecs);
        assert_eq!(long.affinity.as_deref(), Some("0-1"));
        assert_eq!(
            parse("--config configs/cyclic.toml").unwrap().config,
            Some(PathBuf::from("configs/cyclic.toml"))
        );
        let d = parse("").unwrap();
        assert_eq!(
            (
                d.priority,
                d.threads,
                d.loops,
                d.duration,
                d.histogram,
                d.mlockall,
                d.quiet,
                d.nsecs
            ),
            (None, None, 0, None, None, false, false, false)
        );
        assert!(parse("-p 100").is_err());
        assert!(parse("-x").is_err());
    }

    #[test]
    fn threads_and_affinity_take_an_optional_value() {
        assert_eq!(parse("-t").unwrap().threads, Some(0));
        assert_eq!(parse("-t -p 5").unwrap().threads, Some(0));
        assert_eq!(parse("-t4").unwrap().threads, Some(4));
        assert_eq!(parse("-a").unwrap().affinity.as_deref(), Some(""));
        assert_eq!(parse("-a -t 2").unwrap().affinity.as_deref(), Some(""));
        assert_eq!(parse("-a 0,1").unwrap().affinity.as_deref(), Some("0,1"));
    }

    #[test]
    fn cpusets() {
        assert_eq!(parse_cpuset("1"), Ok(vec![1]));
        assert_eq!(parse_cpuset("3,0-1"), Ok(vec![0, 1, 3]));
        assert_eq!(parse_cpuset("0-1,1"), Ok(vec![0, 1]));
        assert!(parse_cpuset("1-0").is_err());
        assert!(parse_cpuset("a").is_err());
        assert!(parse_cpuset("").is_err());
    }

    #[test]
    fn flags_map_to_one_lane_of_timers() {
        let (cfg, timers) = plan("-p 80 -i 1000 -t 3").unwrap();
        assert_eq!(cfg.lanes.len(), 1);
        let g = &cfg.lanes[0];
        assert_eq!(
            (g.priority, g.policy, g.threads, g.cpus.clone()),
            (80, Policy::Fifo, 3, None)
        );
        assert_eq!(cfg.rt, RtMode::Required);
        assert!(!cfg.lock_memory);
        let intervals: Vec<u64> = timers.iter().map(|t| t.interval_us).collect();
        assert_eq!(intervals, [1000, 1500, 2000]);

        let (cfg, timers) = plan("").unwrap();
        assert_eq!(
            (cfg.lanes[0].policy, cfg.lanes[0].priority, cfg.rt),
            (Policy::Other, 0, RtMode::BestEffort)
        );
        assert_eq!(
            timers,
            [TimerSpec {
                lane: 0,
                interval_us: 1000,
                phase_us: 0
            }]
        );

        let (cfg, timers) = plan("-t -a -m -p 10 --policy rr -d 0 --pool-threads 1").unwrap();
        assert_eq!(timers.len(), 2, "-t without NUM: one timer per CPU");
        assert!(timers.iter().all(|t| t.interval_us == 1000));
        assert_eq!(
            (
                cfg.lanes[0].cpus.clone(),
                cfg.lanes[0].threads,
                cfg.lanes[0].policy
            ),
            (Some(vec![0, 1]), 1, Policy::Rr)
        );
        assert!(cfg.lock_memory);

        let (_, timers) = plan("-t 3 -h 100 -d 700").unwrap();
        assert!(
            timers.iter().all(|t| t.interval_us == 1000),
            "-h: the same interval for every timer, as cyclictest"
        );
        assert_eq!(plan("-a 1").unwrap().0.lanes[0].cpus, Some(vec![1]));
        assert!(plan("-a 5").is_err(), "CPU 5 does not exist");
        assert!(plan("-i 10").is_err());
        assert!(plan("--policy fifo").is_err());
        assert!(plan("-p 5 --policy other").is_err());
        assert_eq!(
            plan("-t 4096 -d 0").unwrap().1.len(),
            4096,
            "no cap at 256 timers"
        );
        assert_eq!(plan("-t 4096 -d 0").unwrap().0.lanes[0].max_handles, 4096);
        assert!(plan("-t 300").is_ok());
        assert!(plan("--pool-threads 65").is_err());
    }

    #[test]
    fn deadline_policy_takes_its_reservation_from_the_dl_flags() {
        let (cfg, _) = plan("--policy deadline -i 500 -t 2").unwrap();
        let g = &cfg.lanes[0];
        assert_eq!(
            (g.policy, g.priority, cfg.rt),
            (Policy::Deadline, 1, RtMode::Required)
        );
        assert_eq!(
            g.deadline,
            Some(Deadline {
                runtime_us: 50,
                deadline_us: 500,
                period_us: 500
            }),
            "defaults: period = -i, deadline = period, runtime = a tenth"
        );
        let (cfg, _) =
            plan("--policy deadline -p 90 --dl-runtime 100 --dl-deadline 400 --dl-period 1000")
                .unwrap();
        assert_eq!(cfg.lanes[0].priority, 90);
        assert_eq!(
            cfg.lanes[0].deadline,
            Some(Deadline {
                runtime_us: 100,
                deadline_us: 400,
                period_us: 1000
            })
        );
        let e = plan("-p 80 --dl-runtime 100").unwrap_err();
        assert!(e.contains("--dl-runtime needs --policy deadline"), "{e}");
        let e = plan("--policy deadline --dl-runtime 600 --dl-deadline 500").unwrap_err();
        assert!(
            e.contains("--dl-runtime, --dl-deadline, --dl-period"),
            "{e}"
        );
        let e = plan("--policy deadline -a 1").unwrap_err();
        assert!(e.contains("root domain"), "{e}");
        let a = parse("--config configs/default.toml --dl-period 1000").unwrap();
        let e = Plan::from_args(&a).unwrap_err();
        assert!(
            e.contains("--dl-period cannot be combined with --config"),
            "{e}"
        );
    }

    #[test]
    fn phases_are_spread_unless_aligned() {
        let spec = |lane, interval_us| TimerSpec {
            lane,
            interval_us,
            phase_us: 99,
        };
        let mut t = vec![
            spec(0, 1000),
            spec(0, 1500),
            spec(0, 2000),
            spec(1, 400),
            spec(1, 400),
        ];
        assign_phases(&mut t, None);
        let phases: Vec<u64> = t.iter().map(|t| t.phase_us).collect();
        assert_eq!(phases, [0, 333, 666, 0, 200]);
        assign_phases(&mut t, Some(50));
        let phases: Vec<u64> = t.iter().map(|t| t.phase_us).collect();
        assert_eq!(phases, [0, 50, 100, 150, 200]);
        assert_eq!(parse("-A 0").unwrap().aligned, Some(0));
        assert_eq!(parse("--aligned=20").unwrap().aligned, Some(20));
    }

    #[test]
    fn config_timers_become_measured_timers() {
        let cfg = lfrt::parse_config(
            r#"
            [[lane]]
            name = "hi"
            priority = 80
            [[lane.handler]]
            kind = "timer"
            interval_us = 500
            count = 2
            distance_us = 100
            [[lane]]
            name = "lo"
            priority = 20
            [[lane.handler]]
            kind = "timer"
            interval_us = 2000
            [[lane.handler]]
            kind = "udp-echo"
            bind = "127.0.0.1:0"
            [[lane.handler]]
            kind = "timer"
            interval_us = 3000
            "#,
        )
        .unwrap();
        let (echo, moved) = (
            lfrt::Section::Handler {
                lane: 1,
                handler: 1,
            },
            lfrt::Section::Handler {
                lane: 1,
                handler: 0,
            },
        );
        let mut work = EchoWork::default();
        work.set(echo, 7);
        let (cfg, timers) = split_timers(cfg, &mut work);
        let intervals: Vec<(usize, u64)> = timers.iter().map(|t| (t.lane, t.interval_us)).collect();
        assert_eq!(intervals, [(0, 500), (0, 600), (1, 2000), (1, 3000)]);
        assert!(cfg.lanes[0].handlers.is_empty());
        assert_eq!(cfg.lanes[1].handlers.len(), 1, "the echo service stays");
        assert_eq!(
            (work.at(moved), work.at(echo)),
            (7, 0),
            "with its busy work, at its new index"
        );
    }

    #[test]
    fn config_excludes_layout_flags() {
        let a = parse("--config configs/default.toml -p 80").unwrap();
        let e = Plan::from_args(&a).unwrap_err();
        assert!(e.contains("-p cannot be combined with --config"), "{e}");
        let a = parse("--histfile /tmp/h").unwrap();
        assert!(Plan::from_args(&a)
            .unwrap_err()
            .contains("--histfile needs"));
    }
}
