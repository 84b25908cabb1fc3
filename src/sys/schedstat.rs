//! Where a thread's time went, as the kernel counts it: its CPU time, its wait on a runqueue,
//! its state, last CPU and context switches, and the hypervisor's steal time.
//!
//! The overrun watchdog reads these from its own (time-shared) thread while a handler runs past
//! its budget; nothing here runs on a dispatch path. Sources, all of this process's own:
//!
//! * CPU time: the thread's CPU-time clock (`clock_gettime` on the clock id the kernel derives
//!   from its tid, as `pthread_getcpuclockid` does). Exact at the instant it is read, where
//!   `/proc/self/task/TID/schedstat`'s first field (the same sum) of a thread running on another
//!   CPU is updated only at the scheduler tick and at switches, so lags up to a tick (4 ms at
//!   `HZ=250`).
//! * Runqueue delay: `schedstat`'s second field (ns spent runnable but not running), added when
//!   the wait ends: a wait still going on is not in it yet.
//! * State and last CPU: `/proc/self/task/TID/stat` fields 3 and 39; context switches:
//!   `voluntary_ctxt_switches` (the times the thread slept) of `/proc/self/task/TID/status`.
//! * Steal: the `steal` column (8th value) of `/proc/stat`'s `cpu` lines, in `USER_HZ` ticks
//!   (10 ms at the usual 100). A kernel with paravirtual time accounting
//!   (`CONFIG_PARAVIRT_TIME_ACCOUNTING`) also leaves steal out of a thread's CPU time, so the
//!   time its vCPU was taken away shows in none of the thread's counters.

use std::io;

/// One thread of this process at one instant ([`thread_times`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadTimes {
    /// CPU time used so far (ns), from the thread's CPU-time clock.
    pub(crate) on_cpu_ns: u64,
    /// Time spent runnable on a runqueue, waiting for a CPU (ns): waits that have ended.
    pub(crate) run_delay_ns: u64,
    /// Context switches because the thread slept (blocked).
    pub(crate) voluntary_switches: u64,
    /// Not runnable (any state but `R`): asleep, blocked on I/O, stopped.
    pub(crate) sleeping: bool,
    /// The CPU it runs on or last ran on.
    pub(crate) cpu: usize,
}

/// [`ThreadTimes`] of thread `tid` of this process: its CPU-time clock and three small files of
/// `/proc/self/task/TID`.
pub(crate) fn thread_times(tid: i32) -> io::Result<ThreadTimes> {
    let on_cpu_ns = thread_cpu_time_ns(tid)?;
    let dir = format!("/proc/self/task/{tid}");
    let malformed = |what| io::Error::other(format!("malformed {dir}/{what}"));
    let [_, run_delay_ns, _] =
        parse_schedstat(&std::fs::read_to_string(format!("{dir}/schedstat"))?)
            .ok_or_else(|| malformed("schedstat"))?;
    let (state, cpu) = parse_task_stat(&std::fs::read_to_string(format!("{dir}/stat"))?)
        .ok_or_else(|| malformed("stat"))?;
    let voluntary_switches =
        parse_voluntary_switches(&std::fs::read_to_string(format!("{dir}/status"))?)
            .ok_or_else(|| malformed("status"))?;
    Ok(ThreadTimes {
        on_cpu_ns,
        run_delay_ns,
        voluntary_switches,
        sleeping: state != 'R',
        cpu,
    })
}

/// CPU time (ns) thread `tid` of this process has used so far: `clock_gettime` on its CPU-time
/// clock (the kernel brings a running thread's sum up to date first). `ESRCH`/`EINVAL` for a
/// thread that has exited.
pub(crate) fn thread_cpu_time_ns(tid: i32) -> io::Result<u64> {
    if tid <= 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of linux/posix-timers.h: the inverted tid
    // shifted left by 3, CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2). The kernel accepts
    // it for any thread of the caller's process.
    let clock: libc::clockid_t = (!tid) << 3 | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Pointer contract (syscall!): `ts` is a live, writable timespec.
    syscall!(clock_gettime(clock, &mut ts))?;
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Steal time so far (ns): the whole system's and one CPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Steal {
    /// All CPUs together (`/proc/stat`'s `cpu` line). Zero on a machine whose kernel counts no
    /// steal (bare metal, or a hypervisor without a steal clock).
    pub(crate) total_ns: u64,
    /// CPU `cpu` alone (its `cpuN` line); `None` if that line is missing.
    pub(crate) cpu_ns: Option<u64>,
    /// The step both move in: one `USER_HZ` tick (10 ms at the usual 100). A difference of
    /// one step may hold anything from nothing to two steps of steal.
    pub(crate) tick_ns: u64,
}

/// [`Steal`] now, of the system and of CPU `cpu`, from `/proc/stat`; its `USER_HZ` ticks are
/// converted to ns, so it moves in steps of 10 ms (at `USER_HZ = 100`).
pub(crate) fn steal(cpu: usize) -> io::Result<Steal> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let tick_ns = 1_000_000_000 / (syscall!(sysconf(libc::_SC_CLK_TCK))?.max(1) as u64);
    let total =
        parse_steal_ticks(&stat, "cpu").ok_or_else(|| io::Error::other("malformed /proc/stat"))?;
    Ok(Steal {
        total_ns: total.saturating_mul(tick_ns),
        cpu_ns: parse_steal_ticks(&stat, &format!("cpu{cpu}")).map(|t| t.saturating_mul(tick_ns)),
        tick_ns,
    })
}

