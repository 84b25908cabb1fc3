//! Every Linux system call lfrt makes lives below this module.
//!
//! The rest of the crate sees small safe functions returning `io::Result`; nothing outside `sys`
//! names `libc`. Calls that can run on a pool thread's dispatch path (`epoll`, `futex`,
//! `clock_gettime`, `read`/`write` on timerfd and eventfd) never allocate.
//!
//! * **Owns:** every `libc`/`nix` call. **May use:** nothing else of the crate.
//! * A few functions serve only the measuring side, through `lfrt::os` (the `tools` feature);
//!   without it they are unused, which is expected.
#![cfg_attr(not(feature = "tools"), allow(dead_code))]

/// Calls a `libc` function and turns a negative return into `io::Error::last_os_error()`.
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        // SAFETY: every caller passes arguments that satisfy the documented contract of the
        // wrapped libc function (valid pointers to live, correctly sized objects; valid fds).
        let res = unsafe { libc::$fn($($arg, )*) };
        if res < 0 { Err(std::io::Error::last_os_error()) } else { Ok(res) }
    }};
}

/// The opening fence of a doc example that uses `lfrt::os` (the `tools` feature), as
/// `#[doc = os_example!()]` (`os_example!(no_run)`: built, not run): with the feature the
/// example is built and run; without it (a service's `cargo test --doc`) it is ignored, since
/// `lfrt::os` does not exist there.
#[cfg(feature = "tools")]
macro_rules! os_example {
    () => {
        "```"
    };
    (no_run) => {
        "```no_run"
    };
}
#[cfg(not(feature = "tools"))]
macro_rules! os_example {
    ($($kind:ident)?) => {
        "```ignore"
    };
}

pub(crate) mod epoll;
pub(crate) mod fd;
pub(crate) mod futex;
// The `pub` items of these five (and `gettid`) are what `lfrt::os` re-exports with the `tools`
// feature; without it nothing outside the crate reaches them (but tracefs's event types, which
// `lfrt::window` re-exports either way). The workspace's clippy run builds
// with `tools` (the tools crate turns it on), and there `unreachable_pub` checks them all.
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))]
pub(crate) mod mem;
pub(crate) mod net;
pub(crate) mod pthread;
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))]
pub(crate) mod reuseport;
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))]
pub(crate) mod sched;
pub(crate) mod schedstat;
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))]
pub(crate) mod signal;
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))]
pub(crate) mod tracefs;

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock every lfrt timestamp and timer uses
/// (`lfrt::task::time`'s deadlines, callback timers' instants,
/// [`TimerEvent`](crate::timer::TimerEvent)).
///
/// Served by the vDSO: no system call, no allocation.
///
/// # Examples
/// ```
/// let t0 = lfrt::task::time::now_ns();
/// std::thread::sleep(std::time::Duration::from_millis(1));
/// assert!(lfrt::task::time::now_ns() - t0 >= 1_000_000);
/// ```
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `d` in nanoseconds, or `None` for 2^64 ns or more (about 584 years): never the wrapped value
/// `d.as_nanos() as u64` gives. Callers refuse a period that long and saturate a delay.
pub(crate) fn duration_ns(d: std::time::Duration) -> Option<u64> {
    u64::try_from(d.as_nanos()).ok()
}

/// `CAP_IPC_LOCK` (linux/capability.h; the libc crate does not define capability numbers).
pub(crate) const CAP_IPC_LOCK: u32 = 14;
/// `CAP_SYS_NICE` (linux/capability.h).
pub(crate) const CAP_SYS_NICE: u32 = 23;

/// Whether capability `cap` (e.g. [`CAP_SYS_NICE`]) is in the calling thread's effective set,
/// as `/proc/thread-self/status` (`CapEff`) shows it; `false` if that cannot be read.
/// Capabilities are per thread (`/proc/self/status` shows the main thread's), and a thread
/// passes its own to the threads it creates.
pub(crate) fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| cap < 64 && caps & (1 << cap) != 0)
}

/// The error number an `io::Error` carries; `EIO` for an error that did not come from the
/// kernel (one made by std or by lfrt itself).
pub(crate) fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The kernel thread id of the calling thread (what `/proc`, `chrt` and `sched_*` take).
///
/// # Examples
#[doc = os_example!()]
/// let main = lfrt::os::gettid();
/// let other = std::thread::spawn(lfrt::os::gettid).join().unwrap();
/// assert_ne!(main, other);
/// ```
#[cfg_attr(not(feature = "tools"), allow(unreachable_pub))] // `lfrt::os::gettid`
pub fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}
