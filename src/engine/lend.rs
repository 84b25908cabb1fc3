//! The lender's side of lane borrowing: a thread of a lower lane, woken by a borrowing lane's
//! link in its own set, dispatches one of that lane's events at that lane's priority and
//! returns. The protocol, its invariants and the arming flags are in `borrow.rs`; this is the
//! lent thread's turn, written as one more method of its dispatch loop.

use crate::engine::dispatch::PoolThread;
use crate::engine::follower_queue::MAX_LANE_THREADS;
use crate::engine::handle_set::Wait;
use crate::engine::lane::LanePool;
use crate::observe::metrics::Counters;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;

impl PoolThread<'_> {
    /// A lender's turn (module docs of `borrow.rs`): this thread (its own lane's promotion
    /// done) was woken by the link of lane `to`, which may have no idle thread. If so, and
    /// `max_borrowed` allows, it raises itself to that lane's priority, dispatches one of its
    /// events with that lane's handle set and its own [`Context`](crate::Context) (naming that
    /// lane while the handler runs), and restores itself. No allocation; in user space no lock
    /// but PI locks.
    ///
    /// `lender` is the lane whose epoll set reported the link: its own, or, when the event it
    /// took from a borrower's set is that borrower's own link to a lane higher still, the
    /// borrower it stands in for (it then lends on, as that lane's leader would).
    pub(super) fn lend(&mut self, lender: &LanePool, to: u16, woke_ns: u64) {
        let Some(b) = lender
            .lends
            .get()
            .and_then(|l| l.iter().find(|g| g.index == to))
        else {
            return;
        };
        let (Some(borrow), Some(link)) = (
            &b.borrow,
            b.borrow.as_ref().and_then(|x| x.link_of(lender.index)),
        ) else {
            return;
        };
        // Before the look at its leader: a vacancy after that look arms the link again.
        borrow.gate.fired(link);
        if borrow.stopped.load(SeqCst) || b.protocol.snapshot().0 {
            return; // its own leader takes the event (or it is stopping)
        }
        if !borrow.gate.try_take() {
            // A borrowed thread is still to give back, and re-arms the link then.
            Counters::add(&b.counters.borrow_refused, 1);
            return;
        }
        if !self.time_shared {
            self.set_sched(borrow.sched, false);
        }
        match b.handles.wait_timeout(0) {
            Ok(Wait::Link { borrower }) => self.lend(b, borrower, woke_ns),
            Ok(Wait::Event { token, readiness }) => {
                let own = (self.ctx.lane, self.ctx.thread, self.ctx.priority);
                let registry = std::mem::replace(&mut self.ctx.registry, b.registry());
                // An index no thread of `b` (nor any other lent thread) has: Context docs.
                let lent_index = (1 + u32::from(self.lane.index)) * MAX_LANE_THREADS as u32
                    + u32::from(self.idx);
                (self.ctx.lane, self.ctx.thread, self.ctx.priority) =
                    (b.index, lent_index, b.spec.priority);
                if self.process(b, token, readiness, woke_ns) {
                    Counters::add(&b.counters.borrowed, 1);
                    Counters::add(&self.lane.counters.lent, 1);
                }
                self.ctx.registry = registry;
                (self.ctx.lane, self.ctx.thread, self.ctx.priority) = own;
            }
            _ => {} // nothing ready any more, or the set is shutting down
        }
        if !self.time_shared {
            self.set_sched(self.slot.sched, true);
        }
        borrow.gate.give_back();
        if !borrow.stopped.load(SeqCst) && !b.protocol.snapshot().0 {
            borrow.arm(b.handles.epoll_fd().as_raw_fd(), b.index);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::handler::Context;
    use crate::engine::lane::wire_borrowing;
    use crate::engine::testing::{borrowing, spec, Recorder, Seen};
    use crate::observe::telemetry::Sample;
    use crate::sys::{self, sched::Sched};
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{Arc, Mutex};

    /// Lane "low" (index 0) lends to lane "high" (index 1, priority 20), which has one ready
    /// handle; `raise` is what a lent thread raises itself to.
    struct Lanes {
        low: Arc<LanePool>,
        high: Arc<LanePool>,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    fn lanes(raise: Sched) -> Lanes {
        let low = Arc::new(LanePool::new(0, spec("low", 1), None).unwrap());
        let high = Arc::new(LanePool::new(1, borrowing("high", &["low"], raise), None).unwrap());
        wire_borrowing(&[low.clone(), high.clone()]).unwrap();
        let h = Recorder::new();
        h.fd.write(1).unwrap();
        let seen = h.seen.clone();
        high.registry().register(Box::new(h)).unwrap();
        Lanes { low, high, seen }
    }

    /// Thread 0 of `low` takes one lender's turn for `high`; returns the context it is left
    /// with (lane, thread index, priority).
    fn lend_once(l: &Lanes) -> (usize, usize, u8) {
        let g = &l.low;
        let mut ctx = Context::new(1024, 0, 0, 10, sys::gettid(), g.registry());
        let (mut ring, _samples) = rtrb::RingBuffer::<Sample>::new(16);
        let mut t = PoolThread {
            lane: g,
            idx: 0,
            slot: &g.threads[0],
            ctx: &mut ctx,
            ring: &mut ring,
            dispatches: 0,
            time_shared: false,
        };
        t.lend(g, 1, sys::now_ns());
        (ctx.lane(), ctx.thread_index(), ctx.priority())
    }

    fn count(g: &LanePool) -> (u64, u64, u64) {
        let c = &g.counters;
        (
            c.borrowed.load(Relaxed),
            c.lent.load(Relaxed),
            c.borrow_refused.load(Relaxed),
        )
    }

    #[test]
    fn a_lent_thread_runs_one_event_as_the_borrowing_lane_and_comes_back_as_itself() {
        let l = lanes(Sched::Other);
        assert_eq!(lend_once(&l), (0, 0, 10), "its own context again");
        assert_eq!(
            *l.seen.lock().unwrap(),
            [Seen {
                lane: 1,
                thread: MAX_LANE_THREADS, // (1 + own lane 0) × MAX_LANE_THREADS + thread 0
                priority: 20,
            }]
        );
        assert_eq!((count(&l.high).0, count(&l.low).1), (1, 1));
        assert_eq!(
            l.high.borrow.as_ref().unwrap().gate.borrowed(),
            0,
            "given back"
        );
        assert_eq!(l.low.counters.raise_failures.load(Relaxed), 0);
        // The borrower still has no leader and its handle is ready again: the link is re-armed.
        match l.low.handles.wait_timeout(1000).unwrap() {
            Wait::Link { borrower } => assert_eq!(borrower, 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_borrower_with_a_leader_or_at_its_limit_or_stopping_is_left_alone() {
        // A leader of its own takes the event.
        let l = lanes(Sched::Other);
        let high = &l.high;
        let _ = high.protocol.join(0, 20); // vacant: thread 0 of `high` leads at once
        lend_once(&l);
        assert!(l.seen.lock().unwrap().is_empty());
        assert_eq!(count(high), (0, 0, 0));

        // Its `max_borrowed` threads are lent already.
        let l = lanes(Sched::Other);
        let gate = &l.high.borrow.as_ref().unwrap().gate;
        assert!(gate.try_take());
        lend_once(&l);
        assert!(l.seen.lock().unwrap().is_empty());
        assert_eq!(count(&l.high), (0, 0, 1), "refused and counted");
        gate.give_back();

        // It is stopping.
        let l = lanes(Sched::Other);
        l.high.stop();
        lend_once(&l);
        assert!(l.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_raise_is_counted_and_the_event_runs_at_the_lenders_priority() {
        // SCHED_FIFO priority 0 is refused whatever the privilege.
        let l = lanes(Sched::Fifo(0));
        lend_once(&l);
        assert_eq!(
            l.seen.lock().unwrap().len(),
            1,
            "the event is served all the same"
        );
        let c = &l.low.counters;
        assert_eq!(c.raise_failures.load(Relaxed), 1);
        assert_eq!(c.restore_failures.load(Relaxed), 0);
        assert_eq!(crate::sys::sched::read_back(0).unwrap(), Sched::Other);
        lend_once(&l);
        assert_eq!(c.raise_failures.load(Relaxed), 2, "counted every time");
        assert!(c.raise_failure_said.load(Relaxed), "logged once");
    }
}
