//! The overrun watchdog: a non-RT monitor thread that notices handlers running past their
//! lane's `budget_us`, and leaders that kept their role past `promote_after_us`.
//!
//! It polls each pool thread's `busy_since` stamp every quarter budget (between 100 µs and
//! 10 ms), and every lane that defers its promotions every [`RELIEF_PERIOD`] at least.
//!
//! **Relief** (deferred promotion, `leader.rs`): a leader keeps its role, and wakes nobody,
//! through events whose handlers ran quickly before (`dispatch.rs`); nothing is armed for that
//! on the dispatch path. If such a handler runs far longer this time, the watchdog hands the
//! role to the lane's best follower once `promote_after_us` has passed since the leader kept
//! it ([`Protocol::relieve`](crate::engine::leader::Protocol::relieve)), so that an event that
//! became ready meanwhile waits at most `promote_after_us` plus one period. This thread wakes
//! for other reasons anyway (budgets); a deferring lane without a budget costs one wake-up of
//! it per period, on a CPU that is not running a lane (it is time-shared).
//!
//! **Overruns**: an overrun is reported once per dispatch (tracing warning + `budget_overruns` metric). With
//! `on_overrun = "demote"` the thread is moved to SCHED_OTHER until its handler returns, so a
//! runaway handler cannot hold a CPU at real-time priority; the thread restores its own policy
//! when the handler returns.
//!
//! A handler whose work goes on across dispatches (the task executor while its lane's ready set
//! never empties) backdates its stamp to the stretch's start (`Context::backdate_dispatch`):
//! the watchdog sees the stretch as one dispatch, counts it once (by its start, on whichever
//! thread), and demotes each dispatch of it that it finds running at the thread's own policy.
//!
//! The demotion itself, its restore and their protocol belong to the thread's slot
//! (`ThreadSlot::demote` / `restore_if_demoted` in `slot.rs`); this thread only decides when.
//! A demotion changes the target's policy only: the watchdog keeps its own nice value, so it
//! keeps its share of the CPU against the runaway it has just demoted.
//!
//! The watchdog runs at normal priority as the issue asks; while RT threads saturate every CPU
//! it still gets the kernel's RT-throttle share (`sched_rt_runtime_us`, 5% by default). So does
//! a relief: while every CPU runs real-time threads, a kept role waits for that share (a
//! follower could not run before then either, unless its lane outranks what runs).

use crate::engine::follower_queue::Promotion;
use crate::engine::lane::{LanePool, OnOverrun};
use crate::engine::word::Token;
use crate::observe::metrics::Counters;
use crate::sys::{self, sched::Sched};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// How often, at least, the watchdog looks at a lane that defers its promotions.
pub(crate) const RELIEF_PERIOD: Duration = Duration::from_millis(1);

/// Whether `g`'s leaders keep their role through quick events (deferred promotion): an unbound
/// Leader/Followers lane with `promote_after_us > 0`.
fn defers(g: &LanePool) -> bool {
    g.spec.promote_after_ns > 0 && g.served.is_none() && g.spec.promotion != Promotion::Concurrent
}

/// A lane the watchdog looks at: its handler budget (ns), if any, and whether it defers.
type Watched = (Arc<LanePool>, Option<u64>);

pub(crate) fn spawn(
    lanes: Vec<Arc<LanePool>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let watched: Vec<Watched> = lanes
        .into_iter()
        .filter(|g| g.spec.budget_us.is_some() || defers(g))
        .map(|g| {
            let budget = g.spec.budget_us.map(|b| b * 1000);
            (g, budget)
        })
        .collect();
    let Some(period) = watched
        .iter()
        .map(|(g, budget)| {
            let b = budget.map_or(Duration::MAX, |b| {
                Duration::from_nanos((b / 4).clamp(100_000, 10_000_000))
            });
            if defers(g) {
                b.min(RELIEF_PERIOD)
            } else {
                b
            }
        })
        .min()
    else {
        return Ok(None);
    };
    std::thread::Builder::new()
        .name("lfrt-watchdog".into())
        .spawn(move || {
            let mut last: Vec<Vec<u64>> = watched
                .iter()
                .map(|(g, _)| vec![0; g.threads.len()])
                .collect();
            while !stop.load(Acquire) {
                scan(&watched, &mut last, sys::now_ns());
                std::thread::sleep(period);
            }
        })
        .map(Some)
}

