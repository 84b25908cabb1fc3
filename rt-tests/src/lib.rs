//! # lfrt's rt-tests: the measuring side of the runtime
//!
//! The `lfrt` library is what a service embeds; this crate is what measures it, named after
//! Debian's rt-tests (cyclictest, hackbench, pi_stress), the field's own set of such programs.
//! It holds the `lfrt` command's subcommands and everything a comparison needs that a service
//! must never compile:
//!
//! * [`cyclic`]: `lfrt cyclic`, cyclictest's options and output through a Leader/Followers lane;
//! * [`doctor`]: `lfrt doctor`, what this machine and process can do for real time, and whether a
//!   configuration can run here as intended;
//! * [`duration`]: the one duration syntax of every command (cyclictest's `30`, `30s`, `10m`, `1h`);
//! * [`explain`]: `lfrt explain`, why the worst dispatch of a flight-recorder trace was late;
//! * [`live`]: what `lfrt run` shows while it runs: Prometheus metrics and a status block a second;
//! * [`inversion`]: `lfrt inversion`, priority-inversion experiments against the baselines;
//! * [`hsha`]: the Half-Sync/Half-Reactive pool, the queue-based rival the harnesses compare with;
//! * [`service`]: application work written once and run by every architecture;
//! * [`loadgen`]: the UDP load generator behind `lfrt-loadgen`;
//! * [`overrides`]: `--set PATH=VALUE` and `LFRT_SET`, a configuration file's values overridden
//!   without editing it;
//! * [`plot`]: `lfrt plot`, latency histograms and inversion curves rendered with plotters;
//! * [`timeline`]: `lfrt plot TRACE`, the time around a flight-recorder trace's worst dispatch;
//! * [`progress`]: the harnesses' `experiment k/n` bar with the time left, on a terminal only.
//!
//! It uses only `lfrt`'s public API (the runtime types and the [`lfrt::os`] facade).

#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod cyclic;
pub mod doctor;
pub mod duration;
pub mod explain;
pub mod hsha;
pub mod inversion;
pub mod live;
pub mod loadgen;
pub mod overrides;
pub mod plot;
pub mod progress;
pub mod service;
pub mod timeline;

/// A pool hygiene counter of [`lfrt::LaneMetrics`] (`pool_allocations`, `pool_minor_faults`)
/// as the text reports print it: `-` when it was not measured (no pool thread reached its
/// warm-up, or no counting allocator), so a printed `0` is always a measurement.
pub fn measured(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |n| n.to_string())
}
