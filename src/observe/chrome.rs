//! A flight-recorder [`Window`] as a Chrome trace-event file that Perfetto and
//! chrome://tracing open, with the window itself kept in the file so the tools can read it
//! back exactly.
//!
//! The file is the trace-event format's *JSON Object Format*:
//! `{"displayTimeUnit": "ns", "otherData": {…}, "traceEvents": […], "lfrtWindow": {…}}`.
//! Timestamps are absolute `CLOCK_MONOTONIC` microseconds (floats, so nanoseconds survive).
//!
//! What the events show:
//! * one process per lane (a synthetic pid, named `lane NAME (POLICY PRIORITY)`), one track per
//!   lane thread (its kernel tid, named `NAME/INDEX`); per dispatch a `handler` span (entry →
//!   end), a `hand-off` span before it (the leader's wait returned → entry), `due` and
//!   `arrival` instants, and a flow from the due time or the kernel's arrival through the
//!   wake-up to the handler;
//! * one process `kernel` with one track per CPU: what ran there (from consecutive
//!   `sched_switch` events, named `comm:tid`), IRQs (entry → exit), hrtimer expiries, local
//!   timer ticks and the wake-ups of lane threads;
//! * a global instant at the trigger.
//!
//! It runs on the non-real-time collector thread: it allocates freely, and writes through a
//! [`BufWriter`].

use super::sample::Sample;
use super::window::{KernelEventKind, LaneInfo, TriggerKind, Window};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The top-level key the raw window is written under.
///
/// The trace-event format (Google's "Trace Event Format" document, section "JSON Object
/// Format") defines `traceEvents`, `displayTimeUnit`, `systemTraceEvents`, `otherData`,
/// `stackFrames` and `samples`, and says that any other property of the object is taken as
/// metadata of the trace rather than as events; Perfetto's JSON importer skips keys it does not
/// know. So viewers show the events and leave this key alone.
pub const WINDOW_KEY: &str = "lfrtWindow";

/// Synthetic ids: above the kernel's largest pid (`pid_max` is at most 2^22), so never those of
/// a real process or thread, and never 0 (Perfetto takes a tid of 0 for "unset").
const KERNEL_PID: u32 = 10_000_000;
/// A lane's pid is this plus its index.
const LANE_PID_BASE: u32 = 10_000_001;
/// A CPU's track in the kernel process is this plus its number.
const CPU_TID_BASE: u32 = 20_000_000;
/// A lane thread the window does not describe (no tid): this plus lane × 1024 plus its index.
const UNKNOWN_TID_BASE: u32 = 30_000_000;

/// Writes `window` to the file `path` (created or truncated) as Chrome trace-event JSON, the
/// window itself under the key [`WINDOW_KEY`] ([`read_window`] reads it back).
pub fn write_chrome_trace(window: &Window, path: impl AsRef<Path>) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    write_chrome_trace_to(window, file)
}

/// Writes `window` to `out` as Chrome trace-event JSON (buffered here: `out` may be a bare
/// file or socket).
pub fn write_chrome_trace_to(window: &Window, out: impl Write) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let events = trace_events(window);
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut out, &other_data(window))?;
    out.write_all(b",\"traceEvents\":[\n")?;
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut out, e)?;
    }
    write!(out, "\n],\"{WINDOW_KEY}\":")?;
    serde_json::to_writer(&mut out, window)?;
    out.write_all(b"}\n")?;
    out.flush()
}

/// Reads back the window a file written by [`write_chrome_trace`] holds.
///
/// An error of kind [`io::ErrorKind::InvalidData`] if the file is not JSON, or has no
/// [`WINDOW_KEY`] (a trace lfrt did not write), or its window does not parse.
pub fn read_window(path: impl AsRef<Path>) -> io::Result<Window> {
    #[derive(serde::Deserialize)]
    struct TraceFile {
        #[serde(rename = "lfrtWindow")]
        window: Option<Window>,
    }
    let path = path.as_ref();
    let text = std::fs::read(path)?;
    // The events are skipped unparsed into values (serde ignores unknown fields).
    let file: TraceFile = serde_json::from_slice(&text)?;
    file.window.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: no \"{WINDOW_KEY}\" key: not a flight-recorder trace written by lfrt",
                path.display()
            ),
        )
    })
}

/// One trace event. `ts` and `dur` are kept in ns until written (as µs).
#[derive(Debug)]
struct Event {
    name: Cow<'static, str>,
    cat: &'static str,
    ph: Phase,
    ts_ns: u64,
    dur_ns: Option<u64>,
    pid: u32,
    tid: u32,
    id: Option<u64>,
    args: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Metadata,
    Complete,
    /// Instant with scope thread (`t`) or global (`g`).
    Instant {
        global: bool,
    },
    FlowStart,
    FlowStep,
    FlowEnd,
}

