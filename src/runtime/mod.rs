//! The runtime: owns the lanes, starts and stops their threads, reports their metrics.
//!
//! * **Owns:** [`Runtime`] and what it hands out ([`Lane`], [`Stopper`], [`MetricsHandle`]).
//!   Building (this file: `new`, `add_lane`, `lane`), the built-in handlers a configuration
//!   names (`builtin.rs`), starting (`start.rs`), stopping (`stop.rs`) and reporting
//!   (`report.rs`) are one file each.
//! * **May use:** every layer below it (`config`, `bound`, `task`, `sources`, `engine`,
//!   `observe`, `sync`, `sys`, `error`).
//! * **Must never use:** the tools crate. Nothing in the library imports `runtime` but
//!   `lib.rs`'s re-exports.

mod builtin;
mod lane;
mod report;
mod start;
mod stop;

pub use lane::Lane;
pub use report::MetricsHandle;
pub use start::StartReport;
pub use stop::{Stopper, SHUTDOWN_TIMEOUT};

use crate::bound::lane::BoundLane;
use crate::bound::{BoundPool, BoundStats};
use crate::config::{LaneConfig, OnOverrun, RtMode, RuntimeConfig};
use crate::engine::handle_set::Token;
use crate::engine::handler::Registry;
use crate::engine::lane::{LanePool, Served};
use crate::engine::slot::{Applied, ThreadSlot};
use crate::engine::thread::{pool_thread, Setup};
use crate::error::Error;
use crate::observe::alloc_count;
use crate::observe::metrics::{LaneMetrics, OverrunCauses};
use crate::observe::telemetry::{self, Sample, Telemetry};
use crate::sys::{self, futex, mem};
use crate::task::executor::Budget;
use crate::task::lane::Executor;
use crate::task::relay::Relay;
use crate::task::{SpawnError, Spawner};
use builtin::Pending;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

enum State {
    Built {
        /// Per lane, per thread: the producer side of the thread's telemetry ring.
        rings: Vec<Vec<rtrb::Producer<Sample>>>,
        /// The consumer sides, for the collector.
        consumers: Vec<rtrb::Consumer<Sample>>,
        pending: Vec<(usize, Pending)>,
    },
    Running,
    Stopped,
}

/// A set of Leader/Followers lanes, each at its own priority.
///
/// # Examples
/// ```no_run
/// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// let mut cfg = RuntimeConfig::default();
/// cfg.lanes.push(LaneConfig::new("control", Policy::Fifo, 80));
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
    lanes: Vec<Arc<LanePool>>,
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
    /// A [`Stopper`] or [`MetricsHandle`] was taken: its lane list is fixed, so
    /// [`Runtime::add_lane`] is refused.
    handed_out: AtomicBool,
    /// Each lane's task spawner (`max_tasks > 0`), by lane index.
    spawners: Vec<Option<Spawner>>,
    /// The relay of foreign wakes every pool thread uses (`task/relay.rs`), and its thread
    /// once started.
    relay: Arc<Relay>,
    relay_thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Runtime { .. }")
    }
}

impl Runtime {
    /// Validates the configuration, creates every lane's handle set and telemetry rings and
    /// binds the built-in handlers' sockets and every `[[band]]`'s sockets (registered with
    /// their lanes at start). No thread is started: the pool threads, the
    /// telemetry collector and the watchdog are spawned by [`start`](Self::start).
    ///
    /// A configuration may have no lane: they are then added with
    /// [`add_lane`](Self::add_lane), which returns each one's [`Lane`].
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
    ///     [[lane]]
    ///     name = "control"
    ///     policy = "fifo"
    ///     priority = 80
    ///     "#,
    /// )?;
    /// let rt = lfrt::Runtime::new(cfg)?;
    /// let control = rt.lane("control")?;
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn new(cfg: RuntimeConfig) -> Result<Runtime, Error> {
        Self::build(cfg, &builtin::no_work)
    }

