//! Datagrams a handler receives and answers in batches, in its thread's own storage: the
//! public face of `recvmmsg`/`sendmmsg` (whose calls and kernel structures are
//! `sys::net::MsgBatch`). Part of the handler interface: a pool thread's [`Context`] holds one
//! ([`Context::datagrams`]).
//!
//! [`Context`]: crate::Context
//! [`Context::datagrams`]: crate::Context::datagrams

use crate::sys::net::{MsgBatch, SourceAddr};
use std::io;
use std::os::fd::BorrowedFd;

/// Datagrams received and answered in one system call each way (`recvmmsg` / `sendmmsg`),
/// held in preallocated thread-specific storage: a pool thread owns one in its [`Context`].
///
/// A handler receives up to [`capacity`](Self::capacity) datagrams that are queued *now*
/// with [`recv`](Self::recv), works on them in place, marks each one it wants to answer
/// ([`Datagram::answer`], [`Datagram::answer_with_len`]) and sends those back to their sources
/// with [`reply`](Self::reply). A datagram the handler does not mark is not answered.
///
/// ```no_run
/// # use lfrt::{Context, Disposition};
/// # use std::os::fd::AsFd;
/// # fn handle(socket: &std::net::UdpSocket, ctx: &mut Context) -> Disposition {
/// let batch = ctx.datagrams();
/// if batch.recv(socket.as_fd()).is_ok() {
///     for i in 0..batch.len() {
///         let mut d = batch.get(i);
///         if !d.is_truncated() {
///             d.payload_mut().make_ascii_uppercase();
///             d.answer(); // send the (rewritten) payload back
///         }
///     }
///     batch.reply(socket.as_fd()); // one sendmmsg for the marked ones
/// }
/// # Disposition::Rearm
/// # }
/// ```
///
/// # Real-time safety
/// Nothing allocates after [`new`](Self::new): the message headers, address buffers and one
/// slot of `slot_bytes` per datagram are allocated (and pre-faulted by the pool thread) once.
///
/// [`Context`]: crate::Context
pub struct DatagramBatch {
    msgs: MsgBatch,
    /// Datagrams received by the last `recv` (the rest of the slots is stale).
    len: usize,
    /// Of those, datagrams longer than a slot.
    truncated: usize,
    /// Per received datagram: bytes to send back, or `None` (not answered, the state `recv`
    /// leaves every datagram in).
    reply: Box<[Option<u32>]>,
    /// `CLOCK_REALTIME` − `CLOCK_MONOTONIC` when the last `recv` found receive timestamps.
    realtime_offset_ns: i128,
    /// The earliest kernel receive time (`CLOCK_MONOTONIC` ns) of the datagrams taken since
    /// the engine last read it ([`take_first_arrival`](Self::take_first_arrival)); 0: none
    /// stamped.
    first_arrival_ns: u64,
    /// The last `recv` found the socket empty (short of the capacity, or `WouldBlock`); read
    /// and cleared by the dispatch ([`take_drained`](Self::take_drained)).
    drained: bool,
}

impl std::fmt::Debug for DatagramBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatagramBatch")
            .field("capacity", &self.capacity())
            .field("slot_bytes", &self.slot_bytes())
            .field("len", &self.len)
            .finish()
    }
}

impl DatagramBatch {
    /// Room for `capacity` datagrams of at most `slot_bytes` each (both at least 1).
    ///
    /// # Panics
    /// If `slot_bytes` exceeds `u32::MAX` (a datagram length is a `c_uint`) or the slots
    /// together exceed the address space.
    pub fn new(capacity: usize, slot_bytes: usize) -> DatagramBatch {
        let msgs = MsgBatch::new(capacity, slot_bytes);
        DatagramBatch {
            reply: vec![None; msgs.capacity()].into_boxed_slice(),
            msgs,
            len: 0,
            truncated: 0,
            realtime_offset_ns: 0,
            first_arrival_ns: 0,
            drained: false,
        }
    }

