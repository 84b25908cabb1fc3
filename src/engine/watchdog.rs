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
//! **Overruns**: an overrun is counted once per dispatch (`budget_overruns`) as soon as it is
//! seen, and reported in one log line saying where its time went (`overrun.rs`: the handler
//! ran, waited for a CPU, slept, or lost its CPU to the hypervisor; counted in
//! `overrun_causes`) when its dispatch ends, or [`REPORT_WAIT_NS`] later if it still runs.
//! With `on_overrun = "demote"` the thread is moved to SCHED_OTHER until its handler returns,
//! so a runaway handler cannot hold a CPU at real-time priority; the thread restores its own
//! policy when the handler returns.
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
use crate::engine::overrun::{Cause, Split, Watch, REPORT_WAIT_NS};
use crate::engine::word::Token;
use crate::observe::metrics::Counters;
use crate::sys::{self, sched::Sched, schedstat};
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

/// What the watchdog keeps between its looks: every lane (to name a preemptor), and per
/// watched lane the start of the dispatch last counted on each thread (an overrun is counted
/// once) and what it follows of each thread's dispatch.
struct State {
    all: Vec<Arc<LanePool>>,
    counted: Vec<Vec<u64>>,
    watches: Vec<Vec<Watch>>,
}

impl State {
    fn new(all: Vec<Arc<LanePool>>, watched: &[Watched]) -> State {
        State {
            all,
            counted: watched
                .iter()
                .map(|(g, _)| vec![0; g.threads.len()])
                .collect(),
            watches: watched
                .iter()
                .map(|(g, _)| g.threads.iter().map(|_| Watch::default()).collect())
                .collect(),
        }
    }
}

pub(crate) fn spawn(
    lanes: Vec<Arc<LanePool>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let watched: Vec<Watched> = lanes
        .iter()
        .filter(|g| g.spec.budget_us.is_some() || defers(g))
        .map(|g| {
            let budget = g.spec.budget_us.map(|b| b * 1000);
            (g.clone(), budget)
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
            let mut state = State::new(lanes, &watched);
            while !stop.load(Acquire) {
                scan(&watched, &mut state, sys::now_ns());
                std::thread::sleep(period);
            }
            // Overruns whose report is still due (their threads have exited by now): with
            // what was read while they ran.
            flush(&watched, &mut state);
        })
        .map(Some)
}

/// One look at every watched lane (`(lane, budget in ns)`) at instant `now`: a leader that
/// kept its role for `promote_after` or longer is relieved (a deferring lane); a handler
/// that started more than its budget ago is an overrun, counted once (`state.counted[lane]
/// [thread]` keeps the start of the dispatch last counted) and demoted if its lane says so,
/// and reported once its dispatch has ended, or [`REPORT_WAIT_NS`] after it was counted.
///
/// From half its budget on, a dispatch is read ([`Watch::read`]) at every look until its
/// overrun is reported, or until it ends within its budget; a dispatch that ends before half
/// its budget costs the watchdog only the load of its stamp.
fn scan(watched: &[Watched], state: &mut State, now: u64) {
    for (li, (g, budget)) in watched.iter().enumerate() {
        if defers(g) {
            g.protocol.relieve(now, g.spec.promote_after_ns);
        }
        let Some(budget) = *budget else { continue };
        for (i, slot) in g.threads.iter().enumerate() {
            let start = slot.busy_since.load(SeqCst);
            let tid = slot.tid.load(Relaxed);
            if state.watches[li][i].start != start {
                let w = std::mem::take(&mut state.watches[li][i]);
                if w.due.is_some() {
                    report(g, budget, i, tid, &w, true, &state.all);
                }
                state.watches[li][i].start = start;
            }
            if start == 0 {
                continue;
            }
            let age = now.saturating_sub(start);
            let over = age > budget;
            // Counted once per overrun, whichever thread it is seen on: a stretch of work that
            // spans dispatches (an executor streak, backdated to its start) may move between
            // the lane's threads. The thread that counts it reports it.
            if over && !state.counted[li].contains(&start) {
                state.counted[li][i] = start;
                Counters::add(&g.counters.budget_overruns, 1);
                let w = &mut state.watches[li][i];
                w.due = Some(now);
                w.token = slot.busy_token.load(Relaxed);
            }
            let w = &mut state.watches[li][i];
            let due = w.due.is_some();
            if age.saturating_mul(2) >= budget && (!over || due) && w.read(tid, due) {
                w.others = others(&state.all, tid);
            }
            // Demoted whenever it is seen running at its own policy: also when a stretch
            // counted earlier goes on in a later dispatch (the thread restored itself when the
            // earlier one returned).
            if over
                && g.spec.on_overrun == OnOverrun::Demote
                && slot.sched != Sched::Other
                && !slot.demoted.load(SeqCst)
                && slot.demote(start)
            {
                Counters::add(&g.counters.demotions, 1);
            }
            let w = &mut state.watches[li][i];
            if w.due
                .is_some_and(|at| now.saturating_sub(at) >= REPORT_WAIT_NS)
            {
                report(g, budget, i, tid, w, false, &state.all);
                w.due = None;
            }
        }
    }
}