    /// [`new`](Self::new), with busy work in the built-in echoes: each datagram a `udp-echo`
    /// handler or a `[[band]]`'s echo answers, and each read a `tcp-echo` connection echoes,
    /// first burns `work_us(section)` µs of the pool thread's CPU time (as
    /// [`handlers::cpu_work`](crate::handlers::cpu_work) does, in the echo's own loop: the
    /// dispatch path is the one [`new`](Self::new) builds). `section` is
    /// [`Section::Handler`](crate::Section::Handler) for a `[[lane.handler]]` and
    /// [`Section::Band`](crate::Section::Band) for a `[[band]]` (all of its sockets); timers
    /// are not asked. A lane added later with [`add_lane`](Self::add_lane) burns none.
    ///
    /// This is the `lfrt` command's `work_us` key, a benchmark's stand-in for handler cost:
    /// the command reads it from its own configuration file and bounds it (at most 100 ms an
    /// event); this function bounds nothing. A measurement tool's hook, not a service's API:
    /// only with the `tools` feature. A service does its work in its own handlers.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    ///
    /// # Examples
    /// ```no_run
    /// use lfrt::{HandlerConfig, LaneConfig, Policy, Runtime, RuntimeConfig, Section};
    /// let mut lane = LaneConfig::new("echo", Policy::Fifo, 50);
    /// lane.handlers.push(HandlerConfig::UdpEcho { bind: "127.0.0.1:7000".parse()? });
    /// let mut cfg = RuntimeConfig::default();
    /// cfg.lanes.push(lane);
    /// // 20 µs of CPU per datagram in the lane's first handler.
    /// let rt = Runtime::with_echo_work(cfg, |at| match at {
    ///     Section::Handler { lane: 0, handler: 0 } => 20,
    ///     _ => 0,
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tools")]
    pub fn with_echo_work(
        cfg: RuntimeConfig,
        work_us: impl Fn(crate::Section) -> u64,
    ) -> Result<Runtime, Error> {
        Self::build(cfg, &work_us)
    }

    /// [`new`](Self::new) with the built-in echoes' busy work `work`.
    fn build(mut cfg: RuntimeConfig, work: builtin::Work<'_>) -> Result<Runtime, Error> {
        if !cfg.lanes.is_empty() {
            cfg.validate()?;
        }
        let lanes = std::mem::take(&mut cfg.lanes);
        let mut rt = Runtime {
            cfg,
            telemetry: Arc::new(Telemetry::new(0)),
            lanes: Vec::new(),
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
            relay: Arc::new(Relay::new().map_err(|e| Error::Io {
                context: "creating the relay of foreign wakes (an eventfd)",
                source: e,
            })?),
            relay_thread: None,
        };
        for gc in lanes {
            rt.push_lane(gc, work)?;
        }
        let bands = builtin::bind_bands(&rt.cfg, work)?;
        if let State::Built { pending, .. } = &mut rt.state {
            pending.extend(bands);
        }
        Ok(rt)
    }

    /// Creates lane `gc` (validated by the caller) with its telemetry rings and its built-in
    /// handlers' sockets (their echoes' busy work from `work`), and appends it. On error
    /// nothing is appended.
    fn push_lane(&mut self, gc: LaneConfig, work: builtin::Work<'_>) -> Result<Lane, Error> {
        let State::Built {
            rings,
            consumers,
            pending,
        } = &mut self.state
        else {
            return Err(Error::State("Runtime::add_lane after start or shutdown"));
        };
        let gi = self.lanes.len();
        let served: Option<Arc<dyn Served>> = match &gc.bound {
            Some(b) => Some(Arc::new(BoundLane::connect(
                &gc.name,
                b.connect,
                b.pool_config(&gc),
                gc.threads,
            )?)),
            None => None,
        };
        let g = LanePool::new(gi as u16, gc.engine_spec(), served)?;
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
        let handlers = builtin::bind_handlers(&gc, gi, work)?;
        rings.push(producers);
        consumers.extend(cons);
        pending.extend(handlers);
        self.telemetry.add_lane();
        self.cfg.lanes.push(gc);
        let lane = Arc::new(g);
        self.lanes.push(lane.clone());
        self.spawners.push(tasks.clone());
        Ok(Lane { lane, tasks })
    }