    /// Asks the kernel to stamp every datagram `socket` receives with the time it reached the
    /// socket (`SO_TIMESTAMPNS`). A batch then reads the stamps with the datagrams, at no extra
    /// system call: [`Datagram::arrival_ns`] gives each one, and the runtime records, per
    /// dispatch, the time from the kernel's receive of its earliest datagram to handler entry
    /// (the `arrival` latency of `LaneMetrics`' telemetry, `lfrt run`, its JSON and
    /// Prometheus). The built-in UDP echo does this for its sockets.
    ///
    /// # Errors
    /// The `setsockopt` error (e.g. `fd` is not a socket).
    pub fn stamp_arrivals(socket: BorrowedFd<'_>) -> io::Result<()> {
        crate::sys::net::stamp_arrivals(socket)
    }

    /// The earliest kernel receive time (`CLOCK_MONOTONIC` ns) of the datagrams taken since the
    /// last call, and forget it; 0 if none was stamped. The dispatch reads it after the
    /// handler returned.
    pub(crate) fn take_first_arrival(&mut self) -> u64 {
        std::mem::take(&mut self.first_arrival_ns)
    }

    /// Whether the last `recv` of this dispatch found its socket empty, and forget it.
    pub(crate) fn take_drained(&mut self) -> bool {
        std::mem::take(&mut self.drained)
    }

    /// Bytes [`new`](Self::new)`(capacity, slot_bytes)` allocates: the kernel's side and a
    /// reply length per slot. Kept next to `new` so the two stay in step (a test compares
    /// them).
    pub(crate) fn allocated_bytes(capacity: usize, slot_bytes: usize) -> u64 {
        let replies = capacity.max(1) as u64 * std::mem::size_of::<Option<u32>>() as u64;
        MsgBatch::allocated_bytes(capacity, slot_bytes).saturating_add(replies)
    }

    /// Most datagrams one [`recv`](Self::recv) takes.
    pub fn capacity(&self) -> usize {
        self.msgs.capacity()
    }

    /// Largest datagram a slot holds whole; longer ones arrive [truncated](Datagram::is_truncated).
    pub fn slot_bytes(&self) -> usize {
        self.msgs.slot_bytes()
    }

    /// Datagrams held from the last [`recv`](Self::recv).
    pub fn len(&self) -> usize {
        self.len
    }

    /// No datagram held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Of the datagrams held, how many were longer than a slot and arrived
    /// [truncated](Datagram::is_truncated). A handler that does not answer them should count
    /// them
    /// ([`Incident::DatagramTruncated`](crate::Incident)), as the built-in UDP echo does.
    pub fn truncated(&self) -> usize {
        self.truncated
    }

    /// The bytes of every slot, for pre-faulting them before the first event.
    pub(crate) fn storage_mut(&mut self) -> &mut [u8] {
        self.msgs.storage_mut()
    }

    /// `recvmmsg(fd, …, MSG_DONTWAIT)`: takes the datagrams queued on `fd` now, up to
    /// [`capacity`](Self::capacity), replacing what the batch held. Nothing queued gives
    /// `ErrorKind::WouldBlock`. No received datagram is answered unless the handler marks it
    /// ([`Datagram::answer`], [`Datagram::answer_with_len`]).
    ///
    /// A receive that comes back short of the capacity (or with `WouldBlock`) found the socket
    /// empty: it tells the runtime so, as [`Context::set_drained`](crate::Context::set_drained)
    /// does, and the handle is kept with no system call. A full batch may have left datagrams
    /// queued: the handle is then re-checked, and reported again at once if so.
    pub fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        self.len = 0;
        self.truncated = 0;
        let n = match self.msgs.recv(fd) {
            Ok(n) => n,
            Err(e) => {
                self.drained = e.kind() == io::ErrorKind::WouldBlock;
                return Err(e);
            }
        };
        self.drained = n < self.capacity();
        let mut offset = None;
        for i in 0..n {
            self.reply[i] = None;
            self.truncated += usize::from(self.msgs.received(i).1);
            if let Some(at) = self.msgs.received_at(i) {
                // Two vDSO clock reads per batch that carries stamps, none otherwise.
                let off = *offset.get_or_insert_with(crate::sys::net::realtime_offset_ns);
                let mono = u64::try_from(at - off).unwrap_or(0).max(1);
                if self.first_arrival_ns == 0 || mono < self.first_arrival_ns {
                    self.first_arrival_ns = mono;
                }
            }
        }
        if let Some(off) = offset {
            self.realtime_offset_ns = off;
        }
        self.len = n;
        Ok(n)
    }

    /// Datagram `i` of the last [`recv`](Self::recv) (`i < len()`).
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn get(&mut self, i: usize) -> Datagram<'_> {
        assert!(i < self.len, "datagram {i} of {}", self.len);
        let (received, truncated) = self.msgs.received(i);
        let arrival_ns = self
            .msgs
            .received_at(i)
            .and_then(|at| u64::try_from(at - self.realtime_offset_ns).ok());
        let (slot, source) = self.msgs.message(i);
        Datagram {
            received,
            truncated,
            arrival_ns,
            source,
            slot,
            reply: &mut self.reply[i],
        }
    }

    /// `sendmmsg(fd, …, MSG_DONTWAIT)`: sends every datagram the handler marked back to its
    /// source (as many bytes as the mark says), and empties the batch. Returns how many were
    /// sent; with nothing marked it makes no system call.
    ///
    /// Like a single UDP send, a reply the kernel refuses (full send buffer, an ICMP error
    /// surfaced on the socket) is dropped; the rest are still sent.
    pub fn reply(&mut self, fd: BorrowedFd<'_>) -> usize {
        let sent = self.msgs.send(fd, &self.reply[..self.len]);
        self.len = 0;
        self.truncated = 0;
        sent
    }
}

