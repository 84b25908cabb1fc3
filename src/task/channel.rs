//! Lane inboxes for tasks, and reply slots: how any thread (a tokio task, a plain thread,
//! another lane) hands values to a lane task and awaits an answer computed there.
//!
//! ```text
//!  tokio task / thread / lane             lane task
//!  ───────────────────────────            ─────────
//!  Sender::send(v).await ──push──▶ [bounded queue] ──pop──▶ Receiver::recv().await
//!     full: waits (waker in a bounded        │ a pop wakes one waiting sender
//!     preallocated waiter queue)             ▼
//!  ReplyReceiver.await ◀──────────── ReplySender::send(answer)  (a preallocated reply slot)
//! ```
//!
//! # No lost wake-up
//! *Receiver*: it stores its waker (under a priority-inheriting lock), then looks at the queue
//! again; a sender pushes, then takes the waker under the same lock. Either the receiver's
//! second look finds the value, or the sender finds the waker.
//! *Senders*: a sender that found the queue full registers its waker in the waiter list under
//! its own id, issues a `SeqCst` fence and tries again; the receiver pops a value, issues a
//! `SeqCst` fence and wakes the oldest registered sender. Either the retry finds the free
//! place, or the receiver finds the waker. A sender that got its place, or is dropped while it
//! waits, takes its own entry out of the list (its id), so a pop never spends its wake on a
//! sender that no longer waits. A sender whose waker does not fit the list (more waiting
//! senders than `capacity`) tries again 100 µs later on its lane's timer (a lane task, found
//! from the task being polled) or yields (any other executor).
//!
//! # Real-time contract
//! The queue (`sync::queue`: a pop never waits for a sender that has not finished writing),
//! the waiter list and the reply slots are allocated by [`channel`] and [`ReplySlots::new`].
//! Sending, receiving and replying make no allocation; a lane waker's clone is an `Arc`
//! count, and a tokio waker's clone is one too. A lane thread never wakes a tokio waker
//! itself: a reply, or a wake of a waiting tokio sender, goes through the runtime's relay
//! (`relay.rs`).

use crate::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering::*};
use crate::sync::free::FreeSlots;
use crate::sync::queue::Queue;
use crate::sync::Mutex;
use std::cell::UnsafeCell;
use std::fmt;
use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

pub use crate::sync::queue::Full;
use crate::sys;
use crate::task::executor::wake;
use crate::task::time::LaneTimer;

/// How long a lane task whose waker found no place among the waiting senders waits before it
/// tries again.
const RETRY_NS: u64 = 100_000;

struct Chan<T> {
    queue: Queue<T>,
    receiver: Mutex<Option<Waker>>,
    /// Senders waiting for a place, oldest first, each under its own id.
    senders: Mutex<Waiters>,
    /// Live `Sender`s; the receiver sees the end when it drops to 0 and the queue is empty.
    live_senders: AtomicUsize,
    refused: AtomicU64,
}

impl<T> Chan<T> {
    fn wake_receiver(&self) {
        let w = self.receiver.lock().take();
        if let Some(w) = w {
            // The receiver is a lane task: its wake is lock-free, from any thread.
            wake(w);
        }
    }

    /// Pops a value and, if it took one, wakes the oldest waiting sender.
    fn take(&self) -> Option<T> {
        let v = self.queue.pop();
        if v.is_some() {
            fence(SeqCst);
            let w = self.senders.lock().pop();
            if let Some(w) = w {
                // A tokio sender is woken through the relay when this is a pool thread.
                wake(w);
            }
        }
        v
    }
}

/// The senders waiting for a place: `(id, waker)` in the order they registered, preallocated to
/// the channel's capacity. Under the channel's priority-inheriting lock.
struct Waiters {
    list: Vec<(u64, Waker)>,
    next_id: u64,
}

impl Waiters {
    fn new(capacity: usize) -> Waiters {
        Waiters {
            list: Vec::with_capacity(capacity),
            next_id: 1,
        }
    }

    /// Registers (or updates) the waker of the sender with id `id` (0: not registered yet);
    /// returns its id, or `None` if the list is full.
    fn register(&mut self, id: u64, w: &Waker) -> Option<u64> {
        if let Some(e) = self.list.iter_mut().find(|(i, _)| *i == id && id != 0) {
            if !e.1.will_wake(w) {
                e.1 = w.clone();
            }
            return Some(id);
        }
        if self.list.len() == self.list.capacity() {
            return None; // never grows past its capacity
        }
        let id = self.next_id;
        self.next_id += 1;
        self.list.push((id, w.clone()));
        Some(id)
    }

