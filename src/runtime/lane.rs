//! [`Lane`]: a lane's typed handle, as `add_lane` and `lane` return it.

use super::*;

/// One lane of a runtime: a cheap cloneable handle to a lane (its name, its index and its
/// [`Registry`]), returned by [`Runtime::add_lane`] or looked up once with [`Runtime::lane`].
///
/// A `Lane` is the only way to reach a lane, so a misspelt lane name is an error at set-up,
/// never a missing lane later. It holds its own lane, so it cannot be used with another
/// runtime: no [`Runtime`] method takes a `Lane`, and its registry adds handles only to the
/// lane it came from. It stays valid (and refers to the same, possibly stopped, lane) for as
/// long as it lives; cloning it clones an `Arc`.
///
/// # Examples
/// ```
/// use lfrt::{LaneConfig, Lane, Notifier, Policy, Runtime, RuntimeConfig};
/// # use lfrt::{Context, Disposition, Event, EventHandler};
/// # use std::os::fd::{AsFd, BorrowedFd};
/// # struct Bell(Notifier);
/// # impl EventHandler for Bell {
/// #     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
/// #     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition { Disposition::Rearm }
/// # }
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control: Lane = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// let token = control.registry().register(Box::new(Bell(Notifier::new()?)))?;
/// assert!(control.registry().deregister(token));
/// assert_eq!((control.name(), control.index()), ("control", 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Lane {
    pub(super) lane: Arc<LanePool>,
    pub(super) tasks: Option<Spawner>,
}

impl Lane {
    /// The registry of this lane's lane: add, remove, suspend and resume its handles from
    /// any thread, before or after [`Runtime::start`]. A clone (one `Arc` increment).
    pub fn registry(&self) -> Registry {
        self.lane.registry()
    }

    /// The pool of this lane if it is a bound lane ([`LaneConfig::bound`]); `None` for a
    /// Leader/Followers lane. Lease a [`Waiter`](crate::bound::Waiter) from it to call the
    /// back-end, from a handler of the lane (registered with [`registry`](Self::registry),
    /// which for a bound lane is the pool's) or from any other thread. The lane's own threads
    /// serve the pool from [`Runtime::start`] until shutdown, which also shuts the pool down.
    /// An outside thread waiting in `join` takes part in the pool too: while it leads it may
    /// run the lane's handlers inline, at its own priority (hybrid associations, see
    /// [`crate::bound`]).
    ///
    /// # Examples
    /// ```no_run
    /// use lfrt::{BoundLane, LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let mut front = LaneConfig::new("front", Policy::Fifo, 20);
    /// front.bound = Some(BoundLane::new("127.0.0.1:7100".parse().unwrap()));
    /// let front = rt.add_lane(front)?;
    /// let pool = front.bound_pool().expect("`front` is a bound lane");
    /// rt.start()?;
    /// let mut w = pool.waiter().expect("a free waiter slot");
    /// let reply = pool.call(&mut w, b"balance?", None).expect("a reply");
    /// # drop(reply);
    /// # Ok::<(), lfrt::Error>(())
    /// ```
    pub fn bound_pool(&self) -> Option<BoundPool> {
        let served = self.lane.served.as_ref()?;
        let lane = served.as_any().downcast_ref::<BoundLane>()?;
        Some(lane.pool.clone())
    }

    /// Spawns `future` onto this lane at task priority 0: it is polled by the lane's pool
    /// threads, at the lane's policy and priority (see [`crate::task`]). The shortcut of
    /// [`spawner`](Self::spawner)`()?.spawn(future)`.
    ///
    /// # Errors
    /// The future is handed back ([`SpawnError`]): too large for a slot, the task table is
    /// full, the runtime shut down, or the lane has `max_tasks = 0` ([`SpawnError::Closed`]).
    ///
    /// # Examples
    /// ```no_run
    /// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    /// let mut rt = Runtime::new(RuntimeConfig::default())?;
    /// let mut cfg = LaneConfig::new("control", Policy::Fifo, 80);
    /// cfg.max_tasks = 16;
    /// let control = rt.add_lane(cfg)?;
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

    /// This lane's task spawner (clone it into other threads), or `None` if the lane has
    /// `max_tasks = 0`.
    pub fn spawner(&self) -> Option<Spawner> {
        self.tasks.clone()
    }

    /// The lane's name, as configured.
    pub fn name(&self) -> &str {
        &self.lane.spec.name
    }

    /// The lane's position in the runtime: its index in [`Runtime::metrics`] and
    /// [`Runtime::thread_ids`].
    pub fn index(&self) -> usize {
        usize::from(self.lane.index)
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