    /// Adds a lane (a lane) to a runtime that has not started and returns its [`Lane`]: the
    /// way to build a runtime in code. The lane is validated at once together with the lanes
    /// already there (a duplicate name or priority is an error), and its built-in handlers'
    /// sockets are bound.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field (`lane[i].name` for a duplicate name), as
    /// [`Runtime::new`] does for a configuration; [`Error::Bind`] or [`Error::Io`] as `new`;
    /// [`Error::State`] after [`start`](Self::start) or [`shutdown`](Self::shutdown), or after
    /// a [`Stopper`] or [`MetricsHandle`] was taken (each covers the lanes that exist when it
    /// is taken, so add every lane first). On error the runtime is unchanged.
    ///
    /// # Examples
    /// ```
    /// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let control = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// let admin = rt.add_lane(LaneConfig::new("admin", Policy::Other, 0))?;
    /// assert_eq!((control.name(), admin.index()), ("control", 1));
    /// // Checked at once: a second `control` is refused.
    /// assert!(rt.add_lane(LaneConfig::new("control", Policy::Fifo, 70)).is_err());
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn add_lane(&mut self, gc: LaneConfig) -> Result<Lane, Error> {
        if !matches!(self.state, State::Built { .. }) {
            return Err(Error::State("Runtime::add_lane after start or shutdown"));
        }
        if self.handed_out.load(Relaxed) {
            return Err(Error::State(
                "Runtime::add_lane after stopper() or metrics_handle(): each covers only the \
                 lanes that exist when it is taken; add every lane first",
            ));
        }
        let mut all = self.cfg.clone();
        all.lanes.push(gc.clone());
        all.validate_without_binds()?;
        self.push_lane(gc, &builtin::no_work)
    }

    /// The lane named `name`: how a service finds the lanes of a configuration it
    /// loaded (e.g. from TOML). Look every lane up once, before [`start`](Self::start), so a
    /// misspelt name stops the service at set-up, not later.
    ///
    /// # Errors
    /// [`Error::UnknownLane`] naming `name` and listing the runtime's lanes.
    ///
    /// # Examples
    /// ```
    /// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut cfg = RuntimeConfig::default();
    /// cfg.lanes.push(LaneConfig::new("control", Policy::Fifo, 80));
    /// let rt = Runtime::new(cfg)?;
    /// let control = rt.lane("control")?;
    /// assert_eq!(control.name(), "control");
    /// let typo = rt.lane("contrl").unwrap_err().to_string();
    /// assert_eq!(typo, "no lane named `contrl`; the lanes are: `control`");
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn lane(&self, name: &str) -> Result<Lane, Error> {
        match self.lanes.iter().position(|g| g.spec.name == name) {
            Some(i) => Ok(Lane {
                lane: self.lanes[i].clone(),
                tasks: self.spawners[i].clone(),
            }),
            None => Err(Error::UnknownLane {
                name: name.to_owned(),
                known: self.lanes.iter().map(|g| g.spec.name.clone()).collect(),
            }),
        }
    }

