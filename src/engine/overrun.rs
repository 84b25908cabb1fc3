//! Why a dispatch overran its budget: the watchdog's measurement of where the time went.
//!
//! A dispatch's stamp (`busy_since`) says how long it has been running by the clock, not
//! whether its handler was on a CPU. The watchdog therefore reads, from its own thread, the
//! kernel's accounts of the pool thread ([`sys::schedstat`]): once when it first sees the
//! dispatch at half its budget or later, at every look after that until it has reported the
//! overrun (or seen the dispatch end within its budget), and once more when it sees the
//! dispatch ended (or [`REPORT_WAIT_NS`] after the overrun if it still runs). The system-wide
//! `/proc/stat`, whose cost grows with the machine's CPUs and interrupts, is read only once the
//! dispatch has overrun. Over that span it splits the time into
//!
//! * **ran**: the thread's CPU time;
//! * **waited**: its runqueue delay, runnable but not running (another thread had the CPU);
//! * **steal**: the time the hypervisor took the CPU away;
//! * **blocked**: the rest, when the thread slept (off the CPU, not runnable),
//!
//! and the largest share names the [`Cause`]. Nothing of this is read on the dispatch path,
//! which keeps its one stamp.
//!
//! Two limits of the kernel's accounts shape the split ([`split`]):
//!
//! * A runqueue wait is counted when it ends, so only a reading taken after the thread ran
//!   again (the one at the dispatch's end) holds a wait that covered the span.
//! * `/proc/stat` counts steal in `USER_HZ` ticks (10 ms), far coarser than a sub-millisecond
//!   overrun. But a kernel with paravirtual steal accounting also leaves stolen time out of
//!   the thread's CPU time, so a thread that neither ran, nor waited, nor slept during a
//!   dispatch that has ended had its vCPU taken: on a machine whose kernel counts steal at
//!   all, the watchdog counts that time as steal. Without such a steal clock (bare metal) it
//!   counts as waiting (interrupts, with `CONFIG_IRQ_TIME_ACCOUNTING`).

use crate::sys::{
    self,
    schedstat::{self, Steal, ThreadTimes},
};

/// How long after an overrun the watchdog waits for the dispatch to end before it reports
/// it anyway, with what it read so far. The count and a demotion do not wait.
pub(crate) const REPORT_WAIT_NS: u64 = 10_000_000;

/// Why a dispatch ran past its budget: where most of the measured span went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The handler ran: its thread was on a CPU for most of the span.
    Handler,
    /// It waited for a CPU that another thread (a higher lane's, another process's) held.
    Preempted,
    /// The hypervisor took the CPU (steal time).
    Hypervisor,
    /// It slept: off the CPU and not runnable (a blocking call in the handler).
    Blocked,
    /// Nothing could be read: the span was empty, or the thread's `/proc` files were gone.
    Unknown,
}

impl Cause {
    /// Every cause, in the order of the lane's counters (`Cause as usize`).
    #[cfg(test)]
    pub(crate) const ALL: [Cause; 5] = [
        Cause::Handler,
        Cause::Preempted,
        Cause::Hypervisor,
        Cause::Blocked,
        Cause::Unknown,
    ];

    /// The word the report's `cause` field and the metrics give.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cause::Handler => "handler",
            Cause::Preempted => "preempted",
            Cause::Hypervisor => "hypervisor",
            Cause::Blocked => "blocked",
            Cause::Unknown => "unknown",
        }
    }
}

/// The cause of an overrun whose measured span of `span_ns` the thread spent `ran_ns` on a
/// CPU, `waited_ns` on a runqueue and `steal_ns` with its vCPU taken; the rest of the span it
/// was blocked. The largest of the four wins; a tie goes to the first of handler, preempted,
/// hypervisor, blocked (the handler is never excused by a tie). An empty span is
/// [`Cause::Unknown`].
pub(crate) fn classify(ran_ns: u64, waited_ns: u64, steal_ns: u64, span_ns: u64) -> Cause {
    if span_ns == 0 {
        return Cause::Unknown;
    }
    let blocked = span_ns.saturating_sub(ran_ns.saturating_add(waited_ns).saturating_add(steal_ns));
    let mut best = (ran_ns, Cause::Handler);
    for share in [
        (waited_ns, Cause::Preempted),
        (steal_ns, Cause::Hypervisor),
        (blocked, Cause::Blocked),
    ] {
        if share.0 > best.0 {
            best = share;
        }
    }
    best.1
}

