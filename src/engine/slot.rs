//! A pool thread's slot: what other threads (the runtime, the watchdog, the reporters) see of
//! one pool thread, and the one owner of its demotion and restore.
//!
//! The watchdog demotes a runaway thread through [`ThreadSlot::demote`]; the thread itself
//! takes a policy through [`ThreadSlot::take_sched`] (a lent thread's raise and return) and
//! restores after each handler through [`ThreadSlot::restore_if_demoted`]. No other code
//! changes a pool thread's policy after its set-up.

use crate::observe::metrics::Counters;
use crate::sync::pi_mutex::PiMutex;
use crate::sys::{sched, sched::Sched};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use std::sync::Arc;

/// What other threads (runtime, watchdog, reporters) see of one pool thread.
#[derive(Debug)]
pub(crate) struct ThreadSlot {
    pub(crate) sched: Sched,
    pub(crate) priority: u8,
    pub(crate) tid: AtomicI32,
    /// The policy and level the kernel reported after set-up ([`Applied`]), so a snapshot
    /// shows what runs, not what was asked for (a best-effort lane may run time-shared).
    pub(crate) applied: AtomicU64,
    /// Handler start time (ns) while a handler runs, 0 otherwise. Shared with the thread's
    /// [`Context`](crate::engine::handler::Context), through which a handler whose work
    /// continues across dispatches backdates it (`Context::backdate_dispatch`).
    pub(crate) busy_since: Arc<AtomicU64>,
    /// Token of the event being processed.
    pub(crate) busy_token: AtomicU64,
    pub(crate) allocs_now: AtomicU64,
    /// Allocation count at warm-up; `u64::MAX` before.
    pub(crate) allocs_base: AtomicU64,
    pub(crate) faults_base: AtomicU64,
    /// Minor faults at exit (the /proc entry is gone afterwards); `u64::MAX` while running.
    pub(crate) faults_final: AtomicU64,
    pub(crate) samples: AtomicU64,
    pub(crate) samples_dropped: AtomicU64,
    /// Set by the watchdog (under `sched_lock`) when it demoted this thread.
    pub(crate) demoted: AtomicBool,
    pub(crate) sched_lock: PiMutex<()>,
}

impl ThreadSlot {
    pub(crate) fn new(sched: Sched, priority: u8) -> ThreadSlot {
        ThreadSlot {
            sched,
            priority,
            tid: AtomicI32::new(0),
            applied: AtomicU64::new(Applied::NOT_STARTED),
            busy_since: Arc::new(AtomicU64::new(0)),
            busy_token: AtomicU64::new(0),
            allocs_now: AtomicU64::new(0),
            allocs_base: AtomicU64::new(u64::MAX),
            faults_base: AtomicU64::new(u64::MAX),
            faults_final: AtomicU64::new(u64::MAX),
            samples: AtomicU64::new(0),
            samples_dropped: AtomicU64::new(0),
            demoted: AtomicBool::new(false),
            sched_lock: PiMutex::new(()),
        }
    }

    /// Allocations since warm-up; `None` before this thread's warm-up (not measured yet).
    /// Meaningful only with the counting allocator installed (the caller checks).
    pub(crate) fn allocations(&self) -> Option<u64> {
        let base = self.allocs_base.load(Acquire);
        (base != u64::MAX).then(|| self.allocs_now.load(Relaxed).saturating_sub(base))
    }

    /// Minor page faults since warm-up; `None` before this thread's warm-up, or if its count
    /// can no longer be read (a thread that died without recording its final count).
    pub(crate) fn minor_faults(&self) -> Option<u64> {
        let base = self.faults_base.load(Acquire);
        if base == u64::MAX {
            return None;
        }
        let now = match self.faults_final.load(Acquire) {
            u64::MAX => sched::minor_faults(self.tid.load(Relaxed)).ok()?,
            f => f,
        };
        Some(now.saturating_sub(base))
    }

