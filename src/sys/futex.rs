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