/// One received datagram of a [`DatagramBatch`], and whether (and with what) it is answered.
///
/// It is not answered until the handler calls [`answer`](Self::answer) or
/// [`answer_with_len`](Self::answer_with_len); the last call wins.
///
/// # Examples
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler};
/// use std::net::UdpSocket;
/// use std::os::fd::{AsFd, BorrowedFd};
/// /// Answers each datagram with its length (2 bytes, big-endian) and ignores empty ones.
/// struct Len(UdpSocket);
/// impl EventHandler for Len {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
///         let batch = ctx.datagrams();
///         while batch.recv(self.0.as_fd()).is_ok() {
///             for i in 0..batch.len() {
///                 let mut d = batch.get(i);
///                 let n = d.payload().len();
///                 if n == 0 {
///                     continue; // not marked: not answered
///                 }
///                 let len = (n as u16).to_be_bytes(); // built in place: no allocation
///                 d.slot_mut()[..2].copy_from_slice(&len);
///                 d.answer_with_len(2);
///             }
///             batch.reply(self.0.as_fd());
///         }
///         Disposition::Rearm
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Datagram<'a> {
    received: usize,
    truncated: bool,
    arrival_ns: Option<u64>,
    source: &'a SourceAddr,
    slot: &'a mut [u8],
    reply: &'a mut Option<u32>,
}

