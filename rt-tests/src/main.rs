//! The `lfrt` command: check and run configurations, and the measurement harnesses.

use clap::{Parser, Subcommand};
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
    /// Validate a configuration and print the plan (groups, priorities, threads, CPUs, handlers).
    Check {
        /// Configuration file (TOML).
        config: PathBuf,
    },
    /// Run a configuration until --duration ends or SIGINT/SIGTERM arrives; print metrics.
    Run {
        /// Configuration file (TOML).
        config: PathBuf,
        /// Stop after this many seconds (default: run until a signal).
        #[arg(long)]
        duration: Option<f64>,
        /// Also write the final metrics as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Draw results as SVG or PNG: the latency histogram of an lfrt cyclic or cyclictest JSON
    /// (two such files are overlaid), or high p99 against N of an lfrt inversion JSON.
    Plot {
        /// One result JSON, or two latency JSONs to overlay (e.g. cyclictest's and lfrt's).
        #[arg(required = true, num_args = 1..=2, value_name = "RESULT.json")]
        inputs: Vec<PathBuf>,
        /// The image to write; its extension picks the format: FILE.svg or FILE.png.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Image size in pixels.
        #[arg(long, value_name = "WxH", default_value_t = rt_tests::plot::Size::DEFAULT)]
        size: rt_tests::plot::Size,
    },
    /// cyclictest-compatible timer latency through the runtime (-h is --histogram).
    Cyclic(rt_tests::cyclic::CyclicArgs),
    /// Priority-inversion experiments: lfrt lanes vs a single pool vs Half-Sync/Half-Reactive.
    Inversion(rt_tests::inversion::InversionArgs),
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
        Cmd::Check { config } => check(&config),
        Cmd::Run {
            config,
            duration,
            json,
        } => run(&config, duration, json),
        Cmd::Cyclic(args) => rt_tests::cyclic::run(&args),
        Cmd::Plot {
            inputs,
            output,
            size,
        } => rt_tests::plot::plot_files(&inputs, &output, size)
            .map(|kind| println!("wrote {} ({kind:?})", output.display()))
            .map_err(Into::into),
        Cmd::Inversion(args) => rt_tests::inversion::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lfrt: {e}");
            ExitCode::from(2)
        }
    }
}

fn check(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = lfrt::load_config(path)?;
    print!("{}", plan(&cfg));
    Ok(())
}

fn plan(cfg: &lfrt::RuntimeConfig) -> String {
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
    let mut order: Vec<&lfrt::GroupConfig> = cfg.groups.iter().collect();
    order.sort_by_key(|g| std::cmp::Reverse(g.priority));
    for g in order {
        let prios: Vec<u8> = (0..g.threads).map(|i| g.thread_priority(i)).collect();
        let _ = writeln!(
            s,
            "group {:<12} policy={:?} priority={:<3} threads={} thread_priorities={:?} cpus={:?} promotion={:?} buffer_bytes={} max_handles={} budget_us={}",
            g.name,
            g.policy,
            g.priority,
            g.threads,
            prios,
            g.cpus.clone().unwrap_or_else(|| cpus.clone()),
            g.promotion,
            g.buffer_bytes,
            g.max_handles,
            g.budget_us.map(|b| b.to_string()).unwrap_or_else(|| "-".into()),
        );
        for h in &g.handlers {
            let _ = match h {
                lfrt::HandlerConfig::UdpEcho { bind, work_us } => {
                    writeln!(s, "  handler udp-echo bind={bind} work_us={work_us}")
                }
                lfrt::HandlerConfig::TcpEcho { bind, work_us } => {
                    writeln!(s, "  handler tcp-echo bind={bind} work_us={work_us}")
                }
                lfrt::HandlerConfig::Timer {
                    interval_us,
                    count,
                    distance_us,
                } => {
                    writeln!(s, "  handler timer interval_us={interval_us} count={count} distance_us={distance_us}")
                }
            };
        }
    }
    s
}

fn run(
    path: &std::path::Path,
    duration: Option<f64>,
    json: Option<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = lfrt::load_config(path)?;
    // Block SIGINT/SIGTERM before any thread exists: every thread inherits the mask and the
    // main thread takes the signal synchronously below.
    lfrt::os::block_termination()?;
    let mut rt = lfrt::Runtime::new(cfg)?;
    let report = rt.start()?;
    let started = Instant::now();
    let limit = duration.map(Duration::from_secs_f64);
    let mut signal = None;
    loop {
        let left = match limit {
            Some(l) => match l.checked_sub(started.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => break,
            },
            None => Duration::from_secs(3600),
        };
        if let Some(sig) = lfrt::os::wait_termination(left.min(Duration::from_secs(1)))? {
            signal = Some(sig);
            break;
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
        "group",
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
        let lat = rt.telemetry().group_latency(gi);
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
            m.pool_allocations,
            m.pool_minor_faults,
            lat.p50_ns as f64 / 1000.0,
            lat.p99_ns as f64 / 1000.0
        );
        out.push(serde_json::json!({"metrics": m, "latency_ns": lat}));
    }
    let pool_allocations: u64 = metrics.iter().map(|m| m.pool_allocations).sum();
    let pool_minor_faults: u64 = metrics.iter().map(|m| m.pool_minor_faults).sum();
    println!("pool_allocations={pool_allocations} pool_minor_faults={pool_minor_faults}");
    if let Some(p) = json {
        let v = serde_json::json!({
            "duration_s": elapsed.as_secs_f64(),
            "rt_applied": report.rt_applied,
            "groups": out,
            "pool_allocations": pool_allocations,
            "pool_minor_faults": pool_minor_faults,
        });
        std::fs::write(&p, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}
