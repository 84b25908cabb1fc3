//! A priority-inheritance mutex (`PTHREAD_PRIO_INHERIT`).
//!
//! Threads of different SCHED_FIFO priorities share the runtime's internal state. With a plain
//! mutex (std's `Mutex` has no PI) a low-priority holder can be preempted by a medium-priority
//! thread while a high-priority thread waits: unbounded priority inversion. With PI the kernel
//! boosts the holder to the highest waiter's priority until it unlocks, so the high thread waits
//! at most one low critical section.

use crate::sys::pthread::{self, RawPiMutex};
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A mutual-exclusion lock whose holder inherits the priority of its highest-priority waiter.
///
/// Use it for state that handlers of different lanes (priorities) share.
///
/// # Examples
/// ```
/// let m = lfrt::PiMutex::new(0u64);
/// *m.lock() += 1;
/// assert_eq!(*m.lock(), 1);
/// ```
///
/// # Real-time safety
/// `new` allocates (the pthread mutex must not move); `lock`/`unlock` never allocate. An
/// uncontended lock or unlock is a user-space compare-and-swap; contention goes to the kernel
/// (`FUTEX_LOCK_PI`), which applies the priority boost.
///
/// # Panics
/// `new` panics if the system cannot create a priority-inheritance mutex (no PI futex
/// support). `lock` panics if the calling thread already holds the lock: the mutex is
/// error-checking (`PTHREAD_MUTEX_ERRORCHECK`), so a relock is reported by the kernel instead
/// of blocking the thread forever.
///
/// The lock does not poison: a panic while it is held unlocks it during unwinding.
///
/// # Deadlock between threads
/// If two threads wait for each other's `PiMutex` (a lock-order cycle), the kernel detects
/// it, and glibc aborts the process with an assertion failure in `pthread_mutex_lock` rather
/// than returning an error. Take nested locks in one fixed order.
pub struct PiMutex<T: ?Sized> {
    raw: RawPiMutex,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex serialises all access to `data`, so sharing it across threads is sound
// whenever the protected value may be sent between threads.
unsafe impl<T: ?Sized + Send> Send for PiMutex<T> {}
// SAFETY: as above; `&PiMutex` only hands out access to `T` under the lock.
unsafe impl<T: ?Sized + Send> Sync for PiMutex<T> {}

impl<T> PiMutex<T> {
    /// Creates an unlocked mutex holding `value`.
    pub fn new(value: T) -> PiMutex<T> {
        let raw = RawPiMutex::new()
            .unwrap_or_else(|e| panic!("PiMutex::new: cannot create a PI mutex: {e}"));
        PiMutex {
            raw,
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex and returns the value.
    ///
    /// # Examples
    /// ```
    /// let mut m = lfrt::PiMutex::new(vec![1]);
    /// m.get_mut().push(2); // no lock: `&mut` proves no one else holds it
    /// assert_eq!(m.into_inner(), [1, 2]);
    /// ```
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> PiMutex<T> {
    /// Blocks until the lock is held; the holder is boosted while higher-priority threads wait.
    ///
    /// # Panics
    /// If the calling thread already holds this lock.
    pub fn lock(&self) -> PiMutexGuard<'_, T> {
        match self.lock_unless_held() {
            Some(g) => g,
            None => {
                panic!("PiMutex::lock: the calling thread already holds this lock (self-deadlock)")
            }
        }
    }

    /// Like [`lock`](Self::lock), but `None` instead of a panic when the calling thread
    /// already holds the lock.
    ///
    /// # Panics
    /// On any other error of `pthread_mutex_lock` (none is possible for a valid mutex).
    pub(crate) fn lock_unless_held(&self) -> Option<PiMutexGuard<'_, T>> {
        match self.raw.lock() {
            Ok(()) => Some(PiMutexGuard {
                m: self,
                _not_send: PhantomData,
            }),
            Err(e) if pthread::is_deadlock(&e) => None,
            Err(e) => panic!("pthread_mutex_lock (PI) failed: {e}"),
        }
    }

    /// Takes the lock if it is free, without blocking. `None` if another thread holds it, or
    /// the calling thread itself.
    ///
    /// # Examples
    /// ```
    /// let m = lfrt::PiMutex::new(1);
    /// let held = m.lock();
    /// assert!(m.try_lock().is_none()); // held (here by this very thread)
    /// drop(held);
    /// assert_eq!(m.try_lock().map(|g| *g), Some(1));
    /// ```
    pub fn try_lock(&self) -> Option<PiMutexGuard<'_, T>> {
        match self.raw.try_lock() {
            Ok(true) => Some(PiMutexGuard {
                m: self,
                _not_send: PhantomData,
            }),
            Ok(false) => None,
            Err(e) if pthread::is_deadlock(&e) => None,
            Err(e) => panic!("pthread_mutex_trylock (PI) failed: {e}"),
        }
    }

