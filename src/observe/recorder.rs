//! The flight recorder: the last `window_ms` of every lane's dispatch samples, kept by the
//! telemetry collector, frozen and written out when a trigger fires.
//!
//! ```text
//!   pool threads (RT)          collector thread (not RT, every DRAIN_PERIOD)
//!   ─────────────────          ─────────────────────────────────────────────────────────
//!   dispatch → Sample ─rtrb─▶  histograms (telemetry.rs)
//!                              Recorder::observe(sample)
//!                                ├─ lane ring: preallocated, the newest samples, oldest
//!                                │  overwritten (and its end time kept, to count it)
//!                                └─ trigger? (after the lane's warm-up dispatches)  latency > trace_over_us │ service > budget_us
//!                                             │ demand (trigger(), a signal, /trace)
//!                              Recorder::poll(now)
//!                                └─ once now ≥ at + after: freeze [to − window, to],
//!                                   add the kernel's events (tracefs instance, opt-in),
//!                                   write a Chrome trace, count it
//! ```
//!
//! # What it costs the dispatch path
//!
//! Nothing: a pool thread already pushes one [`Sample`] per dispatch into its own ring
//! (telemetry.rs). The recorder lives entirely on the collector thread: copying each sample
//! into a lane ring preallocated at start, comparing two thresholds, and on a trigger, reading
//! the kernel's buffer and writing a file. No lock, allocation or system call is added where a
//! pool thread runs.
//!
//! # Invariants
//!
//! * **Exactly the window asked for.** A written [`Window`] holds every sample of the lane
//!   rings whose handler *ended* in `[from_ns, to_ns]`, where `to_ns − from_ns = window_ms`,
//!   and no other. A sample of that span the ring overwrote before the freeze is counted in
//!   [`Window::overwritten`] (its end time is kept in a second ring of the same size for that);
//!   kept + overwritten = every sample of the span the collector saw.
//! * **Bounded memory.** Each lane ring holds [`TraceConfig::capacity`] samples, fixed at
//!   start; the memory plan counts it ([`TraceConfig::bytes_per_lane`]). Nothing grows with
//!   the rate; a rate above `max_rate` overwrites, and counts.
//! * **Rate-limited.** At most one window is pending; a trigger while one is pending or within
//!   `min_interval_ms` of the last written one is counted in [`RecorderStats::suppressed`],
//!   never queued.

use super::sample::{Sample, DRAIN_PERIOD};
use crate::observe::window::{LaneInfo, Trigger, TriggerKind, Window};
use crate::sys::tracefs::KernelTrace;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// The flight recorder's settings (the `[trace]` table of a configuration file).
///
/// # Examples
/// ```toml
/// [trace]
/// window_ms = 100      # the span a written window covers
/// after_ms = 10        # of which this much follows the trigger
/// kernel = true        # also the kernel's sched/IRQ/timer events (root)
/// dir = "/var/tmp/lfrt"
///
/// [[lane]]
/// name = "control"
/// priority = 80
/// trace_over_us = 200  # write a window when a dispatch is later than this
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceConfig {
    /// The span of one written window, ms (1..=10000; default 100). 0 turns the recorder off:
    /// no ring, no trigger.
    pub window_ms: u32,
    /// How much of the window follows the trigger, ms (< `window_ms`; default 10): the
    /// recorder waits this long after a trigger before it freezes the window.
    pub after_ms: u32,
    /// The most dispatches per second one lane's ring must hold for a whole window without
    /// overwriting (1..=10000000; default 20000). Sizes the ring:
    /// [`capacity`](Self::capacity).
    pub max_rate: u32,
    /// The least time between two written windows, ms (default 1000); triggers in between are
    /// counted, not written.
    pub min_interval_ms: u32,
    /// Write a window when a handler runs past its lane's `budget_us` (default false: the
    /// watchdog reports overruns; a VM's steal time makes them common).
    pub on_overrun: bool,
    /// Also record the kernel's events for the lanes' CPUs (`sched_switch`, wake-ups, IRQs,
    /// timer expiries) in a private ftrace instance (needs root; default false).
    pub kernel: bool,
    /// The ftrace instance's buffer per CPU, KiB (default 4096).
    pub kernel_buffer_kb: u32,
    /// Where windows are written, as `lfrt-trace-<pid>-<n>.json` (default: the current
    /// directory).
    pub dir: PathBuf,
}