    /// Takes sender `id` out of the list (it got its place, or is dropped); its waker is
    /// returned to be dropped outside the lock.
    fn remove(&mut self, id: u64) -> Option<Waker> {
        let at = self.list.iter().position(|(i, _)| *i == id)?;
        Some(self.list.remove(at).1)
    }

    /// The oldest waiting sender's waker.
    fn pop(&mut self) -> Option<Waker> {
        (!self.list.is_empty()).then(|| self.list.remove(0).1)
    }
}

/// A bounded, preallocated channel of `capacity` values into a lane task.
///
/// # Panics
/// If `capacity` is 0.
///
/// # Examples
/// ```no_run
/// # fn f(lane: lfrt::Lane) {
/// let (tx, mut rx) = lfrt::task::channel::<u64>(64);
/// lane.spawn(async move {
///     while let Some(order) = rx.recv().await {
///         let _ = order; // on the lane, at its priority
///     }
/// })
/// .unwrap();
/// tx.try_send(7).unwrap(); // from any thread; `tx.send(7).await` from a tokio task
/// # }
/// ```
pub fn channel<T: Send>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(capacity > 0, "a channel needs a capacity of at least 1");
    let chan = Arc::new(Chan {
        queue: Queue::new(capacity),
        receiver: Mutex::new(None),
        senders: Mutex::new(Waiters::new(capacity)),
        live_senders: AtomicUsize::new(1),
        refused: AtomicU64::new(0),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// The sending side of a [`channel`]: cheap to clone, usable from any thread or executor.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.live_senders.fetch_add(1, Relaxed);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.chan.live_senders.fetch_sub(1, AcqRel) == 1 {
            self.chan.wake_receiver();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T: Send> Sender<T> {
    /// Sends without waiting.
    ///
    /// # Errors
    /// [`Full`] with the value when the channel holds `capacity` values; counted in
    /// [`refused`](Self::refused).
    pub fn try_send(&self, value: T) -> Result<(), Full<T>> {
        match self.chan.queue.push(value) {
            Ok(()) => {
                self.chan.wake_receiver();
                Ok(())
            }
            Err(v) => {
                self.chan.refused.fetch_add(1, Relaxed);
                Err(Full(v))
            }
        }
    }

    /// Sends, waiting while the channel is full.
    pub fn send(&self, value: T) -> Sending<'_, T> {
        Sending {
            chan: &self.chan,
            value: Some(value),
            waiter: 0,
            retry: LaneTimer::default(),
        }
    }

    /// Values refused by [`try_send`](Self::try_send) because the channel was full.
    pub fn refused(&self) -> u64 {
        self.chan.refused.load(Relaxed)
    }
}

/// The future of [`Sender::send`].
#[must_use = "futures do nothing unless awaited"]
pub struct Sending<'a, T> {
    chan: &'a Chan<T>,
    value: Option<T>,
    /// Its id in the channel's waiter list while it waits there (0: not registered).
    waiter: u64,
    /// Its lane timer entry while it waits for a retry (a full waiter list).
    retry: LaneTimer,
}

impl<T> Sending<'_, T> {
    /// The value found its place: leave the waiter list, and wake the receiver.
    fn sent(&mut self) -> Poll<()> {
        self.leave();
        self.retry.cancel();
        self.chan.wake_receiver();
        Poll::Ready(())
    }

    fn leave(&mut self) {
        if self.waiter != 0 {
            let w = self
                .chan
                .senders
                .lock()
                .remove(std::mem::take(&mut self.waiter));
            drop(w); // outside the lock
        }
    }
}

/// A send dropped while it waits takes its waker out of the waiter list, so a pop wakes a
/// sender that still waits.
impl<T> Drop for Sending<'_, T> {
    fn drop(&mut self) {
        self.leave();
    }
}

impl<T> fmt::Debug for Sending<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sending { .. }")
    }
}

impl<T> Unpin for Sending<'_, T> {}

impl<T: Send> Future for Sending<'_, T> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = &mut *self;
        let v = me.value.take().expect("Send polled after completion");
        let v = match me.chan.queue.push(v) {
            Ok(()) => return me.sent(),
            Err(v) => v,
        };
        let registered = me.chan.senders.lock().register(me.waiter, cx.waker());
        match registered {
            Some(id) => me.waiter = id,
            None => {
                // More waiting senders than places: try again later. A lane task retries
                // after RETRY_NS on its lane's timer, found from the task being polled (an
                // immediate self-wake would spin at the lane's FIFO priority and could starve
                // the receiver); anything else yields.
                if me.retry.poll_until(sys::now_ns() + RETRY_NS, cx).is_none() {
                    cx.waker().wake_by_ref();
                }
                me.value = Some(v);
                return Poll::Pending;
            }
        }
        fence(SeqCst);
        match me.chan.queue.push(v) {
            Ok(()) => me.sent(),
            Err(v) => {
                me.value = Some(v);
                Poll::Pending
            }
        }
    }
}