    /// Mutable access without locking (the borrow checker proves exclusivity).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for PiMutex<T> {
    fn default() -> Self {
        PiMutex::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for PiMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("PiMutex { .. }")
    }
}

/// Holds a [`PiMutex`] locked; unlocks on drop.
///
/// Not `Send`: a priority-inheritance mutex records its owner thread in the kernel and must be
/// unlocked by that same thread.
///
/// ```compile_fail
/// let m = std::sync::Arc::new(lfrt::PiMutex::new(0));
/// let g = m.lock();
/// std::thread::spawn(move || drop(g)); // error: the guard cannot leave its thread
/// ```
pub struct PiMutexGuard<'a, T: ?Sized> {
    m: &'a PiMutex<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing `&PiMutexGuard` only gives `&T` to other threads, which is sound when `T: Sync`;
// the guard itself (and so the unlock) stays on the locking thread.
unsafe impl<T: ?Sized + Sync> Sync for PiMutexGuard<'_, T> {}

impl<T: ?Sized> Deref for PiMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard's existence means this thread holds the lock.
        unsafe { &*self.m.data.get() }
    }
}

impl<T: ?Sized> DerefMut for PiMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard's existence means this thread holds the lock exclusively.
        unsafe { &mut *self.m.data.get() }
    }
}

impl<T: ?Sized> Drop for PiMutexGuard<'_, T> {
    fn drop(&mut self) {
        // This thread locked the mutex when it created the guard (the guard is not `Send`),
        // so the unlock cannot fail.
        let r = self.m.raw.unlock();
        debug_assert!(r.is_ok(), "pthread_mutex_unlock (PI) failed: {r:?}");
    }
}

impl<T: ?Sized> fmt::Debug for PiMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("PiMutexGuard { .. }")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_across_threads() {
        let m = Arc::new(PiMutex::new(0u64));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*m.lock(), 40_000);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let m = PiMutex::new(());
        let g = m.lock();
        std::thread::scope(|s| s.spawn(|| assert!(m.try_lock().is_none())).join().unwrap());
        drop(g);
        assert!(m.try_lock().is_some());
        assert_eq!(PiMutex::new(5).into_inner(), 5);
    }

    /// A relock by the owner panics (the mutex is error-checking) instead of blocking its
    /// thread forever, as a default PI mutex does. The relock runs on its own thread and the
    /// test waits at most 10 s for it, so a regression fails instead of hanging.
    #[test]
    fn relock_by_the_owner_panics_instead_of_hanging() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let m = PiMutex::new(());
            let g = m.lock();
            let owner_try = m.try_lock().is_none();
            let owner_checked = m.lock_unless_held().is_none();
            let relock = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(m.lock())));
            drop(g);
            let free_again = m.try_lock().is_some();
            let _ = tx.send((owner_try, owner_checked, relock.err(), free_again));
        });
        let (owner_try, owner_checked, relock, free_again) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("relocking a PiMutex from its owner thread blocked (self-deadlock)");
        assert!(owner_try, "try_lock by the owner must fail");
        assert!(
            owner_checked,
            "lock_unless_held by the owner must return None"
        );
        let payload = relock.expect("relocking did not panic");
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or(payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default();
        assert!(msg.contains("already holds this lock"), "{msg}");
        assert!(free_again, "the first guard's unlock failed");
    }
}
