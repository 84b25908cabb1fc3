//! `lfrt-loadgen`: UDP load generator for benchmarking echo servers.
//!
//! Usage: `lfrt-loadgen --ports 7000-7003 [--target 127.0.0.1] [--mode closed|open]
//! [--window W | --rate R] [--size BYTES] [--duration SECS] [--drain-ms MS]
//! [--timeout-ms MS] [--max-messages N] [--threads T] [--json FILE]`

use rt_tests::loadgen;

fn main() -> std::process::ExitCode {
    loadgen::cli_main()
}