/// Reports every overrun still due, as it stood at its last reading.
fn flush(watched: &[Watched], state: &mut State) {
    for (li, (g, budget)) in watched.iter().enumerate() {
        for (i, w) in state.watches[li].iter_mut().enumerate() {
            if w.due.is_some() {
                let tid = g.threads[i].tid.load(Relaxed);
                report(g, budget.unwrap_or(0), i, tid, w, false, &state.all);
                w.due = None;
            }
        }
    }
}

/// The CPU time so far of every other lane thread (of every lane, the overrunning thread's
/// own included): (lane, tid, ns).
fn others(all: &[Arc<LanePool>], own_tid: i32) -> Vec<(usize, i32, u64)> {
    let mut v = Vec::new();
    for (li, g) in all.iter().enumerate() {
        for t in g.threads.iter() {
            let tid = t.tid.load(Relaxed);
            if tid == own_tid || tid <= 0 {
                continue;
            }
            if let Ok(ns) = schedstat::thread_cpu_time_ns(tid) {
                v.push((li, tid, ns));
            }
        }
    }
    v
}

/// Who held the CPU an overrunning thread waited for: the lane whose thread ran the most on
/// that CPU since the first reading, if that is at least half the wait; else someone
/// outside lfrt's lanes.
fn preemptor(w: &Watch, cpu: usize, waited_ns: u64, all: &[Arc<LanePool>]) -> String {
    let best = w
        .others
        .iter()
        .filter_map(|&(li, tid, before)| {
            let ran = schedstat::thread_cpu_time_ns(tid)
                .ok()?
                .saturating_sub(before);
            let on = schedstat::thread_times(tid).ok()?.cpu;
            (ran > 0 && on == cpu).then_some((ran, li))
        })
        .max();
    match best {
        Some((ran, li)) if ran.saturating_mul(2) >= waited_ns => {
            format!("lane {}", all[li].spec.name)
        }
        _ => "another thread or process".to_owned(),
    }
}