/// The receiving side of a [`channel`]: await it in one lane task.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}

impl<T: Send> Receiver<T> {
    /// The next value; `None` once every sender is gone and the channel is empty.
    pub fn recv(&mut self) -> Recv<'_, T> {
        Recv { chan: &self.chan }
    }

    /// The next value if one is there (or "empty for now": a sender that has not finished
    /// writing is never waited for; it wakes the receiver when it has).
    pub fn try_recv(&mut self) -> Option<T> {
        self.chan.take()
    }
}

/// The future of [`Receiver::recv`].
#[must_use = "futures do nothing unless awaited"]
pub struct Recv<'a, T> {
    chan: &'a Arc<Chan<T>>,
}

impl<T> fmt::Debug for Recv<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Recv { .. }")
    }
}

impl<T: Send> Future for Recv<'_, T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let c = &**self.chan;
        let take = || c.take();
        if let Some(v) = take() {
            return Poll::Ready(Some(v));
        }
        {
            let mut w = c.receiver.lock();
            match &*w {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        if let Some(v) = take() {
            return Poll::Ready(Some(v));
        }
        if c.live_senders.load(Acquire) == 0 {
            return Poll::Ready(take());
        }
        Poll::Pending
    }
}

// ---- reply slots ----

const FREE: u8 = 0;
const WAITING: u8 = 1;
const SENT: u8 = 2;
const RECEIVER_GONE: u8 = 3;
const SENDER_GONE: u8 = 4;

/// A reply slot's state word: who of the sender and the receiver acts last, and so frees the
/// slot. Each side makes one compare-and-swap from `WAITING`; the side whose CAS fails found
/// the other side done and releases (the loom model `channel/loom_tests.rs` checks: exactly one
/// release, a sent value dropped exactly once).
struct ReplyState(crate::sync::atomic::AtomicU32);

impl ReplyState {
    fn new() -> ReplyState {
        ReplyState(crate::sync::atomic::AtomicU32::new(u32::from(FREE)))
    }
    fn load(&self) -> u8 {
        self.0.load(crate::sync::atomic::Ordering::Acquire) as u8
    }
    fn store(&self, s: u8) {
        self.0
            .store(u32::from(s), crate::sync::atomic::Ordering::Release);
    }
    fn leave_waiting(&self, to: u8) -> bool {
        use crate::sync::atomic::Ordering::{AcqRel, Acquire};
        self.0
            .compare_exchange(u32::from(WAITING), u32::from(to), AcqRel, Acquire)
            .is_ok()
    }
    /// The value is written: true if the receiver waits for it; false if the receiver is
    /// gone (the sender drops the value and releases).
    fn sent(&self) -> bool {
        self.leave_waiting(SENT)
    }
    /// The sender goes without a reply: true if it must release (the receiver is gone).
    fn sender_dropped(&self) -> bool {
        !self.leave_waiting(SENDER_GONE)
    }
    /// The receiver goes: true if it must release (the sender has sent or gone).
    fn receiver_dropped(&self) -> bool {
        !self.leave_waiting(RECEIVER_GONE)
    }
}

struct ReplyCell<T> {
    state: ReplyState,
    value: UnsafeCell<MaybeUninit<T>>,
    waker: Mutex<Option<Waker>>,
}

struct Replies<T> {
    cells: Box<[ReplyCell<T>]>,
    /// Free reply slots (a bitmap: one given back is free at once, see `sync::free`).
    free: FreeSlots,
}

// SAFETY: a cell's value is written by its one `ReplySender` before the release that sets
// SENT and read by its one `ReplyReceiver` after the acquire that sees SENT.
unsafe impl<T: Send> Sync for Replies<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Replies<T> {}

/// A preallocated pool of one-shot reply slots: a caller takes a pair, sends the
/// [`ReplySender`] with its request to a lane, and awaits the [`ReplyReceiver`].
///
/// # Examples
/// ```no_run
/// # async fn f(tx: lfrt::task::Sender<(u64, lfrt::task::ReplySender<u64>)>) {
/// let replies = lfrt::task::ReplySlots::<u64>::new(32);
/// let (reply_tx, reply_rx) = replies.take().expect("a free reply slot");
/// tx.send((41, reply_tx)).await; // the lane task answers with reply_tx.send(42)
/// assert_eq!(reply_rx.await, Some(42));
/// # }
/// ```
pub struct ReplySlots<T> {
    replies: Arc<Replies<T>>,
}