    /// The configuration this runtime runs.
    ///
    /// # Examples
    /// ```
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// assert_eq!(rt.config().lanes[0].name, "control"); // added lanes included
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn config(&self) -> &RuntimeConfig {
        &self.cfg
    }
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

/// Builds the executor of lane `gi` and registers its two handles (task doorbell, timer).
fn add_executor(lane: &LanePool, gc: &LaneConfig, gi: usize) -> Result<Spawner, Error> {
    let registry = lane.registry();
    let budget = gc.budget_us.map(|us| Budget {
        ns: us.saturating_mul(1000),
        demote: gc.on_overrun == OnOverrun::Demote,
    });
    let ex = Executor::new(
        &gc.name,
        gc.max_tasks,
        gc.task_bytes,
        budget,
        registry.clone(),
    )
    .map_err(|e| Error::config(format!("lane[{gi}].max_tasks"), e.to_string()))?;
    registry.register(ex.turn)?;
    registry.register(ex.clock)?;
    Ok(ex.spawner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LaneConfig, Policy};
    use crate::engine::handler::EventHandler;

    /// A pool thread that panics before reporting ready (its set-up channel closes without a
    /// message) fails the start with an error naming its lane, thread and panic, instead of
    /// being skipped.
    #[test]
    fn a_thread_that_dies_during_setup_is_an_error_naming_it() {
        let mut cfg = RuntimeConfig {
            trace: Default::default(),
            rt: RtMode::BestEffort,
            lock_memory: false,
            lanes: vec![LaneConfig::new("g", Policy::Fifo, 10)],
            bands: Vec::new(),
        };
        cfg.lanes[0].threads = 2;
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
                    text.contains("lane `g`")
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
            trace: Default::default(),
            rt: RtMode::BestEffort,
            lock_memory: false,
            lanes: Vec::new(),
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
        cfg.lanes.push(LaneConfig::new("control", Policy::Fifo, 80));
        cfg.lanes.push(LaneConfig::new("feed", Policy::Fifo, 60));
        let rt = Runtime::new(cfg).unwrap();
        match rt.lane("contrl") {
            Err(e @ Error::UnknownLane { .. }) => assert_eq!(
                e.to_string(),
                "no lane named `contrl`; the lanes are: `control`, `feed`"
            ),
            other => panic!("expected UnknownLane, got {other:?}"),
        }
        let feed = rt.lane("feed").unwrap();
        assert_eq!((feed.name(), feed.index()), ("feed", 1));
        let empty = Runtime::new(best_effort()).unwrap();
        assert_eq!(
            empty.lane("x").unwrap_err().to_string(),
            "no lane named `x`; the lanes are: none"
        );
    }

    /// A second lane with a name already used is refused with the field that names it, and
    /// the runtime is left as it was.
    #[test]
    fn a_duplicate_lane_name_is_refused_at_once() {
        let mut rt = Runtime::new(best_effort()).unwrap();
        let control = rt
            .add_lane(LaneConfig::new("control", Policy::Fifo, 80))
            .unwrap();
        match rt.add_lane(LaneConfig::new("control", Policy::Fifo, 70)) {
            Err(Error::Config { field, message, .. }) => {
                assert_eq!(field, "lane[1].name");
                assert!(
                    message.contains("`control` is used by another lane"),
                    "{message}"
                );
            }
            other => panic!("expected a Config error, got {other:?}"),
        }
        assert_eq!(rt.metrics().len(), 1, "the refused lane was not added");
        assert_eq!(rt.config().lanes.len(), 1);
        assert_eq!(rt.lane("control").unwrap().index(), control.index());
        // The same holds for lanes that came from a configuration.
        let mut cfg = best_effort();
        cfg.lanes.push(LaneConfig::new("a", Policy::Fifo, 80));
        let mut rt = Runtime::new(cfg).unwrap();
        assert!(matches!(
            rt.add_lane(LaneConfig::new("a", Policy::Other, 0)),
            Err(Error::Config { .. })
        ));
        let b = rt.add_lane(LaneConfig::new("b", Policy::Other, 0)).unwrap();
        assert_eq!((b.index(), rt.metrics()[1].name.as_str()), (1, "b"));
        assert_eq!(rt.telemetry().with(|r| r.lanes.len()), 2);
    }

    /// A Lane carries its own lane: two runtimes with a lane of the same name, and each
    /// lane's registry adds handles to its own runtime only.
    #[test]
    fn a_lane_registers_only_into_its_own_runtime() {
        let mut a = Runtime::new(best_effort()).unwrap();
        let mut b = Runtime::new(best_effort()).unwrap();
        let la = a.add_lane(LaneConfig::new("g", Policy::Other, 0)).unwrap();
        let _lb = b.add_lane(LaneConfig::new("g", Policy::Other, 0)).unwrap();
        la.registry()
            .register(Box::new(Idle(crate::Notifier::new().unwrap())))
            .unwrap();
        assert_eq!(a.metrics()[0].handles, 1);
        assert_eq!(b.metrics()[0].handles, 0);
    }

    /// Lanes can be added only before start, before a Stopper or MetricsHandle (whose lane
    /// list is fixed when taken) exists, and a runtime without any lane does not start.
    #[test]
    fn add_lane_is_refused_once_the_lane_list_is_fixed() {
        let mut rt = Runtime::new(best_effort()).unwrap();
        match rt.start() {
            Err(Error::Config { field, .. }) => assert_eq!(field, "lane"),
            other => panic!("expected a Config error, got {other:?}"),
        }
        rt.add_lane(LaneConfig::new("g", Policy::Other, 0)).unwrap();
        let _stopper = rt.stopper();
        assert!(matches!(
            rt.add_lane(LaneConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
        let mut rt = Runtime::new(best_effort()).unwrap();
        rt.add_lane(LaneConfig::new("g", Policy::Other, 0)).unwrap();
        let _metrics = rt.metrics_handle();
        assert!(matches!(
            rt.add_lane(LaneConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
        let mut rt = Runtime::new(best_effort()).unwrap();
        rt.shutdown().unwrap();
        assert!(matches!(
            rt.add_lane(LaneConfig::new("h", Policy::Other, 0)),
            Err(Error::State(_))
        ));
    }
}