    /// The thread's dispatch begins: the handler of `token` runs since `start_ns`
    /// (`CLOCK_MONOTONIC`, nonzero). The one stamp of a dispatch, for a Leader/Followers
    /// thread (`dispatch.rs`) and a runtime bound lane's thread (`bound/mod.rs`) alike: the
    /// watchdog reads it to find a handler past its budget, a shutdown to name a handler that
    /// does not return.
    #[inline]
    pub(crate) fn begin_dispatch(&self, token: u64, start_ns: u64) {
        debug_assert_ne!(start_ns, 0, "0 stamps no dispatch");
        // Readers load `busy_since` first (SeqCst), then the token.
        self.busy_token.store(token, Relaxed);
        self.busy_since.store(start_ns, SeqCst);
    }

    /// The thread's dispatch ended: clears the stamp and *then* restores the thread's policy if
    /// the watchdog demoted it meanwhile (the order the demotion protocol below needs).
    #[inline]
    pub(crate) fn end_dispatch(&self, counters: &Counters, lane: &str) {
        self.busy_since.store(0, SeqCst);
        self.restore_if_demoted(counters, lane);
    }

    // Demotion and restore have one owner, these three methods: the watchdog calls
    // [`demote`](Self::demote), the thread itself [`take_sched`](Self::take_sched) (a lent
    // thread's raise and return) and [`restore_if_demoted`](Self::restore_if_demoted) (after
    // each handler). Protocol (no lost restore): the watchdog, under `sched_lock`, sets
    // `demoted` and *then* re-reads `busy_since`; it demotes only if the same handler still
    // runs. The thread clears `busy_since` and *then* reads `demoted`; if set, it takes
    // `sched_lock` and restores. Both pairs are SeqCst, so at least one side sees the other's
    // write: either the watchdog sees the handler ended (and does not demote), or the thread
    // sees `demoted` (and restores after the demotion finished).

    /// Watchdog side: moves this thread to SCHED_OTHER if the handler that started at `start`
    /// still runs. Only the target's policy changes (`sched::set_thread` on its tid leaves
    /// every nice value alone, the caller's included). Returns whether it demoted.
    pub(crate) fn demote(&self, start: u64) -> bool {
        let _l = self.sched_lock.lock();
        self.demoted.store(true, SeqCst);
        if self.busy_since.load(SeqCst) == start
            && sched::set_thread(self.tid.load(Relaxed), Sched::Other).is_ok()
        {
            return true;
        }
        self.demoted.store(false, SeqCst);
        false
    }

    /// Thread side: the calling thread (this slot's) takes policy `s`, its own or a lane's it
    /// is lent to. Under `sched_lock`, so it does not interleave with a demotion; a demotion in
    /// force is over with it.
    pub(crate) fn take_sched(&self, s: Sched) -> io::Result<()> {
        let _g = self.sched_lock.lock();
        self.demoted.store(false, SeqCst);
        sched::set_current(s)
    }

    /// Puts the thread back to its configured policy if the watchdog demoted it. Called by the
    /// thread itself after clearing `busy_since` ([`end_dispatch`](Self::end_dispatch)). A
    /// failed restore (the privilege was taken away while running) is counted and logged: the
    /// thread then stays time-shared.
    #[cold]
    fn restore_if_demoted(&self, counters: &Counters, lane: &str) {
        if !self.demoted.load(SeqCst) {
            return;
        }
        if let Err(e) = self.take_sched(self.sched) {
            Counters::add(&counters.restore_failures, 1);
            tracing::error!(
                lane = %lane,
                policy = ?self.sched,
                error = %e,
                "could not restore a pool thread's policy after a watchdog demotion; \
                 it stays SCHED_OTHER"
            );
        }
    }
}

/// A pool thread's scheduling as read back from the kernel after set-up, packed in one word:
/// the policy and its level (the RT priority, or the nice value for `SCHED_OTHER`).
pub(crate) struct Applied;

impl Applied {
    pub(crate) const NOT_STARTED: u64 = u64::MAX;

    pub(crate) fn pack(sched: io::Result<Sched>, nice: io::Result<i32>) -> u64 {
        match sched {
            Ok(Sched::Fifo(p)) => 1 << 32 | u64::from(p),
            Ok(Sched::Rr(p)) => 2 << 32 | u64::from(p),
            Ok(Sched::Other) => 3 << 32 | u64::from(nice.unwrap_or(0) as u32),
            // Runtime in µs (the period and deadline are the configuration's).
            Ok(Sched::Deadline { runtime_ns, .. }) => {
                4 << 32 | (runtime_ns / 1000).min(u64::from(u32::MAX))
            }
            Err(_) => Self::NOT_STARTED - 1,
        }
    }

