//! Async tasks on lanes: `async fn` polled by a lane's pool threads, at the lane's policy and
//! priority, with no allocation per spawn, poll, wake or completion.
//!
//! * **Owns:** a lane's task table, ready set, wakers and the task being polled
//!   (`executor.rs`), their raw storage (`raw.rs`: all of the layer's unsafe memory), the
//!   per-task state machine (`state.rs`), the relay of foreign wakes (`relay.rs`), spawning
//!   and awaiting (`spawn.rs`, `join.rs`), the turns (`turn.rs`), building a lane's executor
//!   (`lane.rs`), the timer entries (`timers.rs`) and lane time ([`time`]).
//! * **May use:** the engine's handler interface (`engine::handler`, and the handles'
//!   `engine::word::Token`), `sync` (queue, doorbell, indexed heap, loom shim: every atomic of a
//!   protocol goes through it), `sys`, `observe` and `error`. **Must never use:** `config`,
//!   `runtime`, `sources` or the engine's internals; the runtime builds an executor for each
//!   lane with `max_tasks > 0` and registers its two handlers with the lane, like any
//!   event source, and gives every pool thread its relay.
//!
//! ```text
//!  any thread (lane, plain, tokio)          the lane's pool (one turn at a time: claimed)
//!  ───────────────────────────────          ─────────────────────────────────────────────
//!  Spawner::spawn(f) ─ write f into a free slot ─┐
//!  waker.wake() ── state CAS: IDLE→SCHEDULED ────┼─push─▶ [ready queue] ──drain──▶ heap by
//!                    (RUNNING→NOTIFIED: no push) │        lock-free,            (priority,
//!                                                │        max_tasks             FIFO seq)
//!                  first push since last turn: ──┘                                  │ pop ≤ 16
//!                  eventfd += 1 ─────────── the doorbell handle fires ─▶ Turn: poll each task
//!  task::time: deadline heap ── timerfd (abs) ── fires ─▶ Clock: wake tasks whose deadline passed
//! ```
//!
//! # What runs where
//! A task is polled only by a pool thread of the lane it was spawned on, inside that lane's
//! *turn* handler: the lane's task doorbell (an eventfd) is one handle in the lane's handle
//! set, and a handle is dispatched by one thread at a time (its claim, `engine/claim.rs`), so
//! one of the lane's threads runs a turn at a time, and a task is polled by at most one thread
//! at a time (also enforced by its state word, `state.rs`). One exception, the *same-lane
//! fast path*: a task woken by the handler of one of its lane's [`net`] sockets, or by its
//! lane's timer, is polled by the thread that ran that handler, at the end of that dispatch
//! (`executor.rs`, `AfterDispatch`), with no trip through the doorbell and a second
//! `epoll_wait`; still one poller at a time (the state word), at most one such poll per
//! dispatch. Waking a task from any thread — another lane, a plain thread, a tokio task, a
//! signal-free timer — only schedules it: one
//! CAS, one lock-free push, at most one `write(2)`. A wake never polls on the waker's thread.
//!
//! The other way round, a lane thread never calls a foreign waker (a tokio task awaiting a
//! reply, a `JoinHandle` or a place in a channel): it hands it to its runtime's relay thread
//! (`relay.rs`), so that it never takes another runtime's (not priority-inheriting) lock. And
//! a lane thread never waits for a lower-priority thread: every queue it pops
//! (`sync::queue`: the ready set, channels, inboxes) says "empty for now" when a pusher has
//! claimed a place but not written it, and that pusher's doorbell brings the lane back; the
//! free lists of task and reply slots are bitmaps (`sync::free`), where giving a slot back is
//! one atomic instruction, so a take never finds one half given back.
//!
//! # Priority rules
//! * Between lanes: the kernel's. A lane's tasks run at the lane's SCHED_FIFO priority, so a
//!   runnable task of a higher lane preempts every lower lane's task.
//! * Within a lane: a turn drains newly woken tasks into a heap before *every* poll and polls
//!   the highest task priority first ([`Spawner::spawn_with_priority`]), FIFO among equal
//!   priorities (by the moment they became runnable). Polling is cooperative: a running poll
//!   is never preempted by a higher task of the same lane; the higher task is polled next.
//! * **Bounded work per turn**: a turn polls at most [`POLLS_PER_TURN`] tasks, then rings its
//!   own doorbell (if tasks remain) and returns, so the lane's other handles get their events
//!   dispatched between turns (the re-armed doorbell queues behind them in epoll's ready
//!   list). A single poll is bounded only by the task itself: a task that never yields holds
//!   its thread, and the lane's overrun watchdog (`budget_us`) reports or demotes it exactly
//!   as it does a handler.
//! * **Streaks**: a task that wakes itself keeps the ready set from emptying through many
//!   short turns; the turns until the ready set is empty again are one streak, which the
//!   watchdog sees as one dispatch (counted past `budget_us`; with `on_overrun = "demote"`
//!   kept in one dispatch once over budget, so the thread stays demoted until it ends). See
//!   `Turn` in `executor.rs`.
//!
//! # Limits and refusals
//! * `max_tasks` slots per lane (TOML `max_tasks`, default 0: no task table), each
//!   `task_bytes` long (default 512) at alignment [`TASK_ALIGN`]. The storage is one
//!   allocation made and pre-faulted when the lane is added.
//! * [`Spawner::spawn`] refuses, handing the future back: a future (or output) larger than a
//!   slot or aligned above 64 ([`SpawnError::TooLarge`], naming both sizes); a full table
//!   ([`SpawnError::Full`]); a lane without a task table or after shutdown
//!   ([`SpawnError::Closed`]). Each is counted in [`TaskStats`].
//!
//! # Failures
//! * A panicking task is caught, counted ([`TaskStats::panicked`]); its future is dropped,
//!   its slot freed, its handle gives [`JoinError::Panicked`]; other tasks are unaffected.
//! * Shutdown ([`Runtime::shutdown_within`](crate::Runtime::shutdown_within)): every
//!   unfinished task is cancelled (its future dropped, its handle gives
//!   [`JoinError::Cancelled`]) within the deadline, lanes highest first, each lane's tasks in
//!   task priority order; a task in a running poll is waited for until the deadline, then left
//!   to its lane thread, which cancels it when the poll returns (`Shared::close`).
//!
//! # Real-time contract
//! After the lane is built: spawn is a lock-free pop and push plus a move into the slot;
//! a poll, a wake, a waker clone or drop (one `Arc` count) and a completion make no allocation.
//! The join waker is kept under a priority-inheriting lock. Timer entries arm the lane's
//! timerfd under a priority-inheriting lock (one `timerfd_settime` when the earliest changes).
//! No lane thread spins on, or waits for, another thread, and none takes a foreign lock (above).

mod channel;
pub(crate) mod executor;
mod join;
pub(crate) mod lane;
pub mod net;
mod raw;
pub(crate) mod relay;
mod spawn;
pub(crate) mod state;
pub mod time;
mod timers;
mod turn;

#[cfg(all(test, loom))]
mod loom;
#[cfg(all(test, not(loom)))]
mod tests;

pub use channel::{
    channel, Full, Receiver, Recv, ReplyReceiver, ReplySender, ReplySlots, Sender, Sending,
};
pub use executor::{TaskStats, MAX_TASKS};
pub use join::{JoinError, JoinHandle};
pub use raw::TASK_ALIGN;
pub use spawn::{SpawnError, Spawner};
pub use timers::TIMERS_PER_TASK;
pub use turn::{yield_now, YieldNow, POLLS_PER_TURN};
