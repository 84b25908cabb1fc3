//! The `lfrt` command: check and run configurations, and the measurement harnesses.

use clap::{CommandFactory, Parser, Subcommand};
use lfrt::LaneMetrics;
use lfrt_tools::measured;
use lfrt_tools::overrides::{EchoWork, Override, OverrideSource, Provenance};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOC: lfrt::CountingAlloc = lfrt::CountingAlloc;

#[derive(Parser)]
#[command(
    name = "lfrt",
    version,
    about = "Real-time Leader/Followers runtime for Linux"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a configuration and print the plan (lanes, priorities, threads, CPUs, handlers,
    /// preallocated memory, rate warnings).
    Check {
        /// Configuration file (TOML); default: $LFRT_CONFIG.
        config: Option<PathBuf>,
        #[command(flatten)]
        overrides: SetArgs,
    },
    /// Print the plan, run the configuration until --duration ends or SIGINT/SIGTERM arrives,
    /// and print metrics.
    Run {
        /// Configuration file (TOML); default: $LFRT_CONFIG.
        config: Option<PathBuf>,
        #[command(flatten)]
        overrides: SetArgs,
        /// Stop after TIME: `30` or `30s` seconds, `500ms`, `10m`, `1h`, `1d` (cyclictest's -D
        /// forms). Default, or 0: run until SIGINT/SIGTERM.
        #[arg(short = 'D', long, value_name = "TIME", value_parser = lfrt_tools::duration::parse)]
        duration: Option<Duration>,
        /// Also write the final metrics as JSON to this file (fields: docs/operations.md,
        /// "lfrt run --json").
        #[arg(long)]
        json: Option<PathBuf>,
        /// Serve live metrics in Prometheus text format at ADDR (GET /metrics): the override
        /// `runtime.metrics=ADDR`, given after every --set (so it wins over them, LFRT_SET and the
        /// file).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
        /// Print a status block every second (events/s, p99, drops per lane) even when stdout
        /// is not a terminal; on a terminal it is on by default and redrawn in place.
        #[arg(long)]
        status: bool,
    },
    /// Draw results as SVG or PNG: the latency histogram of an lfrt cyclic or cyclictest JSON,
    /// or of each lane of an lfrt run JSON (two such files are overlaid), or high p99 against N
    /// of an lfrt inversion JSON, or the timeline around the worst dispatch of a
    /// flight-recorder trace; the kind is told from the content.
    Plot {
        /// One result JSON, or two latency JSONs to overlay (e.g. cyclictest's and lfrt's).
        #[arg(required = true, num_args = 1..=2, value_name = "RESULT.json")]
        inputs: Vec<PathBuf>,
        /// For a flight-recorder trace: the time drawn on each side of the worst dispatch
        /// (default 2ms; 0: the dispatch alone).
        #[arg(long, value_name = "TIME", value_parser = lfrt_tools::duration::parse)]
        around: Option<Duration>,
        /// The image to write; its extension picks the format: FILE.svg or FILE.png.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Image size in pixels.
        #[arg(long, value_name = "WxH", default_value_t = lfrt_tools::plot::Size::DEFAULT)]
        size: lfrt_tools::plot::Size,
    },
    /// Why the worst dispatch of a flight-recorder trace was late, step by step.
    ///
    /// Reads TRACE (a trace file the flight recorder wrote), takes the dispatch that fired it
    /// (or, for a window taken on demand, the one of the largest latency) and prints its chain
    /// with each step's duration and share: due time or kernel arrival, the IRQ before the
    /// wake-up, the wake-up of the lane thread, the thread running, the leader's wait
    /// returning, handler entry and end. It names the step that dominated, and what ran on the
    /// thread's CPU instead of it while it was runnable: another lane's thread, another process
    /// (comm:tid and priority), an IRQ, the idle task, or a time-shared task that could not be preempted (or the RT throttle).
    #[command(
        after_help = "Without kernel events in the trace (the kernel recorder was off: \
        [trace] kernel = true records them) only lfrt's own steps are shown: due, the wait \
        returning, handler entry and end.\n\n\
        The same trace opens in Perfetto (ui.perfetto.dev) or chrome://tracing, and \
        `lfrt plot TRACE -o FILE.svg` draws the time around the worst dispatch."
    )]
    Explain {
        /// The trace file (JSON) the flight recorder wrote.
        #[arg(value_name = "TRACE")]
        trace: PathBuf,
    },
    /// cyclictest-compatible timer latency through the runtime (-h is --histogram).
    Cyclic(lfrt_tools::cyclic::CyclicArgs),
    /// Priority-inversion experiments: lfrt lanes vs a single pool vs Half-Sync/Half-Reactive.
    Inversion(lfrt_tools::inversion::InversionArgs),
    /// Is this machine ready? What it and this process can do for real time, and for CONFIG.
    ///
    /// Kernel preemption, RT privileges and limits, the RT throttle, CPUs and power settings:
    /// one line per finding, ok/warn/fail, and under each that is not ok the fix.
    #[command(
        after_help = "With CONFIG, its needs are checked too: each lane's policy and \
        priority against the RT privilege, its CPUs, and with lock_memory the memory to lock.\n\n\
        Exit status: 0 when CONFIG (without one: SCHED_FIFO at some priority) can run as \
        intended; 1 when it cannot (a `fail` finding); 3 when it runs but not as intended \
        (rt = \"best-effort\" with real time refused: its lanes are flattened to time-sharing); \
        2 for bad arguments or a configuration the loader rejects (file:line: field)."
    )]
    Doctor {
        /// Configuration file (TOML) to check against this machine.
        config: Option<PathBuf>,
    },
    /// Print the shell completion script for SHELL to stdout.
    ///
    /// bash: `lfrt completions bash > /usr/share/bash-completion/completions/lfrt`;
    /// zsh: into a directory of $fpath as `_lfrt`; fish: `~/.config/fish/completions/lfrt.fish`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages into DIR: lfrt.1 and one lfrt-COMMAND.1 per command.
    Man {
        /// Directory to write the pages into (created if missing), e.g. /usr/local/share/man/man1.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Overrides of the file's values, without editing it.
#[derive(clap::Args)]
struct SetArgs {
    /// Override a value of the file: `--set lane.control.priority=90`, `--set lane.bulk.cpus=[1]`,
    /// `--set runtime.rt=required`, `--set band[0].bind=127.0.0.1:7100` (PATH is runtime.KEY,
    /// lane.NAME.KEY, lane.NAME.handler[I].KEY, lane.NAME.bound.KEY or band[I].KEY, I from 0;
    /// VALUE a TOML value, or a string). Repeatable. Precedence: --set over LFRT_SET over the file; LFRT_SET holds
    /// overrides separated by `;` or newlines.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
}

/// Reads the configuration: CONFIG or $LFRT_CONFIG, then LFRT_SET's overrides, then --set's,
/// then `shorthands` (flags such as `--metrics` that stand for one override); returns it with
/// where each overridden value came from.
fn load(
    config: Option<PathBuf>,
    set: &SetArgs,
    shorthands: impl IntoIterator<Item = Override>,
) -> Result<lfrt_tools::overrides::Loaded, Box<dyn std::error::Error>> {
    let path = config
        .or_else(|| std::env::var_os("LFRT_CONFIG").map(PathBuf::from))
        .ok_or("no configuration: give CONFIG or set LFRT_CONFIG")?;
    let env = std::env::var("LFRT_SET").unwrap_or_default();
    let overrides: Vec<Override> = env
        .split([';', '\n'])
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| (OverrideSource::Env, t))
        .chain(set.set.iter().map(|t| (OverrideSource::Flag, t.trim())))
        .map(|(source, text)| Override {
            source,
            text: text.to_string(),
        })
        .chain(shorthands)
        .collect();
    Ok(lfrt_tools::overrides::load(&path, &overrides)?)
}

