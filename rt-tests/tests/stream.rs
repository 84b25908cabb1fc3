//! Framed stream connections (`lfrt::stream`) through a real runtime on 127.0.0.1: framing,
//! back-pressure, half-close, reset, oversized frames and a full connection table. Every wait
//! is bounded; no assertion depends on timing.
//! Run one at a time: `cargo test --release --test stream -- --test-threads=1`.

mod util;

use lfrt::stream::{Flow, Framed, Limits, Output};
use lfrt::{LaneMetrics, Runtime};
use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Client reads give up after this long: a hang fails the test instead of freezing it.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts a one-lane runtime (2 threads) serving `handler` on a fresh listener.
fn serve(
    limits: Limits,
    listener: TcpListener,
    handler: impl lfrt::stream::FrameHandler,
) -> (Runtime, SocketAddr) {
    let addr = listener.local_addr().unwrap();
    let mut rt = util::lane(2);
    let server = Framed::new(listener, limits, handler).unwrap();
    rt.lane("lane")
        .unwrap()
        .registry()
        .register(Box::new(server))
        .unwrap();
    rt.start().unwrap();
    (rt, addr)
}

fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// An echo handler that counts the frames it was given.
fn echo(delivered: Arc<AtomicU64>) -> impl lfrt::stream::FrameHandler {
    move |frame: &[u8], out: &mut Output<'_>| {
        delivered.fetch_add(1, SeqCst);
        out.send(frame).expect("one reply always fits");
        Flow::Continue
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// Reads one frame; `None` at a clean end of stream between frames.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match s.read(&mut header[got..]) {
            Ok(0) if got == 0 => return None,
            Ok(0) => panic!("end of stream inside a header"),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading a reply: {e}"),
        }
    }
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    s.read_exact(&mut body).expect("reply body");
    Some(body)
}

/// The peer's end: clean EOF or a reset, within the read timeout (not a timeout).
fn assert_closed(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the server to close the connection, got {other:?}"),
    }
}

fn metrics(rt: &Runtime) -> LaneMetrics {
    rt.metrics().remove(0)
}

/// The body of test frame `i`: 0..=300 bytes derived from `i`.
fn body(i: usize) -> Vec<u8> {
    (0..(i * 37) % 301).map(|k| (i + k) as u8).collect()
}

/// Frames written a few bytes at a time (every frame, header included, split over many
/// segments) and frames written many to one `write`: each is delivered exactly once and in
/// order, and the reply stream ends right after the last one.
#[test]
fn frames_split_and_coalesced_are_delivered_once_in_order() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let (mut rt, addr) = serve(Limits::default(), listener(), echo(delivered.clone()));
    const N: usize = 200;
    let wire: Vec<u8> = (0..N).flat_map(|i| frame(&body(i))).collect();
    for coalesced in [false, true] {
        let mut c = connect(addr);
        let mut reader = c.try_clone().unwrap();
        let got = std::thread::scope(|s| {
            let r = s.spawn(move || {
                let mut got = Vec::new();
                while let Some(f) = read_frame(&mut reader) {
                    got.push(f);
                }
                got
            });
            if coalesced {
                c.write_all(&wire).unwrap();
            } else {
                for chunk in wire.chunks(3) {
                    c.write_all(chunk).unwrap();
                }
            }
            c.shutdown(Shutdown::Write).unwrap();
            r.join().unwrap()
        });
        assert_eq!(got.len(), N, "coalesced = {coalesced}");
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f, &body(i), "frame {i}, coalesced = {coalesced}");
        }
    }
    assert_eq!(delivered.load(SeqCst), 2 * N as u64);
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!((m.connections_reset, m.frames_oversize), (0, 0), "{m:?}");
}

