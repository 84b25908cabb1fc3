//! `lfrt-zenoh doctor CONFIG`: reports Zenoh's own threads and session for a bridge
//! configuration, in `lfrt doctor`'s format. Exit status 2 if the file is invalid or a finding
//! is a `fail`.
//!
//! It is a command of this crate rather than a part of `lfrt doctor` so that the `lfrt`
//! command (the rt-tests crate) does not build Zenoh.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [cmd, file] = args.as_slice() else {
        eprintln!("usage: lfrt-zenoh doctor CONFIG");
        return ExitCode::from(2);
    };
    if cmd != "doctor" {
        eprintln!("unknown command `{cmd}`; usage: lfrt-zenoh doctor CONFIG");
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
    let report = lfrt_zenoh::doctor(&cfg, env.as_deref(), cpus);
    print!("{}", report.text);
    if report.failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
