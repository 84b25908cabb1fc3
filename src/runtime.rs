//! The runtime: owns the groups, starts and stops their threads, reports their metrics.

use crate::alloc_count;
use crate::config::{HandlerConfig, RtMode, RuntimeConfig};
use crate::error::Error;
use crate::group::{pool_thread, Applied, Group, Setup, ThreadSlot};
use crate::handle_set::Token;
use crate::handler::EventHandler;
use crate::handler::Registry;
use crate::handlers::{PeriodicTimer, TcpEcho, UdpEcho};
use crate::metrics::GroupMetrics;
use crate::source::Timer;
use crate::sys::{self, futex, mem};
use crate::telemetry::{self, Sample, Telemetry};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long `shutdown` waits for pool threads (each must finish its current handler).
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Delay from `start` to the first expiry of built-in timers, so the first period is measured
/// with every thread already waiting.
const TIMER_START_DELAY_NS: u64 = 2_000_000;

/// What `start` found out about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReport {
    /// Every RT group's threads got their configured policy and priority.
    pub rt_applied: bool,
    /// `mlockall` succeeded (false if not requested).
    pub memory_locked: bool,
    /// The counting allocator is installed, so `pool_allocations` can be measured.
    pub counting_allocations: bool,
}

enum State {
    Built {
        /// Per group, per thread: the producer side of the thread's telemetry ring.
        rings: Vec<Vec<rtrb::Producer<Sample>>>,
        /// The consumer sides, for the collector.
        consumers: Vec<rtrb::Consumer<Sample>>,
        pending: Vec<(usize, Pending)>,
    },
    Running,
    Stopped,
}

enum Pending {
    Handler(Box<dyn EventHandler>),
    Timers {
        interval_us: u64,
        count: usize,
        distance_us: u64,
    },
}

/// A set of Leader/Followers groups, each at its own priority.
///
/// # Examples
/// ```no_run
/// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// let mut cfg = RuntimeConfig::default();
/// cfg.groups.push(GroupConfig::new("control", Policy::Fifo, 80));
/// let mut rt = Runtime::new(cfg)?;
/// // rt.registry("control").unwrap().register(Box::new(my_handler))?;
/// rt.start()?;
/// std::thread::sleep(std::time::Duration::from_millis(100));
/// let metrics = rt.shutdown()?;
/// # Ok::<(), lfrt::Error>(())
/// ```
///
/// # Real-time safety
/// Everything is allocated in [`Runtime::new`] and [`Runtime::start`]: handle tables, follower
/// heaps, per-thread buffers and telemetry rings. After `start` the dispatch path does not
/// allocate and blocks only in `epoll_wait` (leader), the follower's futex, or a PI lock.
pub struct Runtime {
    cfg: RuntimeConfig,
    groups: Vec<Arc<Group>>,
    threads: Vec<JoinHandle<()>>,
    telemetry: Arc<Telemetry>,
    /// Stops the helper threads (collector, watchdog).
    stop: Arc<AtomicBool>,
    helpers: Vec<JoinHandle<()>>,
    state: State,
    /// [`crate::CountingAlloc`] is the global allocator.
    counting: bool,
    /// Set to 1 (and futex-woken) by [`Stopper::stop`]; [`Runtime::wait`] sleeps on it.
    stopped: Arc<AtomicU32>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Runtime { .. }")
    }
}

