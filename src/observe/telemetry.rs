//! Telemetry out of real-time threads.
//!
//! Each pool thread owns the producer side of its own `rtrb` ring and pushes one fixed-size
//! [`Sample`] per dispatch. A push never blocks and never allocates: if the ring is full the
//! sample is dropped and counted. One non-RT collector thread drains every ring every
//! [`DRAIN_PERIOD`] into `hdrhistogram`s (fixed bounds, so recording never allocates either).
//!
//! Accounting invariant (tested): samples pushed = samples recorded + samples dropped.
//!
//! # Why a third-party type is public here
//! The histograms are [`hdrhistogram::Histogram`]s, in public fields, on purpose: it is the
//! field's standard latency histogram (cyclictest-style tools, HdrHistogram's interval logs and
//! plotters read it), and a harness gets quantiles, merging with its own histograms
//! ([`new_histogram`] has the same bounds) and serialisation from it rather than from a copy
//! of its API. It is re-exported here as [`Histogram`], so code that reads telemetry names it
//! through lfrt and needs no `hdrhistogram` dependency of a matching version.

use super::recorder::{Recorder, RecorderShared, RecorderStats};
pub use super::sample::{Sample, DRAIN_PERIOD};
pub use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};

/// Slots in each pool thread's telemetry ring.
pub const RING_CAPACITY: usize = 16 * 1024;
/// Highest value a histogram records (10 s in ns); larger values saturate.
pub const HIST_MAX_NS: u64 = 10_000_000_000;
/// Most timers that get [`Histograms`] of their own (each is four histograms of about
/// 200 KiB, so this bounds the per-timer memory near 200 MiB whatever the number of timers).
/// Samples of further timers are merged per lane into [`Recorded::untracked_timers`], so
/// lane figures stay complete.
pub const MAX_TIMER_HISTOGRAMS: usize = 256;

/// An empty latency histogram with the runtime's fixed bounds (1 ns to [`HIST_MAX_NS`], 3
/// significant digits), so a harness can merge its own histograms with the runtime's.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid fixed histogram bounds")
}

/// Latency histograms of one lane, or of one timer.
#[derive(Debug, Clone)]
pub struct Histograms {
    /// Handler-entry latency: origin (or leader wake-up) → handler entry.
    pub latency: Histogram<u64>,
    /// Origin → leader awake (only samples with an origin).
    pub wake: Histogram<u64>,
    /// Leader awake → handler entry (promotion and demultiplexing cost).
    pub dispatch: Histogram<u64>,
    /// Handler entry → return.
    pub service: Histogram<u64>,
    /// Kernel receive of the earliest datagram the handler took → handler entry (only
    /// dispatches that took a stamped datagram): the latency a socket's peer sees, measured by
    /// the kernel rather than from the wake-up.
    pub arrival: Histogram<u64>,
    /// Missed timer periods reported by handlers ([`crate::Context::add_missed_periods`]).
    pub missed_periods: u64,
    /// Latency of the most recent sample (ns).
    pub last_ns: u64,
    /// Thread of the most recent sample.
    pub last_thread: u16,
}

impl Histograms {
    fn new() -> Histograms {
        Histograms {
            latency: new_histogram(),
            wake: new_histogram(),
            dispatch: new_histogram(),
            service: new_histogram(),
            arrival: new_histogram(),
            missed_periods: 0,
            last_ns: 0,
            last_thread: 0,
        }
    }

    fn record(&mut self, s: &Sample) {
        let lat = s.latency_ns();
        self.latency.saturating_record(lat.max(1));
        if s.origin_ns != 0 {
            self.wake
                .saturating_record(s.woke_ns.saturating_sub(s.origin_ns).max(1));
        }
        self.dispatch
            .saturating_record(s.start_ns.saturating_sub(s.woke_ns).max(1));
        self.service
            .saturating_record(s.end_ns.saturating_sub(s.start_ns).max(1));
        if s.arrival_ns != 0 {
            self.arrival
                .saturating_record(s.start_ns.saturating_sub(s.arrival_ns).max(1));
        }
        self.missed_periods += u64::from(s.missed_periods);
        self.last_ns = lat;
        self.last_thread = s.thread;
    }
}

/// Everything the collector has recorded so far.
#[derive(Debug)]
pub struct Recorded {
    /// Per lane (index = lane index).
    pub lanes: Vec<Histograms>,
    /// Per `(lane, raw token)`, for handles whose samples carry an origin (timers): at most
    /// [`MAX_TIMER_HISTOGRAMS`], those given to [`Telemetry::preallocate_timers`] first, then
    /// the first to report a sample.
    pub timers: BTreeMap<(u16, u64), Histograms>,
    /// Per lane, the merged samples of its timers that found `timers` full.
    pub untracked_timers: BTreeMap<u16, Histograms>,
    /// Samples recorded.
    pub recorded: u64,
}

