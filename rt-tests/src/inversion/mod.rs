//! `lfrt inversion`: measures priority inversion in three server architectures.
//!
//! # Experiment 1: queueing inversion
//! After Schmidt et al.'s real-time ORB experiments (one high-priority client, N low-priority
//! clients). One server process serves
//!
//! * a **high-priority stream**: a periodic timer (`--interval-us`; latency = service entry −
//!   the instant the expiry was due) and a UDP port fed at a fixed rate (`--rate`) by a
//!   generator thread (latency = service entry − the send timestamp carried in the datagram);
//! * **N low-priority UDP streams** (`--n-low`), each an independent Poisson source at
//!   `--low-rate` datagrams/s; every low datagram costs `--work-us` of CPU time in the service.
//!   A generator that falls behind sends the overdue datagrams at once (it never skips), so
//!   the offered count does not depend on how busy the client CPU is.
//!
//! The same [`Service`](crate::service::Service) runs under each architecture:
//!
//! * `lanes`: the high handles in an lfrt lane at `--high-prio`, the low handles in a second
//!   lane at `--low-prio` (`--threads` threads each);
//! * `single_pool`: one lfrt lane at `--high-prio` with 2 × `--threads` threads holding every
//!   handle;
//! * `hsha`: the Half-Sync/Half-Reactive pool of [`crate::hsha`]: an I/O thread and
//!   2 × `--threads` workers, all at `--high-prio`.
//!
//! Each (architecture, N) pair gets a fresh server and the same load for `--duration`; the
//! first `--warmup-ms` of high events are left out of the latency figures (not of the loss
//! count). Every datagram carries `(stream, sequence, send time)`; the service counts each
//! sequence number it sees, so *lost* (sent, never served) and *duplicates* are exact per
//! stream. A timer expiry that the kernel folded into a later read (the handler was more than a
//! period late) counts as lost.
//!
//! ## CPU placement
//! On a 2-core machine the server threads of every architecture are pinned to `--server-cpu`
//! and the generators (`SCHED_OTHER`) to `--client-cpu`. A single server CPU makes the
//! competition between high and low work explicit (a high event can only run if the scheduler
//! or the architecture lets it past low work), and the generators keep sending on time because
//! they never compete with `SCHED_FIFO` threads.
//!
//! ## Bounds
//! Every run stops by itself: generators stop at the end of the run (and at a per-stream
//! count), the server is shut down after a drain of at most [`DRAIN_LIMIT`]. The offered low
//! work is capped at `--low-budget` of one CPU (default 0.6): with N streams each sends at
//! `min(--low-rate, low-budget × 10⁶ / (work-us × N))` per second, so `SCHED_FIFO` busy time on
//! the server CPU stays well below the kernel's RT throttle (950 ms per 1 s) even when
//! per-request overheads are added.
//!
//! # Experiment 1b: priority bands on one port (issue 15)
//! A real service exposes one port. `--arch bands,shared_pool` runs experiment 1 with every
//! UDP stream sent to ONE server port: the high stream's datagrams are marked DSCP EF (46,
//! `IP_TOS`), the N low streams' are not.
//!
//! * `bands`: [`lfrt::band::bind`] opens two `SO_REUSEPORT` sockets on the port with a cBPF
//!   classifier: DSCP 46 goes to the high band's socket, in the lane at `--high-prio`, every
//!   other datagram to the low band's socket, in the lane at `--low-prio` (`--threads` each;
//!   the timer is in the high lane). The service counts a datagram served by the other band's
//!   socket as `misrouted` (must be 0).
//! * `shared_pool`: one socket on the port, in one lane at `--high-prio` with 2 × `--threads`
//!   threads (with the timer): the high datagrams queue behind the low ones in the socket.
//!
//! The table's `udp_p99` column is the high datagrams' p99 alone (the port-sharing figure).
//!
//! # Experiment 2: lock inversion
//! A high-priority and a low-priority lfrt handler (two lanes, one thread each, on the server
//! CPU) share a resource. Each repetition: the low handler takes the lock and does `--cs-us` of
//! CPU work inside it; the high handler is then triggered and blocks on the lock; then a
//! medium-priority thread on the same CPU spins for `--hog-ms` (wall clock). The high handler's
//! blocking time (lock request → lock held) is recorded, once with `std::sync::Mutex` (no
//! priority inheritance; used here on purpose, as the baseline) and once with [`PiMutex`](lfrt::PiMutex). Reps
//! are separated by [`LOCK_COOLDOWN`], so the CPU is busy at `SCHED_FIFO` well under a quarter
//! of the time.
//!
//! # Output
//! A table on stdout and, with `--json FILE`, [`Report`] as JSON:
//! `{"experiments": [{"architecture", "n_low", "high": {"min_us", "p50_us", "p99_us",
//! "p999_us", "max_us", "stddev_us", "count"}, "low_throughput", "lost", …}], "lock":
//! [{"mutex", "high_block_max_us", "high_block_p99_us", …}], "pool_allocations"}`. The fields
//! marked `…` are extra detail; readers may ignore them.
//!
//! # Layout
//! The scenario model and the measurement are the core; the command line and the table are
//! front-ends over them:
//!
//! * `plan.rs`: the scenario model: the [`Architecture`]s under test and a run's checked
//!   [`Plan`];
//! * `probe.rs`: what the server sees: the datagram header, the service every architecture
//!   runs, and its per-sequence accounting;
//! * `generators.rs`: the load, on the client CPU: the high stream's fixed period and the low
//!   streams' Poisson arrivals;
//! * `queueing.rs`: experiment 1 and 1b: one architecture at one N, from the server's start to
//!   its figures ([`run_once`]);
//! * `lock.rs`: experiment 2, the lock inversion ([`lock_experiment`]);
//! * `driver.rs`: both experiments, run after one another from a controller thread
//!   ([`measure`]);
//! * `results.rs`: the figures ([`Latency`], [`RunResult`], [`LockResult`]) and the [`Report`]
//!   that `--json` writes;
//! * `text.rs`: a report as the table on stdout ([`table`]);
//! * `cli.rs`: the flags ([`InversionArgs`]), checked into a plan, and [`run`];
//! * [`borrow`]: the lane-borrowing experiment (`--borrow`).

pub mod borrow;
mod cli;
mod driver;
mod generators;
mod lock;
mod plan;
mod probe;
mod queueing;
mod results;
mod text;

pub use cli::{run, InversionArgs};
pub use driver::measure;
pub use lock::{lock_experiment, LOCK_COOLDOWN};
pub use plan::{Architecture, LockPlan, Plan};
pub use probe::DATAGRAM_BYTES;
pub use queueing::{run_once, DRAIN_LIMIT};
pub use results::{Latency, LockResult, Report, RunResult, StreamCount};
pub use text::table;

/// A set-up failure of a run (socket, runtime, pool or thread), sendable from the controller
/// thread.
type BoxError = Box<dyn std::error::Error + Send + Sync>;
