//! Reporting: metrics snapshots (also from other threads, through [`MetricsHandle`]), the
//! pool threads' ids and the telemetry histograms.

use super::*;

impl Runtime {
    /// Per-lane metrics snapshot (the same as [`MetricsHandle::get`]).
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let control = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// let m = &rt.metrics()[control.index()];
    /// assert_eq!((m.name.as_str(), m.dispatched), ("control", 0));
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn metrics(&self) -> Vec<LaneMetrics> {
        snapshot(&self.lanes, &self.spawners, self.counting)
    }

    /// A cloneable handle that reads this runtime's metrics from any thread, also while it
    /// runs and from inside a handler.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.lanes.push(LaneConfig::new("g", Policy::Fifo, 10));
    /// let rt = Runtime::new(cfg)?;
    /// let metrics = rt.metrics_handle();
    /// std::thread::spawn(move || println!("{} dispatched", metrics.get()[0].dispatched));
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn metrics_handle(&self) -> MetricsHandle {
        self.handed_out.store(true, Relaxed);
        MetricsHandle {
            lanes: self.lanes.clone(),
            tasks: self.spawners.clone(),
            counting: self.counting,
        }
    }

    /// `(lane index, thread index, kernel tid)` of every pool thread (0 before it started).
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// rt.start()?;
    /// for (lane, thread, tid) in rt.thread_ids() {
    ///     println!("lane {lane} thread {thread}: tid {tid}"); // e.g. for `chrt -p TID`
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn thread_ids(&self) -> Vec<(usize, usize, i32)> {
        self.lanes
            .iter()
            .enumerate()
            .flat_map(|(gi, g)| {
                g.threads
                    .iter()
                    .enumerate()
                    .map(move |(ti, t)| (gi, ti, t.tid.load(Acquire)))
            })
            .collect()
    }

    /// Latency histograms recorded by the collector.
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// // after start, the collector fills one set of histograms per lane
    /// let samples = rt.telemetry().with(|r| r.lanes[0].latency.len());
    /// assert_eq!(samples, 0);
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }
}

/// The metrics of `lanes`, with their task tables' counters (`tasks`, by lane index;
/// `counting`: the counting allocator is installed).
fn snapshot(
    lanes: &[Arc<LanePool>],
    tasks: &[Option<Spawner>],
    counting: bool,
) -> Vec<LaneMetrics> {
    lanes
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let c = &g.counters;
            let (bound, (leader_present, followers)) = match &g.served {
                Some(s) => {
                    let (stats, leader, followers) = s.stats();
                    (Some(stats), (leader, followers))
                }
                None => (None, g.protocol.snapshot()),
            };
            let pool = |own: u64, of: fn(&BoundStats) -> u64| bound.as_ref().map_or(own, of);
            LaneMetrics {
                name: g.spec.name.clone(),
                priority: g.spec.priority,
                kernel_sched: g
                    .threads
                    .iter()
                    .map(|t| Applied::describe(t.applied.load(Acquire)))
                    .collect(),
                threads: g.threads.len(),
                dispatched: pool(c.dispatched.load(Relaxed), |b| b.dispatched),
                promotions: pool(c.promotions.load(Relaxed), |b| b.promotions),
                promotions_no_follower: pool(c.vacant.load(Relaxed), |b| b.vacant),
                promotions_deferred: c.kept.load(Relaxed),
                deferred_takeovers: g.protocol.relieved(),
                batch_overflow: g.protocol.overflow(),
                coalesced_reports: g.handles.coalesced.load(Relaxed),
                rearm_checks: g.handles.rechecks.load(Relaxed),
                leader_present,
                followers,
                processing: c.processing.load(Relaxed),
                handler_panics: pool(c.panics.load(Relaxed), |b| b.panics)
                    + g.handles.drop_panics.load(Relaxed),
                handles_closed: g.handles.closed.load(Relaxed),
                handles_closed_by_handler: c.closed_by_handler.load(Relaxed),
                stale_events: g.handles.stale.load(Relaxed),
                handles: g.handles.len(),
                budget_overruns: c.budget_overruns.load(Relaxed),
                overrun_causes: OverrunCauses::of(&c.overrun_causes),
                restore_failures: c.restore_failures.load(Relaxed),
                raise_failures: c.raise_failures.load(Relaxed),
                demotions: c.demotions.load(Relaxed),
                borrowed_dispatches: c.borrowed.load(Relaxed),
                lent_dispatches: c.lent.load(Relaxed),
                borrow_refused: c.borrow_refused.load(Relaxed),
                relayed_wakes: c.relayed.load(Relaxed),
                relay_full: c.relay_full.load(Relaxed),
                pool_allocations: if counting {
                    LaneMetrics::sum_measured(g.threads.iter().map(ThreadSlot::allocations))
                } else {
                    None
                },
                pool_minor_faults: LaneMetrics::sum_measured(
                    g.threads.iter().map(ThreadSlot::minor_faults),
                ),
                samples: g.threads.iter().map(|t| t.samples.load(Relaxed)).sum(),
                samples_dropped: g
                    .threads
                    .iter()
                    .map(|t| t.samples_dropped.load(Relaxed))
                    .sum(),
                accept_exhausted: g.handles.incidents.accept_exhausted.load(Relaxed),
                connections_refused: g.handles.incidents.connections_refused.load(Relaxed),
                datagrams_truncated: g.handles.incidents.datagrams_truncated.load(Relaxed),
                inbox_refused: g.handles.incidents.inbox_refused.load(Relaxed),
                frames_oversize: g.handles.incidents.frames_oversize.load(Relaxed),
                connections_reset: g.handles.incidents.connections_reset.load(Relaxed),
                stream_backpressure: g.handles.incidents.stream_backpressure.load(Relaxed),
                stream_idle_timeouts: g.handles.incidents.stream_idle_timeouts.load(Relaxed),
                stream_write_timeouts: g.handles.incidents.stream_write_timeouts.load(Relaxed),
                bound,
                tasks: tasks.get(gi).and_then(|t| t.as_ref()).map(Spawner::stats),
            }
        })
        .collect()
}

/// Reads a running runtime's metrics from any thread ([`Runtime::metrics_handle`]).
///
/// # Examples
/// ```no_run
/// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// # let mut cfg = RuntimeConfig::default();
/// # cfg.lanes.push(LaneConfig::new("g", Policy::Fifo, 10));
/// let rt = Runtime::new(cfg)?;
/// let metrics = rt.metrics_handle();
/// for g in metrics.get() {
///     println!("{}: {} events", g.name, g.dispatched);
/// }
/// # Ok::<(), lfrt::Error>(())
/// ```
#[derive(Clone)]
pub struct MetricsHandle {
    pub(super) lanes: Vec<Arc<LanePool>>,
    /// Each lane's task spawner, by lane index (its counters are in the snapshot).
    pub(super) tasks: Vec<Option<Spawner>>,
    pub(super) counting: bool,
}

impl MetricsHandle {
    /// The same snapshot as [`Runtime::metrics`].
    ///
    /// # Real-time safety
    /// Allocates the snapshot (names, vectors): call it from an admin lane, not a hot path.
    ///
    /// Example: [`MetricsHandle`].
    pub fn get(&self) -> Vec<LaneMetrics> {
        snapshot(&self.lanes, &self.tasks, self.counting)
    }
}

impl fmt::Debug for MetricsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("MetricsHandle { .. }")
    }
}
