//! Lane inboxes: hand a value of type `T` to a lane (the pattern's "Alternative Event Sources
//! and Sinks" variant: a message queue as an event source).
//!
//! ```text
//!  any thread                          the lane's pool (one handler at a time, ONESHOT)
//!  ──────────                          ───────────────────────────────────────────────
//!  Poster::post(v) ──push──▶ [ bounded, preallocated queue ] ──pop ≤ batch──▶ deliver(v, ctx)
//!        │                                                         ▲
//!        └─ first post since the last drain: eventfd += 1 ─────────┘ (the handle fires)
//! ```
//!
//! # Real-time contract
//! The queue (a lock-free `crossbeam_queue::ArrayQueue`) and, for [`Order::Priority`], the
//! batch heap are allocated by [`Inbox::new`]. After that neither side allocates or blocks:
//! [`Poster::post`] is one lock-free push and at most one nonblocking `write(2)` to an eventfd;
//! the handler pops at most `batch` values per event. A full inbox hands the value back to the
//! sender ([`Full`]) and counts it ([`Poster::refused`], and the group's `inbox_refused`).
//!
//! # The doorbell protocol (no lost wake-up, at most one eventfd write per drain)
//! `rung` is true while a wake-up is pending (written to the eventfd, not yet drained).
//! * Poster: push the value, then `swap(rung, true)`; only the poster that saw `false` writes
//!   the eventfd.
//! * Handler: read the eventfd (clears it), `store(rung, false)`, then pop up to `batch`. If
//!   values remain, ring again itself (`swap(rung, true)`, write if it was false), so the
//!   re-armed handle fires again instead of the rest waiting for the next post.
//!
//! * A `deliver` that panics skips that last step: a guard rings instead while the thread
//!   unwinds (the pool catches the panic and re-arms the handle), so the values after the
//!   panicking one are delivered by the next event.
//!
//! Both sides order their two steps with `SeqCst` (push-then-swap against store-then-pop), so
//! for every value at least one of them sees the other: either the handler's pops find it, or
//! the poster's swap finds `false` and rings. A value is therefore never left in the queue with
//! no wake-up pending. The loom model `loom_tests::every_post_is_delivered` checks this with
//! two posters against the real `Doorbell`.

use crate::engine::handler::{Context, Disposition, Event, EventHandler};
use crate::observe::metrics::Incident;
use crate::sys::fd::EventFd;
use crossbeam_queue::ArrayQueue;
#[cfg(loom)]
use loom::sync::atomic::AtomicBool;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
#[cfg(not(loom))]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

/// In which order a drained batch is delivered.
///
/// # Examples
/// ```
/// use lfrt::inbox::{Inbox, Order};
/// let (inbox, poster) = Inbox::new(64, 8, Order::Priority, |alarm: &str, _ctx| {
///     let _ = alarm; // within a batch: "urgent" before "routine"
/// })?;
/// poster.post_with_priority(1, "routine").unwrap();
/// poster.post_with_priority(9, "urgent").unwrap();
/// # drop(inbox);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// As posted (per poster; posts from different threads interleave as they reached the
    /// queue).
    #[default]
    Fifo,
    /// Highest [`Poster::post_with_priority`] priority first, ties as posted. The order holds
    /// within each drained batch (at most `batch` values): a value posted after a batch was
    /// taken waits for the next one, whatever its priority.
    Priority,
}

/// The value a full inbox handed back to its sender.
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
        f.write_str("the lane inbox is full; the value was handed back")
    }
}

impl<T> std::error::Error for Full<T> {}

/// The wake-up side of an inbox: the `rung` flag of the doorbell protocol (module docs).
#[derive(Debug, Default)]
pub(crate) struct Doorbell {
    rung: AtomicBool,
}

impl Doorbell {
    /// After a push: true if the caller must write the eventfd.
    pub(crate) fn after_push(&self) -> bool {
        !self.rung.swap(true, SeqCst)
    }

    /// Before popping (after the eventfd was read): the next push rings again.
    pub(crate) fn before_drain(&self) {
        self.rung.store(false, SeqCst);
    }
}

/// Rings the doorbell if dropped while the thread unwinds: a panicking `deliver` skips the
/// handler's own re-ring. It rings even if nothing is left (one spurious event, which drains
/// nothing and rings no more), so no value is ever left without a wake-up pending.
struct RingIfUnwinding<'a, T>(&'a Shared<T>);

impl<T> Drop for RingIfUnwinding<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.ring();
        }
    }
}

