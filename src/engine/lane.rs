//! One lane: its shared state, built from the engine's own parameters.
//!
//! A lane is a promotion [`Protocol`], a handle set, one [`ThreadSlot`] per thread, its
//! counters and, for a lane that borrows, its borrowing state. It is built from a
//! [`LaneSpec`]: plain parameters the engine defines (policy and priority per thread,
//! promotion, sizes, CPUs, budget, borrowing), which `config/` derives from a `LaneConfig`.
//! The engine never reads the configuration.
//!
//! A lane whose threads do not run the Leader/Followers loop (a bound lane's threads serve
//! a [`BoundPool`](crate::bound::BoundPool)) is handed a [`Served`] body, built above the
//! engine, whose handle set it uses: each thread makes the same set-up as every pool thread
//! (`thread.rs`), then serves it until the lane stops. The engine knows no pool type.

use crate::engine::borrow::{Borrow, BorrowSpec};
use crate::engine::follower_queue::Promotion;
use crate::engine::handler::{Handles, Registry};
use crate::engine::leader::Protocol;
use crate::engine::slot::ThreadSlot;
use crate::engine::word::Word;
use crate::error::Error;
use crate::observe::metrics::{BoundStats, Counters};
use crate::sys::{epoll, sched::Sched};
use std::fmt;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, OnceLock};

/// What to do when real-time scheduling cannot be had (`rt = "best-effort" | "required"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RtMode {
    /// Warn and run at normal priority.
    #[default]
    BestEffort,
    /// Refuse to start, naming the missing capability or rlimit.
    Required,
}

/// What the overrun watchdog does when a handler exceeds its lane's `budget_us`
/// (`on_overrun = "report" | "demote"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverrun {
    /// Report it (tracing warning and the `budget_overruns` metric).
    #[default]
    Report,
    /// Report it and drop the thread to `SCHED_OTHER` until the handler returns.
    Demote,
}

/// A lane as the engine needs it: the engine's own plain parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaneSpec {
    /// The lane's name (in errors, logs and metrics).
    pub(crate) name: String,
    /// The lane's priority (what a lent thread's handler sees as its lane's).
    pub(crate) priority: u8,
    /// Per thread: its policy and priority.
    pub(crate) threads: Vec<(Sched, u8)>,
    pub(crate) promotion: Promotion,
    pub(crate) max_handles: usize,
    /// Each thread's buffer (`Context`).
    pub(crate) buffer_bytes: usize,
    pub(crate) stack_bytes: usize,
    /// CPUs the threads are pinned to; `None`: every CPU.
    pub(crate) cpus: Option<Vec<usize>>,
    /// The watchdog's budget per handler (µs), and what it does past it.
    pub(crate) budget_us: Option<u64>,
    pub(crate) on_overrun: OnOverrun,
    /// The lane borrows threads of lower lanes (`borrow.rs`).
    pub(crate) borrow: Option<BorrowSpec>,
    /// Deferred promotion (`leader.rs`, `dispatch.rs`): a leader keeps its role through the
    /// events of a wait that drained the handle set if their handlers recently ran for less
    /// than this in all, and the watchdog relieves a leader that kept it for longer (ns); 0:
    /// promote before processing.
    pub(crate) promote_after_ns: u64,
}

