//! `lfrt explain`: why the worst dispatch of a flight-recorder window was late, as a chain of
//! timed steps from the due time (or the kernel's arrival stamp) to the handler's end, the step
//! that dominated, and what ran on the lane thread's CPU instead of it — the shape of
//! `rtla timerlat`'s auto-analysis, for lfrt's lanes.
//!
//! [`explain`] is a pure function of a [`Window`]; its [`Explanation`] prints with
//! [`Display`](fmt::Display).

use lfrt::telemetry::Sample;
use lfrt::window::{KernelEvent, KernelEventKind, LaneInfo, TriggerKind, Window};
use std::collections::HashMap;
use std::fmt;

/// The dispatch a window is explained by: the trigger's sample, else the sample of the largest
/// latency ([`Sample::latency_ns`]; the earliest of equals). `None` if the window holds none.
pub fn worst_sample(w: &Window) -> Option<Sample> {
    w.trigger.sample.or_else(|| {
        w.samples
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|(i, s)| (s.latency_ns(), std::cmp::Reverse(*i)))
            .map(|(_, s)| s)
    })
}

/// A point of a dispatch's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Point {
    /// The event was due (a timer's expected expiry, `origin_ns`).
    Due,
    /// The kernel received the datagram (`arrival_ns`).
    Arrival,
    /// The last interrupt or timer event on the waker's CPU before the wake-up.
    Irq {
        /// What it was: `irq 30 (eth0)`, `local timer`, `hrtimer hrtimer_wakeup`.
        what: String,
        /// The CPU it happened on.
        cpu: u16,
    },
    /// The lane thread was woken (`sched_waking`, else `sched_wakeup`).
    Wake {
        /// The CPU that woke it.
        cpu: u16,
    },
    /// The lane thread was preempted (switched out still runnable) before running again.
    Preempted {
        /// The CPU it was preempted on.
        cpu: u16,
    },
    /// The lane thread was switched in (`sched_switch` with it as `next`).
    Running {
        /// The CPU it ran on.
        cpu: u16,
    },
    /// The leader's wait returned (`woke_ns`).
    WaitReturned,
    /// The handler was entered (`start_ns`).
    Entry,
    /// The handler returned (`end_ns`).
    End,
}

impl Point {
    fn name(&self) -> &'static str {
        match self {
            Point::Due => "due",
            Point::Arrival => "arrival",
            Point::Irq { .. } => "IRQ",
            Point::Wake { .. } => "wake-up",
            Point::Preempted { .. } => "preempted",
            Point::Running { .. } => "running",
            Point::WaitReturned => "wait returned",
            Point::Entry => "handler entry",
            Point::End => "handler end",
        }
    }
}

/// One step of the chain: from one point to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Where it starts.
    pub from: Point,
    /// Where it ends.
    pub to: Point,
    /// Start, `CLOCK_MONOTONIC` ns.
    pub from_ns: u64,
    /// End, `CLOCK_MONOTONIC` ns.
    pub to_ns: u64,
}

impl Step {
    /// Its duration, ns.
    pub fn ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }

    /// Its name as printed: `waiting to run` (woken or preempted → running), `hand-off` (the
    /// wait returned → handler entry), `handler` (entry → end), else `FROM -> TO`.
    pub fn label(&self) -> String {
        match (&self.from, &self.to) {
            (Point::Wake { .. } | Point::Preempted { .. }, Point::Running { .. }) => {
                "waiting to run".into()
            }
            (Point::WaitReturned, Point::Entry) => "hand-off".into(),
            (Point::Entry, Point::End) => "handler".into(),
            (a, b) => format!("{} -> {}", a.name(), b.name()),
        }
    }
}

/// What ran on the lane thread's CPU instead of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occupant {
    /// A thread of a lane (this one's or another's).
    Lane {
        /// The lane's name.
        lane: String,
        /// Its policy and priority as configured (`fifo 20`).
        sched: String,
        /// The thread's index in the lane.
        thread: usize,
        /// Its kernel tid.
        tid: i32,
    },
    /// Another task, not lfrt's.
    Process {
        /// Its command name.
        comm: String,
        /// Its tid.
        tid: i32,
        /// Its kernel priority (`prio`: 99 - N for SCHED_FIFO/RR N, 100 + 20 + nice otherwise).
        prio: i32,
    },
    /// An interrupt handler.
    Irq {
        /// IRQ number.
        irq: u32,
        /// Handler name.
        name: String,
    },
    /// The idle task: the CPU was coming out of idle.
    Idle,
    /// A SCHED_OTHER task kept the CPU while the real-time lane thread was runnable (and no
    /// real-time task ran). The scheduler would have switched at once, so the task was where
    /// it could not be switched: kernel code with preemption off (all of a kernel's code under
    /// `preempt=none`, long sections under `voluntary`), or the RT throttle had stopped the
    /// CPU's real-time tasks (they used up `sched_rt_runtime_us`). The trace alone does not
    /// tell the two apart.
    NotPreempted {
        /// The SCHED_OTHER task that ran.
        comm: String,
        /// Its tid.
        tid: i32,
        /// Its kernel priority.
        prio: i32,
    },
}