/// A value in the queue: its priority and its place in posting order.
struct Slot<T> {
    priority: u8,
    seq: u64,
    value: T,
}

impl<T> PartialEq for Slot<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl<T> Eq for Slot<T> {}
impl<T> PartialOrd for Slot<T> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Slot<T> {
    /// Max-heap order: higher priority first, then the earlier post.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

struct Shared<T> {
    queue: ArrayQueue<Slot<T>>,
    bell: Doorbell,
    eventfd: EventFd,
    seq: AtomicU64,
    refused: AtomicU64,
}

impl<T> Shared<T> {
    fn ring(&self) {
        if self.bell.after_push() {
            // Nonblocking; the counter cannot overflow (at most one write per drain).
            let _ = self.eventfd.write(1);
        }
    }
}

/// The sending side of an inbox: cheap to clone, usable from any thread (real-time or not,
/// inside the runtime or outside it).
///
/// # Examples
/// ```
/// use lfrt::inbox::{Inbox, Order};
/// let (inbox, poster) = Inbox::new(1024, 32, Order::Fifo, |n: u64, _ctx| {
///     let _ = n;
/// })?;
/// let producers: Vec<_> = (0..2u64)
///     .map(|i| {
///         let p = poster.clone();
///         std::thread::spawn(move || p.post(i).is_ok())
///     })
///     .collect();
/// for p in producers {
///     assert!(p.join().unwrap());
/// }
/// # drop(inbox);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Poster<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Poster<T> {
    fn clone(&self) -> Self {
        Poster {
            shared: self.shared.clone(),
        }
    }
}

impl<T> fmt::Debug for Poster<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Poster { .. }")
    }
}

impl<T: Send> Poster<T> {
    /// Posts `value` at priority 0.
    ///
    /// # Errors
    /// [`Full`] with the value when the inbox holds `capacity` values; the refusal is counted.
    ///
    /// # Real-time safety
    /// Lock-free; no allocation; at most one nonblocking `write(2)`.
    ///
    /// Example: [`Poster`].
    pub fn post(&self, value: T) -> Result<(), Full<T>> {
        self.post_with_priority(0, value)
    }

    /// Posts `value` with a priority, used by an inbox built with [`Order::Priority`] (ignored
    /// with [`Order::Fifo`]).
    ///
    /// # Errors
    /// As [`post`](Self::post).
    ///
    /// Example: [`Order`].
    pub fn post_with_priority(&self, priority: u8, value: T) -> Result<(), Full<T>> {
        let s = &self.shared;
        let seq = s.seq.fetch_add(1, Relaxed);
        match s.queue.push(Slot {
            priority,
            seq,
            value,
        }) {
            Ok(()) => {
                s.ring();
                Ok(())
            }
            Err(slot) => {
                s.refused.fetch_add(1, Relaxed);
                Err(Full(slot.value))
            }
        }
    }

    /// Values refused so far because the inbox was full.
    ///
    /// Example: [`Full`].
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Relaxed)
    }
}

/// A lane inbox: an [`EventHandler`] that delivers posted values to a closure on the lane's
/// pool threads. Register it with the lane's [`Registry`](crate::Registry); post with the
/// [`Poster`] returned beside it.
///
/// # Examples
/// ```
/// use lfrt::inbox::{Inbox, Order};
/// let (inbox, poster) = Inbox::new(1024, 32, Order::Fifo, |order: u64, _ctx| {
///     // runs on a pool thread of the lane the inbox is registered with
///     let _ = order;
/// })?;
/// poster.post(42).unwrap();
/// // lane.registry().register(Box::new(inbox))?;
/// # drop(inbox);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Inbox<T, F> {
    shared: Arc<Shared<T>>,
    deliver: F,
    batch: usize,
    order: Order,
    /// Preallocated to `batch` for [`Order::Priority`]; never grows past it.
    heap: BinaryHeap<Slot<T>>,
    /// Refusals already added to the group's counter.
    reported: u64,
}

impl<T, F> fmt::Debug for Inbox<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Inbox { .. }")
    }
}