/// A summary of one histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct LatencySummary {
    /// Number of values.
    pub count: u64,
    /// Smallest.
    pub min_ns: u64,
    /// Mean.
    pub avg_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Standard deviation.
    pub stddev_ns: f64,
}

impl LatencySummary {
    /// Summarises a histogram (all zeros if it is empty).
    ///
    /// Every value is represented by the midpoint of the histogram bucket it fell in (3
    /// significant digits: exact below 2048 ns, within ±0.05% above), as hdrhistogram's own
    /// mean is, so min, percentiles, max and mean agree with each other and with bucket counts.
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let at = |q: f64| h.median_equivalent(h.value_at_quantile(q));
        LatencySummary {
            count: h.len(),
            min_ns: h.median_equivalent(h.min()),
            avg_ns: h.mean(),
            p50_ns: at(0.50),
            p99_ns: at(0.99),
            p999_ns: at(0.999),
            max_ns: h.median_equivalent(h.max()),
            stddev_ns: h.stdev(),
        }
    }
}

/// The collector's shared results. Readers lock a plain mutex: only non-RT threads touch it.
#[derive(Debug)]
pub struct Telemetry {
    recorded: Mutex<Recorded>,
    recorder: Arc<RecorderShared>,
}

impl Telemetry {
    pub(crate) fn new(lanes: usize) -> Telemetry {
        Telemetry {
            recorded: Mutex::new(Recorded {
                lanes: (0..lanes).map(|_| Histograms::new()).collect(),
                timers: BTreeMap::new(),
                untracked_timers: BTreeMap::new(),
                recorded: 0,
            }),
            recorder: Arc::default(),
        }
    }

    /// Asks the flight recorder for a window now: the collector freezes the last `window_ms`
    /// once `after_ms` have passed and writes it (rate-limited like every trigger). A no-op
    /// with the recorder off (`window_ms = 0`) or before [`Runtime::start`](crate::Runtime::start).
    pub fn trace_now(&self) {
        self.recorder.demand();
    }

    /// What the flight recorder has written and counted.
    pub fn recorder_stats(&self) -> RecorderStats {
        self.recorder.stats()
    }

    pub(crate) fn recorder_shared(&self) -> Arc<RecorderShared> {
        self.recorder.clone()
    }

    /// Adds the histograms of one more lane (a lane added before start).
    pub(crate) fn add_lane(&self) {
        let mut r = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        r.lanes.push(Histograms::new());
    }