/// A task or IRQ and how long it held the CPU in an interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// Who.
    pub what: Occupant,
    /// How long, ns (an IRQ's time is not counted in the task it interrupted).
    pub ns: u64,
}

/// Why one dispatch took as long as it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// What fired the window.
    pub trigger: TriggerKind,
    /// The dispatch explained ([`worst_sample`]).
    pub sample: Sample,
    /// Its lane, if the window describes it.
    pub lane: Option<LaneInfo>,
    /// The lane thread's kernel tid, if known.
    pub tid: Option<i32>,
    /// Kernel events in the window (0: the kernel recorder was off).
    pub kernel_events: usize,
    /// The chain, in order; consecutive steps share their points.
    pub steps: Vec<Step>,
    /// The index in [`steps`](Self::steps) of the longest step.
    pub dominant: Option<usize>,
    /// What ran on the thread's CPU between its wake-up (or preemption) and its running,
    /// longest first.
    pub ran_instead: Vec<Ran>,
    /// What ran on the thread's CPU while its handler ran (preemptions, IRQs), longest first.
    pub during_handler: Vec<Ran>,
    /// Steal time in the window, ns, if known.
    pub steal_ns: Option<u64>,
    /// What the analysis could not do, or assumed.
    pub notes: Vec<String>,
}

impl Explanation {
    /// The longest step.
    pub fn dominant_step(&self) -> Option<&Step> {
        self.dominant.map(|i| &self.steps[i])
    }

    /// From the chain's first point to its last (the handler's end), ns.
    pub fn total_ns(&self) -> u64 {
        match (self.steps.first(), self.steps.last()) {
            (Some(a), Some(b)) => b.to_ns - a.from_ns,
            _ => 0,
        }
    }

    /// Where the chain starts, ns.
    fn start_ns(&self) -> u64 {
        self.steps
            .first()
            .map_or(self.sample.start_ns, |s| s.from_ns)
    }
}

/// Explains the window's worst dispatch ([`worst_sample`]); `None` if it holds no dispatch.
pub fn explain(w: &Window) -> Option<Explanation> {
    worst_sample(w).map(|s| explain_sample(w, &s))
}

/// Explains one dispatch of the window.
pub fn explain_sample(w: &Window, s: &Sample) -> Explanation {
    let lane = w.lanes.get(usize::from(s.lane)).cloned();
    let tid = lane
        .as_ref()
        .and_then(|l| l.threads.get(usize::from(s.thread)))
        .map(|t| t.tid);
    let mut notes = Vec::new();
    let (first, t0) = if s.origin_ns != 0 {
        (Point::Due, s.origin_ns)
    } else if s.arrival_ns != 0 {
        (Point::Arrival, s.arrival_ns)
    } else {
        notes.push(
            "the dispatch has neither a due time nor a kernel arrival stamp: the chain starts \
             when the leader's wait returned"
                .to_string(),
        );
        (Point::WaitReturned, s.woke_ns)
    };
    let mut points = vec![(first.clone(), t0)];
    let mut ran_instead = Vec::new();
    let mut during_handler = Vec::new();
    match (tid, w.kernel.is_empty()) {
        (_, true) => {}
        (None, false) => notes.push(format!(
            "the window does not describe lane {} thread {}: its kernel events cannot be told \
             apart",
            s.lane, s.thread
        )),
        (Some(tid), false) => {
            let k = kernel_chain(w, s, tid, t0, &mut notes);
            points.extend(k.points);
            if let Some((cpu, from, to)) = k.runnable {
                ran_instead = occupants(w, cpu, from, to, tid, lane.as_ref());
            }
            if let Some(cpu) = k.cpu {
                during_handler = occupants(w, cpu, s.start_ns, s.end_ns, tid, lane.as_ref());
            }
        }
    }
    if first != Point::WaitReturned {
        points.push((Point::WaitReturned, s.woke_ns));
    }
    points.push((Point::Entry, s.start_ns));
    points.push((Point::End, s.end_ns));
    // Keep the points in time order: a point before the one kept last belongs to an earlier
    // cycle (the thread already ran when the event was due; a follower's event whose wait
    // another thread's returned) and is left out.
    let mut kept: Vec<(Point, u64)> = Vec::with_capacity(points.len());
    for (p, ts) in points {
        if ts == 0 && p == Point::WaitReturned {
            continue;
        }
        match kept.last() {
            Some(&(_, last)) if ts < last => {
                if matches!(p, Point::WaitReturned) {
                    notes.push(format!(
                        "the wait this event came from returned {} before the thread ran: \
                         another thread's wait, or an earlier one of this thread",
                        us(kept.last().map_or(0, |k| k.1) - ts)
                    ));
                }
            }
            _ => kept.push((p, ts)),
        }
    }
    let steps: Vec<Step> = kept
        .windows(2)
        .map(|p| Step {
            from: p[0].0.clone(),
            to: p[1].0.clone(),
            from_ns: p[0].1,
            to_ns: p[1].1,
        })
        .collect();
    let dominant = steps
        .iter()
        .enumerate()
        .max_by_key(|(i, st)| (st.ns(), std::cmp::Reverse(*i)))
        .map(|(i, _)| i);
    Explanation {
        trigger: w.trigger.kind,
        sample: *s,
        lane,
        tid,
        kernel_events: w.kernel.len(),
        steps,
        dominant,
        ran_instead,
        during_handler,
        steal_ns: w.steal_ns,
        notes,
    }
}

