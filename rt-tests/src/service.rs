//! Application work written once and run by every server architecture.
//!
//! A [`Service`] processes one [`Request`] at a time: a datagram (with its sender) or a timer
//! expiry (with the instant it was due). The same service value runs
//!
//! * on an lfrt pool thread, wrapped in a [`ServiceHandler`] (an [`EventHandler`]): the leader
//!   that detected the event reads the request into its thread's preallocated buffer and calls
//!   the service in place;
//! * on a worker of the Half-Sync/Half-Reactive pool ([`crate::hsha`]): the I/O thread reads
//!   the request into a heap buffer, queues it, and a worker calls the service.
//!
//! So a comparison between architectures compares how requests reach the service, never what
//! the service does.

use lfrt::handlers::cpu_work;
use lfrt::Timer;
use lfrt::{Context, Disposition, Event, EventHandler};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

/// What kind of event a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A UDP datagram from `peer`; the reply goes back to it on the same socket.
    Datagram {
        /// The sender.
        peer: SocketAddr,
    },
    /// One read of a periodic timer.
    Timer {
        /// Expirations since the previous read (more than 1: periods were missed).
        expirations: u64,
        /// When the first of them was due (`CLOCK_MONOTONIC` ns): the latency reference.
        due_ns: u64,
    },
}

/// One request as a [`Service`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Index of the handle it arrived on, in the order the server was given its handles.
    pub source: usize,
    /// Datagram or timer.
    pub kind: RequestKind,
    /// The datagram's bytes (empty for timers).
    pub payload: &'a [u8],
}

/// The work done for each request, shared by every architecture.
///
/// # Real-time safety
/// On an lfrt pool thread `serve` runs on the dispatch path: it must not allocate, log, or take
/// a non-PI lock, and must return in bounded time. `reply` sends one datagram back to the
/// request's peer (a no-op for timers); it does not allocate.
pub trait Service: Send + 'static {
    /// Processes one request; call `reply` zero or more times to answer its sender.
    fn serve(&mut self, request: &Request<'_>, reply: &mut dyn FnMut(&[u8]));
}

/// Echoes each datagram verbatim after `work_us` of busy work (thread CPU time, as the built-in
/// `UdpEcho` handler does); ignores timer requests.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo {
    /// Busy work per datagram (µs).
    pub work_us: u64,
}

impl Service for Echo {
    fn serve(&mut self, request: &Request<'_>, reply: &mut dyn FnMut(&[u8])) {
        if let RequestKind::Datagram { .. } = request.kind {
            cpu_work(self.work_us * 1000);
            reply(request.payload);
        }
    }
}

#[derive(Debug)]
enum Handle {
    Udp(UdpSocket),
    Timer(Timer),
}

/// Runs a [`Service`] on an lfrt lane: an [`EventHandler`] for one UDP socket or one timer.
///
/// For a socket, each event reads up to `batch` datagrams (one `recv_from` each, into the pool
/// thread's preallocated buffer) and serves each one; the handle is then re-armed. For a timer,
/// each event reads the expiration count and serves one [`RequestKind::Timer`] request; the
/// expiry is also recorded as the dispatch's telemetry origin (as [`lfrt::handlers::PeriodicTimer`]
/// does), so lfrt's own telemetry measures latency from the due time.
///
/// # Real-time safety
/// No allocation: the datagram lives in [`Context::buffer`], replies go out with `send_to`.
#[derive(Debug)]
pub struct ServiceHandler<S> {
    handle: Handle,
    source: usize,
    batch: usize,
    service: S,
}

impl<S: Service> ServiceHandler<S> {
    /// Serves datagrams arriving on `socket` (made nonblocking here), at most `batch` per event
    /// (at least 1). `source` is the index reported in [`Request::source`].
    pub fn udp(
        socket: UdpSocket,
        source: usize,
        batch: usize,
        service: S,
    ) -> io::Result<ServiceHandler<S>> {
        socket.set_nonblocking(true)?;
        Ok(ServiceHandler {
            handle: Handle::Udp(socket),
            source,
            batch: batch.max(1),
            service,
        })
    }

    /// Serves the expiries of an armed timer.
    pub fn timer(timer: Timer, source: usize, service: S) -> ServiceHandler<S> {
        ServiceHandler {
            handle: Handle::Timer(timer),
            source,
            batch: 1,
            service,
        }
    }

    /// The wrapped service.
    pub fn service(&self) -> &S {
        &self.service
    }
}

impl<S: Service> EventHandler for ServiceHandler<S> {
    fn source(&self) -> BorrowedFd<'_> {
        match &self.handle {
            Handle::Udp(s) => s.as_fd(),
            Handle::Timer(t) => t.as_fd(),
        }
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        match &mut self.handle {
            Handle::Udp(socket) => {
                let buf = ctx.buffer();
                let mut drained = false;
                for _ in 0..self.batch {
                    match socket.recv_from(buf) {
                        Ok((n, peer)) => {
                            let request = Request {
                                source: self.source,
                                kind: RequestKind::Datagram { peer },
                                payload: &buf[..n],
                            };
                            let socket = &*socket;
                            self.service.serve(&request, &mut |data| {
                                // A full send buffer drops the reply, as UDP may.
                                let _ = socket.send_to(data, peer);
                            });
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            drained = true;
                            break;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break, // e.g. an ICMP error surfaced on the socket: keep serving
                    }
                }
                if drained {
                    ctx.set_drained(); // read until WouldBlock: no re-check needed
                }
            }
            Handle::Timer(timer) => {
                let read = timer.read();
                ctx.set_drained(); // one read empties a timerfd
                if let Ok(Some((expirations, due_ns))) = read {
                    ctx.set_origin_ns(due_ns);
                    ctx.add_missed_periods(expirations - 1);
                    let request = Request {
                        source: self.source,
                        kind: RequestKind::Timer {
                            expirations,
                            due_ns,
                        },
                        payload: &[],
                    };
                    self.service.serve(&request, &mut |_| {});
                }
            }
        }
        Disposition::Rearm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_work_burns_thread_cpu_time() {
        let before = lfrt::os::thread_cpu_ns();
        cpu_work(2_000_000);
        assert!(lfrt::os::thread_cpu_ns() - before >= 2_000_000);
    }

    #[test]
    fn echo_replies_with_the_payload_and_ignores_timers() {
        let mut echo = Echo { work_us: 0 };
        let mut out = Vec::new();
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        echo.serve(
            &Request {
                source: 0,
                kind: RequestKind::Datagram { peer },
                payload: b"abc",
            },
            &mut |d| out.push(d.to_vec()),
        );
        echo.serve(
            &Request {
                source: 1,
                kind: RequestKind::Timer {
                    expirations: 1,
                    due_ns: 5,
                },
                payload: &[],
            },
            &mut |d| out.push(d.to_vec()),
        );
        assert_eq!(out, vec![b"abc".to_vec()]);
    }
}
