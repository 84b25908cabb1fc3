//! A bounded, preallocated multi-producer multi-consumer queue in which no thread ever waits for
//! another: Dmitry Vyukov's bounded MPMC queue.
//!
//! Hand-written (real-time constraint): a lane thread pops from queues that threads of any
//! priority push to (wakers, posters, spawners). crossbeam's `ArrayQueue` makes a popper spin
//! (`Backoff::snooze`) while a pusher has claimed a slot but not yet written it; if that pusher
//! is a `SCHED_OTHER` thread preempted on the popper's CPU, a `SCHED_FIFO` popper spins until the
//! kernel's RT throttle stops it (about 0.95 s), or for ever without throttling. Here a pop that
//! finds the next slot claimed but not written returns `None`, "empty for now", at once; the
//! pusher rings its consumer's doorbell after the write (`sync/doorbell.rs`), which wakes the
//! consumer again. `heapless::mpmc` is the same algorithm, sized at compile time; these queues
//! are sized by a lane's configuration.
//!
//! ```text
//!   cells: [seq | value] × capacity          tail: next position to push
//!                                            head: next position to pop
//!   a cell's seq, for the position p whose turn it is (cell = p % capacity):
//!     2p       free for the push at p
//!     2p + 1   written by the push at p, for the pop at p
//!   push at pos:
//!     seq == 2pos       free: CAS tail pos→pos+1, write, seq = 2pos + 1 (published)
//!     seq <  2pos       full (the value of the lap before not popped yet): Err, at once
//!   pop at pos:
//!     seq == 2pos + 1   published: CAS head pos→pos+1, read, seq = 2(pos + capacity)
//!     seq <  2pos + 1   empty, or claimed by a pusher that has not written yet: None, at once
//! ```
//!
//! The sequence counts in half-steps so that "written for p" (2p + 1) never equals "free for
//! the next lap" (2(p + capacity)); with whole steps the two meet when `capacity` is 1, and a
//! push then overwrites a value nobody popped (Vyukov's original needs `capacity` ≥ 2).
//!
//! Invariants (the loom models in `queue/loom_tests.rs` check them):
//! * **each value is popped exactly once**: a position is claimed by one compare-and-swap on
//!   `tail` (push) and on `head` (pop); a cell's sequence says whose turn it is, and only the
//!   claimant of that turn touches the value;
//! * **no thread waits for another**: push and pop retry only when their compare-and-swap lost
//!   to another pusher or popper that moved the position on (progress was made); a claimed but
//!   unwritten cell makes a pop return `None`, an unread cell makes a push return `Err`;
//! * **nothing is lost**: a value whose push returned `Ok` is published (its sequence stored
//!   with release), and is returned by a later pop once every earlier position is published.
//!
//! Positions are `usize` and never wrap in practice (2⁶³ pushes).

use crate::sync::atomic::{AtomicUsize, Ordering::*};
use crate::sync::cell::UnsafeCell;
use std::fmt;
use std::mem::MaybeUninit;

/// The value a full lane inbox ([`inbox`](crate::inbox)) or task channel
/// ([`task::channel`](crate::task::channel)) handed back to its sender.
///
/// # Examples
/// ```
/// use lfrt::inbox::{Full, Inbox, Order};
/// let (inbox, poster) = Inbox::new(1, 1, Order::Fifo, |_: u32, _ctx| {})?;
/// poster.post(1).unwrap();
/// assert_eq!(poster.post(2), Err(Full(2))); // nothing is lost: the sender keeps it
/// assert_eq!(poster.refused(), 1);
/// # drop(inbox);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Full(_)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the lane's queue is full; the value was handed back")
    }
}

impl<T> std::error::Error for Full<T> {}

