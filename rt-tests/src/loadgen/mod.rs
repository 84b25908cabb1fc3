//! UDP load generator for benchmarking echo servers on loopback.
//!
//! The generator drives connected, nonblocking UDP client sockets from one
//! epoll loop per thread (a `timerfd` provides sub-millisecond wake-ups for
//! pacing and timeouts). Its sockets take one of two shapes ([`Clients`]):
//!
//! * **Independent clients** (the default): `clients_per_port` sockets per
//!   target port, each with its own source port, sending one datagram per
//!   `send` and reading one reply per `recv`. This is what many real clients
//!   look like to the kernel and to a server: separate sockets, separate
//!   system calls, so a server finds few datagrams per wake-up (issue 22).
//! * **Batched**: one socket per port; one `recvmmsg` takes up to
//!   [`IO_BATCH`] echoes, the sends they trigger are queued in that port's
//!   outbox and leave in one `sendmmsg` just before the thread waits again
//!   (or when the outbox is full). It costs the generator far less per
//!   datagram (issue 13), and hands a server about 16 datagrams per wake-up.
//!
//! Either way the generator's own CPU share is measured (each thread's
//! `CLOCK_THREAD_CPUTIME_ID` over its send phase) and reported: above
//! [`GEN_SATURATED_PCT`] a figure measures the generator, not the server.
//!
//! # Wire format
//!
//! Every datagram is `size` bytes (20..=65000) laid out as:
//!
//! | bytes   | content                                              |
//! |---------|------------------------------------------------------|
//! | 0..8    | sequence number, `u64` LE, unique within one run     |
//! | 8..16   | send timestamp, `CLOCK_MONOTONIC` ns, `u64` LE       |
//! | 16..20  | index of the target port in [`LoadConfig::ports`], `u32` LE |
//! | 20..    | padding: a pseudo-random pattern seeded from the three fields above |
//!
//! The server must echo the datagram verbatim. Because the padding pattern is
//! derived from the header, a changed byte anywhere in the datagram is
//! detected (a payload of exactly 20 bytes has no padding; there only the
//! port index, the sequence range and the timestamp range are checked).
//!
//! # Modes
//!
//! * [`Mode::Closed`]: `window` datagrams outstanding per port (split evenly
//!   over the port's independent clients); a new one is sent when a reply
//!   arrives or when an outstanding one times out.
//! * [`Mode::Open`]: a fixed total rate spread round-robin over the client
//!   sockets (ports first, so consecutive datagrams go to different ports),
//!   paced against absolute deadlines (`start + k / rate`) so it does not drift.
//!
//! # Accounting
//!
//! Each sequence number has one state byte (outstanding / timed out /
//! received / send failed). `received` counts unique matched echoes (a late
//! echo of a timed-out datagram still counts), `duplicates` counts further
//! echoes of an already received datagram, `corrupt` counts echoes that do not
//! match anything that was sent, and `lost = sent - received` after the drain.
//!
//! # Layout
//! The traffic model, its pacing and its accounting are the core; the table, the JSON document
//! and the command line are front-ends over them:
//!
//! * `config.rs`: what a run is: [`Mode`], [`Clients`], [`LoadConfig`] and their limits, and
//!   port lists;
//! * `wire.rs`: the datagram format above, and the clock its timestamps are read from;
//! * `sockets.rs`: the client sockets and the calls that send on them;
//! * `worker.rs`: one thread's engine: open-loop pacing, the closed-loop window, timeouts,
//!   receiving and matching echoes;
//! * `threads.rs`: a run split over threads ([`run`], [`run_threaded`]);
//! * `report.rs`: the result accounting: [`LoadReport`], merged from the threads' counts;
//! * `output.rs`: a report as a table ([`format_report`]) and as JSON ([`report_json`]);
//! * `cli.rs`: `lfrt-loadgen`'s command line ([`Cli`], [`cli_main`]).

mod cli;
mod config;
mod output;
mod report;
mod sockets;
#[cfg(test)]
mod tests;
mod threads;
mod wire;
mod worker;

pub use cli::{cli_main, Cli, CliMode};
pub use config::{
    parse_ports, Clients, LoadConfig, Mode, DEFAULT_DRAIN, DEFAULT_DURATION, DEFAULT_SIZE,
    DEFAULT_TIMEOUT, DEFAULT_WINDOW, MAX_SIZE, MIN_SIZE,
};
pub use output::{format_report, report_json};
pub use report::{port_fairness, LoadReport, RttSummary, GEN_SATURATED_PCT};
pub use sockets::IO_BATCH;
pub use threads::{run, run_threaded};
pub use wire::HEADER_LEN;
