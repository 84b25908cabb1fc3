//! The overrun watchdog: a non-RT monitor thread that notices handlers running past their
//! group's `budget_us`.
//!
//! It polls each pool thread's `busy_since` stamp every quarter budget (between 100 µs and
//! 10 ms). An overrun is reported once per dispatch (tracing warning + `budget_overruns` metric). With
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
//! it still gets the kernel's RT-throttle share (`sched_rt_runtime_us`, 5% by default).

use crate::engine::group::{Group, OnOverrun};
use crate::engine::word::Token;
use crate::observe::metrics::Counters;
use crate::sys::{self, sched::Sched};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn spawn(
    groups: Vec<Arc<Group>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let watched: Vec<(Arc<Group>, u64)> = groups
        .into_iter()
        .filter_map(|g| g.spec.budget_us.map(|b| (g.clone(), b * 1000)))
        .collect();
    let Some(min_budget) = watched.iter().map(|(_, b)| *b).min() else {
        return Ok(None);
    };
    let period = Duration::from_nanos((min_budget / 4).clamp(100_000, 10_000_000));
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

/// One look at every watched thread (`(group, budget in ns)`) at instant `now`: a handler
/// that started more than its budget ago is an overrun, counted and reported once
/// (`last[group][thread]` keeps the start of the dispatch last reported), and demoted if its
/// group says so.
fn scan(watched: &[(Arc<Group>, u64)], last: &mut [Vec<u64>], now: u64) {
    for ((g, budget), last) in watched.iter().zip(last) {
        for (i, slot) in g.threads.iter().enumerate() {
            let start = slot.busy_since.load(SeqCst);
            if start == 0 || now.saturating_sub(start) <= *budget {
                continue;
            }
            // Counted once per overrun, whichever thread it is seen on: a stretch of work that
            // spans dispatches (an executor streak, backdated to its start) may move between
            // the group's threads.
            if !last.contains(&start) {
                last[i] = start;
                Counters::add(&g.counters.budget_overruns, 1);
                let token = Token::from_raw(slot.busy_token.load(Relaxed));
                tracing::warn!(
                    group = %g.spec.name,
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

    /// A group of two threads that never ran, watched with a 1 ms budget.
    fn watched(on_overrun: OnOverrun, configured: Sched) -> Vec<(Arc<Group>, u64)> {
        let mut s = spec("lane", 2);
        s.threads = vec![(configured, 10); 2];
        s.budget_us = Some(BUDGET_NS / 1000);
        s.on_overrun = on_overrun;
        vec![(Arc::new(Group::new(0, s, None).unwrap()), BUDGET_NS)]
    }

    fn count(w: &[(Arc<Group>, u64)]) -> (u64, u64) {
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
    fn no_budget_no_watchdog() {
        let g = Arc::new(Group::new(0, spec("lane", 1), None).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        assert!(spawn(vec![g], stop).unwrap().is_none());
    }
}
