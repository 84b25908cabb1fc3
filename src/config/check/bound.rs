//! Bound lanes (`[lane.bound]`).

use super::super::*;
use super::*;

impl RuntimeConfig {
    /// Bound lanes (`[lane.bound]`): an address a connection can be made to, the pool's
    /// sizes ([`BoundConfig`](crate::bound::BoundConfig)'s own range check), a waiter slot for
    /// every thread, and none of the lane settings a bound pool does not have: the concurrent
    /// promotion (the pool always has a leader), the overrun watchdog (which watches the
    /// dispatches of Leader/Followers lanes only) and a task table (whose handles only a
    /// Leader/Followers pool dispatches).
    ///
    /// Nothing is connected: `lfrt check` does not open a connection to a back-end, so a
    /// back-end that is down is found by [`Runtime::new`](crate::Runtime::new)
    /// ([`Error::Connect`]).
    pub(crate) fn check_bound(&self) -> Result<(), Invalid> {
        for (gi, g) in self.lanes.iter().enumerate() {
            let Some(b) = &g.bound else { continue };
            let bad = |section, field, message| {
                Err(Invalid {
                    section,
                    field,
                    message,
                })
            };
            let here = Section::Bound(gi);
            if b.connect.port() == 0 || b.connect.ip().is_unspecified() {
                return bad(
                    here,
                    "connect",
                    format!(
                        "{}: give the back-end's explicit address and port, like \
                         \"127.0.0.1:7100\" (no port 0, no wildcard address)",
                        b.connect
                    ),
                );
            }
            if let Some((field, message)) = b.pool_config(g).invalid() {
                // The pool's promotion is the lane's setting.
                let section = if field == "promotion" {
                    Section::Lane(gi)
                } else {
                    here
                };
                return bad(section, field, message);
            }
            if b.max_waiters < g.threads {
                return bad(
                    here,
                    "max_waiters",
                    format!(
                        "{} for {} threads: each thread of the lane leases a waiter slot; give \
                         at least one per thread, plus one per caller of the back-end",
                        b.max_waiters, g.threads
                    ),
                );
            }
            if g.max_tasks > 0 {
                return bad(
                    Section::Lane(gi),
                    "max_tasks",
                    format!(
                        "{}: a bound lane's threads serve its back-end connection only, never \
                         the lane's handle set, where a task table's handles live, so its \
                         tasks would never run; spawn tasks on a Leader/Followers lane and \
                         leave `max_tasks` out here",
                        g.max_tasks
                    ),
                );
            }
            if g.budget_us.is_some() {
                return bad(
                    Section::Lane(gi),
                    "budget_us",
                    "the overrun watchdog does not watch a bound lane's handlers; leave \
                     `budget_us` out"
                        .into(),
                );
            }
        }
        Ok(())
    }
}