/// What the threads of a lane that is not a Leader/Followers pool serve. Built above the
/// engine (a bound pool, `bound/`), handed to [`LanePool::new`].
pub(crate) trait Served: Send + Sync + fmt::Debug {
    /// The handle set the lane's registry adds to.
    fn handles(&self) -> &Arc<Handles>;
    /// Thread `idx` of `lane`, set up at its policy and priority, serves until the lane
    /// stops. Called on that thread.
    fn serve(&self, lane: &Arc<LanePool>, idx: u16);
    /// Makes every serving thread return (non-blocking).
    fn shutdown(&self);
    /// The pool's counters, and whether it has a leader and how many followers, for the
    /// lane's metrics.
    fn stats(&self) -> (BoundStats, bool, usize);
    /// The body itself, for the runtime to hand out its concrete type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A lane's shared state.
#[derive(Debug)]
pub(crate) struct LanePool {
    pub(crate) index: u16,
    pub(crate) spec: LaneSpec,
    pub(crate) protocol: Protocol,
    pub(crate) handles: Arc<Handles>,
    pub(crate) counters: Counters,
    pub(crate) threads: Box<[ThreadSlot]>,
    /// This lane borrows (`borrow_from`): its links and count (`borrow.rs`).
    pub(crate) borrow: Option<Borrow>,
    /// The higher lanes this lane lends to (set once by [`wire_borrowing`]).
    pub(crate) lends: OnceLock<Box<[Arc<LanePool>]>>,
    /// What the threads serve if this is not a Leader/Followers lane (a bound pool, whose
    /// handle set `handles` is); `None` for a Leader/Followers lane.
    pub(crate) served: Option<Arc<dyn Served>>,
}

impl LanePool {
    /// Builds lane `index` as `spec` says. A lane whose threads serve something else
    /// (`served`) uses its handle set; otherwise the lane creates its own.
    pub(crate) fn new(
        index: u16,
        spec: LaneSpec,
        served: Option<Arc<dyn Served>>,
    ) -> Result<LanePool, Error> {
        let handles = match &served {
            Some(s) => s.handles().clone(),
            None => Arc::new(Handles::new(spec.max_handles).map_err(|e| Error::Io {
                context: "creating the lane's epoll instance",
                source: e,
            })?),
        };
        let threads = spec
            .threads
            .iter()
            .map(|&(sched, priority)| ThreadSlot::new(sched, priority))
            .collect();
        let protocol = Protocol::new(spec.threads.len(), spec.promotion);
        Ok(LanePool {
            index,
            protocol,
            handles,
            served,
            counters: Counters::default(),
            threads,
            borrow: spec.borrow.as_ref().map(Borrow::new),
            lends: OnceLock::new(),
            spec,
        })
    }

    pub(crate) fn registry(&self) -> Registry {
        Registry {
            set: self.handles.clone(),
        }
    }