impl Phase {
    /// Order among events of one timestamp: metadata, then spans (longest first, so they
    /// enclose the shorter ones), then instants, then the flow events that bind to them.
    fn rank(self) -> u8 {
        match self {
            Phase::Metadata => 0,
            Phase::Complete => 1,
            Phase::Instant { .. } => 2,
            Phase::FlowStart | Phase::FlowStep | Phase::FlowEnd => 3,
        }
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("cat", self.cat)?;
        let ph = match self.ph {
            Phase::Metadata => "M",
            Phase::Complete => "X",
            Phase::Instant { .. } => "i",
            Phase::FlowStart => "s",
            Phase::FlowStep => "t",
            Phase::FlowEnd => "f",
        };
        m.serialize_entry("ph", ph)?;
        m.serialize_entry("ts", &us(self.ts_ns))?;
        if let Some(d) = self.dur_ns {
            m.serialize_entry("dur", &us(d))?;
        }
        m.serialize_entry("pid", &self.pid)?;
        m.serialize_entry("tid", &self.tid)?;
        if let Phase::Instant { global } = self.ph {
            m.serialize_entry("s", if global { "g" } else { "t" })?;
        }
        if let Some(id) = self.id {
            m.serialize_entry("id", &id)?;
        }
        if self.ph == Phase::FlowEnd {
            // Bind to the enclosing slice (the handler), not the next one to begin.
            m.serialize_entry("bp", "e")?;
        }
        if let Some(a) = &self.args {
            m.serialize_entry("args", a)?;
        }
        m.end()
    }
}

impl Event {
    fn new(name: impl Into<Cow<'static, str>>, cat: &'static str, ph: Phase) -> Event {
        Event {
            name: name.into(),
            cat,
            ph,
            ts_ns: 0,
            dur_ns: None,
            pid: KERNEL_PID,
            tid: KERNEL_PID,
            id: None,
            args: None,
        }
    }

    fn at(mut self, ts_ns: u64, (pid, tid): (u32, u32)) -> Event {
        self.ts_ns = ts_ns;
        self.pid = pid;
        self.tid = tid;
        self
    }

    fn span(self, from_ns: u64, to_ns: u64, track: (u32, u32)) -> Event {
        let mut e = self.at(from_ns, track);
        e.dur_ns = Some(to_ns.saturating_sub(from_ns));
        e
    }

    fn args(mut self, args: serde_json::Value) -> Event {
        self.args = Some(args);
        self
    }

    fn id(mut self, id: u64) -> Event {
        self.id = Some(id);
        self
    }
}

fn metadata(kind: &'static str, (pid, tid): (u32, u32), args: serde_json::Value) -> Event {
    Event::new(kind, "__metadata", Phase::Metadata)
        .at(0, (pid, tid))
        .args(args)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace's `otherData`: what the window is, for the viewer's metadata panel.
fn other_data(w: &Window) -> serde_json::Value {
    serde_json::json!({
        "source": "lfrt flight recorder",
        "version": env!("CARGO_PKG_VERSION"),
        "trigger": trigger_name(&w.trigger.kind),
        "from_us": us(w.from_ns),
        "to_us": us(w.to_ns),
        "samples": w.samples.len(),
        "kernel_events": w.kernel.len(),
        "overwritten": w.overwritten,
        "steal_ns": w.steal_ns,
    })
}

fn trigger_name(k: &TriggerKind) -> &'static str {
    match k {
        TriggerKind::Latency { .. } => "latency",
        TriggerKind::Overrun { .. } => "overrun",
        TriggerKind::Demand => "demand",
    }
}

/// Where a lane's thread is drawn: (pid, tid).
fn thread_track(lanes: &[LaneInfo], lane: u16, thread: u16) -> (u32, u32) {
    let pid = LANE_PID_BASE + u32::from(lane);
    let tid = lanes
        .get(usize::from(lane))
        .and_then(|l| l.threads.get(usize::from(thread)))
        .map(|t| t.tid)
        .filter(|&tid| tid > 0)
        .map_or(
            UNKNOWN_TID_BASE + u32::from(lane) * 1024 + u32::from(thread),
            |tid| tid as u32,
        );
    (pid, tid)
}

fn cpu_track(cpu: u16) -> (u32, u32) {
    (KERNEL_PID, CPU_TID_BASE + u32::from(cpu))
}

