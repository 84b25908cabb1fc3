//! # lfrt — a real-time, priority-aware Leader/Followers runtime for Linux
//!
//! A **lane** is a pool of threads that take turns on one handle set (an epoll instance):
//! one thread, the *leader*, waits for events; when they arrive it promotes a *follower* to
//! leader **before** processing an event itself, in its own thread, then rejoins the pool
//! (Schmidt et al., *Leader/Followers*, POSA2). Events of one wait that the leader does not
//! process stay in a small preallocated batch that passes on with the leader role, so nothing
//! is copied or allocated between threads. An event waits behind another's handler only when
//! every thread of its lane is busy, or when it is one of the few quick events a leader
//! processes itself (deferred promotion: their handlers recently ran for less than
//! [`promote_after_us`](LaneConfig::promote_after_us) in all; the watchdog relieves a leader
//! that keeps its role past that).
//!
//! Several lanes run at distinct `SCHED_FIFO` priorities ("lanes"): an event on a
//! high-priority lane's handles is detected and processed by that lane's threads, never
//! queued behind low-priority work.
//!
//! ## Real-time contract
//! All buffers, follower heaps, handle tables and telemetry rings are allocated in [`Runtime::new`]
//! and [`Runtime::start`]. After `start` the dispatch path does not allocate, and blocks only in
//! `epoll_wait` (the leader; in concurrent mode every idle thread), its own futex word (a follower
//! parks on it until it is woken) or a priority-inheritance lock. Between `epoll_wait` returning
//! and a handler starting it makes no system call, and per event none beyond the wait and the
//! handler's own I/O: handles are edge-triggered, and one whose handler read its source until it
//! would block ([`Context::set_drained`]) is kept without an `epoll_ctl`. Pool threads pre-fault
//! their stacks and buffers before the first event, and `lock_memory` pins everything with
//! `mlockall`. The runtime counts allocations and minor faults on pool threads after warm-up and
//! reports them ([`LaneMetrics`]).
//!
//! ## Quick start
//! ```no_run
//! use lfrt::{
//!     Context, Disposition, Event, EventHandler, LaneConfig, Policy, Runtime, RuntimeConfig,
//! };
//! use std::net::UdpSocket;
//! use std::os::fd::{AsFd, BorrowedFd};
//!
//! struct Echo(UdpSocket);
//! impl EventHandler for Echo {
//!     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
//!     fn handle(&mut self, _ev: &Event, ctx: &mut Context) -> Disposition {
//!         let buf = ctx.buffer();
//!         while let Ok((n, from)) = self.0.recv_from(buf) {
//!             let _ = self.0.send_to(&buf[..n], from);
//!         }
//!         ctx.set_drained(); // read until it would block: kept with no epoll_ctl
//!         Disposition::Rearm
//!     }
//! }
//!
//! let mut rt = Runtime::new(RuntimeConfig::default())?;
//! let control = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
//! let sock = UdpSocket::bind("127.0.0.1:7000").unwrap();
//! sock.set_nonblocking(true).unwrap();
//! control.registry().register(Box::new(Echo(sock)))?;
//! rt.start()?;
//! # rt.shutdown()?;
//! # Ok::<(), lfrt::Error>(())
//! ```
//!
//! ## Public API
//! A small surface, re-exported at the root; everything else is private.
//!
//! | purpose | items |
//! |---|---|
//! | run lanes | [`Runtime`] (`new`, `add_lane`, `lane`, `start`, `metrics`, `metrics_handle`, `stopper`, `wait`, `shutdown`, `shutdown_within`), [`Lane`] (a lane's typed handle: `registry`, `bound_pool`), [`Stopper`], [`MetricsHandle`], [`StartReport`], [`SHUTDOWN_TIMEOUT`] |
//! | configure | [`RuntimeConfig`], [`LaneConfig`], [`HandlerConfig`], [`BandConfig`] (`[[band]]`), [`Policy`], [`RtMode`], [`Promotion`], [`OnOverrun`], [`MAX_LANE_THREADS`]; from TOML (default feature `toml`): `load_config`, `parse_config`, `config_line` (where a field is written); errors: [`Error`], [`Invalid`], [`Section`]; memory plan: [`LaneMemory`], [`Bytes`] |
//! | write handlers | [`EventHandler`], [`Event`], [`Interest`], [`Disposition`], [`Context`] (thread-specific storage), [`Registry`], [`Token`], [`Incident`] |
//! | event sources | [`timer`] (callback timers: periodic or one-shot, cancel and re-arm from any thread), [`Timer`] (timerfd), [`Notifier`] (eventfd), [`inbox`] (hand a value to a lane), [`DatagramBatch`]/[`Datagram`] (`recvmmsg`/`sendmmsg` from thread-specific storage, [`DATAGRAM_BATCH`] slots; only the datagrams a handler marks with [`Datagram::answer`] are answered) |
//! | async tasks | [`Lane::spawn`], [`task`] ([`task::Spawner`], [`task::JoinHandle`], channels and reply slots for tokio or any thread), [`task::time`] (`sleep_until`, `interval` on the lane's timerfd; [`task::time::now_ns`], the clock of every timer), [`task::net`] (UDP, TCP listener and stream on the lane's handle set); sizes: [`LaneConfig::max_tasks`], [`LaneConfig::task_bytes`] |
//! | streams | [`stream`]: length-prefixed frames over TCP ([`stream::Framed`]): per-connection read and write state, bounded preallocated buffers ([`stream::Limits`]), back-pressure, half-close and reset handling |
//! | built-in handlers | [`handlers`]: UDP echo, TCP echo, periodic timer |
//! | bound threads | [`bound`]: the bound handle/thread association variant ([`bound::BoundPool`]); as a runtime lane: [`LaneConfig::bound`] ([`BoundLane`], TOML `[lane.bound]`), [`Lane::bound_pool`] |
//! | share state across lanes | [`PiMutex`], [`PiMutexGuard`] (priority inheritance) |
//! | observe | [`LaneMetrics`], [`telemetry`] (latency histograms), [`CountingAlloc`], [`thread_allocations`], [`counting_alloc_active`], [`WARMUP_DISPATCHES`]; flight recorder: [`window`] (the frozen window, written as a Chrome trace with `write_chrome_trace` and read back with `read_window`) |
//! | measuring (feature `tools`) | `os`: policy and affinity (set and read back), RT privilege, signals, clocks, resource usage, memory limits, a private ftrace instance (`KernelTrace`); `handlers::cpu_work`; `Runtime::with_echo_work` (busy work in the built-in echoes: the `lfrt` command's `work_us`). The tools crate's hooks, not a service's API |
//!
//! The measuring side — the `lfrt` command (`check`, `run`, `cyclic`, `inversion`, `plot`,
//! `doctor`), the Half-Sync/Half-Reactive baseline, the load generator, benchmarks, examples
//! and integration tests — lives in the workspace's `rt-tests` crate, which uses only this
//! API.

