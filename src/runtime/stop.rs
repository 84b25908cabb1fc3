//! Stopping: the [`Stopper`], waiting for a stop, graceful shutdown with a deadline, and the
//! runtime's `Drop`.

use super::*;
use crate::config::Policy;
use std::cmp::Reverse;

/// How long `shutdown` waits for pool threads (each must finish its current handler).
///
/// Example: [`Runtime::shutdown_within`] takes another deadline.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Runtime {
    /// Blocks until a [`Stopper`] of this runtime stopped it (from another thread or from a
    /// handler); the caller then calls [`shutdown`](Self::shutdown) or
    /// [`shutdown_within`](Self::shutdown_within). Returns at once if it was already stopped.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.lanes.push(LaneConfig::new("g", Policy::Fifo, 10));
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

    /// A handle that can stop the runtime from another thread (e.g. a signal waiter).
    ///
    /// Example: [`Stopper`].
    pub fn stopper(&self) -> Stopper {
        self.handed_out.store(true, Relaxed);
        Stopper {
            lanes: self.lanes.clone(),
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
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
    /// rt.start()?;
    /// for m in rt.shutdown()? {
    ///     println!("{}: {} events, {} panics", m.name, m.dispatched, m.handler_panics);
    /// }
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn shutdown(&mut self) -> Result<Vec<LaneMetrics>, Error> {
        self.shutdown_within(SHUTDOWN_TIMEOUT)
    }

    /// Graceful shutdown with a deadline: stops every lane (no new event is dispatched; a
    /// leader waiting for one returns), cancels every lane's async tasks, lets the handlers
    /// that are running finish, waits up to `deadline` for every pool thread; then calls
    /// [`EventHandler::on_close`] of every handle still registered, drops the handlers (closing
    /// their fds) and stops the helper threads. Returns the final metrics. Calling it again is
    /// a no-op returning the metrics. On a runtime that was never started it only cancels the
    /// tasks and closes the handles.
    ///
    /// **Tasks** are cancelled (future dropped, on the calling thread; handle gives
    /// [`JoinError::Cancelled`](crate::task::JoinError::Cancelled); later spawns refused) lane by
    /// lane, the highest lane first (deadline, then fifo/rr by priority, then time-shared),
    /// each lane's tasks highest task priority first. A task being polled at that moment is
    /// waited for (its turn polls nothing after it) before anything below it is cancelled, up
    /// to `deadline`. Guaranteed: when this returns, every task not being polled at the
    /// deadline has been cancelled, in that order; a task whose poll is still running then (it
    /// does not yield) is named in the error and cancelled by its lane thread when the poll
    /// returns. The time spent cancelling counts toward `deadline`; a future's own `Drop`
    /// is not interrupted.
    ///
    /// # Errors
    /// [`Error::Unfinished`] naming the handlers still running at the deadline and the lanes
    /// with tasks left; their threads are left detached and no handler is closed (a running
    /// one still holds its handle).
    ///
    /// [`EventHandler::on_close`]: crate::EventHandler::on_close
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// # let mut cfg = RuntimeConfig::default();
    /// # cfg.lanes.push(LaneConfig::new("g", Policy::Fifo, 10));
    /// let mut rt = Runtime::new(cfg)?;
    /// rt.start()?;
    /// let metrics = rt.shutdown_within(std::time::Duration::from_millis(500))?;
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn shutdown_within(&mut self, deadline: Duration) -> Result<Vec<LaneMetrics>, Error> {
        if matches!(self.state, State::Stopped) {
            return Ok(self.metrics());
        }
        // Before `start` this drops the unused telemetry rings and the built-in handlers.
        self.state = State::Stopped;
        self.stopper().stop();
        let end = Instant::now() + deadline;
        let tasks_left =
            self.cancel_tasks(sys::now_ns().saturating_add(deadline.as_nanos() as u64));
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
        // The relay stops once no pool thread can hand it a wake any more; with threads stuck
        // it runs on (detached), so that what they relay later is still woken.
        if let Some(h) = self.relay_thread.take() {
            if stuck {
                drop(h);
            } else {
                self.relay.stop();
                let _ = h.join();
            }
        }
        if stuck {
            let handlers = self
                .lanes
                .iter()
                .flat_map(|g| {
                    g.threads
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| t.busy_since.load(SeqCst) != 0)
                        .map(move |(i, t)| {
                            let token = Token::from_raw(t.busy_token.load(Relaxed));
                            let name = &g.spec.name;
                            format!(
                                "lane `{name}` thread lf-{name}-{i} handle {}",
                                token.index()
                            )
                        })
                })
                .collect();
            return Err(Error::Unfinished {
                deadline,
                handlers,
                tasks: tasks_left,
            });
        }
        for g in &self.lanes {
            crate::engine::handler::close_all(&g.handles);
        }
        tracing::info!("lfrt stopped");
        Ok(self.metrics())
    }
}

impl Runtime {
    /// Cancels every lane's async tasks, lanes in priority order (deadline lanes, then fifo and
    /// rr by priority, then time-shared ones; the highest first), each lane's tasks in task
    /// priority order: a task being polled is waited for, until `until_ns`, before anything
    /// below it is cancelled. Returns the lanes with tasks left (a poll still running at
    /// `until_ns`), each as `lane `NAME`: N task(s)`; its turn cancels them when that poll
    /// returns.
    fn cancel_tasks(&self, until_ns: u64) -> Vec<String> {
        let rank = |g: &LaneConfig| {
            let class = match g.policy {
                Policy::Deadline => 3,
                Policy::Fifo | Policy::Rr => 2,
                Policy::Other => 1,
            };
            Reverse((class, g.priority))
        };
        let mut lanes: Vec<usize> = (0..self.spawners.len()).collect();
        lanes.sort_by_key(|&i| rank(&self.cfg.lanes[i]));
        let mut left = Vec::new();
        for i in lanes {
            if let Some(sp) = &self.spawners[i] {
                let n = sp.close(until_ns);
                if n > 0 {
                    left.push(format!(
                        "lane `{}`: {n} task(s), cancelled when the running poll returns",
                        self.cfg.lanes[i].name
                    ));
                }
            }
        }
        left
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Stops a runtime from any thread, also from inside a handler: every lane's threads return,
/// and [`Runtime::wait`] returns (the owner's [`Runtime::shutdown`] then joins them).
///
/// # Examples
/// ```no_run
/// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// # let mut cfg = RuntimeConfig::default();
/// # cfg.lanes.push(LaneConfig::new("g", Policy::Fifo, 10));
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
    pub(super) lanes: Vec<Arc<LanePool>>,
    pub(super) stopped: Arc<AtomicU32>,
}

impl Stopper {
    /// Asks every lane to stop and wakes [`Runtime::wait`]. Does not wait.
    ///
    /// # Real-time safety
    /// No allocation, no lock: an eventfd write per lane and one futex wake (a bound lane's
    /// pool also takes its priority-inheritance lock once and shuts its connection down).
    ///
    /// Example: [`Stopper`].
    pub fn stop(&self) {
        for g in &self.lanes {
            g.stop();
        }
        self.stopped.store(1, Release);
        futex::wake(&self.stopped, i32::MAX);
    }
}

impl fmt::Debug for Stopper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Stopper { .. }")
    }
}