    /// `fifo 80`, `rr 10`, `other nice 5`, or why there is nothing to show.
    pub(crate) fn describe(word: u64) -> String {
        let level = word as u32;
        match word >> 32 {
            1 => format!("fifo {level}"),
            2 => format!("rr {level}"),
            3 => format!("other nice {}", level as i32),
            4 => format!("deadline runtime {level} us"),
            _ if word == Self::NOT_STARTED => "not started".to_owned(),
            _ => "unreadable".to_owned(),
        }
    }
}

/// The nice value a best-effort lane runs at when the kernel refuses its RT priority, so the
/// lanes keep their order under time-sharing: priority 99 → nice 0 … priority 1 → nice 19.
/// (Without CAP_SYS_NICE a thread may raise its nice value but not lower it below 0.)
pub(crate) fn best_effort_nice(priority: u8) -> i32 {
    (i32::from(99u8.saturating_sub(priority.min(99))) * 19 + 49) / 99
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::testing::fifo_allowed;
    use crate::sys::gettid;
    use std::sync::{mpsc, Arc};

    #[test]
    fn applied_packs_what_the_kernel_reported_and_describes_it() {
        let ok = |s| Applied::describe(Applied::pack(Ok(s), Ok(7)));
        assert_eq!(ok(Sched::Fifo(80)), "fifo 80");
        assert_eq!(ok(Sched::Rr(1)), "rr 1");
        assert_eq!(ok(Sched::Other), "other nice 7");
        assert_eq!(
            ok(Sched::Deadline {
                runtime_ns: 250_000,
                deadline_ns: 1_000_000,
                period_ns: 1_000_000
            }),
            "deadline runtime 250 us"
        );
        // A negative nice value survives the packing; an unreadable one shows as 0.
        let other = |nice| Applied::describe(Applied::pack(Ok(Sched::Other), nice));
        assert_eq!(other(Ok(-20)), "other nice -20");
        assert_eq!(other(Err(io::Error::other("gone"))), "other nice 0");
        // A deadline runtime beyond u32 µs saturates instead of wrapping into another policy.
        let huge = Applied::pack(
            Ok(Sched::Deadline {
                runtime_ns: u64::MAX,
                deadline_ns: u64::MAX,
                period_ns: u64::MAX,
            }),
            Ok(0),
        );
        assert_eq!(huge >> 32, 4);
        assert_eq!(
            Applied::describe(huge),
            format!("deadline runtime {} us", u32::MAX)
        );
        // Nothing read back, or not started yet: never mistaken for a policy.
        let failed = Applied::pack(Err(io::Error::other("ESRCH")), Ok(0));
        assert_eq!(Applied::describe(failed), "unreadable");
        assert_eq!(Applied::describe(Applied::NOT_STARTED), "not started");
    }

    #[test]
    fn best_effort_nice_keeps_the_lanes_in_order() {
        assert_eq!(best_effort_nice(99), 0);
        assert_eq!(best_effort_nice(1), 19);
        assert_eq!(best_effort_nice(0), 19);
        assert_eq!(best_effort_nice(u8::MAX), 0, "above 99 counts as 99");
        for p in 1..99u8 {
            let (lower, higher) = (best_effort_nice(p), best_effort_nice(p + 1));
            assert!(
                higher <= lower,
                "priority {} runs at nice {higher} > {lower}",
                p + 1
            );
            assert!((0..=19).contains(&lower));
        }
    }

    #[test]
    fn no_restore_without_a_demotion() {
        let slot = ThreadSlot::new(Sched::Fifo(0), 1); // a policy the kernel would refuse
        let counters = Counters::default();
        slot.restore_if_demoted(&counters, "lane");
        assert_eq!(
            counters.restore_failures.load(Relaxed),
            0,
            "nothing was tried"
        );
    }

    #[test]
    fn a_failed_restore_is_counted_once_and_clears_the_demotion() {
        // Priority 0 is refused for SCHED_FIFO whatever the privilege, so the restore fails.
        let slot = ThreadSlot::new(Sched::Fifo(0), 1);
        let counters = Counters::default();
        slot.demoted.store(true, SeqCst);
        slot.restore_if_demoted(&counters, "lane");
        assert_eq!(counters.restore_failures.load(Relaxed), 1);
        assert!(!slot.demoted.load(SeqCst));
        slot.restore_if_demoted(&counters, "lane");
        assert_eq!(counters.restore_failures.load(Relaxed), 1, "idempotent");
        assert_eq!(
            sched::read_back(0).unwrap(),
            Sched::Other,
            "this thread unchanged"
        );
    }

    #[test]
    fn demote_acts_only_on_the_handler_that_overran_and_leaves_the_callers_nice_alone() {
        // The target is this (time-shared) thread, configured as FIFO: moving it to
        // SCHED_OTHER needs no privilege, so the watchdog's side runs anywhere.
        let slot = ThreadSlot::new(Sched::Fifo(10), 10);
        slot.tid.store(gettid(), Relaxed);
        let nice = sched::nice(0).unwrap();
        slot.busy_since.store(5_000, SeqCst);
        assert!(
            !slot.demote(4_000),
            "an earlier handler's start: it has returned"
        );
        assert!(
            !slot.demoted.load(SeqCst),
            "a refused demotion leaves no flag behind"
        );
        assert!(slot.demote(5_000));
        assert!(slot.demoted.load(SeqCst));
        assert_eq!(sched::read_back(0).unwrap(), Sched::Other);
        assert_eq!(
            sched::nice(0).unwrap(),
            nice,
            "demoting does not renice anyone"
        );
        // A thread that has exited (its tid gone) is not demoted.
        let gone = std::thread::spawn(gettid).join().unwrap();
        let stale = ThreadSlot::new(Sched::Fifo(10), 10);
        stale.tid.store(gone, Relaxed);
        stale.busy_since.store(1, SeqCst);
        assert!(!stale.demote(1));
        assert!(!stale.demoted.load(SeqCst));
    }

    #[test]
    fn take_sched_ends_a_demotion_in_force() {
        let slot = ThreadSlot::new(Sched::Other, 10);
        slot.demoted.store(true, SeqCst);
        slot.take_sched(Sched::Other).unwrap();
        assert!(!slot.demoted.load(SeqCst));
        let counters = Counters::default();
        slot.restore_if_demoted(&counters, "lane");
        assert_eq!(counters.restore_failures.load(Relaxed), 0);
    }

    /// The whole protocol on a real SCHED_FIFO thread, read back from the kernel: the
    /// watchdog demotes it while its handler runs, the thread restores itself after.
    #[test]
    fn a_demoted_fifo_thread_is_time_shared_until_its_handler_returns() {
        let Some(_rt) = fifo_allowed("slot::a_demoted_fifo_thread_is_time_shared", 10) else {
            return;
        };
        let slot = Arc::new(ThreadSlot::new(Sched::Fifo(10), 10));
        let counters = Arc::new(Counters::default());
        let (running, handler_runs) = mpsc::channel();
        let (finish, finished) = mpsc::channel::<()>();
        let thread = std::thread::spawn({
            let (slot, counters) = (slot.clone(), counters.clone());
            move || {
                slot.tid.store(gettid(), Relaxed);
                slot.take_sched(slot.sched).unwrap(); // its set-up
                slot.busy_since.store(1_234, SeqCst); // a handler starts…
                running.send(()).unwrap();
                finished.recv().unwrap(); // …and blocks (never spins) until told to return
                let during = sched::read_back(0).unwrap();
                slot.busy_since.store(0, SeqCst);
                slot.restore_if_demoted(&counters, "lane");
                (during, sched::read_back(0).unwrap())
            }
        });
        handler_runs.recv().unwrap();
        let tid = slot.tid.load(Relaxed);
        assert_eq!(sched::read_back(tid).unwrap(), Sched::Fifo(10));
        assert!(slot.demote(1_234));
        assert_eq!(sched::read_back(tid).unwrap(), Sched::Other);
        finish.send(()).unwrap();
        let (during, after) = thread.join().unwrap();
        assert_eq!(during, Sched::Other, "the handler ran on, time-shared");
        assert_eq!(after, Sched::Fifo(10), "restored by the thread itself");
        assert!(!slot.demoted.load(SeqCst));
        assert_eq!(counters.restore_failures.load(Relaxed), 0);
    }
}
