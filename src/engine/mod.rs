//! The Leader/Followers engine: one lane's pool of threads taking turns on one handle set.
//!
//! * **Owns:** the promotion protocol ([`leader`]), the follower queue ([`follower_queue`]),
//!   the handle set ([`handle_set`]) and the one owner of its epoll data word ([`word`]), the
//!   handler interface a source implements ([`handler`], with the datagram batches of a
//!   thread's context, [`datagram`], which it re-exports), a lane's shared state built from the
//!   engine's own parameters ([`lane`]), a pool thread's slot and the one owner of its
//!   demotion and restore ([`slot`]), its set-up ([`thread`]), its dispatch loops
//!   ([`dispatch`]), lane borrowing ([`borrow`], and the lender's turn in `lend.rs`) and the
//!   overrun watchdog ([`watchdog`]).
//! * **May use:** `sys` (system calls), `sync` (PI mutex, parker, the indexed heap, the loom
//!   shim), `observe` (counters and telemetry) and `error`.
//! * **Must never use:** `config` (the engine takes its own plain parameters), `sources`,
//!   `runtime` or the tools crate. Sources are written against [`handler::EventHandler`]; the
//!   engine does not know any one of them.

pub(crate) mod borrow;
pub(crate) mod claim;
pub(crate) mod datagram;
pub(crate) mod dispatch;
pub(crate) mod follower_queue;
pub(crate) mod handle_set;
pub(crate) mod handler;
pub(crate) mod lane;
pub(crate) mod leader;
mod lend;
pub(crate) mod overrun;
pub(crate) mod slot;
#[cfg(all(test, not(loom)))]
pub(crate) mod testing;
pub(crate) mod thread;
pub(crate) mod watchdog;
pub(crate) mod word;
