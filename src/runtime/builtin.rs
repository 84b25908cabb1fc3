//! The built-in handlers a configuration names (`[[lane.handler]]` and `[[band]]`): made,
//! with their sockets bound, when the runtime is built (so a bind error is `Runtime::new`'s or
//! `add_lane`'s), and registered with their lanes at start, when built-in timers are armed.
//!
//! Each echo burns the busy work its [`Work`] gives for its section per event (0 for a
//! runtime built with `Runtime::new`): the `lfrt` command's `work_us`, which is not a key of
//! the configuration.

use crate::config::{BandHandler, HandlerConfig, LaneConfig, RuntimeConfig, Section};
use crate::engine::handler::{EventHandler, Registry};
use crate::error::Error;
use crate::sources::handlers::{PeriodicTimer, TcpEcho, UdpEcho};
use crate::sources::source::Timer;

/// The busy work (µs of thread CPU time per event) of the built-in echo at each section
/// (`Section::Handler` or `Section::Band`).
pub(super) type Work<'a> = &'a dyn Fn(Section) -> u64;

/// No busy work anywhere: what `Runtime::new` and `add_lane` build.
pub(super) fn no_work(_: Section) -> u64 {
    0
}

/// A built-in handler made when the runtime is built, registered with its lane at start.
pub(super) enum Pending {
    /// A handler with its socket bound, registered as it is.
    Handler(Box<dyn EventHandler>),
    /// A `timer` handler: `count` periodic timers, the `k`-th with a period of
    /// `interval_us + k × distance_us`, created and armed at start.
    Timers {
        interval_us: u64,
        count: usize,
        distance_us: u64,
    },
}

/// Binds every `[[band]]` of `cfg` ([`crate::sources::band::bind`]: one `SO_REUSEPORT` socket per band,
/// steered by the kernel) and wraps each band's socket in its handler, to be registered with
/// the band's lane at start: `(lane index, handler)`. Every socket of band `b` burns
/// `work(Section::Band(b))` per datagram.
pub(super) fn bind_bands(
    cfg: &RuntimeConfig,
    work: Work<'_>,
) -> Result<Vec<(usize, Pending)>, Error> {
    let mut pending = Vec::new();
    for (bi, b) in cfg.bands.iter().enumerate() {
        // `Runtime::new` validated `cfg` first, so neither lookup fails; an error all the same.
        let plan = b
            .plan(&cfg.lanes)
            .map_err(|m| Error::config(format!("band[{bi}].classify"), m))?;
        let work_us = work(Section::Band(bi));
        let sockets = crate::sources::band::bind(b.bind, &plan.bands).map_err(|e| Error::Bind {
            addr: b.bind,
            source: e,
        })?;
        for (socket, lane) in sockets.into_iter().zip(&plan.lanes) {
            let gi = cfg
                .lanes
                .iter()
                .position(|g| g.name == *lane)
                .ok_or_else(|| {
                    Error::config(format!("band[{bi}].classify"), format!("no lane `{lane}`"))
                })?;
            let handler: Box<dyn EventHandler> = match b.handler {
                BandHandler::UdpEcho => {
                    Box::new(UdpEcho::new(socket, work_us).map_err(|e| Error::Io {
                        context: "configuring a band's UDP socket",
                        source: e,
                    })?)
                }
            };
            pending.push((gi, Pending::Handler(handler)));
        }
    }
    Ok(pending)
}

/// Binds the sockets of lane `gc`'s built-in handlers (`[[lane.handler]]`), to be registered
/// with the lane (index `gi`) at start: `(lane index, handler)`. The echo of handler `hi`
/// burns `work(Section::Handler { lane: gi, handler: hi })` per event.
pub(super) fn bind_handlers(
    gc: &LaneConfig,
    gi: usize,
    work: Work<'_>,
) -> Result<Vec<(usize, Pending)>, Error> {
    let mut handlers = Vec::new();
    for (hi, h) in gc.handlers.iter().enumerate() {
        let work_us = || {
            work(Section::Handler {
                lane: gi,
                handler: hi,
            })
        };
        let p = match *h {
            HandlerConfig::UdpEcho { bind } => {
                let s = std::net::UdpSocket::bind(bind).map_err(|e| Error::Bind {
                    addr: bind,
                    source: e,
                })?;
                Pending::Handler(Box::new(UdpEcho::new(s, work_us()).map_err(|e| {
                    Error::Io {
                        context: "configuring a UDP socket",
                        source: e,
                    }
                })?))
            }
            HandlerConfig::TcpEcho {
                bind,
                max_connections,
            } => {
                let l = std::net::TcpListener::bind(bind).map_err(|e| Error::Bind {
                    addr: bind,
                    source: e,
                })?;
                let echo = TcpEcho::new(l, work_us(), max_connections, gc.buffer_bytes);
                Pending::Handler(Box::new(echo.map_err(|e| Error::Io {
                    context: "configuring a TCP listener",
                    source: e,
                })?))
            }
            HandlerConfig::Timer {
                interval_us,
                count,
                distance_us,
            } => Pending::Timers {
                interval_us,
                count,
                distance_us,
            },
        };
        handlers.push((gi, p));
    }
    Ok(handlers)
}

impl Pending {
    /// Registers the handler with its lane's registry `reg`. A timer handler's timers are
    /// created here, each armed to first expire at `first` (`CLOCK_MONOTONIC` ns).
    pub(super) fn register(self, reg: &Registry, first: u64) -> Result<(), Error> {
        match self {
            Pending::Handler(h) => {
                reg.register(h)?;
            }
            Pending::Timers {
                interval_us,
                count,
                distance_us,
            } => {
                for k in 0..count as u64 {
                    let mut t = Timer::new().map_err(|e| Error::Io {
                        context: "timerfd_create",
                        source: e,
                    })?;
                    t.arm(first, (interval_us + k * distance_us) * 1000)
                        .map_err(|e| Error::Io {
                            context: "timerfd_settime",
                            source: e,
                        })?;
                    reg.register(Box::new(PeriodicTimer::new(t)))?;
                }
            }
        }
        Ok(())
    }
}