impl Runtime {
    /// Validates the configuration, creates every group's handle set and telemetry rings and
    /// binds the built-in handlers' sockets. No thread is started: the pool threads, the
    /// telemetry collector and the watchdog are spawned by [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, [`Error::Bind`] if a socket cannot be
    /// bound, [`Error::Io`] if a kernel object cannot be created. Nothing is left open.
    pub fn new(cfg: RuntimeConfig) -> Result<Runtime, Error> {
        cfg.validate()?;
        let mut groups = Vec::new();
        let mut rings = Vec::new();
        let mut consumers = Vec::new();
        let mut pending = Vec::new();
        for (gi, gc) in cfg.groups.iter().enumerate() {
            let g = Group::new(gi as u16, gc.clone())?;
            let mut producers = Vec::new();
            for _ in 0..gc.threads {
                let (p, c) = rtrb::RingBuffer::new(telemetry::RING_CAPACITY);
                producers.push(p);
                consumers.push(c);
            }
            rings.push(producers);
            for h in &gc.handlers {
                let p = match *h {
                    HandlerConfig::UdpEcho { bind, work_us } => {
                        let s = std::net::UdpSocket::bind(bind).map_err(|e| Error::Bind {
                            addr: bind,
                            source: e,
                        })?;
                        Pending::Handler(Box::new(UdpEcho::new(s, work_us).map_err(|e| {
                            Error::Io {
                                context: "configuring a UDP socket",
                                source: e,
                            }
                        })?))
                    }
                    HandlerConfig::TcpEcho { bind, work_us } => {
                        let l = std::net::TcpListener::bind(bind).map_err(|e| Error::Bind {
                            addr: bind,
                            source: e,
                        })?;
                        Pending::Handler(Box::new(TcpEcho::new(l, work_us).map_err(|e| {
                            Error::Io {
                                context: "configuring a TCP listener",
                                source: e,
                            }
                        })?))
                    }
                    HandlerConfig::Timer {
                        interval_us,
                        count,
                        distance_us,
                    } => Pending::Timers {
                        interval_us,
                        count,
                        distance_us,
                    },
                };
                pending.push((gi, p));
            }
            groups.push(Arc::new(g));
        }
        crate::borrow::wire(&groups)?;
        Ok(Runtime {
            cfg,
            telemetry: Arc::new(Telemetry::new(groups.len())),
            groups,
            threads: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            helpers: Vec::new(),
            state: State::Built {
                rings,
                consumers,
                pending,
            },
            counting: alloc_count::is_active(),
            stopped: Arc::new(AtomicU32::new(0)),
        })
    }

    /// The registry of the group named `name`, to add handles (before or after `start`).
    pub fn registry(&self, name: &str) -> Option<Registry> {
        self.groups
            .iter()
            .find(|g| g.cfg.name == name)
            .map(|g| g.registry())
    }

    /// The configuration this runtime runs.
    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    /// Latency histograms recorded by the collector.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// Locks memory (if configured), spawns the telemetry collector and every group's threads
    /// and waits until each has set its policy, priority and affinity and pre-faulted its stack
    /// and buffers; then spawns the watchdog (if a group has a budget) and arms the built-in
    /// handlers.
    ///
    /// # Errors
    /// With `rt = "required"`: [`Error::RtPermission`] naming CAP_SYS_NICE / RLIMIT_RTPRIO if a
    /// thread could not get its RT priority, and the error of a failed `mlockall`. With
    /// `"best-effort"` those only log a warning. [`Error::ThreadSetup`] if a pool thread died
    /// during its set-up; [`Error::TooManyHandles`] or [`Error::Io`] if a built-in handler
    /// cannot be armed or registered; [`Error::Io`] if a thread cannot be spawned;
    /// [`Error::State`] if the runtime was already started or shut down.
    ///
    /// Any failure stops and joins every thread already started and closes every handle, as
    /// [`shutdown`](Self::shutdown) does; the runtime cannot be started again.
    pub fn start(&mut self) -> Result<StartReport, Error> {
        let (rings, consumers, pending) = match std::mem::replace(&mut self.state, State::Running) {
            State::Built {
                rings,
                consumers,
                pending,
            } => (rings, consumers, pending),
            other => {
                let what = match other {
                    State::Running => "Runtime::start called twice",
                    _ => "Runtime::start called after shutdown",
                };
                self.state = other;
                return Err(Error::State(what));
            }
        };
        let started = self.start_all(rings, consumers, pending);
        if started.is_err() {
            // The start error is what the caller needs; a thread that does not stop in time
            // stays detached either way.
            let _ = self.shutdown();
        }
        started
    }