impl Datagram<'_> {
    /// The received bytes (at most the slot size).
    pub fn payload(&self) -> &[u8] {
        &self.slot[..self.received.min(self.slot.len())]
    }

    /// The received bytes, to rewrite in place before [`answer`](Self::answer) (the answer
    /// has the same length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let n = self.received.min(self.slot.len());
        &mut self.slot[..n]
    }

    /// The datagram was longer than a slot and only its first [`slot_bytes`] bytes were
    /// kept; answering it sends those bytes only.
    ///
    /// [`slot_bytes`]: DatagramBatch::slot_bytes
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// The whole slot, to build an answer of another length in place (it starts with the
    /// payload); send it with [`answer_with_len`](Self::answer_with_len).
    pub fn slot_mut(&mut self) -> &mut [u8] {
        self.slot
    }

    /// Answer with the payload as it is now (received, or rewritten through
    /// [`payload_mut`](Self::payload_mut)): an echo.
    pub fn answer(&mut self) {
        *self.reply = Some(self.payload().len() as u32);
    }

    /// Answer with the first `len` bytes of the slot (clamped to the slot size), built in
    /// place through [`slot_mut`](Self::slot_mut).
    pub fn answer_with_len(&mut self, len: usize) {
        *self.reply = Some(len.min(self.slot.len()) as u32);
    }

    /// When the kernel received this datagram (`CLOCK_MONOTONIC` ns, as
    /// [`lfrt::task::time::now_ns`](crate::task::time::now_ns)), if its socket stamps arrivals
    /// ([`DatagramBatch::stamp_arrivals`]).
    pub fn arrival_ns(&self) -> Option<u64> {
        self.arrival_ns
    }

    /// Where the datagram came from (and where the reply goes), if it is IPv4 or IPv6.
    pub fn source(&self) -> Option<std::net::SocketAddr> {
        self.source.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::Duration;

    fn pair(ip: &str) -> Option<(UdpSocket, UdpSocket)> {
        let server = UdpSocket::bind((ip, 0)).ok()?;
        let client = UdpSocket::bind((ip, 0)).ok()?;
        client.connect(server.local_addr().ok()?).ok()?;
        for s in [&server, &client] {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        Some((server, client))
    }

    /// Waits (at most the 2 s read timeout) until a datagram is queued on `s`, without
    /// consuming it. Loopback queues a datagram before `send` returns, so every datagram sent
    /// before this call is queued too.
    fn wait_queued(s: &UdpSocket) {
        let mut buf = [0u8; 1];
        s.peek_from(&mut buf).expect("nothing arrived within 2 s");
    }

    #[test]
    fn allocated_bytes_counts_the_kernels_side_and_a_reply_mark_per_slot() {
        for (capacity, slot) in [(16, 4096), (1, 1), (3, 65536), (0, 0)] {
            let b = DatagramBatch::new(capacity, slot);
            assert_eq!(
                DatagramBatch::allocated_bytes(capacity, slot),
                MsgBatch::allocated_bytes(capacity, slot) + std::mem::size_of_val(&*b.reply) as u64,
                "{capacity} x {slot}"
            );
        }
    }

    #[test]
    fn answers_only_marked_datagrams_verbatim_or_rewritten_to_their_sources() {
        let (server, client) = pair("127.0.0.1").unwrap();
        for m in [&b"one"[..], b"two", b"three"] {
            client.send(m).unwrap();
        }
        wait_queued(&server);
        let mut batch = DatagramBatch::new(8, 64);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 3);
        assert_eq!(batch.len(), 3);
        let me = client.local_addr().unwrap();
        for (i, want) in [&b"one"[..], b"two", b"three"].iter().enumerate() {
            let d = batch.get(i);
            assert_eq!(d.payload(), *want);
            assert!(!d.is_truncated());
            assert_eq!(d.source(), Some(me));
        }
        batch.get(0).answer();
        {
            let mut d = batch.get(2);
            d.slot_mut()[..2].copy_from_slice(b"OK");
            d.answer_with_len(2);
        }
        assert_eq!(batch.reply(server.as_fd()), 2);
        assert!(batch.is_empty());
        let mut buf = [0u8; 64];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"one");
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"OK");
        client.set_nonblocking(true).unwrap();
        assert_eq!(
            client.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the unmarked datagram was answered"
        );
    }

    #[test]
    fn takes_at_most_capacity_and_reports_would_block_when_drained() {
        let (server, client) = pair("127.0.0.1").unwrap();
        for i in 0..5u8 {
            client.send(&[i]).unwrap();
        }
        wait_queued(&server);
        let mut batch = DatagramBatch::new(2, 16);
        let mut seen = Vec::new();
        for want in [2, 2, 1] {
            assert_eq!(batch.recv(server.as_fd()).unwrap(), want);
            for i in 0..batch.len() {
                seen.push(batch.get(i).payload()[0]);
            }
        }
        assert_eq!(seen, [0, 1, 2, 3, 4], "in arrival order, each once");
        let e = batch.recv(server.as_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(batch.is_empty());
    }

    #[test]
    fn a_datagram_longer_than_a_slot_is_truncated_and_counted() {
        let (server, client) = pair("127.0.0.1").unwrap();
        client.send(&[7u8; 40]).unwrap();
        client.send(b"short").unwrap();
        wait_queued(&server);
        let mut batch = DatagramBatch::new(4, 16);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 2);
        assert_eq!(batch.truncated(), 1, "counted");
        let d = batch.get(0);
        assert!(d.is_truncated());
        assert_eq!(d.payload(), &[7u8; 16]);
        assert!(!batch.get(1).is_truncated());
        batch.get(1).answer();
        assert_eq!(
            batch.reply(server.as_fd()),
            1,
            "only the marked one goes back"
        );
        assert_eq!(batch.truncated(), 0, "the batch is empty again");
        let mut buf = [0u8; 64];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"short");
    }

    #[test]
    fn a_reply_length_past_the_slot_is_clamped_to_the_slot() {
        let (server, client) = pair("127.0.0.1").unwrap();
        client.send(b"x").unwrap();
        wait_queued(&server);
        let mut batch = DatagramBatch::new(1, 8);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 1);
        batch.get(0).answer_with_len(1 << 20);
        assert_eq!(batch.reply(server.as_fd()), 1);
        let mut buf = [0u8; 64];
        assert_eq!(client.recv(&mut buf).unwrap(), 8, "one slot, not 1 MiB");
    }

    #[test]
    fn a_datagram_not_marked_is_not_answered() {
        let (server, client) = pair("127.0.0.1").unwrap();
        client.send(b"quiet").unwrap();
        wait_queued(&server);
        let mut batch = DatagramBatch::new(4, 16);
        // A previous batch marked its slot 0: the mark must not outlive it.
        batch.recv(server.as_fd()).unwrap();
        batch.get(0).answer();
        assert_eq!(batch.reply(server.as_fd()), 1);
        let mut buf = [0u8; 16];
        client.recv(&mut buf).unwrap();
        client.send(b"quiet").unwrap();
        wait_queued(&server);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 1);
        assert_eq!(batch.get(0).payload(), b"quiet", "read, rewritten or not");
        batch.get(0).payload_mut()[0] = b'Q';
        assert_eq!(
            batch.reply(server.as_fd()),
            0,
            "nothing marked, nothing sent"
        );
        client.set_nonblocking(true).unwrap();
        assert_eq!(
            client.recv(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "an unmarked datagram was answered"
        );
    }

    #[test]
    fn replies_reach_ipv6_sources() {
        let Some((server, client)) = pair("::1") else {
            eprintln!("skipped: no IPv6 loopback on this machine");
            return;
        };
        client.send(b"v6").unwrap();
        wait_queued(&server);
        let mut batch = DatagramBatch::new(4, 16);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 1);
        assert_eq!(batch.get(0).source(), Some(client.local_addr().unwrap()));
        batch.get(0).answer();
        assert_eq!(batch.reply(server.as_fd()), 1);
        let mut buf = [0u8; 16];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"v6");
    }

    /// A socket that stamps arrivals gives each datagram the time the kernel received it, on
    /// the monotonic clock: after the send, before the receive; one that does not gives none.
    #[test]
    fn stamped_arrivals_fall_between_send_and_receive_on_the_monotonic_clock() {
        let (server, client) = pair("127.0.0.1").unwrap();
        let mut batch = DatagramBatch::new(8, 64);
        client.send(b"unstamped").unwrap();
        wait_queued(&server);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 1);
        assert_eq!(batch.get(0).arrival_ns(), None);
        assert_eq!(batch.take_first_arrival(), 0);

        DatagramBatch::stamp_arrivals(server.as_fd()).unwrap();
        let before = crate::sys::now_ns();
        for m in [&b"a"[..], b"b"] {
            client.send(m).unwrap();
        }
        wait_queued(&server);
        assert_eq!(batch.recv(server.as_fd()).unwrap(), 2);
        let after = crate::sys::now_ns();
        // The realtime-to-monotonic conversion reads two clocks; allow it a millisecond.
        let slack = 1_000_000;
        let first = batch.get(0).arrival_ns().expect("stamped");
        let second = batch.get(1).arrival_ns().expect("stamped");
        for at in [first, second] {
            assert!(
                at + slack >= before && at <= after + slack,
                "{before} <= {at} <= {after}"
            );
        }
        assert!(first <= second, "the kernel stamps in arrival order");
        assert_eq!(batch.take_first_arrival(), first.max(1));
        assert_eq!(batch.take_first_arrival(), 0, "read once");
        // A reply carries no ancillary data: the echo is sent and arrives.
        batch.get(0).answer();
        assert_eq!(batch.reply(server.as_fd()), 1);
        let mut buf = [0u8; 8];
        let n = client.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"a");
    }
}
