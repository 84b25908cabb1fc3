//! Memory locking, pre-faulting and fault counting.

use std::io;

/// `mlockall(MCL_CURRENT | MCL_FUTURE)`.
///
/// Also caps glibc at one malloc arena first: as root every new thread's 64 MiB arena
/// would otherwise be locked as well (measured: VmLck 3 MB → 70 MB).
pub(crate) fn lock_all() -> io::Result<()> {
    // SAFETY: mallopt only changes allocator tuning; M_ARENA_MAX=1 is a valid setting.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    syscall!(mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE)).map(drop)
}

/// Touches `bytes` of the calling thread's stack so later calls do not page-fault.
#[inline(never)]
pub(crate) fn prefault_stack(bytes: usize) {
    const CHUNK: usize = 16 * 1024;
    #[inline(never)]
    fn touch(left: usize) {
        let mut page = [0u8; CHUNK];
        let mut i = 0;
        while i < CHUNK {
            // Volatile, so the compiler cannot drop the writes that fault the pages in.
            // SAFETY: `i < CHUNK`, so the pointer is inside `page`.
            unsafe { std::ptr::write_volatile(page.as_mut_ptr().add(i), 1) };
            i += 4096;
        }
        std::hint::black_box(&mut page);
        if left > CHUNK {
            touch(left - CHUNK);
        }
    }
    touch(bytes);
}

/// Writes every page of `buf` so it is resident before the thread turns real-time.
pub(crate) fn prefault(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(4096) {
        // SAFETY: `i < buf.len()`.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 0) };
    }
}

/// Minor page faults of the calling thread (`getrusage(RUSAGE_THREAD)`).
///
/// # Examples
#[doc = os_example!()]
/// let before = lfrt::os::thread_minor_faults();
/// let page = vec![1u8; 1 << 20]; // touching fresh memory faults pages in
/// assert!(lfrt::os::thread_minor_faults() >= before);
/// # drop(page);
/// ```
pub fn thread_minor_faults() -> u64 {
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    match syscall!(getrusage(libc::RUSAGE_THREAD, &mut ru)) {
        Ok(_) => ru.ru_minflt as u64,
        Err(_) => 0,
    }
}

/// Voluntary + involuntary context switches and user+system CPU time (ns) of the whole process.
///
/// # Examples
#[doc = os_example!()]
/// let (voluntary, involuntary, cpu_ns) = lfrt::os::process_usage();
/// println!("{voluntary} + {involuntary} context switches, {cpu_ns} ns of CPU");
/// ```
pub fn process_usage() -> (u64, u64, u64) {
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if syscall!(getrusage(libc::RUSAGE_SELF, &mut ru)).is_err() {
        return (0, 0, 0);
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (
        ru.ru_nvcsw as u64,
        ru.ru_nivcsw as u64,
        tv(ru.ru_utime) + tv(ru.ru_stime),
    )
}

/// CPU time (user + system, ns) of this process's terminated and waited-for children
/// (`getrusage(RUSAGE_CHILDREN)`), e.g. a load generator run as a child process.
///
/// # Examples
#[doc = os_example!()]
/// std::process::Command::new("true").status()?;
/// println!("children used {} ns of CPU", lfrt::os::children_cpu_ns());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn children_cpu_ns() -> u64 {
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if syscall!(getrusage(libc::RUSAGE_CHILDREN, &mut ru)).is_err() {
        return 0;
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `CLOCK_THREAD_CPUTIME_ID` of the calling thread, in ns (0 if the clock cannot be read).
/// Served by the vDSO: no system call, no allocation.
///
/// # Examples
#[doc = os_example!()]
/// let t0 = lfrt::os::thread_cpu_ns();
/// let mut x = 0u64;
/// for i in 0..100_000u64 {
///     x = std::hint::black_box(x.wrapping_add(i));
/// }
/// println!("{} ns of this thread's CPU", lfrt::os::thread_cpu_ns() - t0);
/// ```
pub fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The machine's physical memory in bytes (`MemTotal` in `/proc/meminfo`), or `None` if it
/// cannot be read.
///
/// # Examples
#[doc = os_example!()]
/// if let Some(bytes) = lfrt::os::mem_total() {
///     println!("{} MiB of RAM", bytes >> 20);
/// }
/// ```
pub fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&info)
}

/// `MemTotal:       16303448 kB` → bytes.
fn parse_mem_total(info: &str) -> Option<u64> {
    let kib = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

/// How much memory `mlockall` may lock: the soft `RLIMIT_MEMLOCK`, which `CAP_IPC_LOCK` lifts.
///
/// # Examples
#[doc = os_example!()]
/// let m = lfrt::os::MemLock::probe();
/// match m.limit() {
///     None => println!("mlockall may lock everything"),
///     Some(bytes) => println!("mlockall may lock {bytes} bytes (CAP_IPC_LOCK: {})", m.cap_ipc_lock),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemLock {
    /// Soft `RLIMIT_MEMLOCK` in bytes; `None` = unlimited (`RLIM_INFINITY`).
    pub rlimit: Option<u64>,
    /// `CAP_IPC_LOCK` is in the effective capability set: no limit applies.
    pub cap_ipc_lock: bool,
}

impl MemLock {
    /// Reads the calling process's rlimit and capability set. An rlimit that cannot be read
    /// counts as 0 bytes (nothing may be locked), so a check never passes by mistake.
    pub fn probe() -> MemLock {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let rlimit = match syscall!(getrlimit(libc::RLIMIT_MEMLOCK, &mut rl)) {
            Ok(_) if rl.rlim_cur == libc::RLIM_INFINITY => None,
            Ok(_) => Some(rl.rlim_cur),
            Err(_) => Some(0),
        };
        MemLock {
            rlimit,
            cap_ipc_lock: super::has_capability(super::CAP_IPC_LOCK),
        }
    }

    /// The most bytes this process may lock; `None` = no limit.
    pub fn limit(&self) -> Option<u64> {
        if self.cap_ipc_lock {
            None
        } else {
            self.rlimit
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let info = "MemTotal:       16303448 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_mem_total(info), Some(16_303_448 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        // This machine's own figure is there and plausible (more than 16 MiB).
        assert!(mem_total().unwrap() > 16 << 20);
    }
}