struct Cell<T> {
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded MPMC queue of `capacity` values, allocated at construction.
pub(crate) struct Queue<T> {
    cells: Box<[Cell<T>]>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

// SAFETY: values move between threads through the queue (`T: Send`); a cell's value is touched
// only by the one thread whose compare-and-swap claimed that cell's turn (module docs).
unsafe impl<T: Send> Send for Queue<T> {}
// SAFETY: as above: `&Queue` hands a value to exactly one popper.
unsafe impl<T: Send> Sync for Queue<T> {}

impl<T> Queue<T> {
    /// A queue of `capacity` values (at least 1).
    ///
    /// # Panics
    /// If `capacity` is 0.
    pub(crate) fn new(capacity: usize) -> Queue<T> {
        assert!(capacity > 0, "a queue needs a capacity of at least 1");
        Queue {
            cells: (0..capacity)
                .map(|i| Cell {
                    seq: AtomicUsize::new(i.wrapping_mul(2)),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Appends `value`; hands it back if the queue is full (or its next cell is still being
    /// read by a popper). Never waits.
    pub(crate) fn push(&self, value: T) -> Result<(), T> {
        self.push_with(value, || {})
    }

    /// [`push`](Self::push), running `between` after the cell is claimed and before the value
    /// is written: a test's way to hold a pusher where a preemption hurts most.
    #[cfg(test)]
    pub(crate) fn push_holding(&self, value: T, between: impl FnOnce()) -> Result<(), T> {
        self.push_with(value, between)
    }

    fn push_with(&self, value: T, between: impl FnOnce()) -> Result<(), T> {
        let cap = self.cells.len();
        let mut pos = self.tail.load(Relaxed);
        loop {
            let cell = &self.cells[pos % cap];
            let seq = cell.seq.load(Acquire);
            let dif = seq.wrapping_sub(pos.wrapping_mul(2)) as isize;
            if dif == 0 {
                match self
                    .tail
                    .compare_exchange_weak(pos, pos.wrapping_add(1), Relaxed, Relaxed)
                {
                    Ok(_) => {
                        between();
                        // SAFETY: the CAS on `tail` made this thread the only one to write
                        // this cell in this turn; no popper reads it before `seq` says so.
                        cell.value.with_mut(|v| unsafe { (*v).write(value) });
                        cell.seq.store(pos.wrapping_mul(2).wrapping_add(1), Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return Err(value);
            } else {
                pos = self.tail.load(Relaxed);
            }
        }
    }

    /// Takes the oldest value; `None` if the queue is empty, or if the oldest position is
    /// claimed by a pusher that has not written it yet (its doorbell comes after the write).
    /// Never waits.
    pub(crate) fn pop(&self) -> Option<T> {
        let cap = self.cells.len();
        let mut pos = self.head.load(Relaxed);
        loop {
            let cell = &self.cells[pos % cap];
            let seq = cell.seq.load(Acquire);
            let dif = seq.wrapping_sub(pos.wrapping_mul(2).wrapping_add(1)) as isize;
            if dif == 0 {
                match self
                    .head
                    .compare_exchange_weak(pos, pos.wrapping_add(1), Relaxed, Relaxed)
                {
                    Ok(_) => {
                        // SAFETY: `seq == pos + 1` (acquire) says the value of this turn was
                        // written; the CAS on `head` made this thread its only reader.
                        let value = cell.value.with_mut(|v| unsafe { (*v).assume_init_read() });
                        cell.seq
                            .store(pos.wrapping_add(cap).wrapping_mul(2), Release);
                        return Some(value);
                    }
                    Err(now) => pos = now,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = self.head.load(Relaxed);
            }
        }
    }

    /// How many values it holds (a racy look: pushes and pops in flight count or not).
    pub(crate) fn len(&self) -> usize {
        let tail = self.tail.load(Acquire);
        let head = self.head.load(Acquire);
        tail.wrapping_sub(head).min(self.cells.len())
    }

    /// Whether no value is published at the head (a racy look, for "anything left?").
    pub(crate) fn is_empty(&self) -> bool {
        let pos = self.head.load(Acquire);
        let seq = self.cells[pos % self.cells.len()].seq.load(Acquire);
        seq != pos.wrapping_mul(2).wrapping_add(1)
    }
}

impl<T> Drop for Queue<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("capacity", &self.cells.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    #[test]
    fn fifo_bounded_and_reusable() {
        let q = Queue::new(3);
        for round in 0..5u32 {
            for i in 0..3 {
                assert_eq!(q.push(round * 10 + i), Ok(()));
            }
            assert_eq!(q.push(99), Err(99), "full at its capacity");
            for i in 0..3 {
                assert_eq!(q.pop(), Some(round * 10 + i));
            }
            assert_eq!(q.pop(), None);
            assert!(q.is_empty());
        }
    }

    /// Capacity 1, where Vyukov's whole-step sequence lets a push overwrite an unpopped value
    /// (and a pop then spins): a second push is refused until the first value is popped.
    #[test]
    fn capacity_one_holds_one() {
        let q = Queue::new(1);
        for round in 0..4u32 {
            assert_eq!(q.push(round), Ok(()));
            assert_eq!(q.push(99), Err(99), "full at 1");
            assert_eq!(q.pop(), Some(round));
            assert_eq!(q.pop(), None);
        }
    }

    #[test]
    fn values_left_are_dropped_with_the_queue() {
        let v = Arc::new(());
        let q = Queue::new(4);
        q.push(v.clone()).unwrap();
        q.push(v.clone()).unwrap();
        drop(q);
        assert_eq!(Arc::strong_count(&v), 1);
    }

    /// A pusher held between its claim and its write (as a preempted one would be): a pop
    /// returns `None` at once instead of waiting for it, pushes after it still succeed, and
    /// once the held pusher writes, every value comes out in order.
    #[test]
    fn a_pop_never_waits_for_a_held_pusher() {
        let q = Arc::new(Queue::new(8));
        let (claimed, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let held = {
            let (q, claimed, release) = (q.clone(), claimed.clone(), release.clone());
            std::thread::spawn(move || {
                q.push_holding(1u32, || {
                    claimed.wait();
                    release.wait();
                })
            })
        };
        claimed.wait();
        assert_eq!(
            q.pop(),
            None,
            "empty for now: the oldest cell is claimed, not written"
        );
        q.push(2).unwrap();
        assert_eq!(
            q.pop(),
            None,
            "still behind the held pusher, and still no wait"
        );
        release.wait();
        assert_eq!(held.join().unwrap(), Ok(()));
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(1), Some(2), None));
    }

    /// 4 pushers and 2 poppers, 20,000 values: each popped exactly once.
    #[test]
    fn stress_every_value_once() {
        const PER: usize = 5_000;
        let q = Arc::new(Queue::new(64));
        let seen = Arc::new(
            (0..4 * PER)
                .map(|_| AtomicBool::new(false))
                .collect::<Vec<_>>(),
        );
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pushers: Vec<_> = (0..4)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let mut v = p * PER + i;
                        while let Err(back) = q.push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let (q, seen, done) = (q.clone(), seen.clone(), done.clone());
                std::thread::spawn(move || {
                    while done.load(Relaxed) < 4 * PER {
                        match q.pop() {
                            Some(v) => {
                                assert!(!seen[v].swap(true, Relaxed), "{v} popped twice");
                                done.fetch_add(1, Relaxed);
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                })
            })
            .collect();
        for t in pushers.into_iter().chain(poppers) {
            t.join().unwrap();
        }
        assert!(seen.iter().all(|s| s.load(Relaxed)));
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
