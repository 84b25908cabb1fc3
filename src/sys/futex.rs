//! `FUTEX_WAIT` / `FUTEX_WAKE` on a private 32-bit word: the follower parking primitive.

use std::sync::atomic::AtomicU32;

/// Sleeps while `*word == expected`. Returns on wake-up, signal or a value mismatch
/// (spurious returns are normal; callers re-check their condition).
pub(crate) fn wait(word: &AtomicU32, expected: u32) {
    // SAFETY: `word` points to a live, aligned u32 for the duration of the call; a null
    // timeout means wait without a deadline. Errors (EAGAIN, EINTR) are spurious wake-ups.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes at most `n` threads sleeping on `word`.
pub(crate) fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` points to a live, aligned u32; FUTEX_WAKE only reads the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}

/// Sleeps while `*word == expected`, at the latest until `deadline_ns` (absolute,
/// `CLOCK_MONOTONIC`, the clock of [`crate::sys::now_ns`]). Returns `false` if the kernel
/// reported the deadline as passed, `true` on any other return (wake-up, signal, value
/// mismatch: callers re-check their condition).
///
/// `FUTEX_WAIT_BITSET` takes an *absolute* timeout, so repeated spurious wake-ups never
/// stretch the deadline.
pub(crate) fn wait_until(word: &AtomicU32, expected: u32, deadline_ns: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` points to a live, aligned u32 and `ts` to a valid timespec for the
    // duration of the call; uaddr2 is unused by FUTEX_WAIT_BITSET (null is allowed); the
    // bitset must be non-zero (MATCH_ANY).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        )
    };
    !(rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT))
}
