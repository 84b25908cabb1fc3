//! The synchronisation primitives the promotion protocol is written against.
//!
//! * **Owns:** the priority-inheritance mutex ([`pi_mutex`]), the per-thread futex parker
//!   ([`parker`]), the bounded queue no thread waits in ([`queue`]), the doorbell that wakes a
//!   queue's consumer ([`doorbell`]), the indexed heap the follower queue and the task
//!   layer's timers order their entries with ([`indexed_heap`]) and the loom shim below.
//! * **May use:** `sys` only. **Must never use:** anything above it.
//!
//! Normally: the PI mutex and a futex parker. Under `--cfg loom`: loom's model-checked
//! mutex and a condvar parker, so `leader.rs` (and the bound variant built on it,
//! `bound/table.rs`) is checked by loom exactly as it runs.

pub(crate) mod doorbell;
pub(crate) mod free;
pub(crate) mod indexed_heap;
pub(crate) mod parker;
pub(crate) mod pi_mutex;
pub(crate) mod queue;

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
    #[derive(Debug)]
    pub(crate) struct Parker {
        /// `(token present, timer fired)`.
        state: LMutex<(bool, bool)>,
        cv: Condvar,
    }

    impl Parker {
        pub(crate) fn new() -> Self {
            Parker {
                state: LMutex::new((false, false)),
                cv: Condvar::new(),
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
        /// The owner's deadline passes (models only).
        #[cfg(test)]
        pub(crate) fn time_out(&self) {
            self.state.lock().unwrap().1 = true;
            self.cv.notify_one();
        }
    }
}

pub(crate) use imp::{Mutex, MutexGuard, Parker};

/// The atomics of protocols checked by loom models: std's, or loom's under `--cfg loom`.
/// Every atomic of a protocol goes through here, so that its model checks the code that runs.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{
        fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
}

/// The interior-mutable cell of protocols checked by loom models (`queue.rs`): std's
/// `UnsafeCell` behind loom's access API, or loom's own under `--cfg loom`, which checks every
/// access for a race.
pub(crate) mod cell {
    #[cfg(loom)]
    pub(crate) use loom::cell::UnsafeCell;

    /// `std::cell::UnsafeCell` with loom's access API.
    #[cfg(not(loom))]
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        pub(crate) fn new(value: T) -> UnsafeCell<T> {
            UnsafeCell(std::cell::UnsafeCell::new(value))
        }
        /// Runs `f` on a pointer to the value; the caller's protocol makes the access
        /// exclusive.
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}
