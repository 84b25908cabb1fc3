//! Observation: what the runtime counts and measures about itself.
//!
//! * **Owns:** per-lane counters and their snapshot ([`metrics`]), the latency telemetry
//!   rings and histograms ([`telemetry`]), the counting allocator ([`alloc_count`]), the
//!   flight recorder ([`recorder`]: the last window of every lane's samples, [`sample`]),
//!   its frozen window ([`window`]) and its trace file ([`chrome`]).
//! * **May use:** `sys` and `sync` only.
//! * **Must never use:** the engine, the sources, `bound`, `config` or `runtime`; they all
//!   write into these counters, so the counters cannot depend on any one of them.

pub(crate) mod alloc_count;
pub(crate) mod chrome;
pub(crate) mod metrics;
pub(crate) mod recorder;
pub(crate) mod sample;
pub mod telemetry;
pub(crate) mod window;
