//! One dispatch as a pool thread records it ([`Sample`]), and how often the collector drains
//! the threads' rings: what the telemetry, the flight recorder and its windows share.

use std::time::Duration;

/// How often the collector drains the rings. At 100k events/s a ring fills in 160 ms, so a
/// 2 ms period leaves a wide margin even when the collector is delayed.
pub const DRAIN_PERIOD: Duration = Duration::from_millis(2);

/// One dispatch, as seen by the pool thread that ran it. All times are `CLOCK_MONOTONIC` ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Lane index.
    pub lane: u16,
    /// Thread index within the lane.
    pub thread: u16,
    /// Token of the handle (raw).
    pub token: u64,
    /// When the event was due (a timer's expected expiry), or 0 if unknown.
    pub origin_ns: u64,
    /// When the leader's wait returned.
    pub woke_ns: u64,
    /// When the handler was entered.
    pub start_ns: u64,
    /// When the handler returned.
    pub end_ns: u64,
    /// Missed periods reported by the handler of a timer.
    pub missed_periods: u32,
    /// When the kernel received the earliest datagram the handler took (`SO_TIMESTAMPNS`,
    /// converted to `CLOCK_MONOTONIC` ns), or 0 if it took none that was stamped
    /// ([`DatagramBatch::stamp_arrivals`](crate::DatagramBatch::stamp_arrivals)).
    pub arrival_ns: u64,
}

impl Sample {
    /// Latency as the handler sees it: from `origin_ns` (or the leader's wake-up if there is
    /// no origin) to handler entry.
    pub fn latency_ns(&self) -> u64 {
        let from = if self.origin_ns != 0 {
            self.origin_ns
        } else {
            self.woke_ns
        };
        self.start_ns.saturating_sub(from)
    }
}