#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, unreachable_pub)]

#[cfg(not(target_os = "linux"))]
compile_error!("lfrt supports Linux only");

#[macro_use]
mod sys;

mod config;
mod engine;
mod error;
mod observe;
mod runtime;
mod sources;
mod sync;

pub mod bound;
pub mod task;
pub use observe::telemetry;
pub use sources::{band, handlers, inbox, stream, timer};

/// A flight-recorder window: what a trigger froze (lfrt's dispatch samples and, with the kernel
/// recorder on, the kernel's scheduling, IRQ and timer events), and the Chrome trace-event file
/// it is written as ([`write_chrome_trace`](window::write_chrome_trace)) and read back from
/// ([`read_window`](window::read_window)).
///
/// (The types live in `observe::window`, the file in `observe::chrome`, which uses them: both
/// are gathered here so neither module names the other both ways.)
pub mod window {
    pub use crate::observe::chrome::{
        read_window, write_chrome_trace, write_chrome_trace_to, WINDOW_KEY,
    };
    pub use crate::observe::recorder::RecorderStats;
    pub use crate::observe::window::*;
}

#[cfg(feature = "toml")]
pub use config::{line as config_line, load as load_config, parse as parse_config};
pub use config::{BandClassify, BandConfig, BandHandler, BandPlan};
pub use config::{
    BoundLane, Bytes, Deadline, HandlerConfig, Invalid, LaneConfig, LaneMemory, OnOverrun, Policy,
    RtMode, RuntimeConfig, Section, TraceConfig,
};
pub use engine::dispatch::WARMUP_DISPATCHES;
pub use engine::follower_queue::{Promotion, MAX_LANE_THREADS};
pub use engine::handler::{
    Context, Datagram, DatagramBatch, Disposition, Event, EventHandler, Interest, Registry,
    DATAGRAM_BATCH,
};
pub use engine::word::Token;
pub use error::Error;
pub use observe::alloc_count::{
    is_active as counting_alloc_active, thread_allocations, CountingAlloc,
};
pub use observe::metrics::{Incident, LaneMetrics, OverrunCauses};
pub use runtime::{Lane, MetricsHandle, Runtime, StartReport, Stopper, SHUTDOWN_TIMEOUT};
pub use sources::source::{Notifier, Timer};
pub use sync::pi_mutex::{PiMutex, PiMutexGuard};

/// (With the `tools` feature: the measuring side's hooks, not a service's API.)
///
/// The few Linux facilities the tools and tests share with the runtime: scheduling and its
/// read-back, affinity, termination signals, the monotonic and thread CPU clocks, resource
/// usage, the memory limits a configuration is checked against, and the kernel half of the
/// flight recorder (a private ftrace instance). They are the same functions the runtime itself
/// uses, so a harness sets a thread's policy and reads it back exactly as a pool thread does.
#[cfg(feature = "tools")]
pub mod os {
    pub use crate::sys::mem::{
        children_cpu_ns, mem_total, process_usage, thread_cpu_ns, thread_minor_faults, MemLock,
    };
    pub use crate::sys::reuseport::set_tos;
    pub use crate::sys::sched::{
        affinity, available_cpus, current_cpu, effective_rt_priority, minor_faults, online_cpus,
        parse_cpu_list, read_back, set_current as set_current_sched, set_current_affinity,
        RtPrivilege, Sched,
    };
    pub use crate::sys::signal::{block_termination, wait_termination, TRACE_SIGNAL};
    pub use crate::sys::tracefs::KernelTrace;
    pub use crate::sys::{gettid, now_ns};
}
