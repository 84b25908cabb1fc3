//! The Leader/Followers promotion protocol (Schmidt, O'Ryan, Kircher, Pyarali, Buschmann:
//! *Leader/Followers*, POSA2; implementation activities 3–5).
//!
//! Each pool thread cycles through three roles:
//!
//! ```text
//!            join(): no leader                 event detected: promote()
//!   ┌────────────────────────────► LEADER ─────────────────────────────► PROCESSING
//!   │                                ▲                                        │
//!   │     join(): leader present     │ promoted (unparked by the leader)      │ handler returned:
//!   └──────────────► FOLLOWER ───────┘                                        │ join() again
//!                       ▲─────────────────────────────────────────────────────┘
//! ```
//!
//! State, all under one priority-inheritance lock (threads of different priorities share it):
//! `leader: Option<thread>`, the [`FollowerQueue`] of parked threads, `shutdown`.
//!
//! Invariants (the loom models below check them; `debug_assert!`s guard each transition):
//! * **at most one leader**: `leader` is set only when it is `None` (by `join`) or by the current
//!   leader handing it to a follower it popped (`promote`);
//! * the follower queue holds exactly the threads that are parked or about to park, and a thread
//!   is unparked only after it has been popped (promotion) or at shutdown, so every token a
//!   parker receives is consumed by its owner's `park`;
//! * **no lost wake-up**: a promoted follower is named leader *under the lock* before its parker
//!   is signalled, and the parker keeps a token that arrives before `park`;
//! * a vacant leader slot (no follower to promote) is taken by the next thread that joins;
//! * after `shutdown`, every thread returns from `join` with [`Joined::Shutdown`]: parked ones are
//!   woken, processing ones see the flag when they rejoin, and the leader is woken by the handle
//!   set's shutdown event and calls `resign`.
//!
//! This module makes no system calls besides those of the lock and the parkers, so it runs
//! unchanged under loom (`--cfg loom`, see `scripts/loom.sh`).

use crate::follower_queue::{FollowerQueue, Promotion, MAX_GROUP_THREADS};
use crate::sync::{Mutex, Parker};

/// What `join` returned to its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Joined {
    /// The caller is now the group's only leader.
    Leader,
    /// The group is shutting down; the thread must exit.
    Shutdown,
}

/// What the leader's `promote` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Promoted {
    /// This follower is the new leader.
    Follower(u16),
    /// No follower waited: the leader slot is vacant until a thread rejoins.
    Vacant,
}

#[derive(Debug)]
struct State {
    leader: Option<u16>,
    followers: FollowerQueue,
    shutdown: bool,
}

/// The thread pool synchronizer of one group.
#[derive(Debug)]
pub(crate) struct Protocol {
    state: Mutex<State>,
    parkers: Box<[Parker]>,
}

impl Protocol {
    /// A protocol for `threads` threads (indices `0..threads`).
    pub(crate) fn new(threads: usize, promotion: Promotion) -> Protocol {
        assert!(threads <= MAX_GROUP_THREADS);
        Protocol {
            state: Mutex::new(State {
                leader: None,
                followers: FollowerQueue::new(promotion),
                shutdown: false,
            }),
            parkers: (0..threads).map(|_| Parker::new()).collect(),
        }
    }

    /// Joins (or rejoins) the pool: returns as leader, or at shutdown. Blocks as a follower.
    ///
    /// `priority` orders this thread in the follower queue.
    pub(crate) fn join(&self, me: u16, priority: u8) -> Joined {
        let mut st = self.state.lock();
        loop {
            if st.shutdown {
                if st.leader == Some(me) {
                    st.leader = None;
                }
                return Joined::Shutdown;
            }
            match st.leader {
                None => {
                    st.leader = Some(me);
                    return Joined::Leader;
                }
                // Promoted while parked (or rejoining while still leader after an interrupted
                // wait): the slot is already ours.
                Some(l) if l == me => return Joined::Leader,
                Some(_) => {}
            }
            st.followers.push(me, priority);
            drop(st);
            self.parkers[me as usize].park();
            st = self.state.lock();
        }
    }

    /// Called by the leader right after its wait returned an event, *before* it processes the
    /// event: hands the leader role to the next follower.
    pub(crate) fn promote(&self, me: u16) -> Promoted {
        let mut st = self.state.lock();
        debug_assert_eq!(
            st.leader,
            Some(me),
            "promote() by a thread that is not the leader"
        );
        match st.followers.pop() {
            Some(next) => {
                st.leader = Some(next);
                drop(st);
                // After the lock: the follower re-locks on wake-up; its token is not lost.
                self.parkers[next as usize].unpark();
                Promoted::Follower(next)
            }
            None => {
                st.leader = None;
                Promoted::Vacant
            }
        }
    }

    /// The leader gives up the role without an event (it saw the shutdown event).
    pub(crate) fn resign(&self, me: u16) {
        let mut st = self.state.lock();
        if st.leader == Some(me) {
            st.leader = None;
        }
    }

    /// Sets the shutdown flag and wakes every parked follower. Idempotent.
    pub(crate) fn shutdown(&self) {
        let mut woken: heapless::Vec<u16, MAX_GROUP_THREADS> = heapless::Vec::new();
        {
            let mut st = self.state.lock();
            st.shutdown = true;
            while let Some(t) = st.followers.pop() {
                // Cannot overflow: the queue has the same capacity.
                let _ = woken.push(t);
            }
        }
        for t in woken {
            self.parkers[t as usize].unpark();
        }
    }