impl Default for TraceConfig {
    fn default() -> TraceConfig {
        TraceConfig {
            window_ms: 100,
            after_ms: 10,
            max_rate: 20_000,
            min_interval_ms: 1000,
            on_overrun: false,
            kernel: false,
            kernel_buffer_kb: 4096,
            dir: PathBuf::from("."),
        }
    }
}

impl TraceConfig {
    /// Samples one lane's ring holds: a window at `max_rate`, plus two drain periods of slack
    /// for samples that end after the window while the collector waits to freeze it.
    pub fn capacity(&self) -> usize {
        if self.window_ms == 0 {
            return 0;
        }
        let ms = u64::from(self.window_ms) + 2 * DRAIN_PERIOD.as_millis() as u64;
        (ms * u64::from(self.max_rate)).div_ceil(1000).max(64) as usize
    }

    /// Bytes the recorder preallocates per lane: the ring of samples and the ring of the
    /// overwritten samples' end times.
    pub fn bytes_per_lane(&self) -> u64 {
        (self.capacity() * (std::mem::size_of::<Sample>() + std::mem::size_of::<u64>())) as u64
    }

    /// The first setting out of range, as `(key, message)`.
    pub(crate) fn invalid(&self) -> Option<(&'static str, String)> {
        if self.window_ms == 0 {
            return None;
        }
        if self.window_ms > 10_000 {
            return Some((
                "window_ms",
                format!("{}: must be 0..=10000", self.window_ms),
            ));
        }
        if self.after_ms >= self.window_ms {
            return Some((
                "after_ms",
                format!(
                    "{}: must be less than window_ms ({})",
                    self.after_ms, self.window_ms
                ),
            ));
        }
        if !(1..=10_000_000).contains(&self.max_rate) {
            return Some((
                "max_rate",
                format!("{}: must be 1..=10000000", self.max_rate),
            ));
        }
        if self.kernel && !(64..=1_048_576).contains(&self.kernel_buffer_kb) {
            return Some((
                "kernel_buffer_kb",
                format!("{}: must be 64..=1048576", self.kernel_buffer_kb),
            ));
        }
        None
    }
}

/// What the recorder has done, for reports and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Triggers that started a window.
    pub triggered: u64,
    /// Windows written.
    pub written: u64,
    /// Triggers not written: one was pending, or the last window was written less than
    /// `min_interval_ms` ago.
    pub suppressed: u64,
    /// Windows that could not be written (the error is logged).
    pub failed: u64,
    /// The last window written.
    pub last: Option<PathBuf>,
}

/// The recorder's side that other threads reach: the on-demand trigger and the counts.
#[derive(Debug, Default)]
pub(crate) struct RecorderShared {
    demand: AtomicBool,
    stats: Mutex<RecorderStats>,
}

impl RecorderShared {
    /// Asks for a window now (written by the collector within `after_ms` plus a drain period).
    pub(crate) fn demand(&self) {
        self.demand.store(true, Relaxed);
    }

    pub(crate) fn stats(&self) -> RecorderStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut RecorderStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// A lane's triggers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LaneTriggers {
    /// Latency threshold (`trace_over_us`), ns.
    pub(crate) over_ns: Option<u64>,
    /// Budget (`budget_us`) when `on_overrun`, ns.
    pub(crate) budget_ns: Option<u64>,
    /// The lane's first samples that fire no trigger: its threads' warm-up
    /// (`WARMUP_DISPATCHES` each), whose lateness is the start's (first page faults, the
    /// timers' first expiries while the runtime was still starting), not the service's.
    pub(crate) warmup: u64,
}

/// A preallocated ring of one lane's newest samples, and of the end times of the samples it
/// overwrote.
#[derive(Debug)]
struct LaneRing {
    /// Samples the lane has had.
    seen: u64,
    samples: Box<[Sample]>,
    /// Index of the oldest sample.
    head: usize,
    len: usize,
    evicted: Box<[u64]>,
    evicted_head: usize,
    evicted_len: usize,
}