    /// Asks every thread of the lane to return (non-blocking).
    pub(crate) fn stop(&self) {
        if let Some(b) = &self.borrow {
            b.stopped.store(true, SeqCst);
        }
        self.protocol.shutdown();
        self.handles.wake_for_shutdown();
        if let Some(s) = &self.served {
            s.shutdown();
        }
    }
}

/// Puts each borrower's epoll fd into its lenders' sets (disarmed) and tells each lender
/// whom it lends to. Called once by `Runtime::start`, after validation and before any pool
/// thread runs.
pub(crate) fn wire_borrowing(lanes: &[Arc<LanePool>]) -> Result<(), Error> {
    let mut lends: Vec<Vec<Arc<LanePool>>> = vec![Vec::new(); lanes.len()];
    for b in lanes {
        let Some(borrow) = &b.borrow else { continue };
        let mut links = Vec::new();
        for name in borrow.from.iter() {
            let l = lanes
                .iter()
                .find(|g| &g.spec.name == name)
                .expect("validated: borrow_from names a lane");
            // No interest until armed: ONESHOT alone never reports.
            l.handles
                .watch(
                    b.handles.epoll_fd().as_raw_fd(),
                    epoll::ONESHOT,
                    Word::Link { borrower: b.index },
                )
                .map_err(|e| Error::Io {
                    context: "adding a borrowing lane's epoll fd to its lender's",
                    source: e,
                })?;
            links.push((l.index, l.handles.clone()));
            lends[l.index as usize].push(b.clone());
        }
        borrow.set_links(links);
    }
    for (g, to) in lanes.iter().zip(lends) {
        if !to.is_empty() {
            let _ = g.lends.set(to.into_boxed_slice());
        }
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::handle_set::Wait;
    use crate::engine::leader::Joined;
    use crate::engine::testing::{borrowing, spec, Recorder};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    fn lane(index: u16, spec: LaneSpec) -> Arc<LanePool> {
        Arc::new(LanePool::new(index, spec, None).unwrap())
    }

    #[test]
    fn a_lane_has_a_slot_per_thread_at_its_policy_and_its_own_handle_set() {
        let mut s = spec("lane", 3);
        s.threads[1] = (Sched::Fifo(30), 30);
        let g = lane(2, s);
        let got: Vec<_> = g.threads.iter().map(|t| (t.sched, t.priority)).collect();
        assert_eq!(
            got,
            [
                (Sched::Other, 10),
                (Sched::Fifo(30), 30),
                (Sched::Other, 10)
            ]
        );
        assert!(Arc::ptr_eq(&g.registry().set, &g.handles));
        assert!(g.borrow.is_none() && g.lends.get().is_none() && g.served.is_none());
        // The handle set is the lane's own, with room for `max_handles`.
        let h = Recorder::new();
        h.fd.write(1).unwrap();
        let token = g.registry().register(Box::new(h)).unwrap();
        match g.handles.wait_timeout(1000).unwrap() {
            Wait::Event { token: t, .. } => assert_eq!(t, token),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stop_ends_the_protocol_wakes_the_handle_set_and_the_borrowing() {
        let low = lane(0, spec("low", 1));
        let high = lane(1, borrowing("high", &["low"], Sched::Other));
        high.stop();
        assert!(high.borrow.as_ref().unwrap().stopped.load(SeqCst));
        assert!(matches!(
            high.handles.wait_timeout(1000).unwrap(),
            Wait::Shutdown
        ));
        assert_eq!(high.protocol.join(0, 20), Joined::Shutdown);
        // The other lane is untouched.
        assert!(matches!(
            low.handles.wait_timeout(0).unwrap(),
            Wait::Interrupted
        ));
    }

    /// A lane whose threads serve something else uses its handle set and stops it too.
    #[derive(Debug)]
    struct Body {
        handles: Arc<Handles>,
        shutdowns: AtomicUsize,
    }

    impl Served for Body {
        fn handles(&self) -> &Arc<Handles> {
            &self.handles
        }
        fn serve(&self, _: &Arc<LanePool>, _: u16) {}
        fn shutdown(&self) {
            self.shutdowns.fetch_add(1, Relaxed);
        }
        fn stats(&self) -> (BoundStats, bool, usize) {
            (BoundStats::default(), false, 0)
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn a_served_lane_uses_the_bodys_handle_set_and_stops_it() {
        let body = Arc::new(Body {
            handles: Arc::new(Handles::new(4).unwrap()),
            shutdowns: AtomicUsize::new(0),
        });
        let g = LanePool::new(0, spec("bound", 2), Some(body.clone())).unwrap();
        assert!(Arc::ptr_eq(&g.handles, &body.handles));
        g.stop();
        assert_eq!(body.shutdowns.load(Relaxed), 1);
    }

    #[test]
    fn wiring_puts_each_borrowers_link_disarmed_into_its_lenders_sets() {
        let (a, b) = (lane(0, spec("a", 1)), lane(1, spec("b", 1)));
        let high = lane(2, borrowing("high", &["b", "a"], Sched::Other));
        let plain = lane(3, spec("plain", 1));
        let lanes = [a.clone(), b.clone(), high.clone(), plain.clone()];
        wire_borrowing(&lanes).unwrap();

        // Who lends to whom, and the borrower's links in `borrow_from` order.
        for lender in [&a, &b] {
            let to = lender.lends.get().expect("a lender knows its borrower");
            assert_eq!(to.len(), 1);
            assert!(Arc::ptr_eq(&to[0], &high));
        }
        assert!(high.lends.get().is_none() && plain.lends.get().is_none());
        let borrow = high.borrow.as_ref().unwrap();
        assert_eq!((borrow.link_of(1), borrow.link_of(0)), (Some(0), Some(1)));
        assert_eq!(borrow.link_of(3), None);

        // An event on the borrower does not reach a lender until the link is armed.
        let h = Recorder::new();
        h.fd.write(1).unwrap();
        high.registry().register(Box::new(h)).unwrap();
        for lender in [&a, &b] {
            assert!(matches!(
                lender.handles.wait_timeout(0).unwrap(),
                Wait::Interrupted
            ));
        }
        // Armed (the borrower has no leader), each lender's set reports it once: ONESHOT.
        borrow.arm(high.handles.epoll_fd().as_raw_fd(), high.index);
        for lender in [&a, &b] {
            match lender.handles.wait_timeout(1000).unwrap() {
                Wait::Link { borrower } => assert_eq!(borrower, 2),
                other => panic!("{other:?}"),
            }
            assert!(matches!(
                lender.handles.wait_timeout(0).unwrap(),
                Wait::Interrupted
            ));
        }
        assert!(matches!(
            plain.handles.wait_timeout(0).unwrap(),
            Wait::Interrupted
        ));
    }
}