    /// `(leader present, followers waiting)`: a racy snapshot for metrics.
    pub(crate) fn snapshot(&self) -> (bool, usize) {
        let st = self.state.lock();
        (st.leader.is_some(), st.followers.len())
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Models of the protocol with a fake handle set: an atomic count of pending events.
    //! Each worker joins; as leader it takes one event and promotes before "processing" it;
    //! when no event is left it shuts the group down. Loom explores every interleaving (up to
    //! the preemption bound) and reports a deadlock if any thread parks forever.
    use super::*;
    use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use loom::sync::Arc;

    fn worker(
        p: &Protocol,
        me: u16,
        prio: u8,
        events: &AtomicUsize,
        leaders: &AtomicUsize,
        done: &AtomicUsize,
    ) {
        while p.join(me, prio) == Joined::Leader {
            assert_eq!(leaders.fetch_add(1, SeqCst), 0, "two leaders at once");
            let took = events
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok();
            leaders.fetch_sub(1, SeqCst);
            if took {
                let _ = p.promote(me);
                done.fetch_add(1, SeqCst); // "processing"
            } else {
                p.shutdown();
                p.resign(me);
            }
        }
    }

    fn run(threads: u16, n_events: usize, promotion: Promotion) {
        let p = Arc::new(Protocol::new(threads as usize, promotion));
        let events = Arc::new(AtomicUsize::new(n_events));
        let leaders = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (1..threads)
            .map(|me| {
                let (p, e, l, d) = (p.clone(), events.clone(), leaders.clone(), done.clone());
                loom::thread::spawn(move || worker(&p, me, me as u8, &e, &l, &d))
            })
            .collect();
        worker(&p, 0, 0, &events, &leaders, &done);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            done.load(SeqCst),
            n_events,
            "every event processed exactly once"
        );
    }

    #[test]
    fn two_threads_two_events() {
        loom::model(|| run(2, 2, Promotion::Priority));
    }

    #[test]
    fn two_threads_fifo() {
        loom::model(|| run(2, 3, Promotion::Fifo));
    }

    #[test]
    fn three_threads_bounded() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| run(3, 2, Promotion::Priority));
    }

    #[test]
    fn external_shutdown_wakes_everyone() {
        // Shutdown from outside the pool while threads lead/follow: all must return.
        loom::model(|| {
            let p = Arc::new(Protocol::new(2, Promotion::Lifo));
            let p2 = p.clone();
            let t = loom::thread::spawn(move || {
                while p2.join(1, 1) == Joined::Leader {
                    p2.resign(1);
                    loom::thread::yield_now();
                }
            });
            p.shutdown();
            while p.join(0, 0) == Joined::Leader {
                p.resign(0);
            }
            t.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    #[test]
    fn first_joiner_leads_and_vacancy_is_reported() {
        let p = Protocol::new(2, Promotion::Priority);
        assert_eq!(p.join(0, 1), Joined::Leader);
        assert_eq!(p.promote(0), Promoted::Vacant);
        assert_eq!(p.snapshot(), (false, 0));
        assert_eq!(p.join(1, 1), Joined::Leader);
        p.shutdown();
        assert_eq!(p.join(1, 1), Joined::Shutdown);
    }

    /// Followers of priorities 10, 30, 20 are promoted 30, 20, 10 through the real protocol
    /// (real threads, real parkers).
    #[test]
    fn promotion_order_through_protocol() {
        for (promotion, expect) in [
            (Promotion::Priority, [30u8, 20, 10]),
            (Promotion::Lifo, [20, 30, 10]),
            (Promotion::Fifo, [10, 30, 20]),
        ] {
            let p = Arc::new(Protocol::new(4, promotion));
            assert_eq!(p.join(0, 99), Joined::Leader);
            let order = Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut hs = Vec::new();
            for (i, prio) in [(1u16, 10u8), (2, 30), (3, 20)] {
                let (p2, o) = (p.clone(), order.clone());
                hs.push(std::thread::spawn(move || {
                    if p2.join(i, prio) == Joined::Leader {
                        o.lock().unwrap().push(prio);
                        // hand on immediately, do not rejoin the queue
                        let _ = p2.promote(i);
                    }
                }));
                // wait until the thread is queued, so the arrival order is 10, 30, 20
                while p.snapshot().1 < i as usize {
                    std::thread::yield_now();
                }
            }
            let _ = p.promote(0);
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(*order.lock().unwrap(), expect.to_vec(), "{promotion:?}");
        }
    }

    /// Stress: many threads, many "events"; at most one leader at any time, every event once.
    #[test]
    fn stress_one_leader_exactly_once() {
        const THREADS: u16 = 8;
        const EVENTS: usize = 50_000;
        let p = Arc::new(Protocol::new(THREADS as usize, Promotion::Priority));
        let events = Arc::new(AtomicUsize::new(EVENTS));
        let leaders = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..THREADS)
            .map(|me| {
                let (p, e, l, d) = (p.clone(), events.clone(), leaders.clone(), done.clone());
                std::thread::spawn(move || {
                    while p.join(me, me as u8) == Joined::Leader {
                        assert_eq!(l.fetch_add(1, SeqCst), 0);
                        let took = e.fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1)).is_ok();
                        l.fetch_sub(1, SeqCst);
                        if took {
                            let _ = p.promote(me);
                            d.fetch_add(1, SeqCst);
                        } else {
                            p.shutdown();
                            p.resign(me);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(done.load(SeqCst), EVENTS);
    }
}
