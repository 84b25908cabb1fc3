//! The lender's side of lane borrowing: a thread of a lower lane, woken by a borrowing lane's
//! link in its own set, dispatches one of that lane's events at that lane's priority and
//! returns. The protocol, its invariants and the arming flags are in `borrow.rs`; this is the
//! lent thread's turn, written as one more method of its dispatch loop.

use crate::engine::dispatch::PoolThread;
use crate::engine::follower_queue::MAX_GROUP_THREADS;
use crate::engine::group::Group;
use crate::engine::handle_set::Wait;
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
    pub(super) fn lend(&mut self, lender: &Group, to: u16, woke_ns: u64) {
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
                let own = (self.ctx.group, self.ctx.thread, self.ctx.priority);
                let registry = std::mem::replace(&mut self.ctx.registry, b.registry());
                // An index no thread of `b` (nor any other lent thread) has: Context docs.
                let lent_index = (1 + u32::from(self.group.index)) * MAX_GROUP_THREADS as u32
                    + u32::from(self.idx);
                (self.ctx.group, self.ctx.thread, self.ctx.priority) =
                    (b.index, lent_index, b.spec.priority);
                if self.process(b, token, readiness, woke_ns) {
                    Counters::add(&b.counters.borrowed, 1);
                    Counters::add(&self.group.counters.lent, 1);
                }
                self.ctx.registry = registry;
                (self.ctx.group, self.ctx.thread, self.ctx.priority) = own;
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
