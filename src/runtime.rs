//! The runtime: owns the groups, starts and stops their threads, reports their metrics.

use crate::bound::{BoundPool, BoundStats};
use crate::config::{BandHandler, GroupConfig, HandlerConfig, RtMode, RuntimeConfig};
use crate::engine::group::{pool_thread, Applied, Group, Setup, ThreadSlot};
use crate::engine::handle_set::Token;
use crate::engine::handler::EventHandler;
use crate::engine::handler::Registry;
use crate::error::Error;
use crate::observe::alloc_count;
use crate::observe::metrics::GroupMetrics;
use crate::observe::telemetry::{self, Sample, Telemetry};
use crate::sources::handlers::{PeriodicTimer, TcpEcho, UdpEcho};
use crate::sources::source::Timer;
use crate::sys::{self, futex, mem};
use crate::task::executor::Executor;
use crate::task::{SpawnError, Spawner};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long `shutdown` waits for pool threads (each must finish its current handler).
///
/// Example: [`Runtime::shutdown_within`] takes another deadline.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Delay from `start` to the first expiry of built-in timers, so the first period is measured
/// with every thread already waiting.
const TIMER_START_DELAY_NS: u64 = 2_000_000;

/// What `start` found out about the machine.
///
/// Example: [`Runtime::start`].
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

/// Binds every `[[band]]` of `cfg` ([`crate::sources::band::bind`]: one `SO_REUSEPORT` socket per band,
/// steered by the kernel) and wraps each band's socket in its handler, to be registered with
/// the band's lane at start: `(group index, handler)`.
fn bind_bands(cfg: &RuntimeConfig) -> Result<Vec<(usize, Pending)>, Error> {
    let mut pending = Vec::new();
    for (bi, b) in cfg.bands.iter().enumerate() {
        // `Runtime::new` validated `cfg` first, so neither lookup fails; an error all the same.
        let plan = b
            .plan(&cfg.groups)
            .map_err(|m| Error::config(format!("band[{bi}].classify"), m))?;
        let sockets = crate::sources::band::bind(b.bind, &plan.bands).map_err(|e| Error::Bind {
            addr: b.bind,
            source: e,
        })?;
        for (socket, lane) in sockets.into_iter().zip(&plan.lanes) {
            let gi = cfg
                .groups
                .iter()
                .position(|g| g.name == *lane)
                .ok_or_else(|| {
                    Error::config(format!("band[{bi}].classify"), format!("no group `{lane}`"))
                })?;
            let handler: Box<dyn EventHandler> = match b.handler {
                BandHandler::UdpEcho => {
                    Box::new(UdpEcho::new(socket, b.work_us).map_err(|e| Error::Io {
                        context: "configuring a band's UDP socket",
                        source: e,
                    })?)
                }
            };
            pending.push((gi, Pending::Handler(handler)));
        }
    }
    Ok(pending)
}

/// A set of Leader/Followers groups, each at its own priority.
///
/// # Examples
/// ```no_run
/// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// let mut cfg = RuntimeConfig::default();
/// cfg.groups.push(GroupConfig::new("control", Policy::Fifo, 80));
/// let mut rt = Runtime::new(cfg)?;
/// // rt.lane("control")?.registry().register(Box::new(my_handler))?;
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
    /// A [`Stopper`] or [`MetricsHandle`] was taken: its group list is fixed, so
    /// [`Runtime::add_group`] is refused.
    handed_out: AtomicBool,
    /// Each group's task spawner (`max_tasks > 0`), by group index.
    spawners: Vec<Option<Spawner>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Runtime { .. }")
    }
}

