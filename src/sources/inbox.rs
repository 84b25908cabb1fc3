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
//! The queue (`sync::queue`, a bounded lock-free queue in which no thread waits for another)
//! and, for [`Order::Priority`], the batch heap are allocated by [`Inbox::new`]. After that
//! neither side allocates or blocks: [`Poster::post`] is one lock-free push and at most one
//! nonblocking `write(2)` to an eventfd; the handler pops at most `batch` values per event, and
//! a pop that finds a value claimed by a poster that has not written it yet returns at once
//! (that poster's ring, after its write, brings the handler back): a lane thread never waits
//! for a poster, whatever that poster's priority. A full inbox hands the value back to the
//! sender ([`Full`]) and counts it ([`Poster::refused`], and the lane's `inbox_refused`).
//!
//! # The doorbell protocol (no lost wake-up, at most one eventfd write per drain)
//! The one doorbell of `sync::doorbell`: a poster pushes, then rings; the handler answers (reads
//! the eventfd, clears the flag), then pops up to `batch`. If values remain, it rings again
//! itself, so the handle fires again instead of the rest waiting for the next post. A
//! `deliver` that panics skips that last step: a guard rings instead while the thread unwinds
//! (the pool catches the panic and keeps the handle), so the values after the panicking one
//! are delivered by the next event. The doorbell's loom model checks the protocol with the
//! real queue, two posters and a handler.

use crate::engine::handler::{Context, Disposition, Event, EventHandler};
use crate::observe::metrics::Incident;
use crate::sync::doorbell::Doorbell;
pub use crate::sync::queue::Full;
use crate::sync::queue::Queue;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
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
    queue: Queue<Slot<T>>,
    bell: Doorbell,
    seq: AtomicU64,
    refused: AtomicU64,
}

impl<T> Shared<T> {
    fn ring(&self) {
        self.bell.ring();
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

    /// [`post`](Self::post), held between the claim of its place and its write by `between`
    /// (tests: a poster preempted there).
    #[cfg(test)]
    fn post_holding(&self, value: T, between: impl FnOnce()) {
        let s = &self.shared;
        let seq = s.seq.fetch_add(1, Relaxed);
        let slot = Slot {
            priority: 0,
            seq,
            value,
        };
        assert!(s.queue.push_holding(slot, between).is_ok());
        s.ring();
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
    /// Refusals already added to the lane's counter.
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
            queue: Queue::new(capacity),
            bell: Doorbell::eventfd()?,
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
        self.shared.bell.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let s = &*self.shared;
        s.bell.answer();
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
        let readable = eventfd(inbox).read().unwrap().is_some();
        if readable {
            // handle() reads the eventfd itself; put the count back.
            eventfd(inbox).write(1).unwrap();
            let _ = inbox.handle(&ev, &mut ctx);
        }
        readable
    }

    /// The inbox's eventfd, as the test reads and writes it around a handler run.
    fn eventfd<T, F>(inbox: &Inbox<T, F>) -> crate::sys::fd::EventFd {
        let fd = inbox.shared.bell.as_fd().try_clone_to_owned().unwrap();
        crate::sys::fd::EventFd::from_owned(fd)
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
            eventfd(&inbox).read().unwrap(),
            Some(1),
            "10 posts, 1 write"
        );
        eventfd(&inbox).write(1).unwrap();
        assert!(drain(&mut inbox));
        poster.post(1).unwrap();
        assert_eq!(
            eventfd(&inbox).read().unwrap(),
            Some(1),
            "rings again after a drain"
        );
    }

    /// Issue 28, finding 1: a poster held between the claim of its place and its write (as a
    /// poster preempted there would be, whatever its priority) does not hold up the lane. The
    /// handler's pop says "empty for now" and returns; the lane's only thread serves its other
    /// handle meanwhile; the held poster's ring, after its write, delivers both values. (With
    /// crossbeam's `ArrayQueue` the pop spun until the poster wrote: the lane served nothing.)
    #[test]
    fn a_held_poster_does_not_hold_up_the_lane() {
        use crate::{LaneConfig, Notifier, Policy, RtMode, Runtime, RuntimeConfig};
        use std::sync::atomic::AtomicU64;
        use std::sync::Barrier;
        struct Other(Notifier, Arc<AtomicU64>);
        impl EventHandler for Other {
            fn source(&self) -> BorrowedFd<'_> {
                self.0.as_fd()
            }
            fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
                self.1.fetch_add(self.0.take().unwrap_or(0), SeqCst);
                Disposition::Rearm
            }
        }
        let wait = |what: &str, f: &dyn Fn() -> bool| {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while !f() {
                assert!(std::time::Instant::now() < end, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        let mut g = LaneConfig::new("held", Policy::Other, 0);
        g.threads = 1;
        let mut rt = Runtime::new(RuntimeConfig {
            trace: Default::default(),
            rt: RtMode::BestEffort,
            lock_memory: false,
            lanes: vec![g],
            bands: Vec::new(),
        })
        .unwrap();
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let g2 = got.clone();
        let (inbox, poster) = Inbox::new(8, 8, Order::Fifo, move |v: u32, _| {
            g2.lock().unwrap().push(v)
        })
        .unwrap();
        let reg = rt.lane("held").unwrap().registry();
        reg.register(Box::new(inbox)).unwrap();
        let (n, hits) = (Notifier::new().unwrap(), Arc::new(AtomicU64::new(0)));
        let bell = n.as_fd().try_clone_to_owned().unwrap();
        reg.register(Box::new(Other(n, hits.clone()))).unwrap();
        rt.start().unwrap();

        let (claimed, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        let held = {
            let (poster, claimed, release) = (poster.clone(), claimed.clone(), release.clone());
            std::thread::spawn(move || {
                poster.post_holding(1, || {
                    claimed.wait();
                    release.wait();
                })
            })
        };
        claimed.wait();
        poster.post(2).unwrap(); // rings: the handler finds the held place first
        crate::sys::fd::EventFd::from_owned(bell).write(1).unwrap();
        wait("the lane's other handle was not served", &|| {
            hits.load(SeqCst) == 1
        });
        assert!(
            got.lock().unwrap().is_empty(),
            "2 waits behind the held place"
        );
        release.wait();
        held.join().unwrap();
        wait("the held poster's ring did not deliver", &|| {
            got.lock().unwrap().len() == 2
        });
        assert_eq!(*got.lock().unwrap(), [1, 2]);
        rt.shutdown().unwrap();
    }
}