/// A handler that returns `Flow::Close`: its replies so far are sent, the frames after it
/// (already read, in the same write) are not delivered, then the connection closes.
#[test]
fn handler_close_flushes_its_replies_then_closes() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let d = delivered.clone();
    let handler = move |frame: &[u8], out: &mut Output<'_>| {
        d.fetch_add(1, SeqCst);
        if frame == b"quit" {
            out.send(b"bye").unwrap();
            return Flow::Close;
        }
        out.send(frame).unwrap();
        Flow::Continue
    };
    let (mut rt, addr) = serve(Limits::default(), listener(), handler);
    let mut c = connect(addr);
    let wire: Vec<u8> = [&b"a"[..], b"quit", b"never"]
        .iter()
        .flat_map(|b| frame(b))
        .collect();
    c.write_all(&wire).unwrap();
    assert_eq!(read_frame(&mut c).unwrap(), b"a");
    assert_eq!(read_frame(&mut c).unwrap(), b"bye");
    assert_closed(&mut c);
    assert_eq!(delivered.load(SeqCst), 2);
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!((m.connections_reset, m.frames_oversize), (0, 0), "{m:?}");
}

/// Bytes of each large reply in the back-pressure and half-close tests.
const BIG: usize = 16 * 1024;

/// Answers a 4-byte request `i` with a `BIG`-byte reply: `i` then bytes `i as u8`.
fn big_replies(delivered: Arc<AtomicU64>) -> impl lfrt::stream::FrameHandler {
    move |req: &[u8], out: &mut Output<'_>| {
        delivered.fetch_add(1, SeqCst);
        let body = out.frame(BIG).expect("one reply always fits");
        body[..4].copy_from_slice(req);
        let i = u32::from_be_bytes(req.try_into().unwrap());
        body[4..].fill(i as u8);
        Flow::Continue
    }
}

fn check_big(i: u32, reply: &[u8]) {
    assert_eq!(reply.len(), BIG, "reply {i}");
    assert_eq!(u32::from_be_bytes(reply[..4].try_into().unwrap()), i);
    assert!(
        reply[4..].iter().all(|&b| b == i as u8),
        "reply {i} corrupted"
    );
}

fn requests(n: u32) -> Vec<u8> {
    (0..n).flat_map(|i| frame(&i.to_be_bytes())).collect()
}

/// A client that sends many requests and does not read: the server stops reading it once its
/// replies cannot be written. Proof without timing: every request is already in the server's
/// socket, yet the requests it took never exceed what the kernel's buffers and the
/// connection's output bound can hold. When the client reads, the server resumes and every
/// reply arrives intact and in order.
#[test]
fn backpressure_stops_reading_until_the_client_reads() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_connections: 4,
        max_frame: BIG,
        max_output: 2 * (4 + BIG),
        ..Limits::default()
    };
    // Small, fixed socket buffers make the bound tight (accepted sockets inherit the
    // listener's; setting them turns off the kernel's autotuning).
    let l = listener();
    setsockopt(&l, sockopt::SndBuf, &(64 * 1024)).unwrap();
    let server_sndbuf = getsockopt(&l, sockopt::SndBuf).unwrap();
    let (mut rt, addr) = serve(limits, l, big_replies(delivered.clone()));
    let mut c = connect(addr);
    setsockopt(&c, sockopt::RcvBuf, &(64 * 1024)).unwrap();
    let client_rcvbuf = getsockopt(&c, sockopt::RcvBuf).unwrap();

    const R: u32 = 1000; // 16 MB of replies, 8 KB of requests
    c.write_all(&requests(R)).unwrap();
    assert!(
        util::wait_until(10, || metrics(&rt).stream_backpressure >= 1),
        "the server never hit back-pressure: {:?}",
        metrics(&rt)
    );
    // Whatever the moment of this reading, the server can have taken only the requests whose
    // replies fit in the client's receive buffer, the server's send buffer and the
    // connection's output (plus one partly written reply), doubled for the kernel's
    // accounting slack.
    let bound = 2 * ((client_rcvbuf + server_sndbuf + limits.max_output) / (4 + BIG) + 2) as u64;
    assert!(bound < u64::from(R) / 4, "buffers too large for the proof");
    let taken = delivered.load(SeqCst);
    assert!(
        taken <= bound,
        "the server kept reading while the client did not: {taken} requests taken, bound {bound}"
    );

    for i in 0..R {
        let reply = read_frame(&mut c).expect("a reply per request");
        check_big(i, &reply);
        // Still bounded while the client reads: at most the buffered replies ahead.
        assert!(delivered.load(SeqCst) <= u64::from(i) + 1 + bound);
    }
    assert_eq!(delivered.load(SeqCst), u64::from(R));
    c.shutdown(Shutdown::Write).unwrap();
    assert!(read_frame(&mut c).is_none(), "no reply beyond the requests");
    let m = rt.shutdown().unwrap().remove(0);
    assert!(m.stream_backpressure >= 1, "{m:?}");
    assert_eq!((m.connections_reset, m.frames_oversize), (0, 0), "{m:?}");
}

