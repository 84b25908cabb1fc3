//! The pthread mutex behind [`crate::PiMutex`]: priority-inheriting and error-checking.
//!
//! pthread functions do not follow the `-1`/`errno` convention of system calls: they return 0
//! or the error number itself, and leave `errno` alone. `pthread_call!` turns that return into
//! an `io::Result`, as `syscall!` does for system calls.
//!
//! # Why error-checking
//! A default (`PTHREAD_MUTEX_NORMAL`) PI mutex that its owner locks again never returns: the
//! kernel reports `EDEADLK` and glibc then parks the thread forever on purpose. An
//! error-checking one returns `EDEADLK` instead, so a self-deadlock becomes an error the
//! caller can see (measured on glibc 2.36: `pthread_mutex_lock` and `pthread_mutex_trylock`
//! by the owner both return `EDEADLK`).
//!
//! The kernel also detects a lock-order cycle between threads (A holds X and waits for Y while
//! B holds Y and waits for X) when it walks the PI chain. For an error-checking mutex glibc does
//! not return that `EDEADLK`: an assertion in `pthread_mutex_lock` fails and the process
//! aborts (measured on glibc 2.36). With a default mutex both threads would block forever
//! instead.

use std::cell::UnsafeCell;
use std::io;

/// Calls a `libc` pthread function and turns a non-zero return (the error number) into an
/// `io::Error`.
macro_rules! pthread_call {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        // SAFETY: every caller passes pointers to live, initialised (or, for *_init, writable)
        // pthread objects that do not move while in use.
        let rc = unsafe { libc::$fn($($arg, )*) };
        if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
    }};
}

/// A `PTHREAD_PRIO_INHERIT` + `PTHREAD_MUTEX_ERRORCHECK` mutex.
///
/// The pthread object lives in a `Box`: it must not move once initialised.
pub(crate) struct RawPiMutex(Box<UnsafeCell<libc::pthread_mutex_t>>);

// SAFETY: a pthread mutex is made to be shared between threads; every access goes through the
// pthread functions, which synchronise.
unsafe impl Send for RawPiMutex {}
// SAFETY: as above.
unsafe impl Sync for RawPiMutex {}

/// Destroys a mutex attribute object when dropped.
struct Attr(libc::pthread_mutexattr_t);

impl Drop for Attr {
    fn drop(&mut self) {
        let _ = pthread_call!(pthread_mutexattr_destroy(&mut self.0));
    }
}

impl RawPiMutex {
    /// An unlocked mutex. Allocates (the `Box`).
    ///
    /// # Errors
    /// What `pthread_mutexattr_*` or `pthread_mutex_init` report (`ENOMEM`, or `ENOTSUP` on a
    /// system without PI futexes).
    pub(crate) fn new() -> io::Result<RawPiMutex> {
        // SAFETY: an all-zero pthread_mutexattr_t is valid storage for pthread_mutexattr_init.
        let mut attr = Attr(unsafe { std::mem::zeroed() });
        pthread_call!(pthread_mutexattr_init(&mut attr.0))?;
        pthread_call!(pthread_mutexattr_setprotocol(
            &mut attr.0,
            libc::PTHREAD_PRIO_INHERIT
        ))?;
        pthread_call!(pthread_mutexattr_settype(
            &mut attr.0,
            libc::PTHREAD_MUTEX_ERRORCHECK
        ))?;
        // SAFETY: an all-zero pthread_mutex_t is valid storage for pthread_mutex_init.
        let raw = Box::new(UnsafeCell::new(unsafe { std::mem::zeroed() }));
        pthread_call!(pthread_mutex_init(raw.get(), &attr.0))?;
        Ok(RawPiMutex(raw))
    }

    /// Blocks until the calling thread holds the mutex.
    ///
    /// # Errors
    /// `EDEADLK` if the calling thread already holds it.
    #[inline]
    pub(crate) fn lock(&self) -> io::Result<()> {
        pthread_call!(pthread_mutex_lock(self.0.get()))
    }

    /// Takes the mutex if it is free: `Ok(true)` if the calling thread now holds it, `Ok(false)`
    /// if another thread holds it.
    ///
    /// # Errors
    /// `EDEADLK` if the calling thread already holds it.
    #[inline]
    pub(crate) fn try_lock(&self) -> io::Result<bool> {
        match pthread_call!(pthread_mutex_trylock(self.0.get())) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Releases the mutex.
    ///
    /// # Errors
    /// `EPERM` if the calling thread does not hold it (the mutex is left as it was).
    #[inline]
    pub(crate) fn unlock(&self) -> io::Result<()> {
        pthread_call!(pthread_mutex_unlock(self.0.get()))
    }
}

/// `EDEADLK`: the error [`RawPiMutex::lock`] and [`RawPiMutex::try_lock`] return to a thread
/// that already holds the mutex.
pub(crate) fn is_deadlock(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EDEADLK)
}

impl Drop for RawPiMutex {
    fn drop(&mut self) {
        // `&mut self`: no thread can be waiting. A mutex still locked (its guard leaked) makes
        // this return EBUSY; its memory is freed anyway, and nobody can reach it any more.
        let _ = pthread_call!(pthread_mutex_destroy(self.0.get()));
    }
}