impl Runtime {
    /// Validates the configuration, creates every group's handle set and telemetry rings and
    /// binds the built-in handlers' sockets and every `[[band]]`'s sockets (registered with
    /// their lanes at start). No thread is started: the pool threads, the
    /// telemetry collector and the watchdog are spawned by [`start`](Self::start).
    ///
    /// A configuration may have no group: they are then added with
    /// [`add_group`](Self::add_group), which returns each one's [`Lane`].
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, [`Error::Bind`] if a socket cannot be
    /// bound, [`Error::Io`] if a kernel object cannot be created. Nothing is left open.
    ///
    /// # Examples
    /// ```
    /// // A configuration from TOML (`lfrt::load_config(path)` reads a file), its lanes looked up
    /// // once, before start:
    /// let cfg = lfrt::parse_config(
    ///     r#"
    ///     [runtime]
    ///     rt = "best-effort"
    ///     [[group]]
    ///     name = "control"
    ///     policy = "fifo"
    ///     priority = 80
    ///     "#,
    /// )?;
    /// let rt = lfrt::Runtime::new(cfg)?;
    /// let control = rt.lane("control")?;
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn new(mut cfg: RuntimeConfig) -> Result<Runtime, Error> {
        if !cfg.groups.is_empty() {
            cfg.validate()?;
        }
        let groups = std::mem::take(&mut cfg.groups);
        let mut rt = Runtime {
            cfg,
            telemetry: Arc::new(Telemetry::new(0)),
            groups: Vec::new(),
            threads: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            helpers: Vec::new(),
            state: State::Built {
                rings: Vec::new(),
                consumers: Vec::new(),
                pending: Vec::new(),
            },
            counting: alloc_count::is_active(),
            stopped: Arc::new(AtomicU32::new(0)),
            handed_out: AtomicBool::new(false),
            spawners: Vec::new(),
        };
        for gc in groups {
            rt.push_group(gc)?;
        }
        let bands = bind_bands(&rt.cfg)?;
        if let State::Built { pending, .. } = &mut rt.state {
            pending.extend(bands);
        }
        Ok(rt)
    }