/// The client sends its requests and shuts down its writing side at once, before reading
/// anything: the server still answers every request (its replies need many writable events to
/// drain), and only then closes.
#[test]
fn half_close_gets_every_reply_then_eof() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_frame: BIG,
        max_output: 2 * (4 + BIG),
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), big_replies(delivered.clone()));
    let mut c = connect(addr);
    const R: u32 = 300; // 4.8 MB of replies
    c.write_all(&requests(R)).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    for i in 0..R {
        check_big(
            i,
            &read_frame(&mut c).expect("every reply after the half-close"),
        );
    }
    assert!(read_frame(&mut c).is_none(), "EOF after the last reply");
    assert_eq!(delivered.load(SeqCst), u64::from(R));
    assert!(
        util::wait_until(10, || metrics(&rt).handles == 1),
        "connection not closed"
    );
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!((m.connections_reset, m.frames_oversize), (0, 0), "{m:?}");
}

/// Sets `SO_LINGER` to 0, so dropping the stream resets the connection (RST).
fn reset(c: TcpStream) {
    setsockopt(
        &c,
        sockopt::Linger,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    )
    .unwrap();
    drop(c);
}

/// Two clients reset their connection mid-stream — one inside a frame, one while the server's
/// replies to it are blocked (back-pressure) — and each reset is counted; a third connection
/// is served before, between and after.
#[test]
fn reset_is_counted_and_other_connections_keep_being_served() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_frame: BIG,
        max_output: 2 * (4 + BIG),
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), big_replies(delivered.clone()));
    let mut other = connect(addr);
    let mut ping = |i: u32| {
        other.write_all(&frame(&i.to_be_bytes())).unwrap();
        check_big(
            i,
            &read_frame(&mut other).expect("the other connection is served"),
        );
    };
    ping(0);

    // Inside a frame: a whole request, its reply read, then half a request and a reset.
    let mut a = connect(addr);
    a.write_all(&frame(&7u32.to_be_bytes())).unwrap();
    check_big(7, &read_frame(&mut a).unwrap());
    a.write_all(&[0, 0, 0, 4, 1]).unwrap();
    reset(a);
    assert!(
        util::wait_until(10, || metrics(&rt).connections_reset == 1),
        "{:?}",
        metrics(&rt)
    );
    ping(1);

    // While back-pressured: many requests, no reads, then a reset.
    let before = metrics(&rt).stream_backpressure;
    let mut b = connect(addr);
    // A small, fixed receive buffer: the replies overrun it whatever the kernel's maximum.
    setsockopt(&b, sockopt::RcvBuf, &(64 * 1024)).unwrap();
    b.write_all(&requests(1000)).unwrap();
    assert!(
        util::wait_until(10, || metrics(&rt).stream_backpressure > before),
        "{before} {} {:?}",
        delivered.load(SeqCst),
        metrics(&rt)
    );
    reset(b);
    assert!(
        util::wait_until(10, || metrics(&rt).connections_reset == 2),
        "{:?}",
        metrics(&rt)
    );
    ping(2);
    assert!(
        util::wait_until(10, || metrics(&rt).handles == 2),
        "reset connections not closed"
    );
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!(m.connections_reset, 2, "{m:?}");
    assert_eq!((m.handler_panics, m.frames_oversize), (0, 0), "{m:?}");
}

