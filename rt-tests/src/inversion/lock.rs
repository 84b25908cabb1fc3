//! Experiment 2, lock inversion: a high and a low lfrt handler share a lock while a
//! medium-priority hog spins on the server CPU; the high handler's blocking is measured per
//! repetition, with `std::sync::Mutex` and with [`PiMutex`].

use super::generators::Pinned;
use super::plan::{lfrt_lane, Plan};
use super::results::{Latency, LockResult};
use super::BoxError;
use lfrt::handlers::cpu_work;
use lfrt::os::{self, Sched};
use lfrt::{Context, Disposition, Event, EventHandler};
use lfrt::{Notifier, PiMutex, RtMode, Runtime, RuntimeConfig};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pause between lock-experiment repetitions (keeps SCHED_FIFO busy time low).
pub const LOCK_COOLDOWN: Duration = Duration::from_millis(200);

/// The resource the two handlers share.
enum SharedLock {
    Plain(std::sync::Mutex<u64>),
    Pi(PiMutex<u64>),
}

impl SharedLock {
    fn with<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        match self {
            SharedLock::Plain(m) => f(&mut m.lock().unwrap_or_else(|e| e.into_inner())),
            SharedLock::Pi(m) => f(&mut m.lock()),
        }
    }
}

struct LockState {
    lock: SharedLock,
    cs_ns: u64,
    low_holding: AtomicBool,
    high_waiting: AtomicBool,
    high_block_ns: AtomicU64,
    high_done: AtomicU64,
    low_done: AtomicU64,
}

/// The high or low handler of the lock experiment, woken through a notifier.
struct LockUser {
    wake: Arc<Notifier>,
    state: Arc<LockState>,
    high: bool,
}

impl EventHandler for LockUser {
    fn source(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    fn handle(&mut self, _event: &Event, _ctx: &mut Context) -> Disposition {
        if self.wake.take().unwrap_or(0) == 0 {
            return Disposition::Rearm;
        }
        let s = &*self.state;
        if self.high {
            s.high_waiting.store(true, SeqCst);
            let asked = lfrt::os::now_ns();
            let got = s.lock.with(|v| {
                *v += 1;
                lfrt::os::now_ns()
            });
            s.high_block_ns.store(got - asked, SeqCst);
            s.high_done.fetch_add(1, SeqCst);
        } else {
            s.lock.with(|v| {
                s.low_holding.store(true, SeqCst);
                cpu_work(s.cs_ns);
                *v += 1;
                s.low_holding.store(false, SeqCst);
            });
            s.low_done.fetch_add(1, SeqCst);
        }
        Disposition::Rearm
    }
}

/// Spins until `cond` holds or `limit` passes; true if it held.
fn spin_until(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while !cond() {
        if Instant::now() > end {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

/// Runs experiment 2 for one mutex kind (`pi` true: [`PiMutex`]). The calling thread drives
/// the repetitions from the client CPU.
///
/// # Errors
/// Runtime or hog set-up failures, or a repetition that did not complete in time.
pub fn lock_experiment(plan: &Plan, pi: bool) -> Result<LockResult, BoxError> {
    let lp = &plan.lock;
    let state = Arc::new(LockState {
        lock: if pi {
            SharedLock::Pi(PiMutex::new(0))
        } else {
            SharedLock::Plain(std::sync::Mutex::new(0))
        },
        cs_ns: lp.cs_ns,
        low_holding: AtomicBool::new(false),
        high_waiting: AtomicBool::new(false),
        high_block_ns: AtomicU64::new(0),
        high_done: AtomicU64::new(0),
        low_done: AtomicU64::new(0),
    });
    let lanes = vec![
        lfrt_lane(plan, "lock-high", plan.high_prio, 1),
        lfrt_lane(plan, "lock-low", plan.low_prio, 1),
    ];
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: plan.rt,
        lock_memory: false,
        lanes,
        bands: Vec::new(),
    })?;
    rt.start()?;
    let (wake_high, wake_low) = (Arc::new(Notifier::new()?), Arc::new(Notifier::new()?));
    rt.lane("lock-high")?
        .registry()
        .register(Box::new(LockUser {
            wake: wake_high.clone(),
            state: state.clone(),
            high: true,
        }))?;
    rt.lane("lock-low")?
        .registry()
        .register(Box::new(LockUser {
            wake: wake_low.clone(),
            state: state.clone(),
            high: false,
        }))?;

    // The medium-priority hog: SCHED_FIFO between the two, on the server CPU, spinning a fixed
    // wall-clock time per request.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let (mid, cpu, hog_us, rt_mode) = (
        plan.mid_prio(),
        plan.server_cpu,
        lp.hog.as_micros() as u64,
        plan.rt,
    );
    let hog = std::thread::Builder::new()
        .name("inv-hog".into())
        .spawn(move || {
            let r = os::set_current_sched(Sched::Fifo(mid))
                .map_err(|e| format!("hog SCHED_FIFO {mid}: {e}"));
            let r = match r {
                Err(_) if rt_mode == RtMode::BestEffort => Ok(()),
                r => r,
            };
            let r = r.and_then(|()| {
                os::set_current_affinity(&[cpu]).map_err(|e| format!("hog CPU {cpu}: {e}"))
            });
            let ok = r.is_ok();
            let _ = ready_tx.send(r);
            if ok {
                while go_rx.recv().is_ok() {
                    cpu_work(hog_us * 1000);
                    let _ = done_tx.send(());
                }
            }
        })?;
    let outcome = (|| -> Result<Vec<u64>, BoxError> {
        ready_rx.recv().map_err(|_| "hog thread died")??;
        // Off the server CPU, or the controller would wait behind the SCHED_FIFO threads.
        let _pinned = Pinned::to(plan.client_cpu)?;
        let mut blocks = Vec::with_capacity(lp.reps);
        for rep in 0..lp.reps as u64 {
            state.high_waiting.store(false, SeqCst);
            wake_low.notify(1)?;
            if !spin_until(Duration::from_secs(1), || state.low_holding.load(SeqCst)) {
                return Err(
                    "lock experiment: the low handler did not take the lock within 1 s".into(),
                );
            }
            wake_high.notify(1)?;
            if !spin_until(Duration::from_secs(1), || state.high_waiting.load(SeqCst)) {
                return Err("lock experiment: the high handler did not run within 1 s".into());
            }
            go_tx.send(()).map_err(|_| "hog thread died")?;
            let limit = lp.hog + Duration::from_secs(2);
            if !spin_until(limit, || {
                state.high_done.load(SeqCst) > rep && state.low_done.load(SeqCst) > rep
            }) {
                return Err("lock experiment: a repetition did not finish in time".into());
            }
            done_rx
                .recv_timeout(limit)
                .map_err(|_| "lock experiment: the hog did not finish in time")?;
            blocks.push(state.high_block_ns.load(SeqCst));
            std::thread::sleep(LOCK_COOLDOWN);
        }
        Ok(blocks)
    })();
    drop(go_tx);
    let _ = hog.join();
    rt.shutdown()?;
    let mut blocks = outcome?;
    let l = Latency::of(&mut blocks);
    Ok(LockResult {
        mutex: if pi { "pi" } else { "plain" },
        high_block_max_us: l.max_us,
        high_block_p99_us: l.p99_us,
        high_block_p50_us: l.p50_us,
        reps: blocks.len(),
        cs_us: lp.cs_ns as f64 / 1000.0,
        hog_us: lp.hog.as_secs_f64() * 1e6,
    })
}