    /// The body of [`start`](Self::start); its caller stops everything on error.
    fn start_all(
        &mut self,
        rings: Vec<Vec<rtrb::Producer<Sample>>>,
        consumers: Vec<rtrb::Consumer<Sample>>,
        pending: Vec<(usize, Pending)>,
    ) -> Result<StartReport, Error> {
        let mut report = StartReport {
            rt_applied: true,
            memory_locked: false,
            counting_allocations: self.counting,
        };
        if self.cfg.lock_memory {
            match mem::lock_all() {
                Ok(()) => report.memory_locked = true,
                Err(e) if self.cfg.rt == RtMode::Required => {
                    return Err(Error::Io { context: "mlockall(MCL_CURRENT|MCL_FUTURE) (needs CAP_IPC_LOCK or RLIMIT_MEMLOCK)", source: e });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "mlockall failed; running with unlocked memory")
                }
            }
        }
        let collector =
            telemetry::spawn_collector(self.telemetry.clone(), consumers, self.stop.clone())
                .map_err(|e| Error::Io {
                    context: "spawning the telemetry collector",
                    source: e,
                })?;
        self.helpers.push(collector);
        // One channel per thread, in the order of `self.threads`: a thread that dies before
        // reporting is seen as a closed channel and named.
        let mut setups = Vec::new();
        for (g, producers) in self.groups.iter().zip(rings) {
            for (i, ring) in producers.into_iter().enumerate() {
                let (tx, rx) = std::sync::mpsc::channel();
                let g2 = g.clone();
                let rt = self.cfg.rt;
                let h = std::thread::Builder::new()
                    .name(format!("lf-{}-{}", g.cfg.name, i))
                    .stack_size(g.cfg.stack_bytes)
                    .spawn(move || pool_thread(g2, i as u16, ring, rt, tx))
                    .map_err(|e| Error::Io {
                        context: "spawning a pool thread",
                        source: e,
                    })?;
                self.threads.push(h);
                setups.push((g.cfg.name.clone(), i, rx));
            }
        }
        self.await_setup(setups, &mut report)?;
        self.helpers.extend(
            crate::watchdog::spawn(self.groups.clone(), self.stop.clone()).map_err(|e| {
                Error::Io {
                    context: "spawning the watchdog",
                    source: e,
                }
            })?,
        );
        let first = sys::now_ns() + TIMER_START_DELAY_NS;
        for (gi, p) in pending {
            let reg = self.groups[gi].registry();
            match p {
                Pending::Handler(h) => {
                    reg.register(h)?;
                }
                Pending::Timers {
                    interval_us,
                    count,
                    distance_us,
                } => {
                    for k in 0..count as u64 {
                        let mut t = Timer::new().map_err(|e| Error::Io {
                            context: "timerfd_create",
                            source: e,
                        })?;
                        t.arm(first, (interval_us + k * distance_us) * 1000)
                            .map_err(|e| Error::Io {
                                context: "timerfd_settime",
                                source: e,
                            })?;
                        reg.register(Box::new(PeriodicTimer::new(t)))?;
                    }
                }
            }
        }
        tracing::info!(
            groups = self.groups.len(),
            threads = self.threads.len(),
            rt = report.rt_applied,
            mlock = report.memory_locked,
            "lfrt started"
        );
        Ok(report)
    }

    /// Waits for every pool thread's set-up report. `setups[k]` is `(group name, thread index,
    /// channel)` of `self.threads[k]`. Every thread is waited for, so none is still setting
    /// itself up when the caller stops them; the first failure is returned. A thread whose
    /// channel closed without a report panicked: it is joined for its panic message.
    fn await_setup(
        &mut self,
        setups: Vec<(String, usize, Receiver<Setup>)>,
        report: &mut StartReport,
    ) -> Result<(), Error> {
        let mut failure = None;
        for (k, (group, thread, rx)) in setups.into_iter().enumerate() {
            match rx.recv() {
                Ok(Setup::Ready { rt_applied, error }) => {
                    if !rt_applied {
                        if report.rt_applied {
                            let p = sys::sched::RtPrivilege::probe();
                            tracing::warn!(
                                error = %error.map(|e| e.to_string()).unwrap_or_default(),
                                cap_sys_nice = p.cap_sys_nice,
                                rlimit_rtprio = p.rlimit_rtprio,
                                "real-time scheduling refused; rt = \"best-effort\": every lane runs time-shared \
                                 (SCHED_OTHER), ordered only by nice values, so the lanes are NOT isolated: \
                                 a busy low lane delays a high one (grant CAP_SYS_NICE or raise \
                                 RLIMIT_RTPRIO for SCHED_FIFO)"
                            );
                        }
                        report.rt_applied = false;
                    }
                }
                Ok(Setup::Failed(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) if failure.is_none() => {
                    // Only the first failure removes a handle, so index `k` is still in place.
                    let message = match self.threads.remove(k).join() {
                        Err(payload) => panic_message(payload.as_ref()).to_owned(),
                        Ok(()) => "it returned without reporting".to_owned(),
                    };
                    failure = Some(Error::ThreadSetup {
                        group,
                        thread,
                        message,
                    });
                }
                Err(_) => {}
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Per-group metrics snapshot (the same as [`MetricsHandle::get`]).
    pub fn metrics(&self) -> Vec<GroupMetrics> {
        snapshot(&self.groups, self.counting)
    }

    /// A cloneable handle that reads this runtime's metrics from any thread, also while it
    /// runs and from inside a handler.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.groups.push(GroupConfig::new("g", Policy::Fifo, 10));
    /// let rt = Runtime::new(cfg)?;
    /// let metrics = rt.metrics_handle();
    /// std::thread::spawn(move || println!("{} dispatched", metrics.get()[0].dispatched));
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn metrics_handle(&self) -> MetricsHandle {
        MetricsHandle {
            groups: self.groups.clone(),
            counting: self.counting,
        }
    }

    /// Blocks until a [`Stopper`] of this runtime stopped it (from another thread or from a
    /// handler); the caller then calls [`shutdown`](Self::shutdown) or
    /// [`shutdown_within`](Self::shutdown_within). Returns at once if it was already stopped.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.groups.push(GroupConfig::new("g", Policy::Fifo, 10));
    /// let mut rt = Runtime::new(cfg)?;
    /// let stopper = rt.stopper(); // hand it to an admin handler or a signal thread
    /// rt.start()?;
    /// # stopper.stop();
    /// rt.wait();
    /// rt.shutdown()?;
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn wait(&self) {
        while self.stopped.load(Acquire) == 0 {
            futex::wait(&self.stopped, 0);
        }
    }

    /// `(group index, thread index, kernel tid)` of every pool thread (0 before it started).
    pub fn thread_ids(&self) -> Vec<(usize, usize, i32)> {
        self.groups
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

    /// A handle that can stop the runtime from another thread (e.g. a signal waiter).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            groups: self.groups.clone(),
            stopped: self.stopped.clone(),
        }
    }

    /// [`shutdown_within`](Self::shutdown_within)`(`[`SHUTDOWN_TIMEOUT`]`)`.
    ///
    /// # Errors
    /// As `shutdown_within`.
    pub fn shutdown(&mut self) -> Result<Vec<GroupMetrics>, Error> {
        self.shutdown_within(SHUTDOWN_TIMEOUT)
    }

    /// Graceful shutdown with a deadline: stops every group (no new event is dispatched; a
    /// leader waiting for one returns), lets the handlers that are running finish, waits up to
    /// `deadline` for every pool thread; then calls [`EventHandler::on_close`] of every handle
    /// still registered, drops the handlers (closing their fds) and stops the helper threads.
    /// Returns the final metrics. Calling it again is a no-op returning the metrics. On a
    /// runtime that was never started it only closes the handles.
    ///
    /// # Errors
    /// [`Error::Unfinished`] naming the handlers still running at the deadline; their threads
    /// are left detached and no handler is closed (a running one still holds its handle).
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.groups.push(GroupConfig::new("g", Policy::Fifo, 10));
    /// let mut rt = Runtime::new(cfg)?;
    /// rt.start()?;
    /// let metrics = rt.shutdown_within(std::time::Duration::from_millis(500))?;
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn shutdown_within(&mut self, deadline: Duration) -> Result<Vec<GroupMetrics>, Error> {
        if matches!(self.state, State::Stopped) {
            return Ok(self.metrics());
        }
        // Before `start` this drops the unused telemetry rings and the built-in handlers.
        self.state = State::Stopped;
        self.stopper().stop();
        let end = Instant::now() + deadline;
        let all_exited = || self.threads.iter().all(JoinHandle::is_finished);
        while !all_exited() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let stuck = !all_exited();
        if !stuck {
            for h in self.threads.drain(..) {
                let _ = h.join();
            }
        }
        self.stop.store(true, Release);
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
        if stuck {
            let handlers = self
                .groups
                .iter()
                .flat_map(|g| {
                    g.threads
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| t.busy_since.load(SeqCst) != 0)
                        .map(move |(i, t)| {
                            let token = Token::from_raw(t.busy_token.load(Relaxed));
                            let name = &g.cfg.name;
                            format!(
                                "group `{name}` thread lf-{name}-{i} handle {}",
                                token.index()
                            )
                        })
                })
                .collect();
            return Err(Error::Unfinished { deadline, handlers });
        }
        for g in &self.groups {
            crate::handler::close_all(&g.handles);
        }
        tracing::info!("lfrt stopped");
        Ok(self.metrics())
    }
}

/// The metrics of `groups` (`counting`: the counting allocator is installed).
fn snapshot(groups: &[Arc<Group>], counting: bool) -> Vec<GroupMetrics> {
    groups
        .iter()
        .map(|g| {
            let c = &g.counters;
            let (leader_present, followers) = g.protocol.snapshot();
            GroupMetrics {
                name: g.cfg.name.clone(),
                priority: g.cfg.priority,
                kernel_sched: g
                    .threads
                    .iter()
                    .map(|t| Applied::describe(t.applied.load(Acquire)))
                    .collect(),
                threads: g.cfg.threads,
                dispatched: c.dispatched.load(Relaxed),
                promotions: c.promotions.load(Relaxed),
                promotions_no_follower: c.vacant.load(Relaxed),
                leader_present,
                followers,
                processing: c.processing.load(Relaxed),
                handler_panics: c.panics.load(Relaxed) + g.handles.drop_panics.load(Relaxed),
                handles_closed: g.handles.closed.load(Relaxed),
                handles_closed_by_handler: c.closed_by_handler.load(Relaxed),
                stale_events: g.handles.stale.load(Relaxed),
                handles: g.handles.len(),
                budget_overruns: c.budget_overruns.load(Relaxed),
                restore_failures: c.restore_failures.load(Relaxed),
                demotions: c.demotions.load(Relaxed),
                borrowed_dispatches: c.borrowed.load(Relaxed),
                lent_dispatches: c.lent.load(Relaxed),
                borrow_refused: c.borrow_refused.load(Relaxed),
                pool_allocations: if counting {
                    sum_measured(g.threads.iter().map(ThreadSlot::allocations))
                } else {
                    None
                },
                pool_minor_faults: sum_measured(g.threads.iter().map(ThreadSlot::minor_faults)),
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
            }
        })
        .collect()
}

/// The sum of the measured values; `None` if none is measured.
fn sum_measured(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.flatten().reduce(u64::saturating_add)
}

/// The message of a panic payload (`panic!` with a literal gives `&str`, with arguments
/// `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with a non-string payload")
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Stops a runtime from any thread, also from inside a handler: every group's threads return,
/// and [`Runtime::wait`] returns (the owner's [`Runtime::shutdown`] then joins them).
///
/// # Examples
/// ```no_run
/// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// # let mut cfg = RuntimeConfig::default();
/// # cfg.groups.push(GroupConfig::new("g", Policy::Fifo, 10));
/// let mut rt = Runtime::new(cfg)?;
/// let stopper = rt.stopper();
/// rt.start()?;
/// std::thread::spawn(move || stopper.stop());
/// rt.wait();
/// rt.shutdown()?;
/// # Ok::<(), lfrt::Error>(())
/// ```
#[derive(Clone)]
pub struct Stopper {
    groups: Vec<Arc<Group>>,
    stopped: Arc<AtomicU32>,
}

impl Stopper {
    /// Asks every group to stop and wakes [`Runtime::wait`]. Does not wait.
    ///
    /// # Real-time safety
    /// No allocation, no lock: an eventfd write per group and one futex wake.
    pub fn stop(&self) {
        for g in &self.groups {
            g.stop();
        }
        self.stopped.store(1, Release);
        futex::wake(&self.stopped, i32::MAX);
    }
}

/// Reads a running runtime's metrics from any thread ([`Runtime::metrics_handle`]).
///
/// # Examples
/// ```no_run
/// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// # let mut cfg = RuntimeConfig::default();
/// # cfg.groups.push(GroupConfig::new("g", Policy::Fifo, 10));
/// let rt = Runtime::new(cfg)?;
/// let metrics = rt.metrics_handle();
/// for g in metrics.get() {
///     println!("{}: {} events", g.name, g.dispatched);
/// }
/// # Ok::<(), lfrt::Error>(())
/// ```
#[derive(Clone)]
pub struct MetricsHandle {
    groups: Vec<Arc<Group>>,
    counting: bool,
}

impl MetricsHandle {
    /// The same snapshot as [`Runtime::metrics`].
    ///
    /// # Real-time safety
    /// Allocates the snapshot (names, vectors): call it from an admin lane, not a hot path.
    pub fn get(&self) -> Vec<GroupMetrics> {
        snapshot(&self.groups, self.counting)
    }
}

impl fmt::Debug for MetricsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("MetricsHandle { .. }")
    }
}