/// A frame whose header announces more than `max_frame` closes its connection and is counted;
/// the frame before it was answered; it is never delivered.
#[test]
fn oversize_frame_closes_the_connection_and_is_counted() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_frame: 1024,
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), echo(delivered.clone()));
    let mut c = connect(addr);
    c.write_all(&frame(b"fine")).unwrap();
    assert_eq!(read_frame(&mut c).unwrap(), b"fine");
    let mut big = frame(&[9u8; 1025]);
    big.truncate(100); // the header alone decides
    c.write_all(&big).unwrap();
    assert_closed(&mut c);
    assert!(util::wait_until(10, || metrics(&rt).frames_oversize == 1));
    assert_eq!(
        delivered.load(SeqCst),
        1,
        "the oversized frame was delivered"
    );
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!((m.frames_oversize, m.connections_reset), (1, 0), "{m:?}");
}

/// With every slot of the connection table in use, one more connection is closed unserved and
/// counted in `connections_refused`; a slot freed by a closed connection serves the next one.
#[test]
fn full_table_refuses_and_counts_then_reuses_freed_slots() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), echo(delivered.clone()));
    let served = |c: &mut TcpStream, msg: &[u8]| {
        c.write_all(&frame(msg)).unwrap();
        assert_eq!(read_frame(c).expect("served"), msg);
    };
    let mut a = connect(addr);
    let mut b = connect(addr);
    served(&mut a, b"a");
    served(&mut b, b"b");
    let mut c = connect(addr);
    assert_closed(&mut c);
    assert!(util::wait_until(10, || metrics(&rt).connections_refused == 1));

    a.shutdown(Shutdown::Write).unwrap();
    assert!(read_frame(&mut a).is_none());
    // The listener and `b`: `a`'s handle is gone, and its slot with it.
    assert!(util::wait_until(10, || metrics(&rt).handles == 2));
    let mut d = connect(addr);
    served(&mut d, b"d");
    served(&mut b, b"b again");
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!(m.connections_refused, 1, "{m:?}");
    assert_eq!(delivered.load(SeqCst), 4);
}

/// `frame(a) frame(b) header(len > max_frame)` in one write: a and b are answered before the
/// connection closes, and the oversized frame is counted.
#[test]
fn replies_to_frames_before_an_oversize_header_are_sent() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        max_frame: 1024,
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), echo(delivered.clone()));
    let mut c = connect(addr);
    let mut wire = frame(b"a");
    wire.extend_from_slice(&frame(b"b"));
    wire.extend_from_slice(&1025u32.to_be_bytes());
    c.write_all(&wire).unwrap();
    assert_eq!(read_frame(&mut c).as_deref(), Some(&b"a"[..]));
    assert_eq!(read_frame(&mut c).as_deref(), Some(&b"b"[..]));
    assert_closed(&mut c);
    assert!(util::wait_until(10, || metrics(&rt).frames_oversize == 1));
    assert_eq!(delivered.load(SeqCst), 2);
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!((m.frames_oversize, m.connections_reset), (1, 0), "{m:?}");
}

/// A handler that asks for a reply body and does not fill it sends zeros, never bytes left in
/// the slot by an earlier connection (one slot, so the second connection reuses it).
#[test]
fn an_unfilled_reply_sends_zeros_not_a_previous_connections_bytes() {
    let _l = util::rt_lock();
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let handler = |frame: &[u8], out: &mut Output<'_>| {
        let body = out.frame(64).unwrap();
        if frame == b"fill" {
            body.fill(0xAA);
        }
        Flow::Continue
    };
    let (mut rt, addr) = serve(limits, listener(), handler);
    let mut a = connect(addr);
    a.write_all(&frame(b"fill")).unwrap();
    assert_eq!(read_frame(&mut a).unwrap(), vec![0xAA; 64]);
    a.shutdown(Shutdown::Write).unwrap();
    assert!(read_frame(&mut a).is_none());
    assert!(util::wait_until(10, || metrics(&rt).handles == 1));
    let mut b = connect(addr);
    b.write_all(&frame(b"hole")).unwrap();
    assert_eq!(read_frame(&mut b).unwrap(), vec![0; 64]);
    rt.shutdown().unwrap();
}

