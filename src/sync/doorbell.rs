//! A doorbell: how threads that push into a queue wake its consumer, with at most one write of
//! the bell (an eventfd in a lane's handle set) per drain. Used by lane inboxes
//! (`sources/inbox.rs`), a lane's task ready set (`task/`) and the relay of foreign wakes.
//!
//! ```text
//!   pusher                                  consumer (woken by the bell)
//!   ──────                                  ────────────────────────────
//!   push(v) into the queue                  answer(): read the bell, rung = false
//!   ring(): if !swap(rung, true) → write    pop until the queue says "empty for now"
//! ```
//!
//! `rung` is true while a wake-up is pending (written to the bell, not yet answered).
//!
//! Invariant, **no lost wake-up**: both sides separate their two steps with a `SeqCst` fence
//! (push, fence, swap against store, fence, pop: the store-buffering pattern; `SeqCst` on the
//! flag alone does not order the queue's release store against it, and the loom model
//! (`doorbell/loom_tests.rs`) loses a wake-up without the fences), so for every value at least one of them sees the
//! other: either the consumer's pops find it, or the pusher's swap finds `false` and writes the
//! bell, which wakes the consumer again. This holds with a queue whose pop returns "empty for
//! now" for a value that is claimed but not yet written (`queue.rs`): its pusher rings only
//! after the write, so the ring that follows finds the value published. The loom model
//! checks it with the real queue, two pushers and a consumer that runs once per bell.

use crate::sync::atomic::{fence, AtomicBool, Ordering::SeqCst};
use crate::sys::fd::EventFd;
use std::os::fd::{AsFd, BorrowedFd};

/// What a doorbell rings: in the runtime an eventfd (each write one edge in the consumer's
/// handle set); in the loom model a counter.
pub(crate) trait Bell {
    /// One ring.
    fn write(&self);
    /// Takes the pending rings (the eventfd's counter back to 0).
    fn read(&self);
}

impl Bell for EventFd {
    fn write(&self) {
        // Nonblocking; the counter cannot overflow: at most one write per answer.
        let _ = EventFd::write(self, 1);
    }
    fn read(&self) {
        let _ = EventFd::read(self);
    }
}

/// A bell and the flag that keeps it to one ring per drain.
#[derive(Debug)]
pub(crate) struct Doorbell<B: Bell = EventFd> {
    rung: AtomicBool,
    bell: B,
}

impl<B: Bell> Doorbell<B> {
    pub(crate) fn new(bell: B) -> Doorbell<B> {
        Doorbell {
            rung: AtomicBool::new(false),
            bell,
        }
    }

    /// After a push (or whenever the consumer must look again): rings the bell unless a
    /// wake-up is pending already.
    pub(crate) fn ring(&self) {
        // The pusher's store of its value (release) and its look at `rung` must not be
        // reordered against the consumer's clearing of `rung` and its pops: a store-buffering
        // pattern, which needs a sequentially consistent fence on each side (the loom model
        // finds the lost wake-up without them).
        fence(SeqCst);
        if !self.rung.swap(true, SeqCst) {
            self.bell.write();
        }
    }

    /// The consumer, woken by the bell, before it pops: takes the wake-up, so that the next
    /// push rings again.
    pub(crate) fn answer(&self) {
        self.bell.read();
        self.rung.store(false, SeqCst);
        fence(SeqCst); // see `ring`
    }
}

impl Doorbell<EventFd> {
    /// A doorbell on a new eventfd.
    pub(crate) fn eventfd() -> std::io::Result<Doorbell<EventFd>> {
        Ok(Doorbell::new(EventFd::new()?))
    }
}

/// The bell's fd, which the consumer's handle waits on.
impl AsFd for Doorbell<EventFd> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Ten rings before an answer are one write; after the answer the next ring writes again.
    #[test]
    fn one_write_per_answer() {
        let d = Doorbell::eventfd().unwrap();
        for _ in 0..10 {
            d.ring();
        }
        assert_eq!(d.bell.read().unwrap(), Some(1), "10 rings, 1 write");
        d.bell.write(1).unwrap();
        d.answer();
        assert_eq!(d.bell.read().unwrap(), None, "answered: the bell is read");
        d.ring();
        assert_eq!(
            d.bell.read().unwrap(),
            Some(1),
            "rings again after an answer"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
