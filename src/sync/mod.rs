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
    use loom::sync::{Arc, Condvar, Mutex as LMutex};

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
    /// A parker [`linked`](Parker::linked) to a model handle set ([`Readiness`]) stands in for
    /// the engine's linked parker: [`unpark_on_readiness`](Parker::unpark_on_readiness) arms
    /// its link, which the set fires (an unpark) when it turns ready, or at once if it is.
    #[derive(Debug)]
    pub(crate) struct Parker {
        /// `(token present, timer fired)`.
        state: LMutex<(bool, bool)>,
        cv: Condvar,
        link: Option<(Arc<Readiness>, usize)>,
    }

    /// The model of a handle set's readiness as the linked parkers see it: how many events are
    /// ready, and whose link is armed, under one lock (the kernel's `ep->lock`).
    #[derive(Debug)]
    pub(crate) struct Readiness {
        state: LMutex<(usize, Vec<bool>)>,
    }

    // Built by the models only (`leader.rs`'s `linked_*`).
    #[cfg_attr(not(test), allow(dead_code))]
    impl Readiness {
        pub(crate) fn new(threads: usize) -> Arc<Readiness> {
            Arc::new(Readiness {
                state: LMutex::new((0, vec![false; threads])),
            })
        }

        /// An event turned ready: fires (and disarms) every armed link.
        pub(crate) fn post(&self, parkers: &[Parker]) {
            let mut s = self.state.lock().unwrap();
            s.0 += 1;
            for (i, armed) in s.1.iter_mut().enumerate() {
                if std::mem::replace(armed, false) {
                    parkers[i].unpark();
                }
            }
        }

        /// A wait took an event.
        pub(crate) fn take(&self) {
            let mut s = self.state.lock().unwrap();
            s.0 -= 1;
        }
    }

    impl Parker {
        pub(crate) fn new() -> Self {
            Parker {
                state: LMutex::new((false, false)),
                cv: Condvar::new(),
                link: None,
            }
        }
        /// Thread `me`'s parker, linked to the model set `r`.
        #[cfg(test)]
        pub(crate) fn linked(r: &Arc<Readiness>, me: usize) -> Self {
            Parker {
                link: Some((r.clone(), me)),
                ..Parker::new()
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
        /// Arms the link (unpark when the set is ready; at once if it is); unlinked: unpark.
        pub(crate) fn unpark_on_readiness(&self) {
            match &self.link {
                None => self.unpark(),
                Some((r, me)) => {
                    let mut s = r.state.lock().unwrap();
                    if s.0 > 0 {
                        drop(s);
                        self.unpark();
                    } else {
                        s.1[*me] = true;
                    }
                }
            }
        }
        /// The owner's deadline passes (models only).
        #[cfg(test)]
        pub(crate) fn time_out(&self) {
            self.state.lock().unwrap().1 = true;
            self.cv.notify_one();
        }
    }
}

#[cfg(all(loom, test))]
pub(crate) use imp::Readiness;
pub(crate) use imp::{Mutex, MutexGuard, Parker};

/// The atomics of protocols checked by loom models (`borrow.rs`): std's, or loom's under
/// `--cfg loom`.
pub(crate) mod atomic {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
}
