//! Runtime configuration: the types a TOML file or code fills in, and their validation.
//!
//! * **Owns:** the document's serde types (`document.rs`), the memory plan (`memory.rs`), the
//!   validation and probe step (`check/`: machine probe, bind checks, one file per table or
//!   concern), `[[band]]` plans (`band.rs`), TOML loading with file:line:field errors
//!   (`file.rs`), and turning a lane into the engine's own parameters (`spec.rs`).
//! * **May use:** `bound`, `task` (its limits), `sources`, `engine`, `observe`, `sync`, `sys`
//!   and `error`.
//! * **Must never use:** `runtime`. Nothing below `config/` imports it: the engine, the
//!   sources and the bound pool take their own plain parameters.
//!
//! The types are `serde::Deserialize` under the names a configuration file uses (unknown keys
//! are refused), so any serde format can fill them; with the `toml` feature, [`load`] reads a
//! TOML file. [`RuntimeConfig::validate`] is the single place where configurations are checked:
//! the loader calls it and only adds the file name and line to the errors.
//!
//! The memory a configuration preallocates is counted here too ([`LaneConfig::memory`]), from
//! the same sizes the runtime allocates, so `lfrt check` shows what `lfrt run` will take and
//! validation can refuse what the machine cannot hold.

mod band;
mod check;
mod document;
#[cfg(feature = "toml")]
mod file;
mod memory;
mod spec;
#[cfg(test)]
mod tests;

pub use band::{BandClassify, BandConfig, BandHandler, BandPlan};

pub(crate) use check::addresses_collide;
pub use check::{Invalid, Section};
pub(crate) use document::named;
#[cfg(feature = "toml")]
pub(crate) use document::split_named;
pub use document::*;
#[cfg(feature = "toml")]
pub use file::{line, load, parse};
pub use memory::{Bytes, LaneMemory};
