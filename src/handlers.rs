//! Built-in handlers, so that a configuration file alone runs a service.

use crate::handler::{Context, Disposition, Event, EventHandler, Interest};
use crate::source::Timer;
use crate::sys;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

/// Burns `ns` nanoseconds of the calling thread's **CPU time**: the built-in handlers' `work_us`,
/// a bounded stand-in for handler cost that harnesses reuse so every architecture they compare
/// burns the same work. CPU time, not wall time, so a handler preempted mid-work still costs the
/// same CPU as one that is not. Bounded: it also returns after `ns` plus one second of
/// wall-clock time, whatever happens.
pub fn cpu_work(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = sys::mem::thread_cpu_ns();
    let give_up = sys::now_ns() + ns + 1_000_000_000;
    while sys::mem::thread_cpu_ns().wrapping_sub(start) < ns && sys::now_ns() < give_up {
        std::hint::spin_loop();
    }
}

fn busy_work(us: u64) {
    cpu_work(us.saturating_mul(1000));
}

/// Echoes each datagram verbatim to its sender, after `work_us` of busy work.
#[derive(Debug)]
pub struct UdpEcho {
    socket: UdpSocket,
    work_us: u64,
}

impl UdpEcho {
    /// Wraps a bound socket (made nonblocking here).
    pub fn new(socket: UdpSocket, work_us: u64) -> io::Result<UdpEcho> {
        socket.set_nonblocking(true)?;
        Ok(UdpEcho { socket, work_us })
    }
}

impl EventHandler for UdpEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Takes the datagrams queued *now* (at most [`DATAGRAM_BATCH`]) in one `recvmmsg`, works
    /// on each, and echoes them in one `sendmmsg`. Datagrams that arrive meanwhile wait for the
    /// re-armed handle, so one busy socket cannot hold a thread for longer than one batch.
    ///
    /// [`DATAGRAM_BATCH`]: crate::DATAGRAM_BATCH
    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let batch = ctx.datagrams();
        loop {
            match batch.recv(self.socket.as_fd()) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock (another event drained it), or an ICMP error surfaced on the
                // socket: nothing to echo now, keep serving.
                Err(_) => return Disposition::Rearm,
            }
        }
        // Echo verbatim: `recv` set each reply to the received bytes (and a datagram longer
        // than a slot, truncated, to nothing), so the work is all there is to do.
        for _ in 0..batch.len() {
            busy_work(self.work_us);
        }
        // A full send buffer drops an echo, as UDP may; the client counts it lost.
        batch.reply(self.socket.as_fd());
        Disposition::Rearm
    }
}

/// Accepts TCP connections and registers a [`TcpEchoStream`] for each in the same group.
#[derive(Debug)]
pub struct TcpEcho {
    listener: TcpListener,
    work_us: u64,
}

impl TcpEcho {
    /// Wraps a bound listener (made nonblocking here).
    pub fn new(listener: TcpListener, work_us: u64) -> io::Result<TcpEcho> {
        listener.set_nonblocking(true)?;
        Ok(TcpEcho { listener, work_us })
    }
}

impl EventHandler for TcpEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // Accepting allocates the connection's handler: connection set-up is not
                    // the per-message path.
                    if let Ok(h) = TcpEchoStream::new(stream, self.work_us, ctx.buffer().len()) {
                        let _ = ctx.registry().register(Box::new(h));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Rearm,
            }
        }
    }
}

/// Echoes the bytes of one TCP connection; closes the handle when the peer closes.
///
/// Unsent bytes (the peer is not reading) are kept in a buffer sized at accept time, and the
/// handle waits for writability until they are flushed: no allocation per message.
#[derive(Debug)]
pub struct TcpEchoStream {
    stream: TcpStream,
    work_us: u64,
    pending: Vec<u8>,
    sent: usize,
}

impl TcpEchoStream {
    /// Wraps an accepted stream (made nonblocking, Nagle off).
    pub fn new(stream: TcpStream, work_us: u64, buffer_bytes: usize) -> io::Result<TcpEchoStream> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(TcpEchoStream {
            stream,
            work_us,
            pending: Vec::with_capacity(buffer_bytes),
            sent: 0,
        })
    }

    /// Writes pending bytes; true when all are out.
    fn flush(&mut self) -> io::Result<bool> {
        while self.sent < self.pending.len() {
            match self.stream.write(&self.pending[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.pending.clear();
        self.sent = 0;
        Ok(true)
    }
}

impl EventHandler for TcpEchoStream {
    fn source(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    fn interest(&self) -> Interest {
        if self.pending.is_empty() {
            Interest::READABLE
        } else {
            Interest::WRITABLE
        }
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        match self.flush() {
            Ok(true) => {}
            Ok(false) => return Disposition::Rearm,
            Err(_) => return Disposition::Close,
        }
        let buf = ctx.buffer();
        loop {
            let n = match self.stream.read(buf) {
                Ok(0) => return Disposition::Close,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Disposition::Rearm,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Disposition::Close,
            };
            busy_work(self.work_us);
            let mut off = 0;
            while off < n {
                match self.stream.write(&buf[off..n]) {
                    Ok(0) => return Disposition::Close,
                    Ok(w) => off += w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Keep the rest (bounded by the buffer reserved at accept) and wait
                        // for writability before reading more.
                        let room = self.pending.capacity() - self.pending.len();
                        let keep = (n - off).min(room);
                        self.pending.extend_from_slice(&buf[off..off + keep]);
                        return Disposition::Rearm;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Disposition::Close,
                }
            }
        }
    }
}

/// A periodic timer that reports its wake-up latency through telemetry: the sample's origin is
/// the expiry the timer was due at, so latency = handler entry − expected expiry. Missed
/// periods (expirations > 1) are counted as missed periods.
#[derive(Debug)]
pub struct PeriodicTimer {
    timer: Timer,
}

impl PeriodicTimer {
    /// Wraps an armed timer.
    pub fn new(timer: Timer) -> PeriodicTimer {
        PeriodicTimer { timer }
    }
}

impl EventHandler for PeriodicTimer {
    fn source(&self) -> BorrowedFd<'_> {
        self.timer.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        if let Ok(Some((expirations, due_ns))) = self.timer.read() {
            ctx.set_origin_ns(due_ns);
            ctx.add_missed_periods(expirations - 1);
        }
        Disposition::Rearm
    }
}
