//! A priority-inheritance mutex (`PTHREAD_PRIO_INHERIT`).
//!
//! Threads of different SCHED_FIFO priorities share the runtime's internal state. With a plain
//! mutex (std's `Mutex` has no PI) a low-priority holder can be preempted by a medium-priority
//! thread while a high-priority thread waits: unbounded priority inversion. With PI the kernel
//! boosts the holder to the highest waiter's priority until it unlocks, so the high thread waits
//! at most one low critical section.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// A mutual-exclusion lock whose holder inherits the priority of its highest-priority waiter.
///
/// Use it for state that handlers of different groups (priorities) share.
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
/// `lock` panics if the kernel reports a deadlock (the calling thread already holds the lock).
/// The lock does not poison: a panic while it is held unlocks it during unwinding.
pub struct PiMutex<T: ?Sized> {
    raw: Box<UnsafeCell<libc::pthread_mutex_t>>,
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
        // SAFETY: zeroed pthread types are valid storage for the *_init calls below, which
        // initialise them; the attribute object is destroyed after use; the mutex lives in a
        // Box so it never moves after init.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_mutexattr_init(&mut attr), 0);
            assert_eq!(
                libc::pthread_mutexattr_setprotocol(&mut attr, libc::PTHREAD_PRIO_INHERIT),
                0
            );
            let raw = Box::new(UnsafeCell::new(std::mem::zeroed()));
            assert_eq!(libc::pthread_mutex_init(raw.get(), &attr), 0);
            libc::pthread_mutexattr_destroy(&mut attr);
            PiMutex {
                raw,
                data: UnsafeCell::new(value),
            }
        }
    }

    /// Consumes the mutex and returns the value.
    pub fn into_inner(self) -> T {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its Drop does not run; we move the data out
        // and destroy/free the raw mutex exactly once.
        unsafe {
            let data = std::ptr::read(&this.data).into_inner();
            let raw = std::ptr::read(&this.raw);
            libc::pthread_mutex_destroy(raw.get());
            drop(raw);
            data
        }
    }
}

impl<T: ?Sized> PiMutex<T> {
    /// Blocks until the lock is held; the holder is boosted while higher-priority threads wait.
    pub fn lock(&self) -> PiMutexGuard<'_, T> {
        // SAFETY: `raw` was initialised in `new` and is never moved.
        let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
        assert_eq!(
            rc,
            0,
            "pthread_mutex_lock (PI) failed: {}",
            std::io::Error::from_raw_os_error(rc)
        );
        PiMutexGuard {
            m: self,
            _not_send: PhantomData,
        }
    }

    /// Takes the lock if it is free, without blocking.
    pub fn try_lock(&self) -> Option<PiMutexGuard<'_, T>> {
        // SAFETY: `raw` was initialised in `new` and is never moved.
        let rc = unsafe { libc::pthread_mutex_trylock(self.raw.get()) };
        (rc == 0).then_some(PiMutexGuard {
            m: self,
            _not_send: PhantomData,
        })
    }

    /// Mutable access without locking (the borrow checker proves exclusivity).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized> Drop for PiMutex<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self` proves nobody holds or waits on the lock.
        unsafe { libc::pthread_mutex_destroy(self.raw.get()) };
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
        // SAFETY: this thread locked the mutex when it created the guard.
        unsafe { libc::pthread_mutex_unlock(self.m.raw.get()) };
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
}
