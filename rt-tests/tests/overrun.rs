//! The overrun watchdog says why a handler overran its budget: it ran, it slept, or it waited
//! for a CPU another thread held (issue #31). Each test overruns a few times on purpose and
//! checks the cause the watchdog counted (`LaneMetrics::overrun_causes`) and logged.
//! Run one at a time: `cargo test --test overrun -- --test-threads=1`.

mod util;

use lfrt::*;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Overruns each test causes, one at a time.
const OVERRUNS: u64 = 3;
/// The budget of every lane under test (µs): each overrun lasts 10 ms, five times it.
const BUDGET_US: u64 = 2_000;
/// How long each overrunning handler spins or sleeps (ms); spins stay far under the RT
/// throttle (950 ms per second).
const OVERRUN_MS: u64 = 10;

/// What this test binary logged, from its global `tracing` subscriber (installed once: the
/// watchdog logs from its own thread).
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = LogBuf(buf.clone());
        tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::INFO)
                .with_writer(move || writer.clone())
                .finish(),
        )
        .expect("only this function installs a subscriber");
        buf
    })
    .clone()
}

/// The watchdog's report lines about lane `lane`.
fn reports(lane: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains("lfrt::engine::watchdog") && l.contains(&format!("lane={lane} ")))
        .map(str::to_owned)
        .collect()
}

#[derive(Clone)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn spin_ms(ms: u64) {
    let end = lfrt::os::now_ns() + ms * 1_000_000;
    while lfrt::os::now_ns() < end {
        std::hint::spin_loop();
    }
}

/// What a poked handler does with each poke.
#[derive(Clone, Copy)]
enum Act {
    /// Spin this many ms on the CPU.
    Spin(u64),
    /// Sleep `OVERRUN_MS` (a blocking call).
    Sleep,
    /// Poke the other notifier, whose lane then preempts this one, and return.
    Poke,
    /// Wake the spinning thread at the other end of the channel, which then preempts this
    /// one, and return.
    Wake,
}

/// A handler on a notifier: does `act` once per poke.
struct Poked {
    n: Notifier,
    act: Act,
    other: Option<OwnedFd>,
    wake: Option<std::sync::mpsc::Sender<()>>,
}

impl EventHandler for Poked {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        let _ = self.n.take();
        match self.act {
            Act::Spin(ms) => spin_ms(ms),
            Act::Sleep => std::thread::sleep(Duration::from_millis(OVERRUN_MS)),
            Act::Poke => poke(self.other.as_ref().unwrap()),
            Act::Wake => self.wake.as_ref().unwrap().send(()).unwrap(),
        }
        Disposition::Rearm
    }
}

fn poke(fd: &OwnedFd) {
    nix::unistd::write(fd, &1u64.to_ne_bytes()).unwrap();
}

/// A one-thread FIFO lane at `priority` on CPU `cpu`.
fn lane(name: &str, priority: u8, cpu: usize, budget_us: Option<u64>) -> LaneConfig {
    let mut g = LaneConfig::new(name, Policy::Fifo, priority);
    g.threads = 1;
    g.cpus = Some(vec![cpu]);
    g.budget_us = budget_us;
    g
}

/// Registers a [`Poked`] doing `act` on lane `name`; returns the fd that pokes it.
fn register(rt: &Runtime, name: &str, act: Act, other: Option<OwnedFd>) -> OwnedFd {
    register_waking(rt, name, act, other, None)
}

/// [`register`], with the channel that [`Act::Wake`] wakes.
fn register_waking(
    rt: &Runtime,
    name: &str,
    act: Act,
    other: Option<OwnedFd>,
    wake: Option<std::sync::mpsc::Sender<()>>,
) -> OwnedFd {
    let n = Notifier::new().unwrap();
    let fd = n.as_fd().try_clone_to_owned().unwrap();
    rt.lane(name)
        .unwrap()
        .registry()
        .register(Box::new(Poked {
            n,
            act,
            other,
            wake,
        }))
        .unwrap();
    fd
}

/// Overruns the watchdog reported, by any cause.
fn reported(m: &LaneMetrics) -> u64 {
    let c = m.overrun_causes;
    c.handler + c.preempted + c.hypervisor + c.blocked + c.unknown
}