/// Where a measured span of a dispatch went (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Split {
    pub(crate) ran_ns: u64,
    pub(crate) waited_ns: u64,
    pub(crate) steal_ns: u64,
    pub(crate) span_ns: u64,
}

impl Split {
    /// [`classify`] of this split.
    pub(crate) fn cause(&self) -> Cause {
        classify(self.ran_ns, self.waited_ns, self.steal_ns, self.span_ns)
    }
}

/// What the watchdog read of a pool thread at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// When (`CLOCK_MONOTONIC`, ns).
    pub(crate) at_ns: u64,
    pub(crate) times: ThreadTimes,
    /// Steal so far, of the system and of the CPU the thread was on, if read.
    pub(crate) steal: Option<Steal>,
}

impl Reading {
    /// Reads thread `tid` now, and the steal time with `steal`; `None` if the thread's `/proc`
    /// files cannot be read (not started yet, exited).
    pub(crate) fn take(tid: i32, steal: bool) -> Option<Reading> {
        if tid <= 0 {
            return None;
        }
        let at_ns = sys::now_ns();
        let times = schedstat::thread_times(tid).ok()?;
        Some(Reading {
            at_ns,
            times,
            steal: if steal {
                schedstat::steal(times.cpu).ok()
            } else {
                None
            },
        })
    }
}

/// The split of a dispatch between readings `first` and `end`, `last` being the latest
/// reading taken while the dispatch still ran (`end` itself if it still runs, `ended` false),
/// and `base` the first reading with the steal time (taken once it had overrun).
/// `slept`: some reading found the thread asleep while the dispatch ran.
///
/// A dispatch that ended with one reading only while it ran (`last` is `first`) has no span
/// known to be inside it: the split is empty ([`Cause::Unknown`]). Otherwise:
///
/// * ran and waited are the differences of the thread's CPU time and runqueue delay;
/// * with `ended`, the time after `last` is partly after the dispatch, where the thread
///   usually waits for its next event: as much of it as neither ran nor waited is taken off
///   the span rather than counted as blocked or stolen;
/// * steal is the `/proc/stat` difference from `base` to `end` (of the thread's CPU if it
///   stayed on one, else of the system) less one tick, since a counter that moved by one tick may have moved by a
///   sliver of steal; at most the span;
/// * the time the thread neither ran nor waited is blocked if it slept during the dispatch
///   (a reading saw it asleep, or it switched out voluntarily); else, once the dispatch has
///   ended (every wait counted), it had its vCPU taken if the kernel counts steal at all,
///   and otherwise it waited; while the dispatch still runs it is a wait not yet counted.
pub(crate) fn split(
    first: &Reading,
    base: Option<&Reading>,
    last: &Reading,
    end: &Reading,
    ended: bool,
    slept: bool,
) -> Split {
    if ended && last.at_ns <= first.at_ns {
        return Split::default();
    }
    let (a, b) = (&first.times, &end.times);
    let span = end.at_ns.saturating_sub(first.at_ns);
    let ran = b.on_cpu_ns.saturating_sub(a.on_cpu_ns);
    let mut waited = b.run_delay_ns.saturating_sub(a.run_delay_ns);
    let gap = span.saturating_sub(ran.saturating_add(waited));
    let after = if ended {
        end.at_ns.saturating_sub(last.at_ns).min(gap)
    } else {
        0
    };
    let (span, gap) = (span - after, gap - after);
    // Less one tick: a counter that moved by one step may have moved by a sliver of steal.
    let (from, to) = (
        base.and_then(|r| r.steal.map(|s| (s, r.times.cpu))),
        end.steal,
    );
    let counted = match (from, to) {
        (Some((x, cpu)), Some(y)) => match (x.cpu_ns, y.cpu_ns) {
            (Some(x), Some(y)) if cpu == b.cpu => y.saturating_sub(x),
            _ => y.total_ns.saturating_sub(x.total_ns),
        }
        .saturating_sub(y.tick_ns)
        .min(span),
        _ => 0,
    };
    let steals = to.is_some_and(|s| s.total_ns > 0);
    let slept =
        slept || last.times.voluntary_switches > a.voluntary_switches || (!ended && b.sleeping);
    let steal = if slept {
        counted
    } else if ended && steals {
        counted.max(gap)
    } else {
        waited = waited.saturating_add(gap.saturating_sub(counted));
        counted
    };
    Split {
        ran_ns: ran,
        waited_ns: waited,
        steal_ns: steal,
        span_ns: span,
    }
}

