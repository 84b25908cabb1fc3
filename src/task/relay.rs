//! The relay of foreign wakes: how a lane thread wakes a waker of another runtime (tokio's, a
//! plain thread's) without taking that runtime's locks.
//!
//! Waking a tokio task takes tokio's inject-queue mutex, an ordinary (not priority-inheriting)
//! lock. A lane thread that took it would wait, unboundedly, for a tokio worker preempted while
//! it held it. So a lane thread never calls a foreign waker: it hands the waker to its
//! runtime's relay, a preallocated queue (`sync::queue`) and a doorbell, and a time-shared
//! relay thread (`lfrt-relay`, one per runtime) calls it.
//!
//! ```text
//!   lane thread (any lane of the runtime)                 lfrt-relay (SCHED_OTHER)
//!   ─────────────────────────────────────                 ───────────────────────
//!   executor::wake(w), w not a lane waker:                   poll(bell) … answer()
//!     push(w) into the queue ── ring() ──────────────────►  pop each waker, w.wake()
//!     full: w.wake() here (counted in relay_full)
//! ```
//!
//! What runs where: a lane task's own waker is always woken directly (its wake is lock-free,
//! `executor.rs`); a foreign waker is relayed from a pool thread of a lane and woken directly from
//! any other thread (a tokio task waking tokio is tokio's business). The relay adds one hop of
//! a time-shared thread to a lane → tokio reply (BENCHMARKS.md §5.7 measures it).
//!
//! Invariants:
//! * **a lane thread takes no foreign lock**, except when the relay's queue is full: it then
//!   wakes the waker itself rather than lose the wake, and counts it (`relay_full`, per lane);
//!   `RELAY_CAPACITY` wakes in flight at once is far beyond what a relay that keeps up holds;
//! * **no lost wake-up**: the queue and the doorbell are the protocol of `sync::doorbell`
//!   (checked by its loom model); the relay thread drains until the queue says empty after
//!   every ring, and once more when it stops.

use crate::observe::metrics::Counters;
use crate::sync::atomic::{AtomicBool, Ordering::*};
use crate::sync::doorbell::Doorbell;
use crate::sync::queue::Queue;
use crate::sys;
use std::cell::Cell;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::task::Waker;

/// Foreign wakes a runtime's relay holds at once (each a `Waker`, 16 bytes).
pub(crate) const RELAY_CAPACITY: usize = 4096;

/// One runtime's relay.
#[derive(Debug)]
pub(crate) struct Relay {
    queue: Queue<Waker>,
    bell: Doorbell,
    stop: AtomicBool,
}

impl Relay {
    /// The queue and its doorbell, allocated now; no thread yet ([`spawn`](Self::spawn)).
    pub(crate) fn new() -> std::io::Result<Relay> {
        Ok(Relay {
            queue: Queue::new(RELAY_CAPACITY),
            bell: Doorbell::eventfd()?,
            stop: AtomicBool::new(false),
        })
    }

    /// Starts the relay thread (`lfrt-relay`, time-shared: it inherits the caller's policy,
    /// which `Runtime::start` runs at).
    pub(crate) fn spawn(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("lfrt-relay".into())
            .spawn(move || me.serve())
    }

    /// Makes the relay thread return, after it woke what it holds.
    pub(crate) fn stop(&self) {
        self.stop.store(true, SeqCst);
        self.bell.ring();
    }

    fn serve(&self) {
        loop {
            // Wait for a ring (EINTR or an error: look again; the stop flag ends the loop).
            let _ = sys::net::poll_one(self.bell.as_fd(), sys::net::POLL_IN, -1);
            self.bell.answer();
            while let Some(w) = self.queue.pop() {
                w.wake();
            }
            if self.stop.load(SeqCst) {
                // Whatever a pusher claimed before the stop is written by now or soon: the
                // threads that push (pool threads) have all returned when the runtime stops us.
                while let Some(w) = self.queue.pop() {
                    w.wake();
                }
                return;
            }
        }
    }

    /// A pool thread's foreign wake: queued for the relay thread, or woken here if the queue
    /// is full (counted in `counters`).
    fn post(&self, w: Waker, counters: &Counters) {
        match self.queue.push(w) {
            Ok(()) => {
                Counters::add(&counters.relayed, 1);
                self.bell.ring();
            }
            Err(w) => {
                Counters::add(&counters.relay_full, 1);
                w.wake();
            }
        }
    }
}

thread_local! {
    /// The relay of the pool thread's runtime and its lane's counters; null on other threads.
    static CURRENT: Cell<(*const Relay, *const Counters)> =
        const { Cell::new((std::ptr::null(), std::ptr::null())) };
}

/// Called by a pool thread when it starts: its foreign wakes go through `relay`, counted in its
/// lane's `counters`. Both must outlive the thread (the runtime joins its pool threads before
/// it drops either).
pub(crate) fn enter(relay: &Arc<Relay>, counters: &Counters) {
    CURRENT.with(|c| c.set((Arc::as_ptr(relay), counters as *const Counters)));
}

/// Wakes a waker that is not a lane task's: through the relay on a pool thread, directly on any
/// other thread.
pub(crate) fn wake_foreign(w: Waker) {
    let (relay, counters) = CURRENT.with(Cell::get);
    if relay.is_null() {
        w.wake();
    } else {
        // SAFETY: set by `enter` on this pool thread, whose runtime keeps both alive until the
        // thread has returned.
        unsafe { (*relay).post(w, &*counters) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize, std::thread::Thread);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
            self.1.unpark();
        }
    }

    /// On a thread that entered a relay, a foreign wake is queued and woken by the relay
    /// thread, not by the caller; on any other thread it is woken at once.
    #[test]
    fn a_pool_threads_foreign_wake_goes_through_the_relay() {
        let relay = Arc::new(Relay::new().unwrap());
        let counters = Counters::default();
        let count = Arc::new(Count(AtomicUsize::new(0), std::thread::current()));
        wake_foreign(Waker::from(count.clone()));
        assert_eq!(count.0.load(SeqCst), 1, "not a pool thread: woken at once");

        std::thread::scope(|s| {
            s.spawn(|| {
                enter(&relay, &counters);
                wake_foreign(Waker::from(count.clone()));
                assert_eq!(
                    count.0.load(SeqCst),
                    1,
                    "queued, not woken on the pool thread"
                );
            });
        });
        assert_eq!(counters.relayed.load(SeqCst), 1);
        let thread = relay.spawn().unwrap();
        while count.0.load(SeqCst) < 2 {
            std::thread::park_timeout(std::time::Duration::from_millis(100));
        }
        relay.stop();
        thread.join().unwrap();
        assert_eq!(counters.relay_full.load(SeqCst), 0);
    }
}