/// One look at every watched lane (`(lane, budget in ns)`) at instant `now`: a leader that
/// kept its role for `promote_after` or longer is relieved (a deferring lane); a handler
/// that started more than its budget ago is an overrun, counted and reported once
/// (`last[lane][thread]` keeps the start of the dispatch last reported), and demoted if its
/// lane says so.
fn scan(watched: &[Watched], last: &mut [Vec<u64>], now: u64) {
    for ((g, budget), last) in watched.iter().zip(last) {
        if defers(g) {
            g.protocol.relieve(now, g.spec.promote_after_ns);
        }
        let Some(budget) = budget else { continue };
        for (i, slot) in g.threads.iter().enumerate() {
            let start = slot.busy_since.load(SeqCst);
            if start == 0 || now.saturating_sub(start) <= *budget {
                continue;
            }
            // Counted once per overrun, whichever thread it is seen on: a stretch of work that
            // spans dispatches (an executor streak, backdated to its start) may move between
            // the lane's threads.
            if !last.contains(&start) {
                last[i] = start;
                Counters::add(&g.counters.budget_overruns, 1);
                let token = Token::from_raw(slot.busy_token.load(Relaxed));
                tracing::warn!(
                    lane = %g.spec.name,
                    thread = i,
                    handle = token.index(),
                    running_us = now.saturating_sub(start) / 1000,
                    budget_us = budget / 1000,
                    "handler overran its budget"
                );
            }
            // Demoted whenever it is seen running at its own policy: also when a stretch
            // counted earlier goes on in a later dispatch (the thread restored itself when the
            // earlier one returned).
            if g.spec.on_overrun == OnOverrun::Demote
                && slot.sched != Sched::Other
                && !slot.demoted.load(SeqCst)
                && slot.demote(start)
            {
                Counters::add(&g.counters.demotions, 1);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::testing::spec;
    use crate::sys::{gettid, sched};

    const BUDGET_NS: u64 = 1_000_000;

    /// A lane of two threads that never ran, watched with a 1 ms budget.
    fn watched(on_overrun: OnOverrun, configured: Sched) -> Vec<Watched> {
        let mut s = spec("lane", 2);
        s.threads = vec![(configured, 10); 2];
        s.budget_us = Some(BUDGET_NS / 1000);
        s.on_overrun = on_overrun;
        vec![(
            Arc::new(LanePool::new(0, s, None).unwrap()),
            Some(BUDGET_NS),
        )]
    }

    fn count(w: &[Watched]) -> (u64, u64) {
        let c = &w[0].0.counters;
        (c.budget_overruns.load(Relaxed), c.demotions.load(Relaxed))
    }

    #[test]
    fn an_overrun_is_counted_once_per_dispatch() {
        let w = watched(OnOverrun::Report, Sched::Fifo(10));
        let mut last = vec![vec![0; 2]];
        let busy = &w[0].0.threads[1];
        scan(&w, &mut last, 10 * BUDGET_NS);
        assert_eq!(count(&w), (0, 0), "idle threads never overrun");

        busy.busy_since.store(BUDGET_NS, SeqCst);
        scan(&w, &mut last, 2 * BUDGET_NS);
        assert_eq!(count(&w), (0, 0), "exactly the budget is not an overrun");
        scan(&w, &mut last, 2 * BUDGET_NS + 1);
        assert_eq!(count(&w), (1, 0));
        scan(&w, &mut last, 50 * BUDGET_NS);
        assert_eq!(count(&w), (1, 0), "the same dispatch is reported once");

        busy.busy_since.store(60 * BUDGET_NS, SeqCst); // the next dispatch
        scan(&w, &mut last, 60 * BUDGET_NS + 1);
        assert_eq!(count(&w), (1, 0));
        scan(&w, &mut last, 62 * BUDGET_NS);
        assert_eq!(count(&w), (2, 0), "reported: no demotion asked for");
        assert!(!busy.demoted.load(SeqCst));
    }

    #[test]
    fn demote_moves_an_overrunning_rt_thread_and_only_that() {
        // Thread 1 is configured FIFO; its tid is this (time-shared) test thread, which may be
        // moved to SCHED_OTHER without privilege.
        let w = watched(OnOverrun::Demote, Sched::Fifo(10));
        let mut last = vec![vec![0; 2]];
        let busy = &w[0].0.threads[1];
        busy.tid.store(gettid(), Relaxed);
        busy.busy_since.store(BUDGET_NS, SeqCst);
        scan(&w, &mut last, 3 * BUDGET_NS);
        assert_eq!(count(&w), (1, 1));
        assert!(busy.demoted.load(SeqCst));
        assert!(!w[0].0.threads[0].demoted.load(SeqCst));
        assert_eq!(sched::read_back(0).unwrap(), Sched::Other);

        // A time-shared lane has nothing to demote: counted, never demoted.
        let w = watched(OnOverrun::Demote, Sched::Other);
        let busy = &w[0].0.threads[0];
        busy.tid.store(gettid(), Relaxed);
        busy.busy_since.store(BUDGET_NS, SeqCst);
        scan(&w, &mut [vec![0; 2]], 3 * BUDGET_NS);
        assert_eq!(count(&w), (1, 0));
        assert!(!busy.demoted.load(SeqCst));
    }

    #[test]
    fn no_budget_and_no_deferral_no_watchdog() {
        let mut s = spec("lane", 1);
        s.promote_after_ns = 0;
        let g = Arc::new(LanePool::new(0, s, None).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        assert!(spawn(vec![g], stop).unwrap().is_none());
    }

    /// A leader that kept its role (deferred promotion) is relieved once `promote_after` has
    /// passed since, and only if a follower waits: the follower leads, the old leader finds
    /// the role lost at its next look.
    #[test]
    fn a_leader_kept_past_promote_after_is_relieved() {
        use crate::engine::leader::{Joined, Kept, Lead};
        let mut s = spec("lane", 2);
        s.promote_after_ns = 50_000;
        let g = Arc::new(LanePool::new(0, s, None).unwrap());
        let w: Vec<Watched> = vec![(g.clone(), None)];
        let p = &g.protocol;
        assert_eq!(p.join(0, 10), Joined::Leader);
        assert_eq!(
            p.keep(0, &[], 1_000),
            Kept::Promoted(crate::engine::leader::Promoted::Vacant)
        );
        assert_eq!(p.join(0, 10), Joined::Leader, "vacant: it leads again");
        let g2 = g.clone();
        let follower = std::thread::spawn(move || g2.protocol.join(1, 10));
        while p.snapshot().1 == 0 {
            std::thread::yield_now();
        }
        assert!(matches!(p.lead(0), Lead::Wait { .. }));
        assert_eq!(p.keep(0, &[], 1_000), Kept::Keeping);
        scan(&w, &mut [vec![0; 2]], 1_000 + 49_999);
        assert_eq!(p.relieved(), 0, "not before promote_after");
        scan(&w, &mut [vec![0; 2]], 1_000 + 50_000);
        assert_eq!(p.relieved(), 1);
        assert_eq!(
            follower.join().unwrap(),
            Joined::Leader,
            "the follower leads"
        );
        assert_eq!(p.lead(0), Lead::Lost, "the old leader finds out");
        scan(&w, &mut [vec![0; 2]], u64::MAX);
        assert_eq!(p.relieved(), 1, "only a kept role is relieved");
    }
}