/// Every event of the trace, in the order they are written (by time; see [`Phase::rank`]).
fn trace_events(w: &Window) -> Vec<Event> {
    let mut ev = Vec::with_capacity(w.samples.len() * 6 + w.kernel.len() + 64);
    lane_metadata(w, &mut ev);
    let mut handler_ends = HashMap::new();
    for (i, s) in dispatch_order(&w.samples) {
        dispatch_events(w, s, i as u64 + 1, &mut handler_ends, &mut ev);
    }
    kernel_events(w, &mut ev);
    let trigger = &w.trigger;
    let track = trigger.sample.map_or((KERNEL_PID, KERNEL_PID), |s| {
        thread_track(&w.lanes, s.lane, s.thread)
    });
    let mut args = serde_json::json!({ "kind": trigger_name(&trigger.kind) });
    match trigger.kind {
        TriggerKind::Latency { threshold_ns } => args["threshold_us"] = us(threshold_ns).into(),
        TriggerKind::Overrun { budget_ns } => args["budget_us"] = us(budget_ns).into(),
        TriggerKind::Demand => {}
    }
    if let Some(s) = trigger.sample {
        args["token"] = s.token.into();
        args["latency_us"] = us(s.latency_ns()).into();
    }
    ev.push(
        Event::new(
            format!("trigger: {}", trigger_name(&trigger.kind)),
            "lfrt",
            Phase::Instant { global: true },
        )
        .at(trigger.at_ns, track)
        .args(args),
    );
    // Stable: events of one time and rank keep the order they were made in (a flow's start
    // right after the instant it binds to).
    ev.sort_by_key(|e| {
        (
            e.ph != Phase::Metadata,
            e.ts_ns,
            e.ph.rank(),
            std::cmp::Reverse(e.dur_ns.unwrap_or(0)),
        )
    });
    ev
}

/// The samples with their index in the window, by thread and then handler entry: the order the
/// hand-off spans are clipped in.
fn dispatch_order(samples: &[Sample]) -> Vec<(usize, &Sample)> {
    let mut order: Vec<(usize, &Sample)> = samples.iter().enumerate().collect();
    order.sort_by_key(|(i, s)| (s.lane, s.thread, s.start_ns, *i));
    order
}

fn lane_metadata(w: &Window, ev: &mut Vec<Event>) {
    let mut named: HashSet<(u32, u32)> = HashSet::new();
    for (li, lane) in w.lanes.iter().enumerate() {
        let Ok(l) = u16::try_from(li) else { break };
        let pid = LANE_PID_BASE + u32::from(l);
        let name = format!("lane {} ({} {})", lane.name, lane.policy, lane.priority);
        ev.push(metadata(
            "process_name",
            (pid, pid),
            serde_json::json!({ "name": name }),
        ));
        ev.push(metadata(
            "process_sort_index",
            (pid, pid),
            serde_json::json!({ "sort_index": li }),
        ));
        for ti in 0..lane.threads.len().min(usize::from(u16::MAX)) {
            let track = thread_track(&w.lanes, l, ti as u16);
            named.insert(track);
            ev.push(metadata(
                "thread_name",
                track,
                serde_json::json!({ "name": format!("{}/{ti}", lane.name) }),
            ));
            ev.push(metadata(
                "thread_sort_index",
                track,
                serde_json::json!({ "sort_index": ti }),
            ));
        }
    }
    // Samples of lanes or threads the window does not describe still get named tracks.
    for s in &w.samples {
        let track = thread_track(&w.lanes, s.lane, s.thread);
        if named.insert(track) {
            if usize::from(s.lane) >= w.lanes.len() && named.insert((track.0, track.0)) {
                ev.push(metadata(
                    "process_name",
                    (track.0, track.0),
                    serde_json::json!({ "name": format!("lane #{}", s.lane) }),
                ));
            }
            ev.push(metadata(
                "thread_name",
                track,
                serde_json::json!({ "name": format!("lane #{}/{}", s.lane, s.thread) }),
            ));
        }
    }
}

/// One dispatch's events: `due`/`arrival` instants, the `hand-off` and `handler` spans and the
/// flow that links them (`id`, unique in the trace). `handler_ends` holds the end of the last
/// handler drawn on each track (samples come by track and entry, [`dispatch_order`]).
fn dispatch_events(
    w: &Window,
    s: &Sample,
    id: u64,
    handler_ends: &mut HashMap<(u32, u32), u64>,
    ev: &mut Vec<Event>,
) {
    let track = thread_track(&w.lanes, s.lane, s.thread);
    let end = s.end_ns.max(s.start_ns);
    // A hand-off starts no earlier than the previous handler on its track ended: a leader that
    // takes several events from one wait runs them one after the other, and a follower runs
    // events of a wait that returned while it was busy. The spans of a track must nest.
    let prev_end = handler_ends.insert(track, end).unwrap_or(0);
    let mut flow_from = None;
    if s.origin_ns != 0 {
        ev.push(
            Event::new("due", "lfrt", Phase::Instant { global: false })
                .at(s.origin_ns, track)
                .args(serde_json::json!({ "token": s.token })),
        );
        flow_from = Some(s.origin_ns);
    }
    if s.arrival_ns != 0 {
        ev.push(
            Event::new("arrival", "lfrt", Phase::Instant { global: false })
                .at(s.arrival_ns, track)
                .args(serde_json::json!({
                    "token": s.token,
                    "to_handler_us": us(s.start_ns.saturating_sub(s.arrival_ns)),
                })),
        );
        flow_from = Some(s.arrival_ns);
    }
    let handoff_from = s.woke_ns.max(prev_end);
    let handoff = s.woke_ns != 0 && handoff_from < s.start_ns;
    if handoff {
        ev.push(
            Event::new("hand-off", "lfrt", Phase::Complete)
                .span(handoff_from, s.start_ns, track)
                .args(serde_json::json!({
                    "token": s.token,
                    "woke_us": us(s.woke_ns),
                    "hand_off_us": us(s.start_ns - s.woke_ns.min(s.start_ns)),
                })),
        );
    }
    ev.push(
        Event::new("handler", "lfrt", Phase::Complete)
            .span(s.start_ns, end, track)
            .args(serde_json::json!({
                "token": s.token,
                "latency_us": us(s.latency_ns()),
                "missed_periods": s.missed_periods,
                "lane": s.lane,
                "thread": s.thread,
            })),
    );
    // due or arrival → wake-up → handler entry; each point binds to the slice it lies in.
    if let Some(from) = flow_from.filter(|&f| f <= s.start_ns) {
        ev.push(
            Event::new("dispatch", "lfrt.flow", Phase::FlowStart)
                .at(from, track)
                .id(id),
        );
        if handoff && handoff_from >= from {
            ev.push(
                Event::new("dispatch", "lfrt.flow", Phase::FlowStep)
                    .at(handoff_from, track)
                    .id(id),
            );
        }
        ev.push(
            Event::new("dispatch", "lfrt.flow", Phase::FlowEnd)
                .at(s.start_ns, track)
                .id(id),
        );
    }
}