impl<T> Clone for ReplySlots<T> {
    fn clone(&self) -> Self {
        ReplySlots {
            replies: self.replies.clone(),
        }
    }
}

impl<T> fmt::Debug for ReplySlots<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("ReplySlots { .. }")
    }
}

impl<T: Send> ReplySlots<T> {
    /// `n` reply slots, allocated now.
    pub fn new(n: usize) -> ReplySlots<T> {
        let free = FreeSlots::new(n.max(1));
        if n == 0 {
            let _ = free.take(); // no slot at all
        }
        ReplySlots {
            replies: Arc::new(Replies {
                cells: (0..n)
                    .map(|_| ReplyCell {
                        state: ReplyState::new(),
                        value: UnsafeCell::new(MaybeUninit::uninit()),
                        waker: Mutex::new(None),
                    })
                    .collect(),
                free,
            }),
        }
    }

    /// A free reply slot as a sender/receiver pair; `None` if all are in use.
    pub fn take(&self) -> Option<(ReplySender<T>, ReplyReceiver<T>)> {
        let i = self.replies.free.take()?;
        self.replies.cells[i as usize].state.store(WAITING);
        Some((
            ReplySender {
                replies: self.replies.clone(),
                index: i,
            },
            ReplyReceiver {
                replies: self.replies.clone(),
                index: i,
            },
        ))
    }
}

impl<T> Replies<T> {
    /// The second of the pair to let go returns the slot.
    fn release(&self, index: u32) {
        let c = &self.cells[index as usize];
        if c.state.load() == SENT {
            // SAFETY: the value was sent and never received; both sides are gone.
            unsafe { (*c.value.get()).assume_init_drop() };
        }
        drop(c.waker.lock().take());
        c.state.store(FREE);
        self.free.give(index);
    }
}

/// Answers one request (see [`ReplySlots`]).
pub struct ReplySender<T> {
    replies: Arc<Replies<T>>,
    index: u32,
}

impl<T> fmt::Debug for ReplySender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("ReplySender { .. }")
    }
}

impl<T> ReplySender<T> {
    /// Sends the reply and wakes the waiting receiver.
    pub fn send(self, value: T) {
        let c = &self.replies.cells[self.index as usize];
        // SAFETY: only this sender writes the value, once (it is consumed).
        unsafe { (*c.value.get()).write(value) };
        match c.state.sent() {
            true => {
                let w = c.waker.lock().take();
                if let Some(w) = w {
                    // Typically a tokio task: relayed when this is a pool thread.
                    wake(w);
                }
                std::mem::forget(self);
            }
            false => {
                // The receiver is gone: drop the value, return the slot.
                // SAFETY: written just above, never read.
                unsafe { (*c.value.get()).assume_init_drop() };
                self.replies.release(self.index);
                std::mem::forget(self);
            }
        }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        let c = &self.replies.cells[self.index as usize];
        if c.state.sender_dropped() {
            self.replies.release(self.index); // the receiver is gone
        } else {
            let w = c.waker.lock().take();
            if let Some(w) = w {
                wake(w);
            }
        }
    }
}

/// Awaits one reply: `Some(value)`, or `None` if the sender was dropped without replying.
pub struct ReplyReceiver<T> {
    replies: Arc<Replies<T>>,
    index: u32,
}

impl<T> fmt::Debug for ReplyReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("ReplyReceiver { .. }")
    }
}

impl<T> Unpin for ReplyReceiver<T> {}

impl<T> Future for ReplyReceiver<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let c = &self.replies.cells[self.index as usize];
        let done = |s: u8| match s {
            SENT => {
                // SAFETY: SENT (acquired): the value is written; we take it once and mark
                // the slot so neither `release` nor a second poll reads it again.
                let v = unsafe { (*c.value.get()).assume_init_read() };
                c.state.store(SENDER_GONE);
                Some(Some(v))
            }
            SENDER_GONE => Some(None),
            _ => None,
        };
        if let Some(r) = done(c.state.load()) {
            return Poll::Ready(r);
        }
        *c.waker.lock() = Some(cx.waker().clone());
        match done(c.state.load()) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for ReplyReceiver<T> {
    fn drop(&mut self) {
        let c = &self.replies.cells[self.index as usize];
        if c.state.receiver_dropped() {
            self.replies.release(self.index); // SENT or SENDER_GONE: we are second
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
