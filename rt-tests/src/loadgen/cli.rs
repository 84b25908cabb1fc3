//! `lfrt-loadgen`'s front-end: its command line, mapped onto a checked [`LoadConfig`], and the
//! binary's entry point, which runs the load, prints the table and writes the JSON.

use super::config::{parse_ports, Clients, LoadConfig, Mode, DEFAULT_SIZE, DEFAULT_WINDOW};
use super::output::{format_report, report_json};
use super::threads::run_threaded;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Scheduling mode on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CliMode {
    /// Keep --window datagrams outstanding per port.
    Closed,
    /// Send --rate datagrams per second in total.
    Open,
}

/// Command-line arguments of `lfrt-loadgen`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "lfrt-loadgen",
    about = "UDP load generator for benchmarking echo servers (loopback targets only)"
)]
pub struct Cli {
    /// Target host: 127.0.0.0/8 or ::1.
    #[arg(long, default_value = "127.0.0.1")]
    pub target: IpAddr,
    /// Target ports: a range "7000-7003" or a comma list "7000,7002".
    #[arg(long)]
    pub ports: String,
    /// Scheduling mode.
    #[arg(long, value_enum, default_value_t = CliMode::Closed)]
    pub mode: CliMode,
    /// Closed loop: outstanding datagrams per port [default: 8].
    #[arg(long)]
    pub window: Option<usize>,
    /// Open loop: total datagrams per second (required with --mode open).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Datagram size in bytes (20..=65000).
    #[arg(long, default_value_t = DEFAULT_SIZE)]
    pub size: usize,
    /// How long to send for: `5`, `5s`, `500ms`, `1m` (the duration syntax of every lfrt
    /// command).
    #[arg(long, value_name = "TIME", default_value = "5", value_parser = crate::duration::parse)]
    pub duration: Duration,
    /// Milliseconds to wait for replies after sending stops.
    #[arg(long, default_value_t = 200)]
    pub drain_ms: u64,
    /// Closed loop: milliseconds before an outstanding datagram frees its slot.
    #[arg(long, default_value_t = 200)]
    pub timeout_ms: u64,
    /// Stop after this many send attempts in total.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Threads to split the ports across.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Independent client sockets per port, each sending one datagram per `send` and
    /// reading one reply per `recv` [default: the window in closed loop (one outstanding
    /// datagram per client), 1 in open loop].
    #[arg(long, conflicts_with = "batched")]
    pub clients_per_port: Option<usize>,
    /// One socket per port with up to 32 datagrams per `sendmmsg`/`recvmmsg`, instead of
    /// independent clients.
    #[arg(long)]
    pub batched: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl Cli {
    /// Builds and validates the run configuration.
    pub fn to_config(&self) -> Result<LoadConfig, String> {
        let ports = parse_ports(&self.ports).map_err(|e| format!("--ports: {e}"))?;
        let mode = match self.mode {
            CliMode::Closed => {
                if self.rate.is_some() {
                    return Err("--rate only applies to --mode open".to_string());
                }
                Mode::Closed {
                    window: self.window.unwrap_or(DEFAULT_WINDOW),
                }
            }
            CliMode::Open => {
                if self.window.is_some() {
                    return Err("--window only applies to --mode closed".to_string());
                }
                Mode::Open {
                    rate_per_s: self.rate.ok_or("--mode open requires --rate R")?,
                }
            }
        };
        let duration = self.duration;
        if self.threads == 0 {
            return Err("--threads must be at least 1".to_string());
        }
        let clients = if self.batched {
            Clients::Batched
        } else {
            match self.clients_per_port {
                Some(per_port) => Clients::Unbatched { per_port },
                None => Clients::default_for(mode),
            }
        };
        let cfg = LoadConfig {
            target: self.target,
            ports,
            mode,
            clients,
            size: self.size,
            duration,
            drain: Duration::from_millis(self.drain_ms),
            timeout: Duration::from_millis(self.timeout_ms),
            max_messages: self.max_messages,
        };
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}

/// Entry point of the `lfrt-loadgen` binary: parses the process arguments,
/// runs, prints the table and writes the JSON file if asked. Exit code 0 on
/// success, 2 on a usage error, 1 on a run error.
pub fn cli_main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let cfg = match cli.to_config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("lfrt-loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    let threads = cli.threads.min(cfg.ports.len());
    let report = match run_threaded(&cfg, threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lfrt-loadgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", format_report(&report, &cfg, threads));
    if let Some(path) = &cli.json {
        let doc = report_json(&report, &cfg, threads);
        let text = serde_json::to_string_pretty(&doc).expect("JSON value serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("lfrt-loadgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::config::DEFAULT_DRAIN;

    #[test]
    fn cli_arguments_map_to_config() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "lfrt-loadgen",
            "--ports",
            "7000-7003",
            "--mode",
            "open",
            "--rate",
            "1000",
            "--duration",
            "500ms",
            "--size",
            "128",
        ])
        .unwrap();
        let cfg = cli.to_config().unwrap();
        assert_eq!(cfg.ports, vec![7000, 7001, 7002, 7003]);
        assert_eq!(cfg.mode, Mode::Open { rate_per_s: 1000 });
        assert_eq!(cfg.duration, Duration::from_millis(500));
        assert_eq!(cfg.size, 128);
        assert_eq!(cfg.drain, DEFAULT_DRAIN);

        assert_eq!(cfg.clients, Clients::Unbatched { per_port: 1 });

        let cli = Cli::try_parse_from(["x", "--ports", "7000"]).unwrap();
        let cfg = cli.to_config().unwrap();
        assert_eq!(
            cfg.mode,
            Mode::Closed {
                window: DEFAULT_WINDOW
            }
        );
        assert_eq!(
            cfg.clients,
            Clients::Unbatched {
                per_port: DEFAULT_WINDOW
            },
            "default: independent clients, one outstanding datagram each"
        );
        let cli = Cli::try_parse_from(["x", "--ports", "7000", "--batched"]).unwrap();
        assert_eq!(cli.to_config().unwrap().clients, Clients::Batched);
        let cli = Cli::try_parse_from([
            "x",
            "--ports",
            "7000",
            "--window",
            "16",
            "--clients-per-port",
            "4",
        ])
        .unwrap();
        assert_eq!(
            cli.to_config().unwrap().clients,
            Clients::Unbatched { per_port: 4 }
        );
        assert!(Cli::try_parse_from([
            "x",
            "--ports",
            "7000",
            "--batched",
            "--clients-per-port",
            "2"
        ])
        .is_err());

        for args in [
            &["x", "--ports", "7000", "--mode", "open"][..],
            &["x", "--ports", "7000", "--rate", "10"][..],
            &["x", "--ports", "7000", "--target", "10.1.2.3"][..],
            &["x", "--ports", "7000", "--threads", "0"][..],
            &["x", "--ports", "7000", "--size", "10"][..],
            &["x", "--ports", "7000-6000"][..],
            &[
                "x",
                "--ports",
                "7000",
                "--window",
                "2",
                "--clients-per-port",
                "3",
            ][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert!(cli.to_config().is_err(), "{args:?}");
        }
        // Durations are refused while parsing (the one duration syntax of every command).
        for d in ["--duration=-1", "--duration=inf", "--duration=0.5"] {
            assert!(
                Cli::try_parse_from(["x", "--ports", "7000", d]).is_err(),
                "{d}"
            );
        }
    }
}
