//! A pool thread's life: its set-up, then its group's loop (or, in a group that is not a
//! Leader/Followers pool, what the group [`Served`](crate::engine::group::Served) it).
//!
//! A pool thread: (1) takes its scheduling policy and priority, *then* its CPU affinity (a
//! SCHED_OTHER thread pinned to a CPU that a FIFO thread keeps busy would starve before it could
//! raise itself); (2) pre-faults its stack and creates its [`Context`] (buffers written, so
//! resident); (3) reports ready; (4) loops: join → lead (wait for one event) → promote →
//! process → rejoin, until shutdown. A time-shared (SCHED_OTHER) thread yields before it
//! rejoins while a sibling is mid-handler, so a sibling preempted while holding its disarmed
//! handle finishes first.
//!
//! A thread of a **bound** group ([`GroupConfig::bound`]) makes the same set-up, (1) and (2),
//! then takes the waiter leased for it when the group was built and serves the group's
//! [`BoundPool`] (`crate::bound`: the same [`Protocol`], over the pool's slots) until the group
//! stops; `Group::stop` shuts the pool down too.
//!

use crate::engine::dispatch::PoolThread;
use crate::engine::follower_queue::Promotion;
use crate::engine::group::{Group, RtMode};
use crate::engine::handler::Context;
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

/// Body of pool thread `idx` of `group`.
pub(crate) fn pool_thread(
    group: Arc<Group>,
    idx: u16,
    mut ring: rtrb::Producer<Sample>,
    rt: RtMode,
    ready: std::sync::mpsc::Sender<Setup>,
) {
    let slot = &group.threads[idx as usize];
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
                        group: group.spec.name.clone(),
                        what: format!("setting {:?}: {cause}", slot.sched),
                        source: e,
                    }
                } else if sched::is_permission_denied(&e) {
                    Error::RtPermission {
                        group: group.spec.name.clone(),
                        priority: slot.priority,
                        source: e,
                        have,
                        deadline: matches!(slot.sched, Sched::Deadline { .. }),
                    }
                } else {
                    Error::Sched {
                        group: group.spec.name.clone(),
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
    if let Some(cpus) = &group.spec.cpus {
        if let Err(e) = sched::set_current_affinity(cpus) {
            let _ = ready.send(Setup::Failed(Error::Sched {
                group: group.spec.name.clone(),
                what: format!("pinning to CPUs {cpus:?}"),
                source: e,
            }));
            return;
        }
    }

    // 2. Thread-specific storage, resident before the first event.
    mem::prefault_stack(group.spec.stack_bytes.saturating_sub(STACK_MARGIN));
    if let Some(served) = &group.served {
        // A group that is not a Leader/Followers pool (a bound group: its thread's waiter,
        // leased and pre-faulted with the group, holds its handler buffers): it serves until
        // the group stops.
        let _ = ready.send(Setup::Ready {
            rt_applied,
            error: rt_error,
        });
        drop(ready);
        served.serve(&group, idx);
        record_exit(slot);
        return;
    }
    prefault_ring(&mut ring);
    let mut ctx = Context::new(
        group.spec.buffer_bytes,
        group.index,
        idx,
        slot.priority,
        tid,
        group.registry(),
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
        group: &group,
        idx,
        slot,
        ctx: &mut ctx,
        ring: &mut ring,
        dispatches: 0,
        time_shared,
    };
    if group.spec.promotion == Promotion::Concurrent {
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