    /// Runs `f` on the recorded histograms (briefly blocks the collector).
    pub fn with<R>(&self, f: impl FnOnce(&Recorded) -> R) -> R {
        f(&self.recorded.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Latency summary of lane `g`.
    pub fn lane_latency(&self, g: usize) -> LatencySummary {
        self.with(|r| {
            r.lanes
                .get(g)
                .map(|h| LatencySummary::of(&h.latency))
                .unwrap_or_default()
        })
    }

    /// Arrival latency summary of lane `g`: kernel receive of a datagram → handler entry
    /// (empty if its handlers take no stamped datagrams).
    pub fn lane_arrival(&self, g: usize) -> LatencySummary {
        self.with(|r| {
            r.lanes
                .get(g)
                .map(|h| LatencySummary::of(&h.arrival))
                .unwrap_or_default()
        })
    }

    /// Creates the histograms of these timers (`(lane, raw token)`) now, before their first
    /// sample: the collector then does not allocate for them during a run, and it is these
    /// timers, in this order, that get histograms of their own, up to [`MAX_TIMER_HISTOGRAMS`]
    /// in all; for a lane with timers beyond that, its merged histograms are created too.
    pub fn preallocate_timers(&self, timers: &[(u16, u64)]) {
        let mut guard = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *guard;
        for &key in timers {
            if r.timers.contains_key(&key) || r.timers.len() < MAX_TIMER_HISTOGRAMS {
                r.timers.entry(key).or_insert_with(Histograms::new);
            } else {
                r.untracked_timers
                    .entry(key.0)
                    .or_insert_with(Histograms::new);
            }
        }
    }

    /// Clears all histograms (e.g. after a warm-up period).
    pub fn reset(&self) {
        let mut r = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        for h in &mut r.lanes {
            *h = Histograms::new();
        }
        r.timers.clear();
        r.untracked_timers.clear();
    }

    fn record_all(&self, batch: &[Sample]) {
        if batch.is_empty() {
            return;
        }
        let mut guard = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *guard;
        for s in batch {
            if let Some(h) = r.lanes.get_mut(s.lane as usize) {
                h.record(s);
            }
            if s.origin_ns != 0 {
                let key = (s.lane, s.token);
                let h = if r.timers.contains_key(&key) || r.timers.len() < MAX_TIMER_HISTOGRAMS {
                    r.timers.entry(key).or_insert_with(Histograms::new)
                } else {
                    r.untracked_timers
                        .entry(s.lane)
                        .or_insert_with(Histograms::new)
                };
                h.record(s);
            }
            r.recorded += 1;
        }
    }
}

/// The collector thread: drains all rings until stopped, then drains once more. Every sample
/// also goes to the flight recorder, if there is one, which it polls once per drain and whose
/// windows it writes (recorder.rs).
pub(crate) fn spawn_collector(
    telemetry: Arc<Telemetry>,
    mut rings: Vec<rtrb::Consumer<Sample>>,
    stop: Arc<AtomicBool>,
    mut recorder: Option<Recorder>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("lfrt-collector".into())
        .spawn(move || {
            let mut batch = Vec::with_capacity(RING_CAPACITY);
            loop {
                let stopping = stop.load(Acquire);
                for r in &mut rings {
                    while let Ok(s) = r.pop() {
                        batch.push(s);
                    }
                }
                telemetry.record_all(&batch);
                if let Some(rec) = &mut recorder {
                    let now = crate::sys::now_ns();
                    for s in &batch {
                        rec.observe(s, now);
                    }
                    if let Some(w) = rec.poll(now) {
                        rec.write(&w, now);
                    }
                }
                batch.clear();
                if stopping {
                    break;
                }
                std::thread::sleep(DRAIN_PERIOD);
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer_sample(lane: u16, token: u64, missed_periods: u32) -> Sample {
        Sample {
            lane,
            thread: 0,
            token,
            origin_ns: 1_000,
            woke_ns: 1_500,
            start_ns: 2_000,
            end_ns: 2_100,
            missed_periods,
            arrival_ns: 0,
        }
    }

    /// Per-timer histograms stop at `MAX_TIMER_HISTOGRAMS` timers; the samples of further
    /// timers are kept, merged per lane, so nothing is lost from the lane's figures.
    #[test]
    fn timer_histograms_are_bounded_and_the_rest_is_merged_per_lane() {
        let t = Telemetry::new(2);
        let extra = 10;
        let batch: Vec<Sample> = (0..(MAX_TIMER_HISTOGRAMS + extra) as u64)
            .map(|k| timer_sample(1, k, 1))
            .collect();
        t.record_all(&batch);
        // A second sample of a tracked timer still lands in its own histograms.
        t.record_all(&[timer_sample(1, 0, 0)]);
        t.with(|r| {
            assert_eq!(r.timers.len(), MAX_TIMER_HISTOGRAMS);
            assert_eq!(r.timers[&(1, 0)].latency.len(), 2);
            let rest = &r.untracked_timers[&1];
            assert_eq!(rest.latency.len(), extra as u64);
            assert_eq!(rest.missed_periods, extra as u64);
            assert_eq!(
                r.lanes[1].latency.len(),
                (MAX_TIMER_HISTOGRAMS + extra + 1) as u64
            );
            assert_eq!(r.recorded, (MAX_TIMER_HISTOGRAMS + extra + 1) as u64);
        });
        t.reset();
        t.with(|r| assert!(r.timers.is_empty() && r.untracked_timers.is_empty()));
    }

    /// Preallocated timers are the ones that keep histograms, whatever order their samples
    /// arrive in; the others are merged into their lane's.
    #[test]
    fn preallocated_timers_are_the_tracked_ones() {
        let t = Telemetry::new(1);
        let keys: Vec<(u16, u64)> = (0..(MAX_TIMER_HISTOGRAMS + 3) as u64)
            .map(|k| (0, 1000 + k))
            .collect();
        t.preallocate_timers(&keys);
        t.with(|r| {
            assert_eq!(r.timers.len(), MAX_TIMER_HISTOGRAMS);
            assert!(r.timers.contains_key(&keys[MAX_TIMER_HISTOGRAMS - 1]));
            assert!(!r.timers.contains_key(&keys[MAX_TIMER_HISTOGRAMS]));
            assert!(r.untracked_timers.contains_key(&0));
        });
        // The last timer's sample arrives first: it still goes to the merged histograms.
        let last = keys[MAX_TIMER_HISTOGRAMS + 2].1;
        t.record_all(&[timer_sample(0, last, 0), timer_sample(0, 1000, 0)]);
        t.with(|r| {
            assert_eq!(r.untracked_timers[&0].latency.len(), 1);
            assert_eq!(r.timers[&(0, 1000)].latency.len(), 1);
            assert_eq!(r.timers.len(), MAX_TIMER_HISTOGRAMS);
        });
    }
}