/// The kernel's part of a dispatch's chain.
struct KernelChain {
    /// IRQ, wake-up (or preemption) and running, in order (those found).
    points: Vec<(Point, u64)>,
    /// The CPU the thread ran the handler on.
    cpu: Option<u16>,
    /// The CPU and interval the thread was runnable but not running.
    runnable: Option<(u16, u64, u64)>,
}

fn kernel_chain(w: &Window, s: &Sample, tid: i32, t0: u64, notes: &mut Vec<String>) -> KernelChain {
    let k = &w.kernel;
    // The thread's last switch-in before its handler.
    let run = k.iter().rposition(|e| {
        e.ts_ns <= s.start_ns
            && matches!(&e.kind, KernelEventKind::Switch { next_tid, .. } if *next_tid == tid)
    });
    let Some(run) = run else {
        notes.push(format!(
            "no switch to tid {tid} before the handler in the window: it was running since \
             before the window, or the kernel recorder missed it"
        ));
        return KernelChain {
            points: Vec::new(),
            cpu: None,
            runnable: None,
        };
    };
    let (run_ts, run_cpu) = (k[run].ts_ns, k[run].cpu);
    if run_ts < t0 {
        notes.push(format!(
            "tid {tid} was already on CPU {run_cpu} when the event was due ({} before): no \
             wake-up in the chain",
            us(t0 - run_ts)
        ));
        return KernelChain {
            points: Vec::new(),
            cpu: Some(run_cpu),
            runnable: None,
        };
    }
    // Its last switch-out before that: a wake-up after it woke the thread for this run; a
    // switch-out in state R was a preemption.
    let out = k[..run].iter().rposition(
        |e| matches!(&e.kind, KernelEventKind::Switch { prev_tid, .. } if *prev_tid == tid),
    );
    let since = out.map_or(0, |o| o + 1);
    let wake = k[since..run]
        .iter()
        .filter(|e| matches!(&e.kind, KernelEventKind::Wake { tid: t, .. } if *t == tid))
        .min_by_key(|e| match &e.kind {
            // sched_waking (asked for) before sched_wakeup (done).
            KernelEventKind::Wake { woken, .. } => (e.ts_ns, *woken),
            _ => (e.ts_ns, true),
        });
    let mut points = Vec::new();
    let runnable_from = match (wake, out) {
        (Some(wk), _) => {
            // The interrupt that led to it: the last on the waker's CPU before it.
            if let Some(irq) = k
                .iter()
                .take_while(|e| e.ts_ns <= wk.ts_ns)
                .filter(|e| e.cpu == wk.cpu)
                .filter_map(|e| irq_name(&e.kind).map(|n| (e.ts_ns, n)))
                .last()
            {
                points.push((
                    Point::Irq {
                        what: irq.1,
                        cpu: wk.cpu,
                    },
                    irq.0,
                ));
            }
            points.push((Point::Wake { cpu: wk.cpu }, wk.ts_ns));
            Some(wk.ts_ns)
        }
        (None, Some(o)) if is_preemption(&k[o]) => {
            points.push((Point::Preempted { cpu: k[o].cpu }, k[o].ts_ns));
            Some(k[o].ts_ns)
        }
        _ => {
            notes.push(format!(
                "no wake-up of tid {tid} before it ran on CPU {run_cpu}: the kernel recorder \
                 started after it"
            ));
            None
        }
    };
    points.push((Point::Running { cpu: run_cpu }, run_ts));
    KernelChain {
        points,
        cpu: Some(run_cpu),
        runnable: runnable_from.map(|from| (run_cpu, from, run_ts)),
    }
}

fn is_preemption(e: &KernelEvent) -> bool {
    matches!(&e.kind, KernelEventKind::Switch { prev_state, .. } if prev_state.starts_with('R'))
}

/// The name of an interrupt or timer event, `None` for the others.
fn irq_name(k: &KernelEventKind) -> Option<String> {
    match k {
        KernelEventKind::IrqEntry { irq, name } => Some(format!("irq {irq} ({name})")),
        KernelEventKind::LocalTimer => Some("local timer".into()),
        KernelEventKind::HrtimerExpire { function } => Some(format!("hrtimer {function}")),
        _ => None,
    }
}