/// Logs the overrun `w` follows on thread `i` of `g` (one line) and counts its cause: the
/// span it measured, and, if its dispatch `ended`, up to now.
fn report(
    g: &LanePool,
    budget: u64,
    i: usize,
    tid: i32,
    w: &Watch,
    ended: bool,
    all: &[Arc<LanePool>],
) {
    let (split, cpu) = match w.split(tid, ended) {
        Some((s, end)) => (s, Some(end.times.cpu)),
        None => (Split::default(), None),
    };
    let cause = split.cause();
    Counters::add(&g.counters.overrun_causes[cause as usize], 1);
    let token = Token::from_raw(w.token);
    let seen = w.last.map_or(w.due.unwrap_or(0), |r| r.at_ns);
    let (lane, handle) = (&g.spec.name, token.index());
    let running_us = seen.saturating_sub(w.start) / 1000;
    let budget_us = budget / 1000;
    let (span_us, ran_us, waited_us, steal_us) = (
        split.span_ns / 1000,
        split.ran_ns / 1000,
        split.waited_ns / 1000,
        split.steal_ns / 1000,
    );
    let cause_name = cause.name();
    match cause {
        Cause::Hypervisor => tracing::info!(
            lane = %lane, thread = i, handle, running_us, budget_us, span_us, ran_us, waited_us,
            steal_us, cause = cause_name,
            "the VM took the CPU (steal {steal_us} us); the handler ran {ran_us} us"
        ),
        Cause::Handler => tracing::warn!(
            lane = %lane, thread = i, handle, running_us, budget_us, span_us, ran_us, waited_us,
            steal_us, cause = cause_name,
            "handler overran its budget: it ran {ran_us} us of {span_us} us"
        ),
        Cause::Preempted => {
            let by = cpu.map_or_else(
                || "another thread or process".to_owned(),
                |c| preemptor(w, c, split.waited_ns, all),
            );
            tracing::warn!(
                lane = %lane, thread = i, handle, running_us, budget_us, span_us, ran_us,
                waited_us, steal_us, cause = cause_name, by = %by,
                "handler overran its budget waiting {waited_us} us for a CPU held by {by}"
            )
        }
        Cause::Blocked => tracing::warn!(
            lane = %lane, thread = i, handle, running_us, budget_us, span_us, ran_us, waited_us,
            steal_us, cause = cause_name,
            "handler overran its budget blocked: asleep, off the CPU, most of {span_us} us"
        ),
        Cause::Unknown => tracing::warn!(
            lane = %lane, thread = i, handle, running_us, budget_us, span_us, ran_us, waited_us,
            steal_us, cause = cause_name,
            "handler overran its budget (where its time went could not be read)"
        ),
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

    /// The watchdog's state for `w`, whose lanes are all there is.
    fn state(w: &[Watched]) -> State {
        State::new(w.iter().map(|(g, _)| g.clone()).collect(), w)
    }

    /// Reported overruns by cause: handler, preempted, hypervisor, blocked, unknown.
    fn causes(w: &[Watched]) -> [u64; 5] {
        w[0].0
            .counters
            .overrun_causes
            .each_ref()
            .map(|c| c.load(Relaxed))
    }

    #[test]
    fn an_overrun_is_counted_once_per_dispatch() {
        let w = watched(OnOverrun::Report, Sched::Fifo(10));
        let mut last = state(&w);
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
        // The first overrun was reported at the look 10 ms after it was counted (at 50 ms),
        // not again when its dispatch ended. Its thread (tid 0: never started) could not be
        // read, so its cause is unknown.
        assert_eq!(causes(&w), [0, 0, 0, 0, 1]);
        scan(&w, &mut last, 62 * BUDGET_NS);
        assert_eq!(count(&w), (2, 0), "reported: no demotion asked for");
        assert!(!busy.demoted.load(SeqCst));
        assert_eq!(causes(&w), [0, 0, 0, 0, 1], "counted, its report due");
        // Still running 10 ms after it was counted: reported without waiting for its end.
        scan(&w, &mut last, 62 * BUDGET_NS + REPORT_WAIT_NS - 1);
        assert_eq!(causes(&w), [0, 0, 0, 0, 1]);
        scan(&w, &mut last, 62 * BUDGET_NS + REPORT_WAIT_NS);
        assert_eq!(causes(&w), [0, 0, 0, 0, 2]);
        scan(&w, &mut last, 100 * BUDGET_NS);
        busy.busy_since.store(0, SeqCst);
        scan(&w, &mut last, 101 * BUDGET_NS);
        assert_eq!(causes(&w), [0, 0, 0, 0, 2], "reported once");
        assert_eq!(count(&w), (2, 0));
        // One that ends before then is reported at the first look that finds it ended.
        busy.busy_since.store(110 * BUDGET_NS, SeqCst);
        scan(&w, &mut last, 112 * BUDGET_NS);
        assert_eq!((count(&w), causes(&w)[4]), ((3, 0), 2));
        busy.busy_since.store(0, SeqCst);
        scan(&w, &mut last, 113 * BUDGET_NS);
        assert_eq!((count(&w), causes(&w)[4]), ((3, 0), 3));
    }

    #[test]
    fn demote_moves_an_overrunning_rt_thread_and_only_that() {
        // Thread 1 is configured FIFO; its tid is this (time-shared) test thread, which may be
        // moved to SCHED_OTHER without privilege.
        let w = watched(OnOverrun::Demote, Sched::Fifo(10));
        let mut last = state(&w);
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
        scan(&w, &mut state(&w), 3 * BUDGET_NS);
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
        scan(&w, &mut state(&w), 1_000 + 49_999);
        assert_eq!(p.relieved(), 0, "not before promote_after");
        scan(&w, &mut state(&w), 1_000 + 50_000);
        assert_eq!(p.relieved(), 1);
        assert_eq!(
            follower.join().unwrap(),
            Joined::Leader,
            "the follower leads"
        );
        assert_eq!(p.lead(0), Lead::Lost, "the old leader finds out");
        scan(&w, &mut state(&w), u64::MAX);
        assert_eq!(p.relieved(), 1, "only a kept role is relieved");
    }
}
