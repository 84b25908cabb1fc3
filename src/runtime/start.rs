//! Starting: spawning the collector, every lane's threads and the watchdog, waiting for
//! each thread's set-up, and arming the built-in handlers.

use super::*;
use crate::observe::recorder::{LaneTriggers, Recorder};
use crate::observe::window::{LaneInfo, ThreadInfo};

/// Delay from `start` to the first expiry of built-in timers, so the first period is measured
/// with every thread already waiting.
const TIMER_START_DELAY_NS: u64 = 2_000_000;

/// What `start` found out about the machine.
///
/// Example: [`Runtime::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReport {
    /// Every RT lane's threads got their configured policy and priority.
    pub rt_applied: bool,
    /// `mlockall` succeeded (false if not requested).
    pub memory_locked: bool,
    /// The counting allocator is installed, so `pool_allocations` can be measured.
    pub counting_allocations: bool,
}

impl Runtime {
    /// Locks memory (if configured), spawns the telemetry collector and every lane's threads
    /// and waits until each has set its policy, priority and affinity and pre-faulted its stack
    /// and buffers; then spawns the watchdog (if a lane has a budget) and arms the built-in
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
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// let report = rt.start()?;
    /// if !report.rt_applied {
    ///     eprintln!("running without real-time priorities (rt = \"best-effort\")");
    /// }
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn start(&mut self) -> Result<StartReport, Error> {
        if self.lanes.is_empty() && matches!(self.state, State::Built { .. }) {
            return Err(Error::config(
                "lane",
                "at least one lane is required: add one with Runtime::add_lane or in the \
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
        // `new`, so that lanes added with `add_lane` are linked too.
        crate::engine::lane::wire_borrowing(&self.lanes)?;
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
        let recorder = self.recorder()?;
        let collector = telemetry::spawn_collector(
            self.telemetry.clone(),
            consumers,
            self.stop.clone(),
            recorder,
        )
        .map_err(|e| Error::Io {
            context: "spawning the telemetry collector",
            source: e,
        })?;
        self.helpers.push(collector);
        self.relay_thread = Some(self.relay.spawn().map_err(|e| Error::Io {
            context: "spawning the relay of foreign wakes",
            source: e,
        })?);
        // One channel per thread, in the order of `self.threads`: a thread that dies before
        // reporting is seen as a closed channel and named.
        let mut setups = Vec::new();
        for (g, producers) in self.lanes.iter().zip(rings) {
            for (i, ring) in producers.into_iter().enumerate() {
                let (tx, rx) = std::sync::mpsc::channel();
                let g2 = g.clone();
                let rt = self.cfg.rt;
                let relay = self.relay.clone();
                let h = std::thread::Builder::new()
                    .name(format!("lf-{}-{}", g.spec.name, i))
                    .stack_size(g.spec.stack_bytes)
                    .spawn(move || {
                        // Foreign wakes from this thread go through the runtime's relay; the
                        // runtime joins the thread before it drops either.
                        crate::task::relay::enter(&relay, &g2.counters);
                        pool_thread(g2, i as u16, ring, rt, tx)
                    })
                    .map_err(|e| Error::Io {
                        context: "spawning a pool thread",
                        source: e,
                    })?;
                self.threads.push(h);
                setups.push((g.spec.name.clone(), i, rx));
            }
        }
        self.await_setup(setups, &mut report)?;
        self.helpers.extend(
            crate::engine::watchdog::spawn(self.lanes.clone(), self.stop.clone()).map_err(|e| {
                Error::Io {
                    context: "spawning the watchdog",
                    source: e,
                }
            })?,
        );
        let first = sys::now_ns() + TIMER_START_DELAY_NS;
        for (gi, p) in pending {
            p.register(&self.lanes[gi].registry(), first)?;
        }
        tracing::info!(
            lanes = self.lanes.len(),
            threads = self.threads.len(),
            rt = report.rt_applied,
            mlock = report.memory_locked,
            "lfrt started"
        );
        Ok(report)
    }

    /// The flight recorder of `[trace]` (observe/recorder.rs), or `None` when it is off
    /// (`window_ms = 0`). With `kernel = true` it opens its ftrace instance on the lanes'
    /// CPUs here, so a missing privilege stops the start, naming it.
    fn recorder(&self) -> Result<Option<Recorder>, Error> {
        let trace = &self.cfg.trace;
        if trace.window_ms == 0 {
            return Ok(None);
        }
        let triggers = self
            .cfg
            .lanes
            .iter()
            .map(|l| LaneTriggers {
                over_ns: l.trace_over_us.map(|us| us.saturating_mul(1000)),
                budget_ns: l
                    .budget_us
                    .filter(|_| trace.on_overrun)
                    .map(|us| us.saturating_mul(1000)),
                warmup: crate::WARMUP_DISPATCHES.saturating_mul(l.threads as u64),
            })
            .collect();
        let online = sys::sched::online_cpus();
        let cpus_of = |l: &LaneConfig| -> Vec<u16> {
            l.cpus
                .as_deref()
                .unwrap_or(&online)
                .iter()
                .map(|&c| c as u16)
                .collect()
        };
        let kernel = if trace.kernel {
            let mut cpus: Vec<u16> = self.cfg.lanes.iter().flat_map(cpus_of).collect();
            cpus.sort_unstable();
            cpus.dedup();
            Some(
                sys::tracefs::KernelTrace::open(&cpus, trace.kernel_buffer_kb).map_err(|e| {
                    Error::Io {
                        context: "opening the flight recorder's ftrace instance ([trace] kernel = \
                                  true; needs root)",
                        source: e,
                    }
                })?,
            )
        } else {
            None
        };
        let named: Vec<(String, String, i32, Vec<u16>)> = self
            .cfg
            .lanes
            .iter()
            .map(|l| {
                let policy = format!("{:?}", l.policy).to_lowercase();
                (l.name.clone(), policy, i32::from(l.priority), cpus_of(l))
            })
            .collect();
        let lanes = self.lanes.clone();
        let describe = Box::new(move || {
            named
                .iter()
                .zip(&lanes)
                .map(|((name, policy, priority, cpus), pool)| LaneInfo {
                    name: name.clone(),
                    policy: policy.clone(),
                    priority: *priority,
                    threads: pool
                        .threads
                        .iter()
                        .map(|slot| ThreadInfo {
                            tid: slot.tid.load(Relaxed),
                            cpus: cpus.clone(),
                        })
                        .collect(),
                })
                .collect()
        });
        Ok(Some(Recorder::new(
            trace.clone(),
            triggers,
            kernel,
            describe,
            self.telemetry.recorder_shared(),
        )))
    }

    /// Waits for every pool thread's set-up report. `setups[k]` is `(lane name, thread index,
    /// channel)` of `self.threads[k]`. Every thread is waited for, so none is still setting
    /// itself up when the caller stops them; the first failure is returned. A thread whose
    /// channel closed without a report panicked: it is joined for its panic message.
    pub(super) fn await_setup(
        &mut self,
        setups: Vec<(String, usize, Receiver<Setup>)>,
        report: &mut StartReport,
    ) -> Result<(), Error> {
        let mut failure = None;
        let mut warned_cause: Vec<String> = Vec::new();
        for (k, (lane, thread, rx)) in setups.into_iter().enumerate() {
            match rx.recv() {
                Ok(Setup::Ready { rt_applied, error }) => {
                    if !rt_applied {
                        let (error, cause) =
                            error.map_or((String::new(), None), |(e, c)| (e.to_string(), c));
                        if let Some(cause) = cause {
                            // Every thread of the lane meets it: said per lane, once.
                            if report.rt_applied || !warned_cause.contains(&lane) {
                                tracing::warn!(
                                    lane = %lane,
                                    error = %error,
                                    "real-time scheduling refused for a reason no privilege \
                                     fixes: {cause}; rt = \"best-effort\": the lane runs \
                                     time-shared (SCHED_OTHER), NOT isolated from the others"
                                );
                                warned_cause.push(lane.clone());
                            }
                        } else if report.rt_applied {
                            let p = sys::sched::RtPrivilege::probe();
                            tracing::warn!(
                                error = %error,
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
                        lane,
                        thread,
                        message,
                    });
                }
                Err(_) => {}
            }
        }
        failure.map_or(Ok(()), Err)
    }
}