/// The plan's lines for the values that do not come from the file: each with its override and
/// the file's line it replaces.
fn provenance(p: &[Provenance]) -> String {
    p.iter()
        .map(|p| {
            format!(
                "override {} from {}{}\n",
                p.path,
                p.set_by.label(),
                p.replaced
                    .as_ref()
                    .map_or(" (not in the file)".to_string(), |at| format!(
                        " (replaces {at})"
                    ))
            )
        })
        .collect()
}

fn init_tracing() {
    use tracing_subscriber::{fmt, EnvFilter};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true)
        .try_init();
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Check { config, overrides } => check(config, &overrides),
        Cmd::Run {
            config,
            overrides,
            duration,
            json,
            metrics,
            status,
        } => run(config, &overrides, duration, json, metrics, status),
        Cmd::Cyclic(args) => lfrt_tools::cyclic::run(&args),
        Cmd::Plot {
            inputs,
            output,
            size,
            around,
        } => lfrt_tools::timeline::plot_files(&inputs, &output, size, around)
            .map(|kind| println!("wrote {} ({kind:?})", output.display()))
            .map_err(Into::into),
        Cmd::Inversion(args) => lfrt_tools::inversion::run(&args),
        Cmd::Explain { trace } => explain(&trace),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "lfrt", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man { out } => man(&out),
        Cmd::Doctor { config } => match lfrt_tools::doctor::run(config.as_deref()) {
            Ok(report) => {
                print!("{report}");
                return ExitCode::from(report.verdict().exit_status());
            }
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lfrt: {e}");
            ExitCode::from(2)
        }
    }
}