/// What the watchdog follows of one pool thread's current dispatch.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The dispatch followed (its stamp); 0: none.
    pub(crate) start: u64,
    /// The first reading of it, the first with the steal time, and the latest while it ran.
    pub(crate) first: Option<Reading>,
    pub(crate) base: Option<Reading>,
    pub(crate) last: Option<Reading>,
    /// A reading found the thread asleep.
    pub(crate) slept: bool,
    /// Counted as an overrun at this instant, its report still due.
    pub(crate) due: Option<u64>,
    /// The token of the event being processed when it was counted.
    pub(crate) token: u64,
    /// Other lane threads' CPU time at the first reading: (lane, tid, ns), to name a
    /// preemptor.
    pub(crate) others: Vec<(usize, i32, u64)>,
}

impl Watch {
    /// Takes a reading of `tid` while the dispatch runs, with the steal time if `steal`; the
    /// first one is kept as the span's start. Returns whether it was the first.
    pub(crate) fn read(&mut self, tid: i32, steal: bool) -> bool {
        let Some(r) = Reading::take(tid, steal && self.base.is_none()) else {
            return false;
        };
        self.slept |= r.times.sleeping;
        self.last = Some(r);
        if r.steal.is_some() {
            self.base = Some(r);
        }
        if self.first.is_none() {
            self.first = Some(r);
            return true;
        }
        false
    }