/// After `Flow::Close`, input that arrives after the server's last read must not make it
/// answer with a reset that discards the replies still queued: the client, which reads slowly
/// (a small receive buffer), gets the whole reply and then a clean end of stream.
#[test]
fn input_after_a_handler_close_does_not_reset_away_the_reply() {
    let _l = util::rt_lock();
    const REPLY: usize = 60 * 1024;
    let handler = |_: &[u8], out: &mut Output<'_>| {
        let body = out.frame(REPLY).unwrap();
        for (i, b) in body.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        Flow::Close
    };
    let limits = Limits {
        max_frame: REPLY,
        max_output: 2 * REPLY,
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), handler);
    let mut c = connect(addr);
    setsockopt(&c, sockopt::RcvBuf, &4096).unwrap();
    c.write_all(&frame(b"bye")).unwrap();
    let mut header = [0u8; 4];
    c.read_exact(&mut header).unwrap();
    assert_eq!(u32::from_be_bytes(header) as usize, REPLY);
    // Input after the last read: unread when the server closes.
    c.write_all(&[7u8; 1024]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut body = vec![0u8; REPLY];
    c.read_exact(&mut body)
        .expect("the whole reply, not a reset");
    assert!(body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    let mut rest = [0u8; 16];
    assert_eq!(c.read(&mut rest).unwrap(), 0, "a clean end of stream");
    drop(c);
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!(m.connections_reset, 0, "{m:?}");
}

/// A peer that connects and sends nothing is closed after `idle_timeout` and counted; so is
/// one that stops in the middle of a frame.
#[test]
fn an_idle_connection_is_closed_and_counted() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        idle_timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), echo(delivered.clone()));
    let mut silent = connect(addr);
    let mut partial = connect(addr);
    partial.write_all(&frame(b"hello")[..6]).unwrap();
    assert_closed(&mut silent);
    assert_closed(&mut partial);
    assert!(util::wait_until(10, || metrics(&rt).stream_idle_timeouts == 2));
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!(
        (
            m.stream_idle_timeouts,
            m.stream_write_timeouts,
            m.connections_reset
        ),
        (2, 0, 0),
        "{m:?}"
    );
    assert_eq!(delivered.load(SeqCst), 0);
}

/// A peer that sends requests but never reads the replies is closed after `write_timeout`
/// once its output stops moving, and counted; the listener keeps serving others.
#[test]
fn a_peer_that_stops_reading_is_closed_after_the_write_timeout() {
    let _l = util::rt_lock();
    let delivered = Arc::new(AtomicU64::new(0));
    let limits = Limits {
        write_timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let (mut rt, addr) = serve(limits, listener(), big_replies(delivered.clone()));
    let c = connect(addr);
    setsockopt(&c, sockopt::RcvBuf, &4096).unwrap();
    let mut w = c.try_clone().unwrap();
    w.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    // Far more replies than the socket buffers hold; the write fails once the server closes.
    let _ = w.write_all(&requests(2000));
    let ok = util::wait_until(10, || metrics(&rt).stream_write_timeouts == 1);
    assert!(
        ok,
        "{:?} delivered {}",
        metrics(&rt),
        delivered.load(SeqCst)
    );
    let mut other = connect(addr);
    other.write_all(&frame(&7u32.to_be_bytes())).unwrap();
    check_big(7, &read_frame(&mut other).unwrap());
    let m = rt.shutdown().unwrap().remove(0);
    assert_eq!(
        (m.stream_write_timeouts, m.stream_idle_timeouts),
        (1, 0),
        "{m:?}"
    );
}
