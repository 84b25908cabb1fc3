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
//! (`ThreadSlot::demote` / `restore_if_demoted` in `group.rs`); this thread only decides when.
//! A demotion changes the target's policy only: the watchdog keeps its own nice value, so it
//! keeps its share of the CPU against the runaway it has just demoted.
//!
//! The watchdog runs at normal priority as the issue asks; while RT threads saturate every CPU
//! it still gets the kernel's RT-throttle share (`sched_rt_runtime_us`, 5% by default).

use crate::engine::group::{Group, OnOverrun};
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
                let now = sys::now_ns();
                for ((g, budget), last) in watched.iter().zip(&mut last) {
                    for (i, slot) in g.threads.iter().enumerate() {
                        let start = slot.busy_since.load(SeqCst);
                        if start == 0 || now.saturating_sub(start) <= *budget {
                            continue;
                        }
                        // Counted once per overrun, whichever thread it is seen on: a stretch
                        // of work that spans dispatches (backdated to its start) may move
                        // between the group's threads.
                        if !last.contains(&start) {
                            last[i] = start;
                            Counters::add(&g.counters.budget_overruns, 1);
                            let token = slot.busy_token.load(Relaxed);
                            tracing::warn!(
                                group = %g.spec.name,
                                thread = i,
                                handle = token & 0xffff_ffff,
                                running_us = now.saturating_sub(start) / 1000,
                                budget_us = budget / 1000,
                                "handler overran its budget"
                            );
                        }
                        // Demoted whenever it is seen running at its own policy: also when a
                        // stretch counted earlier goes on in a later dispatch (the thread
                        // restored itself when the earlier one returned).
                        if g.spec.on_overrun == OnOverrun::Demote
                            && slot.sched != Sched::Other
                            && !slot.demoted.load(SeqCst)
                            && slot.demote(start)
                        {
                            Counters::add(&g.counters.demotions, 1);
                        }
                    }
                }
                std::thread::sleep(period);
            }
        })
        .map(Some)
}
