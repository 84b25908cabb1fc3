//! Spawning onto a lane: the [`Spawner`] and its refusals.

use crate::engine::handler::Registry;
use crate::sync::atomic::Ordering::*;
use crate::task::executor::Shared;
use crate::task::join::JoinHandle;
use crate::task::raw::{vtable_of, TASK_ALIGN};
use crate::task::TaskStats;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

/// Why [`Spawner::spawn`] refused a future; the future is handed back.
pub enum SpawnError<F> {
    /// Every one of the lane's `max_tasks` slots holds a task (counted in
    /// [`TaskStats::refused_full`]).
    Full(F),
    /// The future (or its output) needs more than a slot: `size` bytes at alignment `align`,
    /// while the lane's slots hold `slot_bytes` at alignment [`TASK_ALIGN`] (counted in
    /// [`TaskStats::refused_too_large`]).
    TooLarge {
        /// The future handed back.
        future: F,
        /// Bytes the future (or its output, whichever is larger) needs.
        size: usize,
        /// Its alignment.
        align: usize,
        /// Bytes a slot of this lane holds (`task_bytes`).
        slot_bytes: usize,
    },
    /// The runtime shut down (or the lane has no task table: `max_tasks = 0`).
    Closed(F),
}

impl<F> SpawnError<F> {
    /// The refused future.
    pub fn into_inner(self) -> F {
        match self {
            SpawnError::Full(f) | SpawnError::Closed(f) => f,
            SpawnError::TooLarge { future, .. } => future,
        }
    }
}

impl<F> fmt::Debug for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::Full(_) => f.pad("Full(_)"),
            SpawnError::Closed(_) => f.pad("Closed(_)"),
            SpawnError::TooLarge {
                size,
                align,
                slot_bytes,
                ..
            } => f
                .debug_struct("TooLarge")
                .field("size", size)
                .field("align", align)
                .field("slot_bytes", slot_bytes)
                .finish_non_exhaustive(),
        }
    }
}

impl<F> fmt::Display for SpawnError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::Full(_) => f.write_str(
                "the lane's task table is full (every one of its `max_tasks` slots holds a \
                 task); the future was handed back",
            ),
            SpawnError::TooLarge {
                size,
                align,
                slot_bytes,
                ..
            } => write!(
                f,
                "the future needs {size} bytes at alignment {align}, but the lane's task slots \
                 hold {slot_bytes} bytes at alignment {TASK_ALIGN}: raise the lane's \
                 `task_bytes`, or box the future's large state before spawning"
            ),
            SpawnError::Closed(_) => f.write_str(
                "the lane runs no tasks: its runtime shut down, or its lane has `max_tasks = 0`",
            ),
        }
    }
}

impl<F> std::error::Error for SpawnError<F> {}

/// Spawns tasks onto one lane. Cheap to clone (an `Arc`), usable from any thread.
///
/// Obtained from [`Lane::spawner`](crate::Lane::spawner); [`Lane::spawn`](crate::Lane::spawn)
/// is the shortcut.
#[derive(Clone)]
pub struct Spawner {
    pub(super) shared: Arc<Shared>,
    /// The lane's handle registry: where `lfrt::task::net` sockets register their readiness.
    pub(crate) registry: Registry,
}

impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spawner")
            .field("lane", &self.shared.lane)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    /// Spawns `future` at task priority 0. See [`spawn_with_priority`](Self::spawn_with_priority).
    ///
    /// # Errors
    /// As [`spawn_with_priority`](Self::spawn_with_priority).
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, SpawnError<F>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_with_priority(0, future)
    }

    /// Spawns `future` onto the lane: it is polled on the lane's pool threads, at the lane's
    /// policy and priority. Among the lane's runnable tasks, a higher `priority` is polled
    /// first; equal priorities are polled in the order they became runnable.
    ///
    /// # Errors
    /// The future is handed back: [`SpawnError::TooLarge`] if it (or its output) does not fit
    /// a slot; [`SpawnError::Full`] if every slot holds a task; [`SpawnError::Closed`] after
    /// shutdown. Each refusal is counted ([`TaskStats`]).
    ///
    /// # Real-time safety
    /// No allocation: the future is moved into a preallocated slot (one lock-free take from the
    /// free list), then scheduled (one lock-free push and at most one `write(2)` to the
    /// lane's eventfd).
    pub fn spawn_with_priority<F>(
        &self,
        priority: u8,
        future: F,
    ) -> Result<JoinHandle<F::Output>, SpawnError<F>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let s = &*self.shared;
        if let Err((size, align)) = s.storage.fits::<F>() {
            s.counters.refused_too_large.fetch_add(1, Relaxed);
            return Err(SpawnError::TooLarge {
                future,
                size,
                align,
                slot_bytes: s.storage.slot_bytes(),
            });
        }
        if s.closed.load(SeqCst) {
            return Err(SpawnError::Closed(future));
        }
        let Some(index) = s.free.take() else {
            s.counters.refused_full.fetch_add(1, Relaxed);
            return Err(SpawnError::Full(future));
        };
        let slot = &s.slots[index as usize];
        // SAFETY: the slot came off the free list, so no other thread touches it until
        // `TaskState::spawn` publishes it; the cell fits and is aligned (checked above).
        unsafe {
            s.storage.put(index, future);
            *slot.priority.get() = priority;
            *slot.vtable.get() = Some(vtable_of::<F>());
        }
        let gen = slot.state.spawn(true);
        s.counters.spawned.fetch_add(1, Relaxed);
        s.push_ready(index);
        if s.closed.load(SeqCst) {
            // Shutdown raced with us and may have missed the task: cancel it ourselves (one
            // of us wins `take_unpolled`).
            if slot.state.take_unpolled(gen) {
                s.drop_unpolled(index);
            }
        }
        Ok(JoinHandle {
            shared: self.shared.clone(),
            index,
            gen,
            done: false,
            _output: PhantomData,
        })
    }

    /// Shutdown: cancels the lane's tasks ([`Shared::close`]); the number left running past
    /// `until_ns`.
    pub(crate) fn close(&self, until_ns: u64) -> usize {
        self.shared.close(until_ns)
    }

    /// The lane's task counters.
    pub fn stats(&self) -> TaskStats {
        self.shared.stats()
    }

    /// Bytes one task slot holds (`task_bytes`).
    pub fn slot_bytes(&self) -> usize {
        self.shared.storage.slot_bytes()
    }

    /// The number of task slots (`max_tasks`).
    pub fn max_tasks(&self) -> usize {
        self.shared.slots.len()
    }
}
