//! Event sources: every built-in thing a lane can wait on, each an
//! [`EventHandler`](crate::EventHandler) registered in a handle set.
//!
//! * **Owns:** the built-in UDP/TCP echo and periodic timer handlers ([`handlers`]), the
//!   accept side, connection table and flush loop of the TCP listeners (`accept`), framed TCP
//!   streams ([`stream`]) and the one frame reader they share with the bound pool (`frame`),
//!   lane inboxes ([`inbox`]), callback timers ([`timer`]), priority bands on one port
//!   ([`band`]) and the raw timerfd/eventfd sources ([`source`]).
//! * **May use:** the engine's handler interface (`engine::handler`, and the handles'
//!   `engine::word::Token`), `sys`, `sync`, `observe` and `error`.
//! * **Must never use:** `config`, `runtime` or the engine's internals (leader, follower queue,
//!   lane); the engine never uses a source.

pub(crate) mod accept;
pub mod band;
pub(crate) mod frame;
pub mod handlers;
pub mod inbox;
pub(crate) mod source;
pub mod stream;
pub mod timer;
