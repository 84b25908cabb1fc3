//! A pool thread's life: its set-up, then its lane's loop (or, in a lane that is not a
//! Leader/Followers pool, what the lane [`Served`](crate::engine::lane::Served) it).
//!
//! A pool thread: (1) takes its scheduling policy and priority, *then* its CPU affinity (a
//! SCHED_OTHER thread pinned to a CPU that a FIFO thread keeps busy would starve before it could
//! raise itself); (2) pre-faults its stack and creates its [`Context`] (buffers written, so
//! resident); (3) reports ready; (4) loops: join → lead (wait for one event) → promote →
//! process → rejoin, until shutdown. A time-shared (SCHED_OTHER) thread yields before it
//! rejoins while a sibling is mid-handler, so a sibling preempted while holding its disarmed
//! handle finishes first.
//!
//! A thread of a **bound** lane ([`LaneConfig::bound`](crate::LaneConfig::bound)) makes
//! the same set-up, (1) and (2), then takes the waiter leased for it when the lane was built
//! and serves the lane's [`BoundPool`](crate::bound::BoundPool) (the same
//! [`Protocol`](crate::engine::leader::Protocol), over the pool's slots) until the lane stops;
//! `LanePool::stop` shuts the pool down too.
//!

use crate::engine::dispatch::PoolThread;
use crate::engine::follower_queue::Promotion;
use crate::engine::handler::Context;
use crate::engine::lane::{LanePool, RtMode};
use crate::engine::slot::{best_effort_nice, Applied, ThreadSlot};
use crate::error::Error;
use crate::observe::alloc_count;
use crate::observe::telemetry::Sample;
use crate::sys::{self, mem, sched, sched::Sched};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// Stack kept free of pre-faulting for the guard area and the thread's own start-up frames.
const STACK_MARGIN: usize = 32 * 1024;

/// How a pool thread's set-up went.
#[derive(Debug)]
pub(crate) enum Setup {
    /// Running with the configured policy (`true`) or at normal priority (`false`, best-effort).
    Ready {
        rt_applied: bool,
        /// The kernel's refusal, and why if no privilege would fix it
        /// ([`sched::refusal_cause`]).
        error: Option<(std::io::Error, Option<String>)>,
    },
    Failed(Error),
}

/// Body of pool thread `idx` of `lane`.
pub(crate) fn pool_thread(
    lane: Arc<LanePool>,
    idx: u16,
    mut ring: rtrb::Producer<Sample>,
    rt: RtMode,
    ready: std::sync::mpsc::Sender<Setup>,
) {
    let slot = &lane.threads[idx as usize];
    let tid = sys::gettid();
    slot.tid.store(tid, Release);

    // 1. Priority first, then affinity.
    let mut rt_applied = true;
    let mut rt_error = None;
    if slot.sched != Sched::Other {
        if let Err(e) = sched::set_current(slot.sched) {
            let cause = sched::refusal_cause(slot.sched, &e);
            if rt == RtMode::Required {
                let p = sched::RtPrivilege::probe();
                let have = format!(
                    "CAP_SYS_NICE {}, RLIMIT_RTPRIO {}",
                    if p.cap_sys_nice { "yes" } else { "no" },
                    p.rlimit_rtprio
                );
                let err = if let Some(cause) = cause {
                    Error::Sched {
                        lane: lane.spec.name.clone(),
                        what: format!("setting {:?}: {cause}", slot.sched),
                        source: e,
                    }
                } else if sched::is_permission_denied(&e) {
                    Error::RtPermission {
                        lane: lane.spec.name.clone(),
                        priority: slot.priority,
                        source: e,
                        have,
                        deadline: matches!(slot.sched, Sched::Deadline { .. }),
                    }
                } else {
                    Error::Sched {
                        lane: lane.spec.name.clone(),
                        what: format!("setting {:?}", slot.sched),
                        source: e,
                    }
                };
                let _ = ready.send(Setup::Failed(err));
                return;
            }
            rt_applied = false;
            rt_error = Some((e, cause));
            let _ = sched::set_current_nice(best_effort_nice(slot.priority));
        }
    }
    slot.applied
        .store(Applied::pack(sched::read_back(0), sched::nice(0)), Release);
    if let Some(cpus) = &lane.spec.cpus {
        if let Err(e) = sched::set_current_affinity(cpus) {
            let _ = ready.send(Setup::Failed(Error::Sched {
                lane: lane.spec.name.clone(),
                what: format!("pinning to CPUs {cpus:?}"),
                source: e,
            }));
            return;
        }
    }

    // 2. Thread-specific storage, resident before the first event.
    mem::prefault_stack(lane.spec.stack_bytes.saturating_sub(STACK_MARGIN));
    if let Some(served) = &lane.served {
        // A lane that is not a Leader/Followers pool (a bound lane: its thread's waiter,
        // leased and pre-faulted with the lane, holds its handler buffers): it serves until
        // the lane stops.
        let _ = ready.send(Setup::Ready {
            rt_applied,
            error: rt_error,
        });
        drop(ready);
        served.serve(&lane, idx);
        record_exit(slot);
        return;
    }
    prefault_ring(&mut ring);
    let mut ctx = Context::new(
        lane.spec.buffer_bytes,
        lane.index,
        idx,
        slot.priority,
        tid,
        lane.registry(),
    );
    ctx.dispatch_stamp = Some(slot.busy_since.clone());
    let _ = ready.send(Setup::Ready {
        rt_applied,
        error: rt_error,
    });
    drop(ready);

    // Time-shared: SCHED_OTHER by configuration, or RT refused in best-effort mode.
    let time_shared = slot.sched == Sched::Other || !rt_applied;
    let mut t = PoolThread {
        lane: &lane,
        idx,
        slot,
        ctx: &mut ctx,
        ring: &mut ring,
        dispatches: 0,
        time_shared,
    };
    if lane.spec.promotion == Promotion::Concurrent {
        t.run_concurrent();
    } else {
        t.run(time_shared);
    }
    record_exit(slot);
}