impl<T, F> Inbox<T, F>
where
    T: Send + 'static,
    F: FnMut(T, &mut Context) + Send + 'static,
{
    /// An inbox of `capacity` values delivering at most `batch` per event, in `order`.
    ///
    /// # Errors
    /// `InvalidInput` if `capacity` or `batch` is 0; the eventfd's error if it cannot be
    /// created.
    ///
    /// Example: [`Inbox`].
    pub fn new(
        capacity: usize,
        batch: usize,
        order: Order,
        deliver: F,
    ) -> io::Result<(Inbox<T, F>, Poster<T>)> {
        if capacity == 0 || batch == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an inbox needs a capacity and a batch of at least 1",
            ));
        }
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity),
            bell: Doorbell::default(),
            eventfd: EventFd::new()?,
            seq: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let heap = match order {
            Order::Fifo => BinaryHeap::new(),
            Order::Priority => BinaryHeap::with_capacity(batch),
        };
        let inbox = Inbox {
            shared: shared.clone(),
            deliver,
            batch,
            order,
            heap,
            reported: 0,
        };
        Ok((inbox, Poster { shared }))
    }
}

impl<T, F> EventHandler for Inbox<T, F>
where
    T: Send + 'static,
    F: FnMut(T, &mut Context) + Send + 'static,
{
    fn source(&self) -> BorrowedFd<'_> {
        self.shared.eventfd.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let s = &*self.shared;
        let _ = s.eventfd.read();
        s.bell.before_drain();
        // From here until the re-ring below, values may remain with no wake-up pending. If
        // `deliver` panics, the guard rings on the way out, so the rest of the queue (and,
        // for `Order::Priority`, of the batch heap, which stays in `self`) is delivered by the
        // next event instead of waiting for an unrelated post.
        let _unwinding = RingIfUnwinding(s);
        match self.order {
            Order::Fifo => {
                for _ in 0..self.batch {
                    match s.queue.pop() {
                        Some(slot) => (self.deliver)(slot.value, ctx),
                        None => break,
                    }
                }
            }
            Order::Priority => {
                while self.heap.len() < self.batch {
                    match s.queue.pop() {
                        Some(slot) => self.heap.push(slot),
                        None => break,
                    }
                }
                while let Some(slot) = self.heap.pop() {
                    (self.deliver)(slot.value, ctx);
                }
            }
        }
        if !s.queue.is_empty() {
            s.ring();
        }
        let refused = s.refused.load(Relaxed);
        if refused != self.reported {
            ctx.count(Incident::InboxRefused, refused - self.reported);
            self.reported = refused;
        }
        // The eventfd was read (emptied); values left rang it again above, which reports the
        // handle once more.
        ctx.set_drained();
        Disposition::Rearm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::handle_set::Token;
    use crate::engine::handler::{Handles, Registry};

    /// Runs the inbox's handler once, as a pool thread would when its eventfd is readable.
    fn drain<T, F>(inbox: &mut Inbox<T, F>) -> bool
    where
        T: Send + 'static,
        F: FnMut(T, &mut Context) + Send + 'static,
    {
        let registry = Registry {
            set: Arc::new(Handles::new(4).unwrap()),
        };
        let mut ctx = Context::new(64, 0, 0, 0, 0, registry);
        let ev = Event {
            token: Token::from_raw(0),
            readiness: 0,
            woke_ns: 0,
        };
        let readable = inbox.shared.eventfd.read().unwrap().is_some();
        if readable {
            // handle() reads the eventfd itself; put the count back.
            inbox.shared.eventfd.write(1).unwrap();
            let _ = inbox.handle(&ev, &mut ctx);
        }
        readable
    }

    #[test]
    fn a_full_inbox_hands_the_value_back_and_counts_it() {
        let (_inbox, poster) = Inbox::new(2, 8, Order::Fifo, |_: String, _| {}).unwrap();
        poster.post("a".into()).unwrap();
        poster.post("b".into()).unwrap();
        assert_eq!(poster.post("c".into()), Err(Full("c".to_string())));
        assert_eq!(poster.refused(), 1);
    }

    #[test]
    fn fifo_batches_are_bounded_and_the_rest_rings_again() {
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        let (mut inbox, poster) = Inbox::new(16, 3, Order::Fifo, move |v: u32, _| {
            g.lock().unwrap().push(v)
        })
        .unwrap();
        for i in 0..7 {
            poster.post(i).unwrap();
        }
        assert!(drain(&mut inbox));
        assert_eq!(*got.lock().unwrap(), vec![0, 1, 2], "one batch of 3");
        assert!(drain(&mut inbox), "values remain: the handler rang again");
        assert!(drain(&mut inbox));
        assert_eq!(*got.lock().unwrap(), (0..7).collect::<Vec<_>>());
        assert!(!drain(&mut inbox), "drained: no wake-up pending");
    }

    #[test]
    fn priority_order_within_a_batch() {
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let g = got.clone();
        let (mut inbox, poster) = Inbox::new(16, 8, Order::Priority, move |v: &str, _| {
            g.lock().unwrap().push(v)
        })
        .unwrap();
        for (p, v) in [
            (1, "low-1"),
            (9, "high-1"),
            (5, "mid"),
            (9, "high-2"),
            (1, "low-2"),
        ] {
            poster.post_with_priority(p, v).unwrap();
        }
        assert!(drain(&mut inbox));
        assert_eq!(
            *got.lock().unwrap(),
            vec!["high-1", "high-2", "mid", "low-1", "low-2"]
        );
    }

    /// Runs one drain that may panic (as the pool's `catch_unwind` would); true if it did.
    fn drain_catching<T, F>(inbox: &mut Inbox<T, F>) -> (bool, bool)
    where
        T: Send + 'static,
        F: FnMut(T, &mut Context) + Send + 'static,
    {
        let mut readable = false;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            readable = drain(inbox);
        }))
        .is_err();
        (readable || panicked, panicked)
    }

    /// A `deliver` that panics on 3, with 0..10 posted in one burst: every other value is
    /// still delivered, each exactly once, without another post (the panic must not strand
    /// the rest of the queue, nor, with `Order::Priority`, the rest of the batch heap).
    #[test]
    fn a_panicking_delivery_does_not_strand_the_rest() {
        for order in [Order::Fifo, Order::Priority] {
            let got = Arc::new(std::sync::Mutex::new(Vec::new()));
            let g = got.clone();
            let (mut inbox, poster) = Inbox::new(64, 4, order, move |v: u32, _| {
                if v == 3 {
                    panic!("deliver fails on 3");
                }
                g.lock().unwrap().push(v)
            })
            .unwrap();
            for i in 0..10 {
                poster.post(i).unwrap();
            }
            let mut panics = 0;
            // Bounded: 10 values, batches of 4, one panic: a few drains at most.
            for _ in 0..20 {
                let (ran, panicked) = drain_catching(&mut inbox);
                panics += panicked as u32;
                if !ran {
                    break;
                }
            }
            let mut got = got.lock().unwrap().clone();
            got.sort_unstable();
            assert_eq!(panics, 1, "{order:?}");
            assert_eq!(got, vec![0, 1, 2, 4, 5, 6, 7, 8, 9], "{order:?}");
            assert!(inbox.heap.is_empty() && inbox.shared.queue.is_empty());
        }
    }

    #[test]
    fn one_eventfd_write_per_drain() {
        let (mut inbox, poster) = Inbox::new(64, 64, Order::Fifo, |_: u8, _| {}).unwrap();
        for _ in 0..10 {
            poster.post(1).unwrap();
        }
        assert_eq!(
            inbox.shared.eventfd.read().unwrap(),
            Some(1),
            "10 posts, 1 write"
        );
        inbox.shared.eventfd.write(1).unwrap();
        assert!(drain(&mut inbox));
        poster.post(1).unwrap();
        assert_eq!(
            inbox.shared.eventfd.read().unwrap(),
            Some(1),
            "rings again after a drain"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::Doorbell;
    use loom::sync::atomic::{AtomicU64, Ordering::*};
    use loom::sync::{Arc, Mutex};
    use std::collections::VecDeque;

    /// Two posters and one draining handler, with a model queue and a model eventfd counter
    /// around the real [`Doorbell`]: after everyone is done, either the queue is empty or a
    /// wake-up is pending (so the handle will fire and deliver the rest).
    #[test]
    fn every_post_is_delivered() {
        loom::model(|| {
            let bell = Arc::new(Doorbell::default());
            let queue = Arc::new(Mutex::new(VecDeque::new()));
            let eventfd = Arc::new(AtomicU64::new(0));
            let posters: Vec<_> = (0..2u32)
                .map(|i| {
                    let (bell, queue, eventfd) = (bell.clone(), queue.clone(), eventfd.clone());
                    loom::thread::spawn(move || {
                        queue.lock().unwrap().push_back(i);
                        if bell.after_push() {
                            eventfd.fetch_add(1, SeqCst);
                        }
                    })
                })
                .collect();
            // One handler run, as the pool would do it when the eventfd is readable.
            let mut delivered = 0;
            if eventfd.swap(0, SeqCst) > 0 {
                bell.before_drain();
                while queue.lock().unwrap().pop_front().is_some() {
                    delivered += 1;
                }
            }
            for p in posters {
                p.join().unwrap();
            }
            let left = queue.lock().unwrap().len();
            assert_eq!(delivered + left, 2);
            assert!(
                left == 0 || eventfd.load(SeqCst) > 0,
                "{left} value(s) left with no wake-up pending"
            );
        });
    }
}
