//! `lfrt-zenoh doctor CONFIG [--pid PID]`: reports Zenoh's own threads, their policy, the
//! session and the link each priority takes for a bridge configuration, in `lfrt doctor`'s
//! format; with `--pid`, the live Zenoh threads and TCP connections of the process that runs
//! the bridge. Exit status 2 if the file or an argument is invalid or a finding is a `fail`.
//!
//! It is a command of this crate rather than a part of `lfrt doctor` so that the `lfrt`
//! command (the rt-tests crate) does not build Zenoh.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    const USAGE: &str = "usage: lfrt-zenoh doctor CONFIG [--pid PID]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, file, pid) = match args.as_slice() {
        [cmd, file] => (cmd, file, None),
        [cmd, file, flag, pid] if flag == "--pid" => match pid.parse::<u32>() {
            Ok(pid) if std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                (cmd, file, Some(pid))
            }
            _ => {
                eprintln!("--pid: `{pid}` is not a running process; {USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if cmd != "doctor" {
        eprintln!("unknown command `{cmd}`; {USAGE}");
        return ExitCode::from(2);
    }
    let cfg = match lfrt_zenoh::Config::load(Path::new(file)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let env = std::env::var("ZENOH_RUNTIME").ok();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let report = lfrt_zenoh::doctor(&cfg, env.as_deref(), cpus, pid);
    print!("{}", report.text);
    if report.failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