    /// Creates group `gc` (validated by the caller) with its telemetry rings and its built-in
    /// handlers' sockets, and appends it. On error nothing is appended.
    fn push_group(&mut self, gc: GroupConfig) -> Result<Lane, Error> {
        let State::Built {
            rings,
            consumers,
            pending,
        } = &mut self.state
        else {
            return Err(Error::State("Runtime::add_group after start or shutdown"));
        };
        let gi = self.groups.len();
        let g = Group::new(gi as u16, gc.clone())?;
        let tasks = if gc.max_tasks > 0 {
            Some(add_executor(&g, &gc, gi)?)
        } else {
            None
        };
        let mut producers = Vec::new();
        let mut cons = Vec::new();
        for _ in 0..gc.threads {
            let (p, c) = rtrb::RingBuffer::new(telemetry::RING_CAPACITY);
            producers.push(p);
            cons.push(c);
        }
        let mut handlers = Vec::new();
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
            handlers.push((gi, p));
        }
        rings.push(producers);
        consumers.extend(cons);
        pending.extend(handlers);
        self.telemetry.add_group();
        self.cfg.groups.push(gc);
        let group = Arc::new(g);
        self.groups.push(group.clone());
        self.spawners.push(tasks.clone());
        Ok(Lane { group, tasks })
    }

    /// Adds a group (a lane) to a runtime that has not started and returns its [`Lane`]: the
    /// way to build a runtime in code. The group is validated at once together with the groups
    /// already there (a duplicate name or priority is an error), and its built-in handlers'
    /// sockets are bound.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field (`group[i].name` for a duplicate name), as
    /// [`Runtime::new`] does for a configuration; [`Error::Bind`] or [`Error::Io`] as `new`;
    /// [`Error::State`] after [`start`](Self::start) or [`shutdown`](Self::shutdown), or after
    /// a [`Stopper`] or [`MetricsHandle`] was taken (each covers the groups that exist when it
    /// is taken, so add every group first). On error the runtime is unchanged.
    ///
    /// # Examples
    /// ```
    /// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let control = rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// let admin = rt.add_group(GroupConfig::new("admin", Policy::Other, 0))?;
    /// assert_eq!((control.name(), admin.index()), ("control", 1));
    /// // Checked at once: a second `control` is refused.
    /// assert!(rt.add_group(GroupConfig::new("control", Policy::Fifo, 70)).is_err());
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn add_group(&mut self, gc: GroupConfig) -> Result<Lane, Error> {
        if !matches!(self.state, State::Built { .. }) {
            return Err(Error::State("Runtime::add_group after start or shutdown"));
        }
        if self.handed_out.load(Relaxed) {
            return Err(Error::State(
                "Runtime::add_group after stopper() or metrics_handle(): each covers only the \
                 groups that exist when it is taken; add every group first",
            ));
        }
        let mut all = self.cfg.clone();
        all.groups.push(gc.clone());
        all.validate_without_binds()?;
        self.push_group(gc)
    }

    /// The lane (group) named `name`: how a service finds the groups of a configuration it
    /// loaded (e.g. from TOML). Look every lane up once, before [`start`](Self::start), so a
    /// misspelt name stops the service at set-up, not later.
    ///
    /// # Errors
    /// [`Error::UnknownLane`] naming `name` and listing the runtime's lanes.
    ///
    /// # Examples
    /// ```
    /// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut cfg = RuntimeConfig::default();
    /// cfg.groups.push(GroupConfig::new("control", Policy::Fifo, 80));
    /// let rt = Runtime::new(cfg)?;
    /// let control = rt.lane("control")?;
    /// assert_eq!(control.name(), "control");
    /// let typo = rt.lane("contrl").unwrap_err().to_string();
    /// assert_eq!(typo, "no lane (group) named `contrl`; the lanes are: `control`");
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn lane(&self, name: &str) -> Result<Lane, Error> {
        match self.groups.iter().position(|g| g.cfg.name == name) {
            Some(i) => Ok(Lane {
                group: self.groups[i].clone(),
                tasks: self.spawners[i].clone(),
            }),
            None => Err(Error::UnknownLane {
                name: name.to_owned(),
                known: self.groups.iter().map(|g| g.cfg.name.clone()).collect(),
            }),
        }
    }

    /// The configuration this runtime runs.
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// assert_eq!(rt.config().groups[0].name, "control"); // added groups included
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }

    /// Latency histograms recorded by the collector.
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// // after start, the collector fills one set of histograms per group
    /// let samples = rt.telemetry().with(|r| r.groups[0].latency.len());
    /// assert_eq!(samples, 0);
    /// # Ok::<(), lfrt::Error>(())
    /// ```
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
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// let report = rt.start()?;
    /// if !report.rt_applied {
    ///     eprintln!("running without real-time priorities (rt = \"best-effort\")");
    /// }
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn start(&mut self) -> Result<StartReport, Error> {
        if self.groups.is_empty() && matches!(self.state, State::Built { .. }) {
            return Err(Error::config(
                "group",
                "at least one group is required: add one with Runtime::add_group or in the \
                 configuration",
            ));
        }
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
        // Lane borrowing links every lender to its borrowers' epoll sets; done here, not in
        // `new`, so that groups added with `add_group` are linked too.
        crate::engine::borrow::wire(&self.groups)?;
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
            crate::engine::watchdog::spawn(self.groups.clone(), self.stop.clone()).map_err(
                |e| Error::Io {
                    context: "spawning the watchdog",
                    source: e,
                },
            )?,
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
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let control = rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// let m = &rt.metrics()[control.index()];
    /// assert_eq!((m.name.as_str(), m.dispatched), ("control", 0));
    /// # Ok::<(), lfrt::Error>(())
    /// ```
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
        self.handed_out.store(true, Relaxed);
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
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// rt.start()?;
    /// for (group, thread, tid) in rt.thread_ids() {
    ///     println!("group {group} thread {thread}: {:?}", lfrt::os::read_back(tid));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// Example: [`Stopper`].
    pub fn stopper(&self) -> Stopper {
        self.handed_out.store(true, Relaxed);
        Stopper {
            groups: self.groups.clone(),
            stopped: self.stopped.clone(),
        }
    }

    /// [`shutdown_within`](Self::shutdown_within)`(`[`SHUTDOWN_TIMEOUT`]`)`.
    ///
    /// # Errors
    /// As `shutdown_within`.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
    /// rt.start()?;
    /// for m in rt.shutdown()? {
    ///     println!("{}: {} events, {} panics", m.name, m.dispatched, m.handler_panics);
    /// }
    /// # Ok::<(), lfrt::Error>(())
    /// ```
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
            crate::engine::handler::close_all(&g.handles);
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
            let bound = g.bound.as_ref().map(|b| b.pool.stats());
            let (leader_present, followers) = match &g.bound {
                Some(b) => {
                    let (leader, followers, _) = b.pool.snapshot();
                    (leader, followers)
                }
                None => (leader_present, followers),
            };
            let pool = |own: u64, of: fn(&BoundStats) -> u64| bound.as_ref().map_or(own, of);
            GroupMetrics {
                name: g.cfg.name.clone(),
                priority: g.cfg.priority,
                kernel_sched: g
                    .threads
                    .iter()
                    .map(|t| Applied::describe(t.applied.load(Acquire)))
                    .collect(),
                threads: g.cfg.threads,
                dispatched: pool(c.dispatched.load(Relaxed), |b| b.dispatched),
                promotions: pool(c.promotions.load(Relaxed), |b| b.promotions),
                promotions_no_follower: pool(c.vacant.load(Relaxed), |b| b.vacant),
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
                frames_oversize: g.handles.incidents.frames_oversize.load(Relaxed),
                connections_reset: g.handles.incidents.connections_reset.load(Relaxed),
                stream_backpressure: g.handles.incidents.stream_backpressure.load(Relaxed),
                bound,
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

/// Builds the executor of group `gi` and registers its two handles (task doorbell, timer).
fn add_executor(group: &Group, gc: &GroupConfig, gi: usize) -> Result<Spawner, Error> {
    let registry = group.registry();
    let ex = Executor::new(&gc.name, gc.max_tasks, gc.task_bytes, registry.clone())
        .map_err(|e| Error::config(format!("group[{gi}].max_tasks"), e.to_string()))?;
    registry.register(ex.turn)?;
    registry.register(ex.clock)?;
    Ok(ex.spawner)
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// One lane of a runtime: a cheap cloneable handle to a group (its name, its index and its
/// [`Registry`]), returned by [`Runtime::add_group`] or looked up once with [`Runtime::lane`].
///
/// A `Lane` is the only way to reach a group, so a misspelt lane name is an error at set-up,
/// never a missing group later. It holds its own group, so it cannot be used with another
/// runtime: no [`Runtime`] method takes a `Lane`, and its registry adds handles only to the
/// group it came from. It stays valid (and refers to the same, possibly stopped, group) for as
/// long as it lives; cloning it clones an `Arc`.
///
/// # Examples
/// ```
/// use lfrt::{GroupConfig, Lane, Notifier, Policy, Runtime, RuntimeConfig};
/// # use lfrt::{Context, Disposition, Event, EventHandler};
/// # use std::os::fd::{AsFd, BorrowedFd};
/// # struct Bell(Notifier);
/// # impl EventHandler for Bell {
/// #     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
/// #     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition { Disposition::Rearm }
/// # }
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control: Lane = rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
/// let token = control.registry().register(Box::new(Bell(Notifier::new()?)))?;
/// assert!(control.registry().deregister(token));
/// assert_eq!((control.name(), control.index()), ("control", 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Lane {
    group: Arc<Group>,
    tasks: Option<Spawner>,
}

impl Lane {
    /// The registry of this lane's group: add, remove, suspend and resume its handles from
    /// any thread, before or after [`Runtime::start`]. A clone (one `Arc` increment).
    pub fn registry(&self) -> Registry {
        self.group.registry()
    }

    /// The pool of this lane if it is a bound group ([`GroupConfig::bound`]); `None` for a
    /// Leader/Followers group. Lease a [`Waiter`](crate::bound::Waiter) from it to call the
    /// back-end, from a handler of the group (registered with [`registry`](Self::registry),
    /// which for a bound group is the pool's) or from any other thread. The group's own threads
    /// serve the pool from [`Runtime::start`] until shutdown, which also shuts the pool down.
    /// An outside thread waiting in `join` takes part in the pool too: while it leads it may
    /// run the group's handlers inline, at its own priority (hybrid associations, see
    /// [`crate::bound`]).
    ///
    /// # Examples
    /// ```no_run
    /// use lfrt::{BoundGroup, GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let mut front = GroupConfig::new("front", Policy::Fifo, 20);
    /// front.bound = Some(BoundGroup::new("127.0.0.1:7100".parse().unwrap()));
    /// let front = rt.add_group(front)?;
    /// let pool = front.bound_pool().expect("`front` is a bound group");
    /// rt.start()?;
    /// let mut w = pool.waiter().expect("a free waiter slot");
    /// let reply = pool.call(&mut w, b"balance?", None).expect("a reply");
    /// # drop(reply);
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn bound_pool(&self) -> Option<BoundPool> {
        self.group.bound.as_ref().map(|b| b.pool.clone())
    }

    /// Spawns `future` onto this lane at task priority 0: it is polled by the lane's pool
    /// threads, at the lane's policy and priority (see [`crate::task`]). The shortcut of
    /// [`spawner`](Self::spawner)`()?.spawn(future)`.
    ///
    /// # Errors
    /// The future is handed back ([`SpawnError`]): too large for a slot, the task table is
    /// full, the runtime shut down, or the group has `max_tasks = 0` ([`SpawnError::Closed`]).
    ///
    /// # Examples
    /// ```no_run
    /// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let mut cfg = GroupConfig::new("control", Policy::Fifo, 80);
    /// cfg.max_tasks = 16;
    /// let control = rt.add_group(cfg)?;
    /// rt.start()?;
    /// let answer = control.spawn(async { 6 * 7 }).unwrap();
    /// assert_eq!(answer.wait(), Ok(42));
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn spawn<F>(&self, future: F) -> Result<crate::task::JoinHandle<F::Output>, SpawnError<F>>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.tasks {
            Some(s) => s.spawn(future),
            None => Err(SpawnError::Closed(future)),
        }
    }

    /// This lane's task spawner (clone it into other threads), or `None` if the group has
    /// `max_tasks = 0`.
    pub fn spawner(&self) -> Option<Spawner> {
        self.tasks.clone()
    }

    /// The group's name, as configured.
    pub fn name(&self) -> &str {
        &self.group.cfg.name
    }

    /// The group's position in the runtime: its index in [`Runtime::metrics`] and
    /// [`Runtime::thread_ids`].
    pub fn index(&self) -> usize {
        usize::from(self.group.index)
    }
}

impl fmt::Debug for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lane")
            .field("name", &self.name())
            .field("index", &self.index())
            .finish()
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
    /// No allocation, no lock: an eventfd write per group and one futex wake (a bound group's
    /// pool also takes its priority-inheritance lock once and shuts its connection down).
    ///
    /// Example: [`Stopper`].
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
    ///
    /// Example: [`MetricsHandle`].
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
            bands: Vec::new(),
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

    fn best_effort() -> RuntimeConfig {
        RuntimeConfig {
            rt: RtMode::BestEffort,
            lock_memory: false,
            metrics: None,
            groups: Vec::new(),
            bands: Vec::new(),
        }
    }

    /// A handler on an eventfd that never fires unless notified.
    struct Idle(crate::Notifier);
    impl EventHandler for Idle {
        fn source(&self) -> std::os::fd::BorrowedFd<'_> {
            std::os::fd::AsFd::as_fd(&self.0)
        }
        fn handle(&mut self, _: &crate::Event, _: &mut crate::Context) -> crate::Disposition {
            crate::Disposition::Rearm
        }
    }

    /// A misspelt lane name is an error naming it and listing every lane, in order.
    #[test]
    fn an_unknown_lane_is_an_error_naming_it_and_the_known_lanes() {
        let mut cfg = best_effort();
        cfg.groups
            .push(GroupConfig::new("control", Policy::Fifo, 80));
        cfg.groups.push(GroupConfig::new("feed", Policy::Fifo, 60));
        let rt = Runtime::new(cfg).unwrap();
        match rt.lane("contrl") {
            Err(e @ Error::UnknownLane { .. }) => assert_eq!(
                e.to_string(),
                "no lane (group) named `contrl`; the lanes are: `control`, `feed`"
            ),
            other => panic!("expected UnknownLane, got {other:?}"),
        }
        let feed = rt.lane("feed").unwrap();
        assert_eq!((feed.name(), feed.index()), ("feed", 1));
        let empty = Runtime::new(best_effort()).unwrap();
        assert_eq!(
            empty.lane("x").unwrap_err().to_string(),
            "no lane (group) named `x`; the lanes are: none"
        );
    }

    /// A second group with a name already used is refused with the field that names it, and
    /// the runtime is left as it was.
    #[test]
    fn a_duplicate_group_name_is_refused_at_once() {
        let mut rt = Runtime::new(best_effort()).unwrap();
        let control = rt
            .add_group(GroupConfig::new("control", Policy::Fifo, 80))
            .unwrap();
        match rt.add_group(GroupConfig::new("control", Policy::Fifo, 70)) {
            Err(Error::Config { field, message, .. }) => {
                assert_eq!(field, "group[1].name");
                assert!(
                    message.contains("`control` is used by another group"),
                    "{message}"
                );
            }
            other => panic!("expected a Config error, got {other:?}"),
        }
        assert_eq!(rt.metrics().len(), 1, "the refused group was not added");
        assert_eq!(rt.config().groups.len(), 1);
        assert_eq!(rt.lane("control").unwrap().index(), control.index());
        // The same holds for groups that came from a configuration.
        let mut cfg = best_effort();
        cfg.groups.push(GroupConfig::new("a", Policy::Fifo, 80));
        let mut rt = Runtime::new(cfg).unwrap();
        assert!(matches!(
            rt.add_group(GroupConfig::new("a", Policy::Other, 0)),
            Err(Error::Config { .. })
        ));
        let b = rt
            .add_group(GroupConfig::new("b", Policy::Other, 0))
            .unwrap();
        assert_eq!((b.index(), rt.metrics()[1].name.as_str()), (1, "b"));
        assert_eq!(rt.telemetry().with(|r| r.groups.len()), 2);
    }

    /// A Lane carries its own group: two runtimes with a lane of the same name, and each
    /// lane's registry adds handles to its own runtime only.
    #[test]
    fn a_lane_registers_only_into_its_own_runtime() {
        let mut a = Runtime::new(best_effort()).unwrap();
        let mut b = Runtime::new(best_effort()).unwrap();
        let la = a
            .add_group(GroupConfig::new("g", Policy::Other, 0))
            .unwrap();
        let _lb = b
            .add_group(GroupConfig::new("g", Policy::Other, 0))
            .unwrap();
        la.registry()
            .register(Box::new(Idle(crate::Notifier::new().unwrap())))
            .unwrap();
        assert_eq!(a.metrics()[0].handles, 1);
        assert_eq!(b.metrics()[0].handles, 0);
    }

    /// Groups can be added only before start, before a Stopper or MetricsHandle (whose group
    /// list is fixed when taken) exists, and a runtime without any group does not start.
    #[test]
    fn add_group_is_refused_once_the_group_list_is_fixed() {
        let mut rt = Runtime::new(best_effort()).unwrap();
        match rt.start() {
            Err(Error::Config { field, .. }) => assert_eq!(field, "group"),
            other => panic!("expected a Config error, got {other:?}"),
        }
        rt.add_group(GroupConfig::new("g", Policy::Other, 0))
            .unwrap();
        let _stopper = rt.stopper();
        assert!(matches!(
            rt.add_group(GroupConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
        let mut rt = Runtime::new(best_effort()).unwrap();
        rt.add_group(GroupConfig::new("g", Policy::Other, 0))
            .unwrap();
        let _metrics = rt.metrics_handle();
        assert!(matches!(
            rt.add_group(GroupConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
        let mut rt = Runtime::new(best_effort()).unwrap();
        rt.shutdown().unwrap();
        assert!(matches!(
            rt.add_group(GroupConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
    }
}
