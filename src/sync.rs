//! The synchronisation primitives the promotion protocol is written against.
//!
//! Normally: the PI mutex and a futex parker. Under `--cfg loom`: loom's model-checked
//! mutex and a condvar parker, so `leader.rs` is checked by loom exactly as it runs.

#[cfg(not(loom))]
mod imp {
    pub(crate) use crate::parker::Parker;
    use crate::pi_mutex::{PiMutex, PiMutexGuard};

    /// The protocol's lock: priority-inheriting.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(PiMutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Mutex(PiMutex::new(v))
        }
        pub(crate) fn lock(&self) -> PiMutexGuard<'_, T> {
            self.0.lock()
        }
    }
}

#[cfg(loom)]
mod imp {
    use loom::sync::{Condvar, Mutex as LMutex, MutexGuard};

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
    #[derive(Debug)]
    pub(crate) struct Parker {
        token: LMutex<bool>,
        cv: Condvar,
    }

    impl Parker {
        pub(crate) fn new() -> Self {
            Parker {
                token: LMutex::new(false),
                cv: Condvar::new(),
            }
        }
        pub(crate) fn park(&self) {
            let mut t = self.token.lock().unwrap();
            while !*t {
                t = self.cv.wait(t).unwrap();
            }
            *t = false;
        }
        /// Loom has no clock: models only pass deadlines that have already expired (checked
        /// before parking) or none, so a timed park is an untimed one here.
        pub(crate) fn park_until(&self, _deadline_ns: u64) -> bool {
            self.park();
            true
        }
        pub(crate) fn unpark(&self) {
            *self.token.lock().unwrap() = true;
            self.cv.notify_one();
        }
    }
}

pub(crate) use imp::{Mutex, Parker};
