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
//! flag alone does not order the queue's release store against it, and the loom model below
//! loses a wake-up without the fences), so for every value at least one of them sees the
//! other: either the consumer's pops find it, or the pusher's swap finds `false` and writes the
//! bell, which wakes the consumer again. This holds with a queue whose pop returns "empty for
//! now" for a value that is claimed but not yet written (`queue.rs`): its pusher rings only
//! after the write, so the ring that follows finds the value published. The loom model below
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
mod loom_tests {
    use super::*;
    use crate::sync::queue::Queue;
    use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use loom::sync::Arc;

    /// A model eventfd: its counter.
    #[derive(Default)]
    struct Counter(AtomicU64);

    impl Bell for Arc<Counter> {
        fn write(&self) {
            self.0.fetch_add(1, SeqCst);
        }
        fn read(&self) {
            self.0.store(0, SeqCst);
        }
    }

    /// Two pushers into the real queue and a consumer that runs once if the bell rang (as the
    /// pool runs a handler when its eventfd is readable): after everyone is done, every value
    /// was delivered or a ring is pending, so the handle fires again and delivers the rest. A
    /// pusher preempted between its claim and its write is among the interleavings: the
    /// consumer's pop then says "empty for now", and the pusher's ring comes after its write.
    #[test]
    fn every_push_is_delivered_or_rung() {
        loom::model(|| {
            let bell = Arc::new(Counter::default());
            let door = Arc::new(Doorbell::new(bell.clone()));
            let q = Arc::new(Queue::new(2));
            let pushers: Vec<_> = (0..2u32)
                .map(|i| {
                    let (door, q) = (door.clone(), q.clone());
                    loom::thread::spawn(move || {
                        q.push(i).unwrap();
                        door.ring();
                    })
                })
                .collect();
            let mut delivered = 0;
            if bell.0.load(SeqCst) > 0 {
                door.answer();
                while q.pop().is_some() {
                    delivered += 1;
                }
            }
            for p in pushers {
                p.join().unwrap();
            }
            let mut left = 0;
            while q.pop().is_some() {
                left += 1;
            }
            assert_eq!(delivered + left, 2);
            assert!(
                left == 0 || bell.0.load(SeqCst) > 0,
                "{left} value(s) left with no ring pending"
            );
        });
    }
}