    /// The split of the followed dispatch: `ended` if it has ended (a reading is taken now),
    /// else up to the latest reading. `None` if there is no span to split.
    pub(crate) fn split(&self, tid: i32, ended: bool) -> Option<(Split, Reading)> {
        let (first, last, base) = (self.first?, self.last?, self.base.as_ref());
        // The end: a new reading if the dispatch has ended; else the latest, read now with the
        // steal time if no reading had it.
        let end = match ended {
            true => Reading::take(tid, true),
            false if base.is_none() => Reading::take(tid, true),
            false => None,
        };
        Some(match end {
            Some(end) => (split(&first, base, &last, &end, ended, self.slept), end),
            // Still running, or gone (exited) since: up to the latest reading.
            None => (split(&first, base, &last, &last, false, self.slept), last),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_largest_share_names_the_cause() {
        // A handler that spins: on the CPU nearly all the span.
        assert_eq!(classify(9 * MS, MS / 10, 0, 10 * MS), Cause::Handler);
        // Preempted: waited on the runqueue most of it.
        assert_eq!(classify(MS, 8 * MS, 0, 10 * MS), Cause::Preempted);
        // The VM took the CPU: a no-op handler, 600 µs of an overrun stolen.
        assert_eq!(classify(20_000, 0, 600_000, 650_000), Cause::Hypervisor);
        // Neither ran, nor waited, nor stolen: it slept.
        assert_eq!(classify(50_000, 10_000, 0, 10 * MS), Cause::Blocked);
        // Shares that add up to more than the span (a wait that began before it) leave no
        // blocked time.
        assert_eq!(classify(MS, 20 * MS, 0, 10 * MS), Cause::Preempted);
        assert_eq!(classify(0, 0, 0, 0), Cause::Unknown, "an empty span");
    }

    #[test]
    fn a_tie_never_excuses_the_handler() {
        assert_eq!(classify(5 * MS, 5 * MS, 0, 10 * MS), Cause::Handler);
        assert_eq!(classify(5 * MS, 0, 5 * MS, 10 * MS), Cause::Handler);
        assert_eq!(classify(0, 5 * MS, 5 * MS, 10 * MS), Cause::Preempted);
        assert_eq!(classify(0, 0, 5 * MS, 10 * MS), Cause::Hypervisor);
        assert_eq!(classify(4 * MS, 0, 0, 8 * MS), Cause::Handler);
    }

    #[test]
    fn causes_have_stable_names_in_counter_order() {
        let names: Vec<&str> = Cause::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            ["handler", "preempted", "hypervisor", "blocked", "unknown"]
        );
        for (i, c) in Cause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    /// A reading at `at` of a thread that has used `cpu` and waited `delay`, switched out
    /// voluntarily `vol` times, on CPU 1, with `steal` ns stolen there (and in all).
    fn reading(at: u64, cpu: u64, delay: u64, vol: u64, sleeping: bool, steal: u64) -> Reading {
        Reading {
            at_ns: at,
            times: ThreadTimes {
                on_cpu_ns: cpu,
                run_delay_ns: delay,
                voluntary_switches: vol,
                sleeping,
                cpu: 1,
            },
            steal: Some(Steal {
                total_ns: steal,
                cpu_ns: Some(steal),
                tick_ns: 10 * MS,
            }),
        }
    }

    #[test]
    fn a_split_from_readings() {
        let first = reading(100 * MS, 10 * MS, 0, 5, false, 0);
        // Spinning 8 ms of a 9 ms span that ended: the handler.
        let last = reading(108 * MS, 18 * MS, 0, 5, false, 0);
        let end = reading(109 * MS, 18 * MS, 0, 6, true, 0);
        let s = split(&first, Some(&first), &last, &end, true, false);
        assert_eq!(
            (s.ran_ns, s.span_ns),
            (8 * MS, 8 * MS),
            "the after-end taken off"
        );
        assert_eq!(s.cause(), Cause::Handler);

        // Preempted: the wait shows at the end, once the thread ran again.
        let waiting = reading(101 * MS, 10 * MS + 50_000, 0, 5, false, 0);
        let end = reading(109 * MS, 10 * MS + 100_000, 8 * MS, 6, true, 0);
        let s = split(&first, Some(&first), &waiting, &end, true, false);
        assert_eq!(s.cause(), Cause::Preempted);
        assert_eq!(s.waited_ns, 8 * MS);
        // Seen running once only, then ended: nothing known to be inside the dispatch.
        let s = split(&first, Some(&first), &first, &end, true, false);
        assert_eq!((s, s.cause()), (Split::default(), Cause::Unknown));

        // Asleep when read: blocked, though the machine counts steal, and though /proc/stat's
        // counter moved by one tick meanwhile.
        let first = reading(100 * MS, 10 * MS, 0, 5, false, 30 * MS);
        let asleep = reading(105 * MS, 10 * MS + 10_000, 0, 6, true, 30 * MS);
        let end = reading(111 * MS, 10 * MS + 30_000, 5_000, 7, true, 40 * MS);
        let s = split(&first, Some(&first), &asleep, &end, true, true);
        assert_eq!(s.cause(), Cause::Blocked);
        assert_eq!(s.steal_ns, 0, "one tick of /proc/stat counts as none");

        // A no-op handler that neither ran, waited nor slept over 600 µs of a VM that counts
        // steal: its vCPU was taken, though /proc/stat's ticks did not move.
        let first = reading(100 * MS, 10 * MS, 0, 5, false, 30 * MS);
        let last = reading(100 * MS + 600_000, 10 * MS + 10_000, 0, 5, false, 30 * MS);
        let end = reading(100 * MS + 700_000, 10 * MS + 20_000, 0, 6, true, 30 * MS);
        let s = split(&first, Some(&first), &last, &end, true, false);
        assert_eq!(s.cause(), Cause::Hypervisor);
        assert_eq!(s.steal_ns, 580_000);
        assert_eq!(
            s.span_ns, 600_000,
            "the 100 µs after the last look taken off"
        );

        // The same on bare metal (no steal ever counted): a wait (interrupts).
        let bare = |r: Reading| Reading {
            steal: Some(Steal {
                total_ns: 0,
                cpu_ns: Some(0),
                tick_ns: 10 * MS,
            }),
            ..r
        };
        let s = split(
            &bare(first),
            Some(&bare(first)),
            &bare(last),
            &bare(end),
            true,
            false,
        );
        assert_eq!((s.cause(), s.steal_ns), (Cause::Preempted, 0));

        // Still running (no end yet), runnable, not run: a wait not yet counted, never
        // guessed to be steal.
        let s = split(&first, Some(&first), &last, &last, false, false);
        assert_eq!((s.cause(), s.steal_ns), (Cause::Preempted, 0));
        // ...unless /proc/stat counted the steal (two ticks: more than one tick's worth).
        let stolen = reading(100 * MS + 600_000, 10 * MS + 10_000, 0, 5, false, 50 * MS);
        let s = split(&first, Some(&first), &stolen, &stolen, false, false);
        assert_eq!((s.cause(), s.steal_ns), (Cause::Hypervisor, 600_000));
        // Without a reading of the steal time before, none is counted.
        let s = split(&first, None, &stolen, &stolen, false, false);
        assert_eq!((s.cause(), s.steal_ns), (Cause::Preempted, 0));
    }

    #[test]
    fn a_reading_of_no_thread_is_none() {
        assert!(Reading::take(0, true).is_none());
        let mut w = Watch::default();
        assert!(!w.read(0, true));
        assert!(
            w.split(0, true).is_none(),
            "no span without a first reading"
        );
    }
}
