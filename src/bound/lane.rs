//! A bound pool as a runtime lane: the connection to its back-end, made when the lane is
//! built, and each pool thread's waiter, leased then so that callers leasing slots before
//! `start` cannot take them. The engine sets each thread up as for every lane and hands it
//! to [`BoundLane::serve`](crate::engine::lane::Served::serve) (the engine's `Served`).

use super::{BoundConfig, BoundPool, BoundStats, Waiter};
use crate::engine::handler::Handles;
use crate::engine::lane::{LanePool, Served};
use crate::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;

/// How long [`BoundLane::connect`] waits for the connection to the back-end.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The runtime's side of a bound lane: the pool, and the waiter slot of each of its threads
/// (each thread takes its own at set-up).
#[derive(Debug)]
pub(crate) struct BoundLane {
    pub(crate) pool: BoundPool,
    waiters: Box<[std::sync::Mutex<Option<Waiter>>]>,
}

impl BoundLane {
    /// Connects bound lane `lane` to its back-end at `connect` and builds its pool, with a
    /// waiter leased for each of its `threads`.
    pub(crate) fn connect(
        lane: &str,
        connect: SocketAddr,
        config: BoundConfig,
        threads: usize,
    ) -> Result<BoundLane, Error> {
        let conn =
            std::net::TcpStream::connect_timeout(&connect, CONNECT_TIMEOUT).map_err(|e| {
                Error::Connect {
                    lane: lane.to_owned(),
                    addr: connect,
                    source: e,
                }
            })?;
        let pool = BoundPool::new(conn, config)?;
        let waiters = (0..threads)
            .map(|_| {
                pool.waiter()
                    .map(|w| std::sync::Mutex::new(Some(w)))
                    .map_err(|e| {
                        Error::config(format!("lane `{lane}`.bound.max_waiters"), e.to_string())
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(BoundLane { pool, waiters })
    }

    /// Thread `idx`'s waiter, at the thread's priority (once).
    fn waiter(&self, idx: u16, priority: u8) -> Waiter {
        let mut w = self.waiters[idx as usize]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .expect("each bound thread takes its waiter once");
        w.set_priority(priority);
        w
    }
}

impl Served for BoundLane {
    fn handles(&self) -> &Arc<Handles> {
        self.pool.handles()
    }

    fn serve(&self, lane: &Arc<LanePool>, idx: u16) {
        let priority = lane.threads[idx as usize].priority;
        let mut w = self.waiter(idx, priority);
        super::set_runtime_thread(lane, idx, priority);
        let served = self.pool.serve(&mut w, None);
        debug_assert_eq!(
            served,
            Ok(()),
            "serve without a deadline ends only at shutdown"
        );
    }

    fn shutdown(&self) {
        self.pool.shutdown();
    }

    fn stats(&self) -> (BoundStats, bool, usize) {
        let (leader, followers, _) = self.pool.snapshot();
        (self.pool.stats(), leader, followers)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