/// `lfrt explain TRACE`: reads the window and prints the analysis of its worst dispatch.
fn explain(trace: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let window = lfrt::window::read_window(trace)
        .map_err(|e| format!("explain: cannot read {}: {e}", trace.display()))?;
    let explanation = lfrt_tools::explain::explain(&window).ok_or_else(|| {
        format!(
            "explain: {}: the window holds no dispatch to explain",
            trace.display()
        )
    })?;
    print!("{explanation}");
    Ok(())
}

/// Writes `lfrt.1` and one `lfrt-COMMAND.1` per command into `out`, from the same clap
/// definitions the command parses with.
fn man(out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out)
        .map_err(|e| format!("man: cannot create {}: {e}", out.display()))?;
    clap_mangen::generate_to(Cli::command(), out)
        .map_err(|e| format!("man: cannot write into {}: {e}", out.display()))?;
    println!("wrote man pages into {}", out.display());
    Ok(())
}

fn check(config: Option<PathBuf>, set: &SetArgs) -> Result<(), Box<dyn std::error::Error>> {
    // Validation (in `load`) refuses what `run` would fail on: ranges, colliding
    // addresses, a plan larger than memory (or RLIMIT_MEMLOCK with lock_memory), and ports
    // that cannot be bound now.
    let loaded = load(config, set, None)?;
    print!(
        "{}{}",
        plan(&loaded.config, &loaded.work),
        provenance(&loaded.provenance)
    );
    warn_exposed(&loaded.config);
    Ok(())
}

