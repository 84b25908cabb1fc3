//! `lfrt-loadgen`: UDP load generator for benchmarking echo servers.
//!
//! Usage: `lfrt-loadgen --ports 7000-7003 [--target 127.0.0.1] [--mode closed|open]
//! [--window W | --rate R] [--clients-per-port N | --batched] [--size BYTES]
//! [--duration TIME] [--drain-ms MS] [--timeout-ms MS] [--max-messages N] [--threads T]
//! [--json FILE]`
//!
//! By default it looks like many independent clients (one socket per client, one datagram
//! per system call; closed loop: as many clients per port as the window); `--batched` gives
//! one socket per port with `sendmmsg`/`recvmmsg`. Every report gives the generator's own CPU
//! share and flags `GEN-SATURATED` above 80 %.

use lfrt_tools::loadgen;

fn main() -> std::process::ExitCode {
    loadgen::cli_main()
}