impl LaneRing {
    fn new(capacity: usize) -> LaneRing {
        LaneRing {
            seen: 0,
            samples: vec![Sample::default(); capacity].into_boxed_slice(),
            head: 0,
            len: 0,
            evicted: vec![0; capacity].into_boxed_slice(),
            evicted_head: 0,
            evicted_len: 0,
        }
    }

    fn push(&mut self, s: Sample) {
        self.seen += 1;
        let cap = self.samples.len();
        if self.len == cap {
            let old = self.samples[self.head].end_ns;
            self.samples[self.head] = s;
            self.head = (self.head + 1) % cap;
            // The end times ring overwrites its own oldest: those are older than any sample a
            // window of the ring's span can hold.
            let at = (self.evicted_head + self.evicted_len) % cap;
            self.evicted[at] = old;
            if self.evicted_len == cap {
                self.evicted_head = (self.evicted_head + 1) % cap;
            } else {
                self.evicted_len += 1;
            }
        } else {
            self.samples[(self.head + self.len) % cap] = s;
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Sample> {
        let cap = self.samples.len();
        (0..self.len).map(move |i| &self.samples[(self.head + i) % cap])
    }

    fn overwritten_in(&self, from: u64, to: u64) -> u64 {
        let cap = self.evicted.len();
        (0..self.evicted_len)
            .filter(|i| (from..=to).contains(&self.evicted[(self.evicted_head + i) % cap]))
            .count() as u64
    }
}

/// What the runtime tells the recorder about its lanes at a freeze: names, priorities and the
/// threads' ids, which exist only once the threads run.
pub(crate) type DescribeLanes = Box<dyn Fn() -> Vec<LaneInfo> + Send>;

/// The collector's flight recorder (module docs).
pub(crate) struct Recorder {
    cfg: TraceConfig,
    rings: Vec<LaneRing>,
    triggers: Vec<LaneTriggers>,
    pending: Option<Trigger>,
    last_written_ns: Option<u64>,
    kernel: Option<KernelTrace>,
    describe: DescribeLanes,
    shared: std::sync::Arc<RecorderShared>,
    written: u64,
    /// When the last freeze began: a written window's log line says how long freezing
    /// (reading the kernel's buffer included) and writing took.
    froze_at: Option<std::time::Instant>,
    /// The system's steal time (`/proc/stat`) read every [`STEAL_PERIOD_NS`]: `(when, ns)`,
    /// oldest first, the last [`STEAL_MARKS`]; a window's steal is counted from the last mark
    /// at or before its start.
    steal_marks: std::collections::VecDeque<(u64, u64)>,
}

/// How often the recorder reads the system's steal time.
const STEAL_PERIOD_NS: u64 = 25_000_000;
/// Steal readings kept: enough to reach back over the longest window (10 s) is not needed;
/// a window older than the marks counts steal from the oldest one.
const STEAL_MARKS: usize = 64;

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("cfg", &self.cfg)
            .field("lanes", &self.rings.len())
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder of `triggers.len()` lanes. `kernel`: the opened ftrace instance, if asked for.
    pub(crate) fn new(
        cfg: TraceConfig,
        triggers: Vec<LaneTriggers>,
        kernel: Option<KernelTrace>,
        describe: DescribeLanes,
        shared: std::sync::Arc<RecorderShared>,
    ) -> Recorder {
        let cap = cfg.capacity();
        Recorder {
            rings: triggers.iter().map(|_| LaneRing::new(cap)).collect(),
            cfg,
            triggers,
            pending: None,
            last_written_ns: None,
            kernel,
            describe,
            shared,
            written: 0,
            froze_at: None,
            steal_marks: std::collections::VecDeque::with_capacity(STEAL_MARKS),
        }
    }

    /// Keeps `s` and checks it against its lane's triggers.
    pub(crate) fn observe(&mut self, s: &Sample, now_ns: u64) {
        let lane = s.lane as usize;
        let (Some(ring), Some(t)) = (self.rings.get_mut(lane), self.triggers.get(lane)) else {
            return;
        };
        ring.push(*s);
        if ring.seen <= t.warmup {
            return;
        }
        let kind = match (t.over_ns, t.budget_ns) {
            (Some(over), _) if s.latency_ns() > over => TriggerKind::Latency { threshold_ns: over },
            (_, Some(budget)) if s.end_ns.saturating_sub(s.start_ns) > budget => {
                TriggerKind::Overrun { budget_ns: budget }
            }
            _ => return,
        };
        self.fire(kind, s.start_ns, Some(*s), now_ns);
    }

    fn fire(&mut self, kind: TriggerKind, at_ns: u64, sample: Option<Sample>, now_ns: u64) {
        let min = u64::from(self.cfg.min_interval_ms) * 1_000_000;
        let recent = self
            .last_written_ns
            .is_some_and(|last| now_ns.saturating_sub(last) < min);
        if self.pending.is_some() || recent {
            self.shared.update(|s| s.suppressed += 1);
            return;
        }
        self.shared.update(|s| s.triggered += 1);
        self.pending = Some(Trigger {
            kind,
            at_ns,
            sample,
        });
    }

    /// Takes an on-demand trigger, and freezes the pending window once `after_ms` have passed
    /// since its trigger. Returns the frozen window (the caller writes it).
    pub(crate) fn poll(&mut self, now_ns: u64) -> Option<Window> {
        if self
            .steal_marks
            .back()
            .is_none_or(|&(at, _)| now_ns.saturating_sub(at) >= STEAL_PERIOD_NS)
        {
            if let Ok(st) = crate::sys::schedstat::steal(0) {
                if self.steal_marks.len() == STEAL_MARKS {
                    self.steal_marks.pop_front();
                }
                self.steal_marks.push_back((now_ns, st.total_ns));
            }
        }
        if self.shared.demand.swap(false, Relaxed) {
            self.fire(TriggerKind::Demand, now_ns, None, now_ns);
        }
        let after = u64::from(self.cfg.after_ms) * 1_000_000;
        let at = self.pending.as_ref()?.at_ns;
        if now_ns < at.saturating_add(after) {
            return None;
        }
        let trigger = self.pending.take()?;
        let to_ns = at.saturating_add(after);
        let from_ns = to_ns.saturating_sub(u64::from(self.cfg.window_ms) * 1_000_000);
        Some(self.freeze(trigger, from_ns, to_ns))
    }

    fn freeze(&mut self, trigger: Trigger, from_ns: u64, to_ns: u64) -> Window {
        self.froze_at = Some(std::time::Instant::now());
        let span = from_ns..=to_ns;
        let mut samples: Vec<Sample> = self
            .rings
            .iter()
            .flat_map(|r| r.iter().filter(|s| span.contains(&s.end_ns)).copied())
            .collect();
        samples.sort_by_key(|s| (s.start_ns, s.lane, s.thread));
        let overwritten = self
            .rings
            .iter()
            .map(|r| r.overwritten_in(from_ns, to_ns))
            .collect();
        let kernel = match &self.kernel {
            Some(k) => k.read_window(from_ns, to_ns).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "flight recorder: reading the kernel's events failed");
                Vec::new()
            }),
            None => Vec::new(),
        };
        Window {
            trigger,
            from_ns,
            to_ns,
            lanes: (self.describe)(),
            samples,
            overwritten,
            kernel,
            steal_ns: self.steal_since(from_ns),
        }
    }

    /// Steal time from the last reading at or before `from_ns` (else the oldest) to now: a
    /// span that covers the window, in `USER_HZ` steps (10 ms); `None` without a reading.
    fn steal_since(&self, from_ns: u64) -> Option<u64> {
        let start = self
            .steal_marks
            .iter()
            .rev()
            .find(|&&(at, _)| at <= from_ns)
            .or(self.steal_marks.front())?;
        let now = crate::sys::schedstat::steal(0).ok()?;
        Some(now.total_ns.saturating_sub(start.1))
    }

    /// Writes `w` into the configured directory and counts it. Returns the path.
    pub(crate) fn write(&mut self, w: &Window, now_ns: u64) -> Option<PathBuf> {
        self.written += 1;
        let path = self.cfg.dir.join(format!(
            "lfrt-trace-{}-{}.json",
            std::process::id(),
            self.written
        ));
        self.last_written_ns = Some(now_ns);
        match crate::observe::chrome::write_chrome_trace(w, &path) {
            Ok(()) => {
                tracing::warn!(
                    trigger = ?w.trigger.kind,
                    samples = w.samples.len(),
                    kernel_events = w.kernel.len(),
                    took_ms = self.froze_at.map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3),
                    path = %path.display(),
                    "flight recorder: window written (open it in Perfetto, or `lfrt explain`)"
                );
                self.shared.update(|s| {
                    s.written += 1;
                    s.last = Some(path.clone());
                });
                Some(path)
            }
            Err(e) => {
                tracing::warn!(error = %e, path = %path.display(), "flight recorder: write failed");
                self.shared.update(|s| s.failed += 1);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn sample(lane: u16, start_ns: u64, end_ns: u64) -> Sample {
        Sample {
            lane,
            thread: 0,
            token: 1,
            origin_ns: start_ns.saturating_sub(1_000),
            woke_ns: start_ns,
            start_ns,
            end_ns,
            missed_periods: 0,
            arrival_ns: 0,
        }
    }

    fn recorder(cfg: TraceConfig, triggers: Vec<LaneTriggers>) -> (Recorder, Arc<RecorderShared>) {
        let shared = Arc::new(RecorderShared::default());
        let r = Recorder::new(cfg, triggers, None, Box::new(Vec::new), shared.clone());
        (r, shared)
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn the_window_holds_exactly_its_span_and_counts_what_was_overwritten() {
        // 10 ms window; a ring of (10 + 4) × 1000 / 1000 = 14 → 64 samples (the floor).
        let cfg = TraceConfig {
            window_ms: 10,
            after_ms: 2,
            max_rate: 1000,
            min_interval_ms: 0,
            ..TraceConfig::default()
        };
        assert_eq!(cfg.capacity(), 64);
        let (mut r, shared) = recorder(cfg, vec![LaneTriggers::default()]);
        // 200 samples, one every 100 µs from t = 1 s: 20 ms of them, 136 overwritten.
        let t0 = 1_000 * MS;
        for i in 0..200 {
            let start = t0 + i * 100_000;
            r.observe(&sample(0, start, start + 10_000), start + 10_000);
        }
        shared.demand();
        let now = t0 + 20 * MS;
        assert!(r.poll(now).is_none(), "the window runs on for after_ms");
        let w = r.poll(now + 2 * MS).expect("frozen");
        assert_eq!((w.from_ns, w.to_ns), (now + 2 * MS - 10 * MS, now + 2 * MS));
        let in_span = (0..200u64)
            .map(|i| t0 + i * 100_000 + 10_000)
            .filter(|e| (w.from_ns..=w.to_ns).contains(e))
            .count() as u64;
        assert!(w
            .samples
            .iter()
            .all(|s| (w.from_ns..=w.to_ns).contains(&s.end_ns)));
        assert_eq!(w.samples.len(), 64, "the whole ring falls in the span");
        assert_eq!(w.overwritten, vec![in_span - 64]);
        assert!(w.samples.windows(2).all(|p| p[0].start_ns <= p[1].start_ns));
        assert_eq!(w.trigger.kind, TriggerKind::Demand);
    }

    #[test]
    fn a_window_that_fits_loses_nothing_and_leaves_out_older_samples() {
        let cfg = TraceConfig {
            window_ms: 10,
            after_ms: 1,
            max_rate: 100_000,
            min_interval_ms: 0,
            ..TraceConfig::default()
        };
        let over = 50_000;
        let (mut r, shared) = recorder(
            cfg,
            vec![
                LaneTriggers::default(),
                LaneTriggers {
                    over_ns: Some(over),
                    ..LaneTriggers::default()
                },
            ],
        );
        let t0 = 5_000 * MS;
        // 30 ms of samples on lane 0, one every ms; lane 1's late one at 25 ms.
        for i in 0..30 {
            let s = t0 + i * MS;
            r.observe(&sample(0, s, s + 1_000), s + 1_000);
        }
        let mut late = sample(1, t0 + 25 * MS, t0 + 25 * MS + 5_000);
        late.origin_ns = late.start_ns - 60_000;
        r.observe(&late, late.end_ns);
        let w = r.poll(t0 + 40 * MS).expect("frozen");
        assert_eq!(w.to_ns, late.start_ns + MS);
        assert_eq!(w.from_ns, late.start_ns + MS - 10 * MS);
        let lane0: Vec<u64> = w
            .samples
            .iter()
            .filter(|s| s.lane == 0)
            .map(|s| s.end_ns)
            .collect();
        let expect: Vec<u64> = (0..30)
            .map(|i| t0 + i * MS + 1_000)
            .filter(|e| (w.from_ns..=w.to_ns).contains(e))
            .collect();
        assert_eq!(lane0, expect);
        assert_eq!(w.overwritten, vec![0, 0]);
        assert_eq!(w.trigger.kind, TriggerKind::Latency { threshold_ns: over });
        assert_eq!(w.trigger.sample, Some(late));
        assert_eq!(shared.stats().triggered, 1);
    }

    #[test]
    fn the_warm_up_fires_no_trigger() {
        let cfg = TraceConfig {
            min_interval_ms: 0,
            ..TraceConfig::default()
        };
        let (mut r, shared) = recorder(
            cfg,
            vec![LaneTriggers {
                over_ns: Some(1),
                warmup: 3,
                ..LaneTriggers::default()
            }],
        );
        for i in 0..3 {
            r.observe(&sample(0, i * MS, i * MS + 10), i * MS + 10);
        }
        assert_eq!(shared.stats().triggered, 0);
        r.observe(&sample(0, 3 * MS, 3 * MS + 10), 3 * MS + 10);
        assert_eq!(shared.stats().triggered, 1);
    }

    #[test]
    fn triggers_in_a_row_are_counted_not_queued() {
        let cfg = TraceConfig {
            window_ms: 10,
            after_ms: 1,
            min_interval_ms: 1000,
            on_overrun: true,
            ..TraceConfig::default()
        };
        let (mut r, shared) = recorder(
            cfg,
            vec![LaneTriggers {
                budget_ns: Some(100_000),
                ..LaneTriggers::default()
            }],
        );
        let t0 = 9_000 * MS;
        let long = |at: u64| sample(0, at, at + 200_000);
        r.observe(&long(t0), t0);
        r.observe(&long(t0 + MS / 2), t0 + MS / 2); // pending: suppressed
        let dir = std::env::temp_dir().join(format!("lfrt-recorder-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        r.cfg.dir = dir.clone();
        let w = r.poll(t0 + 2 * MS).expect("frozen");
        assert_eq!(w.trigger.kind, TriggerKind::Overrun { budget_ns: 100_000 });
        let path = r.write(&w, t0 + 2 * MS).expect("written");
        r.observe(&long(t0 + 3 * MS), t0 + 3 * MS); // within min_interval: suppressed
        assert!(r.poll(t0 + 10 * MS).is_none());
        let back = crate::observe::chrome::read_window(&path).unwrap();
        assert_eq!(back, w);
        let stats = shared.stats();
        assert_eq!(
            (
                stats.triggered,
                stats.written,
                stats.suppressed,
                stats.failed
            ),
            (1, 1, 2, 0)
        );
        assert_eq!(stats.last, Some(path));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn settings_out_of_range_are_named() {
        let bad = |f: fn(&mut TraceConfig)| {
            let mut c = TraceConfig::default();
            f(&mut c);
            c.invalid().map(|(k, _)| k)
        };
        assert_eq!(bad(|_| {}), None);
        assert_eq!(bad(|c| c.window_ms = 0), None);
        assert_eq!(bad(|c| c.window_ms = 10_001), Some("window_ms"));
        assert_eq!(bad(|c| c.after_ms = 100), Some("after_ms"));
        assert_eq!(bad(|c| c.max_rate = 0), Some("max_rate"));
        assert_eq!(
            bad(|c| {
                c.kernel = true;
                c.kernel_buffer_kb = 1
            }),
            Some("kernel_buffer_kb")
        );
        // The default plan: 104 ms at 20,000/s, a 56-byte sample and its 8-byte end time each.
        assert_eq!(std::mem::size_of::<Sample>(), 56);
        assert_eq!(TraceConfig::default().capacity(), 2080);
        assert_eq!(TraceConfig::default().bytes_per_lane(), 2080 * 64);
    }
}