/// Pokes lane 0 through `fd`, one dispatch at a time, until the watchdog has counted
/// [`OVERRUNS`] overruns, and returns the lane's metrics after shutdown, where every overrun
/// counted has been reported.
///
/// The lanes under test run on CPU `cpu`; the watchdog, a time-shared thread, inherits the
/// affinity of the thread that starts the runtime, which this keeps off that CPU first: the
/// kernel may otherwise place the watchdog on the very CPU a SCHED_FIFO thread then spins on
/// for the whole overrun, and it would see the dispatch only once it has ended. Should a
/// dispatch still overrun uncounted, the test pokes again, at most 10 times.
fn overrun(mut rt: Runtime, fd: &OwnedFd, cpu: usize) -> LaneMetrics {
    let elsewhere: Vec<usize> = lfrt::os::available_cpus()
        .into_iter()
        .filter(|&c| c != cpu)
        .collect();
    lfrt::os::set_current_affinity(&elsewhere).unwrap();
    rt.start().unwrap();
    let mut pokes = 0;
    while rt.metrics()[0].budget_overruns < OVERRUNS {
        assert!(pokes < 10, "{pokes} pokes: {:?}", rt.metrics()[0]);
        poke(fd);
        pokes += 1;
        assert!(
            util::wait_until(5, || rt.metrics()[0].dispatched >= pokes),
            "poke {pokes} not dispatched: {:?}",
            rt.metrics()[0]
        );
        // A counted overrun is reported at the watchdog's first look after its end.
        assert!(
            util::wait_until(5, || {
                let m = &rt.metrics()[0];
                reported(m) >= m.budget_overruns
            }),
            "overrun not reported: {:?}",
            rt.metrics()[0]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = rt.shutdown().unwrap().swap_remove(0);
    assert_eq!(reported(&m), m.budget_overruns, "{m:?}");
    m
}

/// A handler that spins past its budget is reported as the handler's own overrun: its thread
/// was on the CPU.
#[test]
fn an_overrun_spent_spinning_is_the_handlers() {
    const NAME: &str = "an_overrun_spent_spinning_is_the_handlers";
    let _l = util::rt_lock();
    if !util::rt_allowed(NAME, 10) {
        return;
    }
    if !util::two_cpus(NAME) {
        return;
    }
    logs();
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    let rt = util::runtime(
        RtMode::Required,
        false,
        vec![lane("spin", 10, cpu, Some(BUDGET_US))],
    );
    let fd = register(&rt, "spin", Act::Spin(OVERRUN_MS), None);
    let m = overrun(rt, &fd, cpu);
    assert_eq!(m.overrun_causes.handler, m.budget_overruns, "{m:?}");
    let lines = reports("spin");
    assert_eq!(lines.len() as u64, m.budget_overruns, "{lines:#?}");
    for l in &lines {
        eprintln!("{l}");
        assert!(
            l.contains(" WARN ")
                && l.contains("handler overran its budget: it ran")
                && l.contains("cause=\"handler\"")
                && l.contains("ran_us=")
                && l.contains("waited_us=")
                && l.contains("steal_us="),
            "{l}"
        );
    }
}

/// A handler that spins for 30 ms, longer than the watchdog waits for a dispatch to end (10 ms
/// after the overrun): reported while it still runs, as the handler's.
#[test]
fn an_overrun_still_running_is_reported_as_it_stands() {
    const NAME: &str = "an_overrun_still_running_is_reported_as_it_stands";
    let _l = util::rt_lock();
    if !util::rt_allowed(NAME, 10) {
        return;
    }
    if !util::two_cpus(NAME) {
        return;
    }
    logs();
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    let rt = util::runtime(
        RtMode::Required,
        false,
        vec![lane("long", 10, cpu, Some(BUDGET_US))],
    );
    let fd = register(&rt, "long", Act::Spin(3 * OVERRUN_MS), None);
    let m = overrun(rt, &fd, cpu);
    assert_eq!(m.overrun_causes.handler, m.budget_overruns, "{m:?}");
    let lines = reports("long");
    assert_eq!(lines.len() as u64, m.budget_overruns, "{lines:#?}");
    for l in &lines {
        eprintln!("{l}");
        assert!(l.contains("cause=\"handler\""), "{l}");
    }
}

/// A handler that sleeps past its budget did not run: neither on a CPU nor waiting for one.
/// It is reported as blocked.
#[test]
fn an_overrun_spent_asleep_is_blocked() {
    const NAME: &str = "an_overrun_spent_asleep_is_blocked";
    let _l = util::rt_lock();
    if !util::rt_allowed(NAME, 10) {
        return;
    }
    if !util::two_cpus(NAME) {
        return;
    }
    logs();
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    let rt = util::runtime(
        RtMode::Required,
        false,
        vec![lane("nap", 10, cpu, Some(BUDGET_US))],
    );
    let fd = register(&rt, "nap", Act::Sleep, None);
    let m = overrun(rt, &fd, cpu);
    assert_eq!(m.overrun_causes.blocked, m.budget_overruns, "{m:?}");
    let lines = reports("nap");
    assert_eq!(lines.len() as u64, m.budget_overruns, "{lines:#?}");
    for l in &lines {
        eprintln!("{l}");
        assert!(
            l.contains(" WARN ")
                && l.contains("handler overran its budget blocked")
                && l.contains("cause=\"blocked\""),
            "{l}"
        );
    }
}

/// A handler whose thread a higher lane's thread preempts on its CPU (that lane's handler
/// spins 10 ms at a higher SCHED_FIFO priority, pinned to the same CPU) waited for the CPU:
/// reported as preempted, by that lane.
#[test]
fn an_overrun_spent_preempted_names_the_higher_lane() {
    const NAME: &str = "an_overrun_spent_preempted_names_the_higher_lane";
    let _l = util::rt_lock();
    if !util::rt_allowed(NAME, 30) {
        return;
    }
    if !util::two_cpus(NAME) {
        return;
    }
    logs();
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    let rt = util::runtime(
        RtMode::Required,
        false,
        vec![
            lane("low", 10, cpu, Some(BUDGET_US)),
            lane("high", 30, cpu, None),
        ],
    );
    let high = register(&rt, "high", Act::Spin(OVERRUN_MS), None);
    let low = register(&rt, "low", Act::Poke, Some(high));
    let m = overrun(rt, &low, cpu);
    assert_eq!(m.overrun_causes.preempted, m.budget_overruns, "{m:?}");
    let lines = reports("low");
    assert_eq!(lines.len() as u64, m.budget_overruns, "{lines:#?}");
    for l in &lines {
        eprintln!("{l}");
        assert!(
            l.contains(" WARN ")
                && l.contains("handler overran its budget waiting")
                && l.contains("held by lane high")
                && l.contains("cause=\"preempted\""),
            "{l}"
        );
    }
}

/// The same with a plain SCHED_FIFO thread of higher priority (not a lane's) pinned to the lane
/// thread's CPU, which spins 10 ms each time the handler wakes it: preempted, by another
/// thread.
#[test]
fn an_overrun_spent_preempted_by_a_thread_outside_the_lanes() {
    const NAME: &str = "an_overrun_spent_preempted_by_a_thread_outside_the_lanes";
    let _l = util::rt_lock();
    if !util::rt_allowed(NAME, 30) {
        return;
    }
    if !util::two_cpus(NAME) {
        return;
    }
    logs();
    let cpu = *lfrt::os::available_cpus().last().unwrap();
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let spinner = std::thread::spawn(move || {
        lfrt::os::set_current_affinity(&[cpu]).unwrap();
        lfrt::os::set_current_sched(lfrt::os::Sched::Fifo(30)).unwrap();
        // Ends when the handler (and its sender) is dropped at shutdown.
        while woken.recv().is_ok() {
            spin_ms(OVERRUN_MS);
        }
    });
    let rt = util::runtime(
        RtMode::Required,
        false,
        vec![lane("victim", 10, cpu, Some(BUDGET_US))],
    );
    let fd = register_waking(&rt, "victim", Act::Wake, None, Some(wake));
    let m = overrun(rt, &fd, cpu);
    spinner.join().unwrap();
    assert_eq!(m.overrun_causes.preempted, m.budget_overruns, "{m:?}");
    let lines = reports("victim");
    assert_eq!(lines.len() as u64, m.budget_overruns, "{lines:#?}");
    for l in &lines {
        eprintln!("{l}");
        assert!(
            l.contains(" WARN ")
                && l.contains("held by another thread or process")
                && l.contains("cause=\"preempted\""),
            "{l}"
        );
    }
}