/// A pool thread's last counts, read by metrics after it is gone.
fn record_exit(slot: &ThreadSlot) {
    slot.faults_final.store(mem::thread_minor_faults(), Release);
    slot.allocs_now
        .store(alloc_count::thread_allocations(), Release);
}

/// Writes every slot of the (empty) telemetry ring without committing them, so its pages are
/// resident before the first sample; the collector sees nothing of it.
fn prefault_ring(ring: &mut rtrb::Producer<Sample>) {
    let n = ring.slots();
    if let Ok(mut chunk) = ring.write_chunk_uninit(n) {
        let (a, b) = chunk.as_mut_slices();
        for slot in a.iter_mut().chain(b.iter_mut()) {
            slot.write(Sample::default());
        }
        // Dropping an uncommitted chunk publishes nothing.
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::testing::spec;
    use std::sync::mpsc;

    /// Runs pool thread 0 of `lane` until its set-up reports, hands the report and the
    /// thread (still running) to `check`, then stops the lane and joins the thread.
    fn set_up(lane: &Arc<LanePool>, rt: RtMode, check: impl FnOnce(Setup, i32)) {
        let (ring, _samples) = rtrb::RingBuffer::<Sample>::new(16);
        let (ready, report) = mpsc::channel();
        let thread = std::thread::spawn({
            let lane = lane.clone();
            move || pool_thread(lane, 0, ring, rt, ready)
        });
        let setup = report.recv().expect("the thread reports its set-up");
        check(setup, lane.threads[0].tid.load(Acquire));
        lane.stop();
        thread.join().unwrap();
    }

    #[test]
    fn a_thread_takes_its_policy_then_its_cpus_and_reports_what_the_kernel_applied() {
        let cpu = *sched::available_cpus().last().unwrap();
        let mut s = spec("lane", 1);
        s.cpus = Some(vec![cpu]);
        let lane = Arc::new(LanePool::new(0, s, None).unwrap());
        let nice = sched::nice(0).unwrap(); // a new thread starts at its creator's
        set_up(&lane, RtMode::Required, |setup, tid| {
            assert!(matches!(
                setup,
                Setup::Ready {
                    rt_applied: true,
                    error: None
                }
            ));
            assert_ne!(tid, 0);
            // Read back from the kernel while the thread waits as the lane's leader.
            assert_eq!(sched::read_back(tid).unwrap(), Sched::Other);
            assert_eq!(sched::affinity(tid).unwrap(), [cpu]);
        });
        let slot = &lane.threads[0];
        assert_eq!(
            Applied::describe(slot.applied.load(Acquire)),
            format!("other nice {nice}")
        );
        assert_ne!(
            slot.faults_final.load(Acquire),
            u64::MAX,
            "its last counts recorded"
        );
    }

    #[test]
    fn a_refused_policy_fails_a_required_lane_naming_it() {
        // SCHED_FIFO priority 0 is refused whatever the privilege.
        let mut s = spec("strict", 1);
        s.threads[0] = (Sched::Fifo(0), 1);
        let lane = Arc::new(LanePool::new(0, s, None).unwrap());
        let (ring, _samples) = rtrb::RingBuffer::<Sample>::new(16);
        let (ready, report) = mpsc::channel();
        pool_thread(lane.clone(), 0, ring, RtMode::Required, ready);
        match report.recv().unwrap() {
            Setup::Failed(Error::Sched { lane, what, .. }) => {
                assert_eq!(lane, "strict");
                assert!(what.contains("Fifo(0)"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(lane.threads[0].applied.load(Acquire), Applied::NOT_STARTED);
    }

    #[test]
    fn a_refused_policy_leaves_a_best_effort_lane_time_shared_at_its_nice_value() {
        let mut s = spec("soft", 1);
        s.threads[0] = (Sched::Fifo(0), 1);
        let lane = Arc::new(LanePool::new(0, s, None).unwrap());
        set_up(&lane, RtMode::BestEffort, |setup, tid| {
            match setup {
                Setup::Ready {
                    rt_applied: false,
                    error: Some((e, cause)),
                } => {
                    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
                    assert!(cause.is_some(), "no privilege would fix it");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(sched::read_back(tid).unwrap(), Sched::Other);
            assert_eq!(sched::nice(tid).unwrap(), best_effort_nice(1));
        });
        assert_eq!(
            Applied::describe(lane.threads[0].applied.load(Acquire)),
            format!("other nice {}", best_effort_nice(1))
        );
    }

    #[test]
    fn cpus_the_process_cannot_use_fail_the_set_up() {
        let mut s = spec("pinned", 1);
        s.cpus = Some(vec![sched::online_cpus().len() + 1024]);
        let lane = Arc::new(LanePool::new(0, s, None).unwrap());
        let (ring, _samples) = rtrb::RingBuffer::<Sample>::new(16);
        let (ready, report) = mpsc::channel();
        pool_thread(lane, 0, ring, RtMode::BestEffort, ready);
        match report.recv().unwrap() {
            Setup::Failed(Error::Sched { what, .. }) => assert!(what.contains("pinning"), "{what}"),
            other => panic!("{other:?}"),
        }
    }
}