/// Warns on stderr about every built-in echo handler bound to a non-loopback address: an echo
/// answers anyone who can reach it, and a UDP echo reflects (and can amplify, with
/// `udp-echo`'s batches) traffic sent with a forged source address at a third party.
/// A warning, not an error: a benchmark across machines needs it.
fn warn_exposed(cfg: &lfrt::RuntimeConfig) {
    for (gi, g) in cfg.lanes.iter().enumerate() {
        for (hi, h) in g.handlers.iter().enumerate() {
            let (kind, bind) = match h {
                lfrt::HandlerConfig::UdpEcho { bind, .. } => ("udp-echo", bind),
                lfrt::HandlerConfig::TcpEcho { bind, .. } => ("tcp-echo", bind),
                _ => continue,
            };
            if !bind.ip().is_loopback() {
                eprintln!(
                    "lfrt: warning: lane[{gi}].handler[{hi}] ({kind}, lane `{}`) binds {bind}, \
                     not a loopback address: it echoes to anyone who can reach it{}. \
                     Bind 127.0.0.1 unless this is intended.",
                    g.name,
                    if kind == "udp-echo" {
                        ", and reflects datagrams with forged sources at third parties"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    for (bi, b) in cfg.bands.iter().enumerate() {
        if !b.bind.ip().is_loopback() {
            eprintln!(
                "lfrt: warning: band[{bi}] (udp-echo) binds {}, not a loopback address: it echoes \
                 to anyone who can reach it, and reflects datagrams with forged sources at third \
                 parties. Bind 127.0.0.1 unless this is intended.",
                b.bind
            );
        }
    }
}

/// The plan's line for a `[[band]]`: `band 127.0.0.1:7000 dscp 46->control default->bulk
/// (2 sockets, SO_REUSEPORT + cBPF) handler udp-echo work_us=0`, `work_us` its echo's busy
/// work.
fn band_line(b: &lfrt::BandConfig, lanes: &[lfrt::LaneConfig], work_us: u64) -> String {
    let Ok(p) = b.plan(lanes) else {
        return format!("band {} (invalid)", b.bind);
    };
    let what = match p.bands.classify {
        lfrt::band::Classify::Dscp => "dscp".to_string(),
        lfrt::band::Classify::PayloadByte(offset) => format!("payload_byte[{offset}]"),
    };
    let map: Vec<String> = p
        .bands
        .map
        .iter()
        .map(|&(v, band)| format!("{v}->{}", p.lanes[band]))
        .collect();
    let lfrt::BandHandler::UdpEcho = b.handler;
    format!(
        "band {} {what} {} default->{} ({} sockets, SO_REUSEPORT + cBPF) handler udp-echo work_us={}",
        b.bind,
        map.join(" "),
        p.lanes[p.bands.default],
        p.bands.count,
        work_us
    )
}

/// Timer events per second one pool thread is taken to serve at most, for the plan's warning.
///
/// BENCHMARKS.md §2.2 measures 3.7–5.0 µs of CPU per event for lfrt with 0 µs of handler work
/// (`cpu_us/m`), i.e. 200–270 k events/s for a thread that does nothing else. A timer event
/// also reads and re-arms its timerfd, and a thread at that load has no slack left for
/// latency, so the plan warns at about half of it.
const MAX_EVENTS_PER_THREAD: f64 = 100_000.0;

/// What `check` prints and `run` prints before it starts: every lane's settings, handlers (the
/// echoes with their busy work `work`) and preallocated memory, the total against the machine,
/// and warnings for timer rates a lane's threads cannot serve.
fn plan(cfg: &lfrt::RuntimeConfig, work: &EchoWork) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let cpus = lfrt::os::available_cpus();
    let privilege = lfrt::os::RtPrivilege::probe();
    let _ = writeln!(
        s,
        "runtime: rt={:?} lock_memory={} (CAP_SYS_NICE {}, RLIMIT_RTPRIO {})",
        cfg.rt,
        cfg.lock_memory,
        if privilege.cap_sys_nice { "yes" } else { "no" },
        privilege.rlimit_rtprio
    );
    let mut order: Vec<(usize, &lfrt::LaneConfig)> = cfg.lanes.iter().enumerate().collect();
    order.sort_by_key(|(_, g)| std::cmp::Reverse(g.priority));
    for (gi, g) in order {
        let prios: Vec<u8> = (0..g.threads).map(|i| g.thread_priority(i)).collect();
        let lane_cpus = g.cpus.clone().unwrap_or_else(|| cpus.clone());
        let _ = writeln!(
            s,
            "lane {:<12} policy={:?} priority={:<3} threads={} thread_priorities={:?} cpus={:?} promotion={:?} buffer_bytes={} max_handles={} budget_us={}",
            g.name,
            g.policy,
            g.priority,
            g.threads,
            prios,
            lane_cpus,
            g.promotion,
            g.buffer_bytes,
            g.max_handles,
            g.budget_us.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
        );
        if let Some(h) = lfrt_tools::doctor::handoff(g) {
            let _ = writeln!(s, "  hand-off: {h}");
        }
        if let Some(b) = &g.bound {
            let _ = writeln!(
                s,
                "  bound connect={} max_waiters={} max_body={} max_nesting={}",
                b.connect, b.max_waiters, b.max_body, b.max_nesting
            );
        }
        if !g.borrow_from.is_empty() {
            let _ = writeln!(
                s,
                "  borrow_from={:?} max_borrowed={}",
                g.borrow_from,
                g.max_borrowed.unwrap_or(1)
            );
        }
        let _ = writeln!(s, "  memory {}", g.memory());
        for (hi, h) in g.handlers.iter().enumerate() {
            let work_us = work.at(lfrt::Section::Handler {
                lane: gi,
                handler: hi,
            });
            let _ = match h {
                lfrt::HandlerConfig::UdpEcho { bind } => {
                    writeln!(s, "  handler udp-echo bind={bind} work_us={work_us}")
                }
                lfrt::HandlerConfig::TcpEcho {
                    bind,
                    max_connections,
                } => writeln!(
                    s,
                    "  handler tcp-echo bind={bind} work_us={work_us} \
                     max_connections={max_connections}"
                ),
                lfrt::HandlerConfig::Timer {
                    interval_us,
                    count,
                    distance_us,
                } => {
                    writeln!(s, "  handler timer interval_us={interval_us} count={count} distance_us={distance_us}")
                }
            };
        }
        // Threads beyond the lane's CPUs cannot serve events at the same time.
        let parallel = g.threads.min(lane_cpus.len()).max(1);
        let rate = g.timer_events_per_sec();
        if rate / parallel as f64 > MAX_EVENTS_PER_THREAD {
            let _ = writeln!(
                s,
                "  warning: the timers deliver {rate:.0} events/s, {:.0}/s for each of the {parallel} thread(s) that can run at once: more than the {MAX_EVENTS_PER_THREAD:.0}/s a pool thread can serve; lengthen interval_us, or spread the timers over more threads, CPUs or lanes",
                rate / parallel as f64
            );
        }
    }
    for (bi, b) in cfg.bands.iter().enumerate() {
        let work_us = work.at(lfrt::Section::Band(bi));
        let _ = writeln!(s, "{}", band_line(b, &cfg.lanes, work_us));
    }
    let t = &cfg.trace;
    let _ = if t.window_ms == 0 {
        writeln!(s, "flight recorder: off ([trace] window_ms = 0)")
    } else {
        writeln!(
            s,
            "flight recorder: last {} ms of each lane ({} samples at up to {}/s), {} per lane, \
             {} in all; kernel events {}; windows written to {}",
            t.window_ms,
            t.capacity(),
            t.max_rate,
            lfrt::Bytes(t.bytes_per_lane()),
            lfrt::Bytes(cfg.recorder_bytes()),
            if t.kernel { "on" } else { "off" },
            t.dir.display()
        )
    };
    let total = cfg.preallocated_bytes();
    let memlock = lfrt::os::MemLock::probe();
    let _ = writeln!(
        s,
        "memory: {} preallocated in total ({total} bytes); MemTotal {}; RLIMIT_MEMLOCK {}{}",
        lfrt::Bytes(total),
        lfrt::os::mem_total().map_or("unknown".into(), |m| lfrt::Bytes(m).to_string()),
        memlock
            .rlimit
            .map_or("unlimited".into(), |m| lfrt::Bytes(m).to_string()),
        if memlock.cap_ipc_lock {
            " (CAP_IPC_LOCK: not enforced)"
        } else {
            ""
        }
    );
    s
}

fn run(
    config: Option<PathBuf>,
    set: &SetArgs,
    duration: Option<Duration>,
    json: Option<PathBuf>,
    metrics: Option<std::net::SocketAddr>,
    status: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    // `--metrics ADDR` is `runtime.metrics=ADDR` given last: validated, blamed and shown in
    // the plan like every override.
    let metrics = metrics.map(|addr| Override {
        source: OverrideSource::Shorthand("--metrics"),
        text: format!("runtime.metrics={addr}"),
    });
    let loaded = load(config, set, metrics)?;
    print!(
        "{}{}",
        plan(&loaded.config, &loaded.work),
        provenance(&loaded.provenance)
    );
    warn_exposed(&loaded.config);
    use std::io::IsTerminal;
    // As cyclictest: redrawn in place on a terminal, appended blocks with --status to a pipe.
    let mut status = match (status, std::io::stdout().is_terminal()) {
        (_, true) => Some(lfrt_tools::live::Status::new(true)),
        (true, false) => Some(lfrt_tools::live::Status::new(false)),
        (false, false) => None,
    };
    // Block SIGINT/SIGTERM before any thread exists: every thread inherits the mask and the
    // main thread takes the signal synchronously below.
    lfrt::os::block_termination()?;
    let shared = lfrt_tools::live::Shared::default();
    let metrics = loaded.metrics;
    let publish = metrics.is_some() || status.is_some();
    // The built-in echoes burn the file's `work_us` (the command's key) in their own loop.
    let mut rt = loaded.work.runtime(loaded.config)?;
    // Bound after `Runtime::new` (whose validation probes the port) and before `start`, so a
    // port taken since fails before any RT thread exists. The exporter thread is spawned here,
    // by this time-shared thread.
    if let Some(addr) = metrics {
        let bound = lfrt_tools::live::serve(addr, shared.clone(), rt.telemetry().clone())
            .map_err(|e| format!("metrics: cannot serve {addr}: {e}"))?;
        println!("# metrics: http://{bound}/metrics (GET /trace: a flight-recorder window)");
    }
    let report = rt.start()?;
    let started = Instant::now();
    let limit = duration.filter(|d| !d.is_zero());
    let mut signal = None;
    // Once a second (on the second since the start): publish a snapshot for the exporter and
    // print the status block.
    let mut tick = 0u32;
    let mut previous: Option<lfrt_tools::live::Snapshot> = None;
    loop {
        let now = started.elapsed();
        if publish && now >= Duration::from_secs(u64::from(tick)) {
            let snap = lfrt_tools::live::Snapshot::take(&rt, now);
            if let (Some(st), Some(prev)) = (status.as_mut(), previous.as_ref()) {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(st.block(prev, &snap).as_bytes());
                let _ = out.flush();
            }
            *shared.lock().unwrap_or_else(|e| e.into_inner()) = snap.clone();
            previous = Some(snap);
            tick = now.as_secs() as u32 + 1;
        }
        let left = match limit {
            Some(l) => match l.checked_sub(started.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => break,
            },
            None => Duration::from_secs(3600),
        };
        let to_tick = Duration::from_secs(u64::from(tick)).saturating_sub(started.elapsed());
        let wait = left.min(if publish {
            to_tick
        } else {
            Duration::from_secs(1)
        });
        match lfrt::os::wait_termination(wait.max(Duration::from_millis(1)))? {
            Some(lfrt::os::TRACE_SIGNAL) => rt.telemetry().trace_now(),
            Some(sig) => {
                signal = Some(sig);
                break;
            }
            None => {}
        }
    }
    let elapsed = started.elapsed();
    let metrics = rt.shutdown()?;
    println!(
        "# ran {:.3} s{}; rt_applied={} memory_locked={} counting_allocations={}",
        elapsed.as_secs_f64(),
        match signal {
            Some(libc_sig) => format!(" (stopped by signal {libc_sig})"),
            None => String::new(),
        },
        report.rt_applied,
        report.memory_locked,
        report.counting_allocations
    );
    println!(
        "{:<12} {:>4} {:>4} {:>10} {:>10} {:>10} {:>7} {:>8} {:>8} {:>11} {:>11} {:>10} {:>10}",
        "lane",
        "prio",
        "thr",
        "dispatched",
        "promotions",
        "no_follow",
        "panics",
        "budget_ovr",
        "stale",
        "pool_allocs",
        "pool_faults",
        "p50_us",
        "p99_us"
    );
    let mut out = Vec::new();
    for (gi, m) in metrics.iter().enumerate() {
        let lat = rt.telemetry().lane_latency(gi);
        println!(
            "{:<12} {:>4} {:>4} {:>10} {:>10} {:>10} {:>7} {:>8} {:>8} {:>11} {:>11} {:>10.1} {:>10.1}",
            m.name,
            m.priority,
            m.threads,
            m.dispatched,
            m.promotions,
            m.promotions_no_follower,
            m.handler_panics,
            m.budget_overruns,
            m.stale_events,
            measured(m.pool_allocations),
            measured(m.pool_minor_faults),
            lat.p50_ns as f64 / 1000.0,
            lat.p99_ns as f64 / 1000.0
        );
        let histogram = rt.telemetry().with(|r| {
            r.lanes.get(gi).map(|h| {
                lfrt_tools::plot::latency_histogram(&h.latency, lfrt_tools::plot::RUN_BUCKET_NS)
            })
        });
        // Kernel receive → handler entry, for lanes whose handlers take stamped datagrams.
        let arrival = rt.telemetry().lane_arrival(gi);
        out.push(serde_json::json!({
            "metrics": m, "latency_ns": lat, "latency_histogram": histogram,
            "arrival_ns": (arrival.count > 0).then_some(arrival),
        }));
    }
    // The latency a datagram's sender sees, from the kernel's receive (SO_TIMESTAMPNS): printed
    // for each lane whose handlers took stamped datagrams.
    for (gi, m) in metrics.iter().enumerate() {
        let a = rt.telemetry().lane_arrival(gi);
        if a.count > 0 {
            println!(
                "{:<12} arrival (kernel receive -> handler entry, {} dispatches): p50 {:.1} us  \
                 p99 {:.1} us  p99.9 {:.1} us  max {:.1} us",
                m.name,
                a.count,
                a.p50_ns as f64 / 1000.0,
                a.p99_ns as f64 / 1000.0,
                a.p999_ns as f64 / 1000.0,
                a.max_ns as f64 / 1000.0
            );
        }
    }
    // What the kernel runs, which differs from the plan when best-effort lanes were refused.
    for m in &metrics {
        println!("{:<12} kernel: {}", m.name, m.kernel_sched.join(", "));
    }
    // Why the overruns overran (the watchdog's measurement): only for a lane that had some.
    for m in metrics.iter().filter(|m| m.budget_overruns > 0) {
        let causes: Vec<String> = lfrt_tools::live::overrun_causes(m)
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(cause, n)| format!("{cause}={n}"))
            .collect();
        println!("{:<12} overruns by cause: {}", m.name, causes.join(" "));
    }
    // Work the handlers dropped or deferred: printed only for a lane where something was.
    for m in &metrics {
        let stream = m.frames_oversize
            + m.connections_reset
            + m.stream_backpressure
            + m.stream_idle_timeouts
            + m.stream_write_timeouts;
        if m.accept_exhausted + m.connections_refused + m.datagrams_truncated + stream > 0 {
            println!(
                "{:<12} accept_exhausted={} connections_refused={} datagrams_truncated={} \
                 frames_oversize={} connections_reset={} stream_backpressure={} \
                 stream_idle_timeouts={} stream_write_timeouts={}",
                m.name,
                m.accept_exhausted,
                m.connections_refused,
                m.datagrams_truncated,
                m.frames_oversize,
                m.connections_reset,
                m.stream_backpressure,
                m.stream_idle_timeouts,
                m.stream_write_timeouts
            );
        }
        // Priority changes the kernel refused (each logged once or rarely): the lanes did not
        // run at the priorities the plan shows for those events.
        if m.raise_failures + m.restore_failures > 0 {
            println!(
                "{:<12} raise_failures={} restore_failures={}",
                m.name, m.raise_failures, m.restore_failures
            );
        }
    }
    // Async tasks: printed for each lane with a task table.
    for m in &metrics {
        if let Some(t) = &m.tasks {
            println!(
                "{:<12} tasks: spawned={} completed={} panicked={} cancelled={} \
                 refused_full={} refused_too_large={} polls={} turns={}",
                m.name,
                t.spawned,
                t.completed,
                t.panicked,
                t.cancelled,
                t.refused_full,
                t.refused_too_large,
                t.polls,
                t.turns
            );
        }
    }
    // Over the lanes that measured (`-`/null: no pool thread reached its warm-up).
    let pool_allocations = LaneMetrics::sum_measured(metrics.iter().map(|m| m.pool_allocations));
    let pool_minor_faults = LaneMetrics::sum_measured(metrics.iter().map(|m| m.pool_minor_faults));
    println!(
        "pool_allocations={} pool_minor_faults={}",
        measured(pool_allocations),
        measured(pool_minor_faults)
    );
    if let Some(p) = json {
        let v = serde_json::json!({
            "duration_s": elapsed.as_secs_f64(),
            "rt_applied": report.rt_applied,
            "lanes": out,
            "pool_allocations": pool_allocations,
            "pool_minor_faults": pool_minor_faults,
        });
        std::fs::write(&p, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