/// What held CPU `cpu` in `[from, to]` besides `tid`, longest first: the tasks (from the
/// CPU's consecutive `sched_switch` events) less the IRQs that interrupted them, and the IRQs.
fn occupants(
    w: &Window,
    cpu: u16,
    from: u64,
    to: u64,
    tid: i32,
    lane: Option<&LaneInfo>,
) -> Vec<Ran> {
    if to <= from {
        return Vec::new();
    }
    let overlap = |a: u64, b: u64| b.min(to).saturating_sub(a.max(from));
    let on_cpu = || w.kernel.iter().filter(move |e| e.cpu == cpu);
    // (tid, comm, prio) → ns, in order of first appearance.
    let mut tasks: Vec<((i32, String, i32), u64)> = Vec::new();
    let mut add_task = |key: (i32, String, i32), ns: u64| {
        if let Some(t) = tasks.iter_mut().find(|t| t.0 == key) {
            t.1 += ns;
        } else {
            tasks.push((key, ns));
        }
    };
    let mut current: Option<(u64, (i32, String, i32))> = None;
    for e in on_cpu() {
        if let KernelEventKind::Switch {
            prev_tid,
            prev_comm,
            prev_prio,
            next_tid,
            next_comm,
            next_prio,
            ..
        } = &e.kind
        {
            let (since, task) = current.take().unwrap_or_else(|| {
                (
                    w.from_ns.min(e.ts_ns),
                    (*prev_tid, prev_comm.clone(), *prev_prio),
                )
            });
            // A task is named as it was when it left the CPU: a thread that renamed itself or
            // raised its priority while running (a fresh clone does both) shows as it is then.
            let task = if task.0 == *prev_tid {
                (*prev_tid, prev_comm.clone(), *prev_prio)
            } else {
                task
            };
            add_task(task, overlap(since, e.ts_ns));
            current = Some((e.ts_ns, (*next_tid, next_comm.clone(), *next_prio)));
        }
    }
    if let Some((since, task)) = current {
        add_task(task, overlap(since, w.to_ns.max(to)));
    }
    // IRQs: their time comes off the task they interrupted.
    let mut irqs: Vec<((u32, String), u64)> = Vec::new();
    let mut open: HashMap<u32, (u64, &str)> = HashMap::new();
    let mut taken: HashMap<i32, u64> = HashMap::new();
    let running_at = |ts: u64| -> Option<i32> {
        // The task running at `ts`: next of the last switch at or before it.
        let mut who = None;
        for e in on_cpu() {
            if e.ts_ns > ts {
                break;
            }
            if let KernelEventKind::Switch { next_tid, .. } = &e.kind {
                who = Some(*next_tid);
            }
        }
        who.or_else(|| {
            on_cpu().find_map(|e| match &e.kind {
                KernelEventKind::Switch { prev_tid, .. } => Some(*prev_tid),
                _ => None,
            })
        })
    };
    for e in on_cpu() {
        match &e.kind {
            KernelEventKind::IrqEntry { irq, name } => {
                open.insert(*irq, (e.ts_ns, name));
            }
            KernelEventKind::IrqExit { irq } => {
                if let Some((start, name)) = open.remove(irq) {
                    let ns = overlap(start, e.ts_ns);
                    if ns > 0 {
                        if let Some(t) = running_at(start) {
                            *taken.entry(t).or_default() += ns;
                        }
                        let key = (*irq, name.to_string());
                        match irqs.iter_mut().find(|i| i.0 == key) {
                            Some(i) => i.1 += ns,
                            None => irqs.push((key, ns)),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let rt_lane = lane.is_some_and(|l| l.policy == "fifo" || l.policy == "rr");
    let mut ran: Vec<Ran> = Vec::new();
    for ((t, comm, prio), ns) in tasks {
        let ns = ns.saturating_sub(taken.get(&t).copied().unwrap_or(0));
        if t == tid || ns == 0 {
            continue;
        }
        let what = if t == 0 {
            Occupant::Idle
        } else if let Some((l, k)) = lane_of(&w.lanes, t) {
            Occupant::Lane {
                lane: l.name.clone(),
                sched: format!("{} {}", l.policy, l.priority),
                thread: k,
                tid: t,
            }
        } else if rt_lane && prio >= 100 {
            Occupant::NotPreempted { comm, tid: t, prio }
        } else {
            Occupant::Process { comm, tid: t, prio }
        };
        ran.push(Ran { what, ns });
    }
    ran.extend(irqs.into_iter().map(|((irq, name), ns)| Ran {
        what: Occupant::Irq { irq, name },
        ns,
    }));
    ran.sort_by_key(|r| std::cmp::Reverse(r.ns));
    ran
}

/// The lane and thread index of a tid.
fn lane_of(lanes: &[LaneInfo], tid: i32) -> Option<(&LaneInfo, usize)> {
    lanes
        .iter()
        .find_map(|l| l.threads.iter().position(|t| t.tid == tid).map(|k| (l, k)))
}

fn us(ns: u64) -> String {
    format!("{:.2} us", ns as f64 / 1000.0)
}

/// A kernel priority as a person reads it: `rt 89` (SCHED_FIFO/RR), `other, nice 0`,
/// `deadline`.
fn prio_text(prio: i32) -> String {
    match prio {
        p if p < 0 => "deadline".into(),
        p if p < 100 => format!("rt {}", 99 - p),
        p => format!("other, nice {}", p - 120),
    }
}

/// How a real-time priority compares with the lane's.
fn versus_lane(prio: i32, lane: Option<&LaneInfo>) -> String {
    let Some(l) = lane.filter(|l| l.policy == "fifo" || l.policy == "rr") else {
        return String::new();
    };
    if !(0..100).contains(&prio) {
        return String::new();
    }
    let theirs = 99 - prio;
    let cmp = match theirs.cmp(&l.priority) {
        std::cmp::Ordering::Greater => "above",
        std::cmp::Ordering::Equal => "equal to",
        std::cmp::Ordering::Less => "below",
    };
    format!(", {cmp} the lane's {}", l.priority)
}

impl Occupant {
    /// How it is named in the analysis (`hog:999 (rt 89, above the lane's 80)`).
    fn describe(&self, lane: Option<&LaneInfo>) -> String {
        match self {
            Occupant::Lane {
                lane: name,
                sched,
                thread,
                tid,
            } => format!("lane {name} ({sched}) thread {thread}, tid {tid}"),
            Occupant::Process { comm, tid, prio } => {
                format!(
                    "{comm}:{tid} ({}{})",
                    prio_text(*prio),
                    versus_lane(*prio, lane)
                )
            }
            Occupant::Irq { irq, name } => format!("irq {irq} ({name})"),
            Occupant::Idle => "idle (the CPU was leaving idle)".into(),
            Occupant::NotPreempted { comm, tid, prio } => {
                format!("{comm}:{tid} ({}), not preempted", prio_text(*prio))
            }
        }
    }
}

fn trigger_text(k: &TriggerKind) -> String {
    match k {
        TriggerKind::Latency { threshold_ns } => {
            format!("latency over {}", us(*threshold_ns))
        }
        TriggerKind::Overrun { budget_ns } => {
            format!("handler over its budget of {}", us(*budget_ns))
        }
        TriggerKind::Demand => "on demand".into(),
    }
}

/// Width of the step column.
const LABEL: usize = 32;

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.sample;
        let lane = self.lane.as_ref();
        writeln!(
            f,
            "## lfrt explain: {}, analysing the {} ##",
            trigger_text(&self.trigger),
            if matches!(self.trigger, TriggerKind::Demand) {
                "dispatch of the largest latency"
            } else {
                "dispatch that fired it"
            }
        )?;
        let cpu = self.steps.iter().find_map(|st| match st.to {
            Point::Running { cpu } => Some(cpu),
            _ => None,
        });
        writeln!(
            f,
            "  lane {} thread {}{}{}, token {}",
            lane.map_or_else(
                || format!("#{}", s.lane),
                |l| format!("{} ({} {})", l.name, l.policy, l.priority)
            ),
            s.thread,
            self.tid.map_or(String::new(), |t| format!(", tid {t}")),
            cpu.map_or(String::new(), |c| format!(", CPU {c}")),
            s.token
        )?;
        writeln!(f)?;
        let total = self.total_ns().max(1);
        for (i, st) in self.steps.iter().enumerate() {
            let detail = match &st.to {
                Point::Irq { what, cpu } => format!("  {what} on CPU {cpu}"),
                _ => String::new(),
            };
            writeln!(
                f,
                "  {:<LABEL$} {:>12}  ({:>5.1} %){detail}{}",
                st.label(),
                us(st.ns()),
                st.ns() as f64 * 100.0 / total as f64,
                if Some(i) == self.dominant {
                    "  <- dominant"
                } else {
                    ""
                }
            )?;
            let under = match st.to {
                Point::Running { .. } => &self.ran_instead,
                Point::End => &self.during_handler,
                _ => continue,
            };
            match st.to {
                _ if under.is_empty() => {}
                Point::Running { cpu } => writeln!(f, "    ran on CPU {cpu} instead:")?,
                _ => writeln!(f, "    interrupted or preempted by:")?,
            }
            for r in under {
                writeln!(f, "    {:>12}  {}", us(r.ns), r.what.describe(lane))?;
            }
        }
        writeln!(f, "  {}", "-".repeat(LABEL + 24))?;
        let first = self.steps.first().map_or("due", |st| st.from.name());
        writeln!(
            f,
            "  {:<LABEL$} {:>12}  (100.0 %)",
            format!("total ({first} -> handler end)"),
            us(self.total_ns())
        )?;
        writeln!(
            f,
            "  {:<LABEL$} {:>12}",
            format!("latency ({first} -> handler entry)"),
            us(s.start_ns.saturating_sub(self.start_ns()))
        )?;
        writeln!(f)?;
        if let Some(d) = self.dominant_step() {
            let pct = d.ns() as f64 * 100.0 / total as f64;
            write!(
                f,
                "  dominant step: {}, {} ({pct:.1} % of the total)",
                d.label(),
                us(d.ns())
            )?;
            match (&d.to, self.ran_instead.first()) {
                (Point::Running { cpu }, Some(top)) => writeln!(
                    f,
                    ": the thread was runnable but CPU {cpu} ran {} for {}",
                    top.what.describe(lane),
                    us(top.ns)
                )?,
                (Point::Running { cpu }, None) if self.kernel_events > 0 => writeln!(
                    f,
                    ": the thread was runnable but did not run on CPU {cpu}, and nothing else \
                     is recorded there"
                )?,
                (Point::Irq { what, .. }, _) => writeln!(
                    f,
                    ": the interrupt that led to the wake-up ({what}) came late"
                )?,
                (Point::WaitReturned, _) if self.kernel_events == 0 => writeln!(
                    f,
                    ": the kernel's part (the interrupt, the wake-up, the wait for the CPU, the \
                     return from epoll_wait), which the kernel recorder breaks down"
                )?,
                (Point::Entry, _) if d.from == Point::WaitReturned => writeln!(
                    f,
                    ": lfrt's own path from the wait to the handler (promotion, or earlier \
                     handlers of the same wait on this thread)"
                )?,
                (Point::End, _) => writeln!(
                    f,
                    ": the handler itself{}",
                    self.during_handler
                        .first()
                        .map_or(String::new(), |r| format!(
                            ", interrupted by {} for {}",
                            r.what.describe(lane),
                            us(r.ns)
                        ))
                )?,
                _ => writeln!(f)?,
            }
        }
        if self
            .ran_instead
            .iter()
            .chain(&self.during_handler)
            .any(|r| matches!(r.what, Occupant::NotPreempted { .. }))
        {
            writeln!(
                f,
                "  not preempted: a SCHED_OTHER task kept the CPU while the real-time lane \
                 thread was runnable. Either it ran kernel code that cannot be preempted (a \
                 kernel with preempt=none or voluntary; see `lfrt doctor`, a PREEMPT_RT or \
                 preempt=full kernel removes most of it), or the RT throttle had stopped the \
                 CPU's real-time tasks (they used up sched_rt_runtime_us)"
            )?;
        }
        if let Some(steal) = self.steal_ns {
            writeln!(
                f,
                "  steal time: {} in the window went to the hypervisor",
                us(steal)
            )?;
        }
        if self.kernel_events == 0 {
            writeln!(
                f,
                "  kernel recorder off: the window has no scheduling, IRQ or timer events \
                 ([trace] kernel = true records them), so only lfrt's own steps are shown"
            )?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}

/// Hand-built windows for the tests of this module and of [`timeline`](crate::timeline).
#[cfg(test)]
pub(crate) mod fixture {
    use lfrt::telemetry::Sample;
    use lfrt::window::{
        KernelEvent, KernelEventKind, LaneInfo, ThreadInfo, Trigger, TriggerKind, Window,
    };

    /// 1 s, the time the fixtures start at.
    pub(crate) const T: u64 = 1_000_000_000;

    pub(crate) fn switch(
        ts: u64,
        cpu: u16,
        prev: (i32, &str, i32),
        next: (i32, &str, i32),
    ) -> KernelEvent {
        KernelEvent {
            ts_ns: T + ts,
            cpu,
            kind: KernelEventKind::Switch {
                prev_tid: prev.0,
                prev_comm: prev.1.into(),
                prev_prio: prev.2,
                prev_state: "S".into(),
                next_tid: next.0,
                next_comm: next.1.into(),
                next_prio: next.2,
            },
        }
    }

    pub(crate) fn ke(ts: u64, cpu: u16, kind: KernelEventKind) -> KernelEvent {
        KernelEvent {
            ts_ns: T + ts,
            cpu,
            kind,
        }
    }

    pub(crate) fn waking(ts: u64, cpu: u16, tid: i32, comm: &str) -> KernelEvent {
        ke(
            ts,
            cpu,
            KernelEventKind::Wake {
                tid,
                comm: comm.into(),
                prio: 19,
                target_cpu: cpu,
                woken: false,
            },
        )
    }

    pub(crate) fn irq(from: u64, to: u64, cpu: u16, n: u32, name: &str) -> [KernelEvent; 2] {
        [
            ke(
                from,
                cpu,
                KernelEventKind::IrqEntry {
                    irq: n,
                    name: name.into(),
                },
            ),
            ke(to, cpu, KernelEventKind::IrqExit { irq: n }),
        ]
    }

    /// A timer dispatch of lane `control` thread 0 (tid 1001), relative to [`T`] in ns.
    pub(crate) fn sample(origin: u64, woke: u64, start: u64, end: u64) -> Sample {
        Sample {
            lane: 0,
            thread: 0,
            token: 7,
            origin_ns: T + origin,
            woke_ns: T + woke,
            start_ns: T + start,
            end_ns: T + end,
            missed_periods: 0,
            arrival_ns: 0,
        }
    }

    /// Lanes `control` (fifo 80: tids 1001, 1002 on CPU 2) and `bulk` (fifo 20: tid 2001 on
    /// CPU 3); `worst` fired a latency trigger; no kernel events.
    pub(crate) fn window(worst: Sample, kernel: Vec<KernelEvent>) -> Window {
        let lane = |name: &str, prio, tids: &[i32], cpu| LaneInfo {
            name: name.into(),
            policy: "fifo".into(),
            priority: prio,
            threads: tids
                .iter()
                .map(|&tid| ThreadInfo {
                    tid,
                    cpus: vec![cpu],
                })
                .collect(),
        };
        let mut early = sample(10_000, 11_000, 12_000, 20_000);
        early.thread = 1;
        let mut bulk = sample(0, 300_000, 301_000, 305_000);
        bulk.lane = 1;
        bulk.origin_ns = 0;
        bulk.arrival_ns = T + 299_000;
        Window {
            trigger: Trigger {
                kind: TriggerKind::Latency {
                    threshold_ns: 50_000,
                },
                at_ns: worst.start_ns,
                sample: Some(worst),
            },
            from_ns: T,
            to_ns: T + 1_000_000,
            lanes: vec![
                lane("control", 80, &[1001, 1002], 2),
                lane("bulk", 20, &[2001], 3),
            ],
            samples: vec![early, worst, bulk],
            overwritten: vec![0, 0],
            kernel,
            steal_ns: None,
        }
    }

    /// (a) Due at 100 µs; the timer IRQ and the wake-up at 101–102 µs; `hog` (tid 999,
    /// SCHED_FIFO 89: kernel prio 10) runs on CPU 2 from 90 µs until 228 µs, an IRQ of eth0
    /// inside it; then the lane thread runs, its wait returns at 230 µs and its handler runs
    /// 232–240 µs.
    pub(crate) fn hog() -> Window {
        let mut k = vec![
            switch(90_000, 2, (0, "swapper/2", 120), (999, "hog", 10)),
            ke(101_000, 2, KernelEventKind::LocalTimer),
            ke(
                101_500,
                2,
                KernelEventKind::HrtimerExpire {
                    function: "hrtimer_wakeup".into(),
                },
            ),
            waking(102_000, 2, 1001, "control/0"),
        ];
        k.extend(irq(150_000, 155_000, 2, 30, "eth0"));
        k.push(switch(
            228_000,
            2,
            (999, "hog", 10),
            (1001, "control/0", 19),
        ));
        k.push(switch(
            241_000,
            2,
            (1001, "control/0", 19),
            (0, "swapper/2", 120),
        ));
        // On CPU 3: the bulk lane's datagram.
        k.push(ke(
            298_000,
            3,
            KernelEventKind::Wake {
                tid: 2001,
                comm: "bulk/0".into(),
                prio: 79,
                target_cpu: 3,
                woken: true,
            },
        ));
        k.push(switch(
            299_500,
            3,
            (50, "kworker/3:1", 120),
            (2001, "bulk/0", 79),
        ));
        window(sample(100_000, 230_000, 232_000, 240_000), k)
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;

    fn labels(e: &Explanation) -> Vec<String> {
        e.steps.iter().map(Step::label).collect()
    }

    #[test]
    fn a_higher_priority_process_that_ran_instead_is_named() {
        let w = hog();
        let e = explain(&w).unwrap();
        assert_eq!(
            labels(&e),
            [
                "due -> IRQ",
                "IRQ -> wake-up",
                "waiting to run",
                "running -> wait returned",
                "hand-off",
                "handler"
            ]
        );
        let d = e.dominant_step().unwrap();
        assert_eq!(d.label(), "waiting to run");
        assert_eq!(d.ns(), 126_000);
        // The hog, less the IRQ that interrupted it, then the IRQ.
        assert_eq!(
            e.ran_instead,
            [
                Ran {
                    what: Occupant::Process {
                        comm: "hog".into(),
                        tid: 999,
                        prio: 10
                    },
                    ns: 121_000
                },
                Ran {
                    what: Occupant::Irq {
                        irq: 30,
                        name: "eth0".into()
                    },
                    ns: 5_000
                },
            ]
        );
        // The IRQ before the wake-up on its CPU is the hrtimer's.
        assert_eq!(
            e.steps[0].to,
            Point::Irq {
                what: "hrtimer hrtimer_wakeup".into(),
                cpu: 2
            }
        );
        assert_eq!(e.total_ns(), 140_000);
        let text = e.to_string();
        println!("{text}");
        assert!(
            text.contains("hog:999 (rt 89, above the lane's 80)"),
            "{text}"
        );
        assert!(text.contains("dominant step: waiting to run"), "{text}");
        assert!(text.contains("90.0 %"), "{text}");
        assert!(!text.contains("kernel recorder off"), "{text}");
    }

    #[test]
    fn an_irq_that_ran_instead_is_named() {
        // The thread is woken on an idle CPU, and eth0's handler runs 80 µs before it can run.
        let mut k = vec![
            ke(101_000, 2, KernelEventKind::LocalTimer),
            waking(102_000, 2, 1001, "control/0"),
        ];
        k.extend(irq(103_000, 183_000, 2, 30, "eth0"));
        k.push(switch(
            184_000,
            2,
            (0, "swapper/2", 120),
            (1001, "control/0", 19),
        ));
        let w = window(sample(100_000, 186_000, 187_000, 190_000), k);
        let e = explain(&w).unwrap();
        assert_eq!(e.dominant_step().unwrap().label(), "waiting to run");
        assert_eq!(
            e.ran_instead[0],
            Ran {
                what: Occupant::Irq {
                    irq: 30,
                    name: "eth0".into()
                },
                ns: 80_000
            }
        );
        // The idle task held the CPU for the rest.
        assert_eq!(
            e.ran_instead[1],
            Ran {
                what: Occupant::Idle,
                ns: 2_000
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("CPU 2 ran irq 30 (eth0) for 80.00 us"),
            "{text}"
        );
    }

    #[test]
    fn a_late_timer_interrupt_dominates() {
        // The local timer fires 70 µs after the due time (interrupts were off).
        let k = vec![
            switch(50_000, 2, (1001, "control/0", 19), (0, "swapper/2", 120)),
            ke(170_000, 2, KernelEventKind::LocalTimer),
            waking(171_000, 2, 1001, "control/0"),
            switch(172_000, 2, (0, "swapper/2", 120), (1001, "control/0", 19)),
        ];
        let w = window(sample(100_000, 173_000, 174_000, 176_000), k);
        let e = explain(&w).unwrap();
        let d = e.dominant_step().unwrap();
        assert_eq!(d.label(), "due -> IRQ");
        assert_eq!(d.ns(), 70_000);
        let text = e.to_string();
        assert!(text.contains("local timer"), "{text}");
        assert!(text.contains("came late"), "{text}");
    }

    #[test]
    fn without_kernel_events_lfrts_own_steps() {
        let w = window(sample(100_000, 150_000, 152_000, 160_000), Vec::new());
        let e = explain(&w).unwrap();
        assert_eq!(labels(&e), ["due -> wait returned", "hand-off", "handler"]);
        assert_eq!(e.dominant_step().unwrap().label(), "due -> wait returned");
        assert!(e.ran_instead.is_empty());
        let text = e.to_string();
        assert!(text.contains("kernel recorder off"), "{text}");
        assert!(text.contains("the kernel's part"), "{text}");
        assert!(text.contains("latency (due -> handler entry)"), "{text}");
        assert!(text.contains("52.00 us"), "{text}");
    }

    #[test]
    fn a_sched_other_task_running_while_the_lane_is_runnable_is_the_rt_throttle() {
        let k = vec![
            switch(90_000, 2, (0, "swapper/2", 120), (4242, "make", 120)),
            waking(101_000, 2, 1001, "control/0"),
            switch(900_000, 2, (4242, "make", 120), (1001, "control/0", 19)),
        ];
        let w = window(sample(100_000, 901_000, 902_000, 903_000), k);
        let e = explain(&w).unwrap();
        assert_eq!(
            e.ran_instead[0].what,
            Occupant::NotPreempted {
                comm: "make".into(),
                tid: 4242,
                prio: 120
            }
        );
        let text = e.to_string();
        assert!(
            text.contains("make:4242 (other, nice 0), not preempted"),
            "{text}"
        );
        assert!(text.contains("sched_rt_runtime_us"), "{text}");
    }

    #[test]
    fn another_lanes_thread_and_a_preemption() {
        // The lane thread is preempted by bulk's thread (misconfigured onto CPU 2) and resumes.
        let running = switch(95_000, 2, (0, "swapper/2", 120), (1001, "control/0", 19));
        let mut out = switch(110_000, 2, (1001, "control/0", 19), (2001, "bulk/0", 79));
        if let KernelEventKind::Switch { prev_state, .. } = &mut out.kind {
            *prev_state = "R+".into();
        }
        let k = vec![
            running,
            out,
            switch(130_000, 2, (2001, "bulk/0", 79), (1001, "control/0", 19)),
        ];
        let w = window(sample(100_000, 131_000, 132_000, 133_000), k);
        let e = explain(&w).unwrap();
        assert_eq!(
            labels(&e),
            [
                "due -> preempted",
                "waiting to run",
                "running -> wait returned",
                "hand-off",
                "handler"
            ]
        );
        assert_eq!(
            e.ran_instead[0].what,
            Occupant::Lane {
                lane: "bulk".into(),
                sched: "fifo 20".into(),
                thread: 0,
                tid: 2001
            }
        );
        assert!(e
            .to_string()
            .contains("lane bulk (fifo 20) thread 0, tid 2001"));
    }

    #[test]
    fn a_demand_window_explains_its_largest_latency() {
        let mut w = window(sample(100_000, 150_000, 152_000, 160_000), Vec::new());
        w.trigger.kind = TriggerKind::Demand;
        w.trigger.sample = None;
        assert_eq!(worst_sample(&w), Some(w.samples[1]));
        w.samples.clear();
        assert!(explain(&w).is_none());
    }

    #[test]
    fn a_thread_already_running_has_no_wake_up() {
        let k = vec![switch(
            50_000,
            2,
            (0, "swapper/2", 120),
            (1001, "control/0", 19),
        )];
        let w = window(sample(100_000, 101_000, 102_000, 110_000), k);
        let e = explain(&w).unwrap();
        assert_eq!(labels(&e), ["due -> wait returned", "hand-off", "handler"]);
        assert!(
            e.notes.iter().any(|n| n.contains("already on CPU 2")),
            "{:?}",
            e.notes
        );
    }
}
