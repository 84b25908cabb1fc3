//! Building a lane's executor: the task table (`executor.rs`), its [`Spawner`] and the two
//! handlers the runtime registers with the lane (`turn.rs`: the task doorbell's turn and the
//! lane timer's clock), and the bytes it all takes, for the memory plan.

use crate::engine::handler::{EventHandler, Registry};
use crate::sync::atomic::{AtomicBool, AtomicU64};
use crate::sync::doorbell::Doorbell;
use crate::sync::free::FreeSlots;
use crate::sync::queue::Queue;
use crate::sync::Mutex;
use crate::sys::fd::TimerFd;
use crate::task::executor::{Budget, Counters, Shared, Slot, TimerState, ADDR_MASK, MAX_TASKS};
use crate::task::raw::{stride, Storage};
use crate::task::spawn::Spawner;
use crate::task::state::TaskState;
use crate::task::timers::{Timers, TIMERS_PER_TASK};
use crate::task::turn::{Clock, Turn};
use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::Arc;

/// A lane's executor before it is registered: the [`Spawner`] and the two handlers (task
/// doorbell, timer) the runtime registers with the lane.
pub(crate) struct Executor {
    pub(crate) spawner: Spawner,
    pub(crate) turn: Box<dyn EventHandler>,
    pub(crate) clock: Box<dyn EventHandler>,
}

impl Executor {
    /// Bytes [`new`](Self::new) allocates for `max_tasks` slots of `task_bytes`: the slots'
    /// storage (pre-faulted), their state words and join-waker locks, the free list, the
    /// ready queue, the turn's heap, the close order and the timer entries. Kept next to
    /// `new` so the two stay in step.
    pub(crate) fn allocated_bytes(max_tasks: usize, task_bytes: usize) -> u64 {
        // A queue cell: a sequence word beside the value.
        let queue_entry = size_of::<(usize, u32)>();
        let per_slot = stride(task_bytes)
            + size_of::<Slot>()
            + queue_entry
            + 1 // the free list's bit, rounded up to a byte
            + size_of::<(u8, Reverse<u64>, u32)>()
            + size_of::<(u8, Reverse<u32>)>()
            + TIMERS_PER_TASK * Timers::BYTES_PER_ENTRY;
        (max_tasks as u64).saturating_mul(per_slot as u64)
    }

    /// `max_tasks` slots of `task_bytes` each, allocated and pre-faulted now.
    pub(crate) fn new(
        lane: &str,
        max_tasks: usize,
        task_bytes: usize,
        budget: Option<Budget>,
        registry: Registry,
    ) -> io::Result<Executor> {
        if max_tasks == 0 || max_tasks > MAX_TASKS || task_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_tasks must be 1..=65536 and task_bytes at least 1",
            ));
        }
        let storage = Storage::new(max_tasks, task_bytes)?;
        let doorbell = Doorbell::eventfd()?;
        let timer = TimerFd::new()?;
        let free = FreeSlots::new(max_tasks);
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
            let me = me.as_ptr();
            let slots = (0..max_tasks as u32)
                .map(|index| Slot {
                    state: TaskState::new(),
                    index,
                    shared: me,
                    priority: UnsafeCell::new(0),
                    vtable: UnsafeCell::new(None),
                    joiner: Mutex::new(None),
                })
                .collect();
            Shared {
                lane: lane.to_owned(),
                slots,
                storage,
                free,
                ready: Queue::new(max_tasks),
                doorbell,
                timer,
                timer_state: Mutex::new(TimerState {
                    timers: Timers::new(max_tasks * TIMERS_PER_TASK),
                    armed: u64::MAX,
                }),
                next_deadline: AtomicU64::new(u64::MAX),
                closed: AtomicBool::new(false),
                close_order: Mutex::new(BinaryHeap::with_capacity(max_tasks)),
                counters: Counters::default(),
            }
        });
        if shared
            .slots
            .iter()
            .any(|s| (s as *const Slot as usize) & !ADDR_MASK != 0)
        {
            return Err(io::Error::other(
                "task slots above 2^48: lane wakers cannot tag them with a generation",
            ));
        }
        let turn = Turn {
            shared: shared.clone(),
            heap: BinaryHeap::with_capacity(max_tasks),
            seq: 0,
            streak_since: 0,
            budget,
        };
        let clock = Clock {
            shared: shared.clone(),
        };
        Ok(Executor {
            spawner: Spawner { shared, registry },
            turn: Box::new(turn),
            clock: Box::new(clock),
        })
    }
}
