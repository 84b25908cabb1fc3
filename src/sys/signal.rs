//! Termination signals, and the flight recorder's on-demand signal, handled synchronously:
//! block them, then wait with a timeout.

use std::io;
use std::time::Duration;

fn term_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, TRACE_SIGNAL);
        set
    }
}

/// The signal that asks the flight recorder for a window (`kill -USR2 PID`): the `lfrt`
/// command's loops take it from [`wait_termination`] and call
/// [`Telemetry::trace_now`](crate::telemetry::Telemetry::trace_now) instead of stopping.
pub const TRACE_SIGNAL: i32 = libc::SIGUSR2;

/// Blocks SIGINT, SIGTERM and [`TRACE_SIGNAL`] in the calling thread. Threads spawned afterwards inherit the
/// mask, so the signals stay pending until [`wait_termination`] takes them.
///
/// # Examples
#[doc = os_example!(no_run)]
/// use std::time::Duration;
/// lfrt::os::block_termination()?; // first thing in main, before spawning threads
/// // ... start the runtime ...
/// while lfrt::os::wait_termination(Duration::from_secs(1))?.is_none() { /* housekeeping */ }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn block_termination() -> io::Result<()> {
    let set = term_set();
    // SAFETY: valid sigset pointer; null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits up to `timeout` for SIGINT, SIGTERM or [`TRACE_SIGNAL`]; returns the signal number if
/// one came (the caller tells a request for a window from a termination).
///
/// # Examples
#[doc = os_example!()]
/// lfrt::os::block_termination()?;
/// let got = lfrt::os::wait_termination(std::time::Duration::from_millis(1))?;
/// assert_eq!(got, None); // nobody sent SIGINT or SIGTERM
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn wait_termination(timeout: Duration) -> io::Result<Option<i32>> {
    let set = term_set();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid sigset and timespec pointers; siginfo may be null.
    let rc = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    if rc >= 0 {
        return Ok(Some(rc));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}