/// The name a task has on a CPU track: `comm:tid`.
fn task_name(comm: &str, tid: i32) -> String {
    format!("{comm}:{tid}")
}

fn kernel_events(w: &Window, ev: &mut Vec<Event>) {
    if w.kernel.is_empty() {
        return;
    }
    let lane_tids: HashSet<i32> = w
        .lanes
        .iter()
        .flat_map(|l| l.threads.iter().map(|t| t.tid))
        .collect();
    ev.push(metadata(
        "process_name",
        (KERNEL_PID, KERNEL_PID),
        serde_json::json!({ "name": "kernel" }),
    ));
    ev.push(metadata(
        "process_sort_index",
        (KERNEL_PID, KERNEL_PID),
        serde_json::json!({ "sort_index": w.lanes.len() }),
    ));
    /// What runs on a CPU since when: (since, tid, comm, prio).
    type Running = (u64, i32, String, i32);
    let mut running: HashMap<u16, Running> = HashMap::new();
    let mut cpus: BTreeSet<u16> = BTreeSet::new();
    let mut irqs: HashMap<(u16, u32), (u64, &str)> = HashMap::new();
    let last_ts = w.kernel.last().map_or(w.to_ns, |e| e.ts_ns);
    let close = |ev: &mut Vec<Event>, cpu: u16, run: Running, to: u64| {
        let (since, tid, comm, prio) = run;
        if tid != 0 && to >= since {
            ev.push(
                Event::new(task_name(&comm, tid), "sched", Phase::Complete)
                    .span(since, to, cpu_track(cpu))
                    .args(serde_json::json!({ "prio": prio, "tid": tid, "comm": comm })),
            );
        }
    };
    for k in &w.kernel {
        cpus.insert(k.cpu);
        let track = cpu_track(k.cpu);
        match &k.kind {
            KernelEventKind::Switch {
                prev_tid,
                prev_comm,
                prev_prio,
                next_tid,
                next_comm,
                next_prio,
                ..
            } => {
                // Before the CPU's first switch in the window, `prev` ran since its start.
                let run = running.remove(&k.cpu).unwrap_or_else(|| {
                    let since = w.from_ns.min(k.ts_ns);
                    (since, *prev_tid, prev_comm.clone(), *prev_prio)
                });
                close(ev, k.cpu, run, k.ts_ns);
                running.insert(k.cpu, (k.ts_ns, *next_tid, next_comm.clone(), *next_prio));
            }
            KernelEventKind::Wake {
                tid,
                comm,
                prio,
                target_cpu,
                woken,
            } => {
                if lane_tids.contains(tid) {
                    let what = if *woken { "wakeup" } else { "waking" };
                    ev.push(
                        Event::new(
                            format!("{what} {}", task_name(comm, *tid)),
                            "sched",
                            Phase::Instant { global: false },
                        )
                        .at(k.ts_ns, track)
                        .args(serde_json::json!({ "prio": prio, "target_cpu": target_cpu })),
                    );
                }
            }
            KernelEventKind::IrqEntry { irq, name } => {
                irqs.insert((k.cpu, *irq), (k.ts_ns, name));
            }
            KernelEventKind::IrqExit { irq } => {
                // An exit whose entry is before the window is left out: its span would start
                // at an unknown time.
                if let Some((from, name)) = irqs.remove(&(k.cpu, *irq)) {
                    ev.push(
                        Event::new(format!("irq {irq}: {name}"), "irq", Phase::Complete)
                            .span(from, k.ts_ns, track)
                            .args(serde_json::json!({ "irq": irq })),
                    );
                }
            }
            KernelEventKind::HrtimerExpire { function } => {
                ev.push(
                    Event::new(
                        format!("hrtimer {function}"),
                        "timer",
                        Phase::Instant { global: false },
                    )
                    .at(k.ts_ns, track),
                );
            }
            KernelEventKind::LocalTimer => {
                ev.push(
                    Event::new("local timer", "timer", Phase::Instant { global: false })
                        .at(k.ts_ns, track),
                );
            }
        }
    }
    for cpu in cpus {
        if let Some(run) = running.remove(&cpu) {
            close(ev, cpu, run, w.to_ns.max(last_ts));
        }
        ev.push(metadata(
            "thread_name",
            cpu_track(cpu),
            serde_json::json!({ "name": format!("CPU {cpu}") }),
        ));
        ev.push(metadata(
            "thread_sort_index",
            cpu_track(cpu),
            serde_json::json!({ "sort_index": cpu }),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::tracefs::KernelEvent;
    use crate::window::{LaneInfo, ThreadInfo, Trigger};
    use serde_json::Value;

    const MS: u64 = 1_000_000;

    fn switch(ts_ns: u64, cpu: u16, prev: (i32, &str, i32), next: (i32, &str, i32)) -> KernelEvent {
        KernelEvent {
            ts_ns,
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

    fn ke(ts_ns: u64, cpu: u16, kind: KernelEventKind) -> KernelEvent {
        KernelEvent { ts_ns, cpu, kind }
    }

    fn sample(lane: u16, thread: u16, origin: u64, woke: u64, start: u64, end: u64) -> Sample {
        Sample {
            lane,
            thread,
            token: 7,
            origin_ns: origin,
            woke_ns: woke,
            start_ns: start,
            end_ns: end,
            missed_periods: 0,
            arrival_ns: 0,
        }
    }

    /// Two lanes; a timer dispatch delayed by a higher-priority hog on its CPU, a leader that
    /// runs two events of one wait, a datagram with a kernel arrival stamp, an IRQ, timers and
    /// wake-ups, an IRQ exit whose entry is before the window, and a sample of a lane the
    /// window does not describe.
    fn window() -> Window {
        let t = 1_000 * MS;
        let worst = sample(0, 0, t + 100_000, t + 230_000, t + 232_000, t + 240_000);
        let mut dgram = sample(1, 0, 0, t + 300_000, t + 301_000, t + 305_000);
        dgram.arrival_ns = t + 299_000;
        let lane = |name: &str, prio, tids: &[i32], cpus: &[u16]| LaneInfo {
            name: name.into(),
            policy: "fifo".into(),
            priority: prio,
            threads: tids
                .iter()
                .map(|&tid| ThreadInfo {
                    tid,
                    cpus: cpus.to_vec(),
                })
                .collect(),
        };
        Window {
            trigger: Trigger {
                kind: TriggerKind::Latency {
                    threshold_ns: 50_000,
                },
                at_ns: worst.start_ns,
                sample: Some(worst),
            },
            from_ns: t,
            to_ns: t + MS,
            lanes: vec![
                lane("control", 80, &[1001, 1002], &[2]),
                lane("bulk", 20, &[2001], &[3]),
            ],
            samples: vec![
                sample(0, 1, t + 10_000, t + 11_000, t + 12_000, t + 20_000),
                // Two events of one wait on thread 1: the second waits behind the first.
                sample(0, 1, t + 50_000, t + 51_000, t + 52_000, t + 60_000),
                sample(0, 1, t + 50_500, t + 51_000, t + 60_500, t + 61_000),
                worst,
                dgram,
                sample(5, 3, t + 400_000, t + 401_000, t + 402_000, t + 403_000),
            ],
            overwritten: vec![0, 3],
            kernel: vec![
                ke(t + 1_000, 2, KernelEventKind::IrqExit { irq: 30 }),
                switch(t + 90_000, 2, (0, "swapper/2", 120), (999, "hog", 10)),
                ke(t + 101_000, 2, KernelEventKind::LocalTimer),
                ke(
                    t + 101_500,
                    2,
                    KernelEventKind::HrtimerExpire {
                        function: "hrtimer_wakeup".into(),
                    },
                ),
                ke(
                    t + 102_000,
                    2,
                    KernelEventKind::Wake {
                        tid: 1001,
                        comm: "control/0".into(),
                        prio: 19,
                        target_cpu: 2,
                        woken: false,
                    },
                ),
                ke(
                    t + 150_000,
                    2,
                    KernelEventKind::IrqEntry {
                        irq: 30,
                        name: "eth0".into(),
                    },
                ),
                ke(t + 155_000, 2, KernelEventKind::IrqExit { irq: 30 }),
                switch(t + 228_000, 2, (999, "hog", 10), (1001, "control/0", 19)),
                switch(
                    t + 241_000,
                    2,
                    (1001, "control/0", 19),
                    (0, "swapper/2", 120),
                ),
                ke(
                    t + 298_000,
                    3,
                    KernelEventKind::Wake {
                        tid: 2001,
                        comm: "bulk/0".into(),
                        prio: 79,
                        target_cpu: 3,
                        woken: true,
                    },
                ),
                switch(t + 299_500, 3, (50, "kworker", 120), (2001, "bulk/0", 79)),
                // Never closed in the window.
                ke(
                    t + 900_000,
                    3,
                    KernelEventKind::IrqEntry {
                        irq: 31,
                        name: "nvme".into(),
                    },
                ),
            ],
            steal_ns: Some(1_500),
        }
    }

    fn written(w: &Window) -> Vec<u8> {
        let mut out = Vec::new();
        write_chrome_trace_to(w, &mut out).unwrap();
        out
    }

    fn temp_path(what: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("lfrt-chrome-{what}-{}.json", std::process::id()))
    }

    #[test]
    fn round_trip() {
        let w = window();
        let path = temp_path("round-trip");
        write_chrome_trace(&w, &path).unwrap();
        let back = read_window(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.unwrap(), w);
    }

    #[test]
    fn round_trip_of_an_empty_demand_window() {
        let w = Window {
            trigger: Trigger {
                kind: TriggerKind::Demand,
                at_ns: 5,
                sample: None,
            },
            from_ns: 0,
            to_ns: 10,
            lanes: vec![],
            samples: vec![],
            overwritten: vec![],
            kernel: vec![],
            steal_ns: None,
        };
        let path = temp_path("empty");
        write_chrome_trace(&w, &path).unwrap();
        let back = read_window(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.unwrap(), w);
    }

    #[test]
    fn read_window_refuses_other_traces() {
        let path = temp_path("foreign");
        std::fs::write(&path, br#"{"traceEvents": []}"#).unwrap();
        let err = read_window(&path).unwrap_err();
        std::fs::write(&path, b"not json").unwrap();
        let err2 = read_window(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("lfrtWindow"), "{err}");
        assert_eq!(err2.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn top_level_keys_are_the_formats_and_the_window() {
        // The JSON Object Format of the trace-event format names its own keys and treats any
        // other property of the object as trace metadata, not as events (Trace Event Format,
        // "JSON Object Format"); Perfetto's importer skips unknown keys. `lfrtWindow` is the
        // only key of ours.
        let v: Value = serde_json::from_slice(&written(&window())).unwrap();
        let known = [
            "traceEvents",
            "displayTimeUnit",
            "systemTraceEvents",
            "otherData",
            "stackFrames",
            "samples",
        ];
        let obj = v.as_object().unwrap();
        let ours: Vec<&String> = obj
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .collect();
        assert_eq!(ours, [WINDOW_KEY]);
        assert_eq!(v["displayTimeUnit"], "ns");
        assert!(v["otherData"].is_object());
        // What a reader that knows only the format sees: the events, with the window present
        // or not.
        let mut without = v.clone();
        without.as_object_mut().unwrap().remove(WINDOW_KEY);
        assert_eq!(without["traceEvents"], v["traceEvents"]);
        // And the window reader ignores keys it does not know, before or after the window.
        let path = temp_path("extra-keys");
        let mut extra = v.clone();
        extra["zzz"] = serde_json::json!({"a": [1, 2]});
        extra["aaa"] = serde_json::json!(null);
        std::fs::write(&path, serde_json::to_vec(&extra).unwrap()).unwrap();
        let back = read_window(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.unwrap(), window());
    }

    /// Checks every event against the trace-event format's rules; returns the events.
    fn check_format(bytes: &[u8]) -> Vec<Value> {
        let v: Value = serde_json::from_slice(bytes).unwrap();
        let events = v["traceEvents"]
            .as_array()
            .expect("traceEvents array")
            .clone();
        let mut flow_start: HashMap<u64, (usize, f64)> = HashMap::new();
        let mut flow_end: HashMap<u64, (usize, f64)> = HashMap::new();
        let mut spans: HashMap<(u64, u64), Vec<(f64, f64)>> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let what = format!("event {i}: {e}");
            assert!(e["name"].is_string(), "{what}: name");
            let ph = e["ph"].as_str().unwrap_or_else(|| panic!("{what}: ph"));
            let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("{what}: ts"));
            assert!(ts.is_finite() && ts >= 0.0, "{what}: ts");
            let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("{what}: pid"));
            let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("{what}: tid"));
            assert!(tid > 0 && pid > 0, "{what}: a pid or tid of 0 means unset");
            match ph {
                "X" => {
                    let dur = e["dur"].as_f64().unwrap_or_else(|| panic!("{what}: dur"));
                    assert!(dur.is_finite() && dur >= 0.0, "{what}: dur");
                    spans.entry((pid, tid)).or_default().push((ts, ts + dur));
                }
                "i" => {
                    let s = e["s"].as_str().unwrap_or_else(|| panic!("{what}: s"));
                    assert!(["g", "p", "t"].contains(&s), "{what}: s");
                }
                "M" => {
                    let name = e["name"].as_str().unwrap();
                    match name {
                        "process_name" | "thread_name" => {
                            assert!(e["args"]["name"].is_string(), "{what}: args.name")
                        }
                        "process_sort_index" | "thread_sort_index" => {
                            assert!(e["args"]["sort_index"].is_i64(), "{what}: sort_index")
                        }
                        other => panic!("{what}: unknown metadata {other}"),
                    }
                }
                "s" | "t" | "f" => {
                    let id = e["id"].as_u64().unwrap_or_else(|| panic!("{what}: id"));
                    assert!(e["cat"].is_string(), "{what}: flows match by cat");
                    match ph {
                        "s" => assert!(flow_start.insert(id, (i, ts)).is_none(), "{what}"),
                        "f" => {
                            assert_eq!(e["bp"], "e", "{what}: binds to the enclosing slice");
                            assert!(flow_end.insert(id, (i, ts)).is_none(), "{what}")
                        }
                        _ => {
                            let (si, sts) = flow_start[&id];
                            assert!(si < i && sts <= ts, "{what}: step after its start");
                        }
                    }
                }
                other => panic!("{what}: unexpected phase {other}"),
            }
        }
        assert_eq!(
            flow_start.len(),
            flow_end.len(),
            "every flow starts and ends"
        );
        for (id, (fi, fts)) in &flow_end {
            let (si, sts) = flow_start
                .get(id)
                .unwrap_or_else(|| panic!("flow {id} ends without a start"));
            assert!(si < fi && sts <= fts, "flow {id}: \"s\" before \"f\"");
        }
        // The spans of one track nest (Perfetto drops a slice that overlaps its parent's end).
        for (track, mut s) in spans {
            s.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
            let mut stack: Vec<(f64, f64)> = Vec::new();
            for (from, to) in s {
                while stack.last().is_some_and(|&(_, end)| end <= from) {
                    stack.pop();
                }
                if let Some(&(pf, pt)) = stack.last() {
                    assert!(
                        to <= pt,
                        "track {track:?}: [{from}, {to}] overlaps [{pf}, {pt}]"
                    );
                }
                stack.push((from, to));
            }
        }
        events
    }

    fn named<'a>(events: &'a [Value], ph: &str, name: &str) -> Vec<&'a Value> {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .collect()
    }

    #[test]
    fn every_event_follows_the_format() {
        let w = window();
        let events = check_format(&written(&w));
        let t = 1_000_000.0; // µs
                             // Lanes, their threads and the CPUs are named.
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"].as_str().unwrap().ends_with("_name"))
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        for n in [
            "lane control (fifo 80)",
            "lane bulk (fifo 20)",
            "control/0",
            "control/1",
            "bulk/0",
            "kernel",
            "CPU 2",
            "CPU 3",
            "lane #5",
            "lane #5/3",
        ] {
            assert!(names.contains(&n), "{n} not in {names:?}");
        }
        // The worst dispatch: its handler on its real tid, with its latency.
        let worst = named(&events, "X", "handler")
            .into_iter()
            .find(|e| e["tid"] == 1001)
            .unwrap();
        assert_eq!(worst["ts"].as_f64().unwrap(), t + 232.0);
        assert_eq!(worst["dur"].as_f64().unwrap(), 8.0);
        assert_eq!(worst["args"]["latency_us"].as_f64().unwrap(), 132.0);
        assert_eq!(worst["args"]["token"], 7);
        assert_eq!(worst["args"]["missed_periods"], 0);
        // Its hand-off, due and flow.
        let handoff = named(&events, "X", "hand-off")
            .into_iter()
            .find(|e| e["tid"] == 1001)
            .unwrap();
        assert_eq!(handoff["ts"].as_f64().unwrap(), t + 230.0);
        assert_eq!(handoff["dur"].as_f64().unwrap(), 2.0);
        assert!(named(&events, "i", "due")
            .iter()
            .any(|e| e["tid"] == 1001 && e["ts"].as_f64().unwrap() == t + 100.0));
        let arrival = named(&events, "i", "arrival");
        assert_eq!(arrival.len(), 1);
        assert_eq!(arrival[0]["tid"], 2001);
        // The second event of one wait: its hand-off starts where the first handler ended.
        let second = named(&events, "X", "hand-off")
            .into_iter()
            .find(|e| e["ts"].as_f64().unwrap() == t + 60.0)
            .expect("clipped hand-off");
        assert_eq!(second["args"]["woke_us"].as_f64().unwrap(), t + 51.0);
        // A flow per dispatch with a due time or an arrival (all 6), through the hand-off.
        assert_eq!(events.iter().filter(|e| e["ph"] == "s").count(), 6);
        assert_eq!(events.iter().filter(|e| e["ph"] == "t").count(), 6);
        // The kernel: the hog ran on CPU 2 until the lane thread was switched in; the IRQ.
        let hog = named(&events, "X", "hog:999");
        assert_eq!(hog.len(), 1);
        assert_eq!(hog[0]["ts"].as_f64().unwrap(), t + 90.0);
        assert_eq!(hog[0]["dur"].as_f64().unwrap(), 138.0);
        assert_eq!(hog[0]["args"]["prio"], 10);
        assert_eq!(hog[0]["tid"], CPU_TID_BASE + 2);
        let irq = named(&events, "X", "irq 30: eth0");
        assert_eq!(irq.len(), 1, "the exit without entry is left out");
        assert_eq!(irq[0]["dur"].as_f64().unwrap(), 5.0);
        assert!(named(&events, "X", "irq 31: nvme").is_empty());
        // What ran before the first switch of a CPU, from the window's start; idle is a gap.
        assert_eq!(
            named(&events, "X", "kworker:50")[0]["ts"].as_f64().unwrap(),
            t
        );
        assert!(events
            .iter()
            .all(|e| !e["name"].as_str().unwrap().starts_with("swapper")));
        // The lane thread until the end of the window.
        let bulk = named(&events, "X", "bulk/0:2001");
        assert_eq!(
            bulk[0]["ts"].as_f64().unwrap() + bulk[0]["dur"].as_f64().unwrap(),
            t + 1000.0
        );
        assert_eq!(named(&events, "i", "local timer").len(), 1);
        assert_eq!(named(&events, "i", "hrtimer hrtimer_wakeup").len(), 1);
        assert_eq!(named(&events, "i", "waking control/0:1001").len(), 1);
        assert_eq!(named(&events, "i", "wakeup bulk/0:2001").len(), 1);
        // The trigger, global.
        let trig = named(&events, "i", "trigger: latency");
        assert_eq!(trig.len(), 1);
        assert_eq!(trig[0]["s"], "g");
        assert_eq!(trig[0]["args"]["threshold_us"].as_f64().unwrap(), 50.0);
    }

    #[test]
    fn events_are_in_time_order_after_the_metadata() {
        let events = check_format(&written(&window()));
        let first = events.iter().position(|e| e["ph"] != "M").unwrap();
        assert!(events[first..].iter().all(|e| e["ph"] != "M"));
        let ts: Vec<f64> = events[first..]
            .iter()
            .map(|e| e["ts"].as_f64().unwrap())
            .collect();
        assert!(ts.windows(2).all(|p| p[0] <= p[1]));
    }

    /// A window of 100 ms at 20,000 dispatches/s over two lanes (2,000 samples) and about
    /// 20,000 kernel events on four CPUs.
    fn big_window() -> Window {
        let t = 5_000 * MS;
        let mut w = window();
        w.from_ns = t;
        w.to_ns = t + 100 * MS;
        w.samples.clear();
        w.kernel.clear();
        for i in 0..2_000u64 {
            let due = t + i * 50_000;
            let (lane, thread) = ((i % 2) as u16, 0);
            w.samples.push(Sample {
                lane,
                thread,
                token: i,
                origin_ns: due,
                woke_ns: due + 3_000,
                start_ns: due + 4_000,
                end_ns: due + 9_000,
                missed_periods: 0,
                arrival_ns: if lane == 1 { due + 500 } else { 0 },
            });
        }
        let mut ts = t;
        while w.kernel.len() < 20_000 {
            let cpu = (w.kernel.len() % 4) as u16;
            ts += 1_000;
            let kind = match (w.kernel.len() / 4) % 5 {
                0 => KernelEventKind::IrqEntry {
                    irq: 30,
                    name: "eth0".into(),
                },
                1 => KernelEventKind::IrqExit { irq: 30 },
                2 => KernelEventKind::Wake {
                    tid: 1001,
                    comm: "control/0".into(),
                    prio: 19,
                    target_cpu: cpu,
                    woken: true,
                },
                3 => KernelEventKind::LocalTimer,
                _ => KernelEventKind::Switch {
                    prev_tid: 1001,
                    prev_comm: "control/0".into(),
                    prev_prio: 19,
                    prev_state: "S".into(),
                    next_tid: 77,
                    next_comm: "worker".into(),
                    next_prio: 120,
                },
            };
            w.kernel.push(ke(ts, cpu, kind));
        }
        w
    }

    #[test]
    fn writes_a_full_window() {
        let w = big_window();
        let path = temp_path("big");
        write_chrome_trace(&w, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let back = read_window(&path);
        let _ = std::fs::remove_file(&path);
        let events = check_format(&bytes);
        assert!(events.len() > 2_000 * 4 + 15_000, "{}", events.len());
        assert_eq!(back.unwrap(), w);
    }

    /// How long a full window takes to write (a timing, not a test): `cargo test -p lfrt --lib
    /// --release chrome::tests::time_a_full_window -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn time_a_full_window() {
        let w = big_window();
        let path = temp_path("timing");
        let t = std::time::Instant::now();
        write_chrome_trace(&w, &path).unwrap();
        let took = t.elapsed();
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        let _ = std::fs::remove_file(&path);
        println!(
            "{} samples + {} kernel events: {:.1} ms, {} KiB",
            w.samples.len(),
            w.kernel.len(),
            took.as_secs_f64() * 1e3,
            size / 1024
        );
    }
}