/// The three fields of `/proc/…/schedstat`: ns on a CPU, ns waiting on a runqueue, and the
/// times the thread was given a CPU.
pub(crate) fn parse_schedstat(s: &str) -> Option<[u64; 3]> {
    let mut f = s.split_whitespace().map(|v| v.parse().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// The state (field 3: `R`, `S`, `D`, …) and the CPU last run on (field 39) of a
/// `/proc/…/stat` line. The command name (field 2) may hold spaces and parentheses; the fields
/// after its last `)` do not.
pub(crate) fn parse_task_stat(s: &str) -> Option<(char, usize)> {
    let (_, rest) = s.rsplit_once(')')?;
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    // Field 3 was the first after the name; field 39 is 36 further on.
    let cpu = f.nth(35)?.parse().ok()?;
    Some((state, cpu))
}

/// `voluntary_ctxt_switches` of a `/proc/…/status` file: the times the thread slept.
pub(crate) fn parse_voluntary_switches(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The `steal` column (the 8th value: user, nice, system, idle, iowait, irq, softirq, steal)
/// of the line of `/proc/stat` named `name` (`cpu` for the total, `cpu0`, `cpu1`, …), in
/// `USER_HZ` ticks. A kernel too old to have the column has none to give.
pub(crate) fn parse_steal_ticks(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == name).then(|| f.nth(7)?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_its_three_fields() {
        assert_eq!(
            parse_schedstat("1049323 3709207 17\n"),
            Some([1_049_323, 3_709_207, 17])
        );
        assert_eq!(parse_schedstat("0 0 0"), Some([0; 3]));
        assert_eq!(parse_schedstat("12 34\n"), None, "a field missing");
        assert_eq!(parse_schedstat("12 x 3"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn task_stat_gives_state_and_cpu_past_a_name_with_spaces_and_parens() {
        // A real line (kernel 6.x: 52 fields), CPU 1, with a command name that has a space
        // and a parenthesis in it.
        let line = "20892 (lfrt (ctl) 0) S 20890 20890 2136 34816 20890 4194304 123 0 0 0 \
                    5 7 0 0 20 0 1 0 3591410 2789376 196 18446744073709551615 1 1 0 0 0 0 \
                    0 0 65536 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_task_stat(line), Some(('S', 1)));
        assert_eq!(
            parse_task_stat(&line.replace(") S ", ") R ")),
            Some(('R', 1))
        );
        assert_eq!(parse_task_stat("1 (x) R 0 0"), None, "too short");
        assert_eq!(parse_task_stat("no name at all"), None);
    }

    #[test]
    fn status_gives_the_voluntary_switches() {
        let status = "Name:\tlfrt-control-0\nState:\tS (sleeping)\nTgid:\t7\n\
                      voluntary_ctxt_switches:\t1520\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_voluntary_switches(status), Some(1520));
        assert_eq!(
            parse_voluntary_switches("nonvoluntary_ctxt_switches:\t3\n"),
            None
        );
    }

    #[test]
    fn proc_stat_gives_the_steal_column_of_the_line_asked_for() {
        let stat = "cpu  2546949 291097 1046180 3118411 15804 0 105259 3592 0 0\n\
                    cpu0 1228149 143304 529794 1603045 4385 0 51654 1822 0 0\n\
                    cpu1 1318799 147793 516386 1515366 11418 0 53604 1770 0 0\n\
                    intr 137603462 0 0 0\nctxt 1\n";
        assert_eq!(parse_steal_ticks(stat, "cpu"), Some(3592));
        assert_eq!(parse_steal_ticks(stat, "cpu0"), Some(1822));
        assert_eq!(parse_steal_ticks(stat, "cpu1"), Some(1770));
        assert_eq!(parse_steal_ticks(stat, "cpu2"), None, "no such CPU");
        assert_eq!(
            parse_steal_ticks("cpu  1 2 3 4 5 6 7\n", "cpu"),
            None,
            "a kernel without the column"
        );
    }

    #[test]
    fn this_threads_times_and_the_systems_steal_can_be_read() {
        let tid = crate::sys::gettid();
        let t = thread_times(tid).unwrap();
        assert!(t.on_cpu_ns > 0);
        assert!(!t.sleeping, "the reading thread runs");
        let spin_until = t.on_cpu_ns + 1_000_000;
        while thread_cpu_time_ns(tid).unwrap() < spin_until {}
        assert!(thread_times(tid).unwrap().on_cpu_ns >= spin_until);
        let s = steal(t.cpu).unwrap();
        assert!(s.cpu_ns.unwrap() <= s.total_ns);
        assert!(thread_times(0).is_err(), "no thread 0");
        let gone = std::thread::spawn(crate::sys::gettid).join().unwrap();
        assert!(thread_cpu_time_ns(gone).is_err(), "an exited thread");
    }
}