impl fmt::Debug for Stopper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Stopper { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{GroupConfig, Policy};

    /// A pool thread that panics before reporting ready (its set-up channel closes without a
    /// message) fails the start with an error naming its group, thread and panic, instead of
    /// being skipped.
    #[test]
    fn a_thread_that_dies_during_setup_is_an_error_naming_it() {
        let mut cfg = RuntimeConfig {
            rt: RtMode::BestEffort,
            lock_memory: false,
            metrics: None,
            groups: vec![GroupConfig::new("g", Policy::Fifo, 10)],
        };
        cfg.groups[0].threads = 2;
        let mut rt = Runtime::new(cfg).unwrap();
        let mut setups = Vec::new();
        for i in 0..2 {
            let (tx, rx) = std::sync::mpsc::channel::<Setup>();
            rt.threads.push(std::thread::spawn(move || {
                if i == 1 {
                    let _tx = tx;
                    panic!("set-up exploded");
                }
                tx.send(Setup::Ready {
                    rt_applied: true,
                    error: None,
                })
                .unwrap();
            }));
            setups.push(("g".to_owned(), i, rx));
        }
        let mut report = StartReport {
            rt_applied: true,
            memory_locked: false,
            counting_allocations: false,
        };
        match rt.await_setup(setups, &mut report) {
            Err(e @ Error::ThreadSetup { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("group `g`")
                        && text.contains("lf-g-1")
                        && text.contains("set-up exploded"),
                    "{text}"
                );
            }
            other => panic!("expected a ThreadSetup error, got {other:?}"),
        }
        assert_eq!(rt.threads.len(), 1, "the dead thread was joined");
        rt.shutdown().unwrap();
    }
}
