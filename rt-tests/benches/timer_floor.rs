//! The floor a VM allows for many timers on one thread: a bare loop of `epoll_wait` and `read`
//! over N periodic timerfds, on one thread at SCHED_FIFO, with no runtime at all (issue #27).
//! It is the yardstick for `lfrt cyclic -t N --pool-threads 2`: lfrt may miss at most what this
//! loop misses, plus what its own dispatch costs.
//!
//! The timers are laid out as `lfrt cyclic` lays them out by default (timer k of N offset by
//! k/N of the interval, or all at once with `--aligned`), and each is read as lfrt cyclic's
//! handler reads it: one `read` per report, the expirations beyond the first counted as missed
//! periods, lateness taken from the expected expiry to the moment the read begins.
//!
//! ```text
//! cargo bench --bench timer_floor -- [-t 256] [-i 1000] [-D 10] [-p 80] [--aligned]
//! ```
//! Prints one line: loops run, missed periods, their share of the periods that elapsed, and
//! the average lateness. Bounded by `-D`.

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::os::fd::AsFd;

fn main() {
    let (mut timers, mut interval_us, mut secs, mut prio, mut aligned) =
        (256usize, 1000u64, 10u64, 80u8, false);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let val = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match args[i].as_str() {
            "-t" => timers = val().expect("-t N") as usize,
            "-i" => interval_us = val().expect("-i US"),
            "-D" => secs = val().expect("-D SECONDS"),
            "-p" => prio = val().expect("-p PRIO") as u8,
            "--aligned" | "--bench" => {
                aligned |= args[i] == "--aligned";
                i += 1;
                continue;
            }
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    assert!((1..=4096).contains(&timers) && secs <= 120 && interval_us >= 50);
    lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(prio)).expect("SCHED_FIFO (run as root)");

    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).expect("epoll_create1");
    let interval_ns = interval_us * 1000;
    let first = lfrt::os::now_ns() + 50_000_000;
    let mut fds = Vec::with_capacity(timers);
    for k in 0..timers {
        let phase = if aligned {
            0
        } else {
            interval_ns * k as u64 / timers as u64
        };
        let mut t = lfrt::Timer::new().expect("timerfd_create");
        t.arm(first + phase + interval_ns, interval_ns)
            .expect("timerfd_settime");
        epoll
            .add(t.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, k as u64))
            .expect("epoll_ctl");
        fds.push(t);
    }

    let end = first + secs * 1_000_000_000;
    let mut events = [EpollEvent::empty(); 64];
    let (mut loops, mut missed, mut late_sum) = (0u64, 0u64, 0u128);
    while lfrt::os::now_ns() < end {
        let n = match epoll.wait(&mut events, EpollTimeout::from(100u16)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => panic!("epoll_wait: {e}"),
        };
        for ev in &events[..n] {
            let entry = lfrt::os::now_ns();
            if let Ok(Some((expirations, due_ns))) = fds[ev.data() as usize].read() {
                loops += 1;
                missed += expirations - 1;
                late_sum += u128::from(entry.saturating_sub(due_ns));
            }
        }
    }
    let periods = loops + missed;
    println!(
        "# bare loop: 1 thread at SCHED_FIFO {prio}, epoll_wait + read over {timers} timerfds at {interval_us} µs ({}), {secs} s",
        if aligned { "aligned" } else { "staggered" }
    );
    println!(
        "floor: loops {loops}, missed periods {missed}, share missed {:.1} %, avg lateness {:.1} µs",
        if periods > 0 { missed as f64 * 100.0 / periods as f64 } else { 0.0 },
        if loops > 0 { late_sum as f64 / loops as f64 / 1000.0 } else { 0.0 }
    );
}
