//! The synchronisation primitives the promotion protocol is written against.
//!
//! * **Owns:** the priority-inheritance mutex ([`pi_mutex`]), the per-thread futex parker
//!   ([`parker`]) and the loom shim below.
//! * **May use:** `sys` only. **Must never use:** anything above it.
//!
//! Normally: the PI mutex and a futex parker. Under `--cfg loom`: loom's model-checked
//! mutex and a condvar parker, so `leader.rs` (and the bound variant built on it,
//! `bound/table.rs`) is checked by loom exactly as it runs.

pub(crate) mod parker;
pub(crate) mod pi_mutex;

#[cfg(not(loom))]
mod imp {
    pub(crate) use crate::sync::parker::Parker;
    use crate::sync::pi_mutex::PiMutex;
    pub(crate) use crate::sync::pi_mutex::PiMutexGuard as MutexGuard;

    /// The protocol's lock: priority-inheriting.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(PiMutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Mutex(PiMutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::MutexGuard;
    use loom::sync::{Condvar, Mutex as LMutex};

    #[derive(Debug)]
    pub(crate) struct Mutex<T>(LMutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Mutex(LMutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    /// Loom stand-in for the futex parker: a token guarded by a mutex and condvar.
    ///
    /// Loom has no clock, so a timed park ends on a token or when the model's timer fires
    /// ([`time_out`](Parker::time_out), called by a model thread at a point loom chooses). A
    /// timer that fires before the owner parks ends its next timed park at once, as a deadline
    /// that has already passed does; untimed parks ignore the timer.
    ///
    /// The promotion timer of a timed parker (`sync/parker.rs`) is modelled too:
    /// [`promote_at`](Parker::promote_at) arms it, and a model's clock thread fires it
    /// ([`fire_when_armed`](Parker::fire_when_armed)) at a point loom chooses after it was
    /// armed, unless it was cancelled first.
    #[derive(Debug)]
    pub(crate) struct Parker {
        /// `(token present, timer fired)`.
        state: LMutex<(bool, bool)>,
        cv: Condvar,
        /// The promotion timer: `(armed, due, clock stopped)`.
        promotion: LMutex<(bool, bool, bool)>,
        armed: Condvar,
    }

    impl Parker {
        pub(crate) fn new() -> Self {
            Parker {
                state: LMutex::new((false, false)),
                cv: Condvar::new(),
                promotion: LMutex::new((false, false, false)),
                armed: Condvar::new(),
            }
        }
        pub(crate) fn park(&self) {
            let mut s = self.state.lock().unwrap();
            while !s.0 {
                s = self.cv.wait(s).unwrap();
            }
            s.0 = false;
        }
        /// `true` if the token was consumed, `false` if the model's timer fired first.
        pub(crate) fn park_until(&self, _deadline_ns: u64) -> bool {
            let mut s = self.state.lock().unwrap();
            while !s.0 && !s.1 {
                s = self.cv.wait(s).unwrap();
            }
            s.1 = false;
            std::mem::replace(&mut s.0, false)
        }
        pub(crate) fn unpark(&self) {
            self.state.lock().unwrap().0 = true;
            self.cv.notify_one();
        }
        /// Arms the promotion timer (the time is the model clock's choice).
        pub(crate) fn promote_at(&self, _at_ns: u64) {
            let mut p = self.promotion.lock().unwrap();
            (p.0, p.1) = (true, false);
            self.armed.notify_all();
        }
        /// Disarms it.
        pub(crate) fn cancel_promotion(&self) {
            let mut p = self.promotion.lock().unwrap();
            (p.0, p.1) = (false, false);
        }
        /// Whether it fired.
        pub(crate) fn promotion_due(&self) -> bool {
            self.promotion.lock().unwrap().1
        }
        /// The model's clock: waits until the timer is armed (or the clock is stopped), then
        /// fires it once: due, and the owner unparked. Returns whether it fired.
        #[cfg(test)]
        pub(crate) fn fire_when_armed(&self) -> bool {
            let mut p = self.promotion.lock().unwrap();
            while !p.0 && !p.2 {
                p = self.armed.wait(p).unwrap();
            }
            if !p.0 {
                return false;
            }
            (p.0, p.1) = (false, true);
            drop(p);
            self.unpark();
            true
        }
        /// Ends the model's clock (`fire_when_armed` returns).
        #[cfg(test)]
        pub(crate) fn stop_clock(&self) {
            self.promotion.lock().unwrap().2 = true;
            self.armed.notify_all();
        }
        /// The owner's deadline passes (models only).
        #[cfg(test)]
        pub(crate) fn time_out(&self) {
            self.state.lock().unwrap().1 = true;
            self.cv.notify_one();
        }
    }
}

pub(crate) use imp::{Mutex, MutexGuard, Parker};

/// The atomics of protocols checked by loom models (`borrow.rs`): std's, or loom's under
/// `--cfg loom`.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
}
