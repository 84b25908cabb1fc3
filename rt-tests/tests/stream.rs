//! Framed stream connections (`lfrt::stream`) through a real runtime on 127.0.0.1: framing,
//! back-pressure, half-close, reset, oversized frames and a full connection table. Every wait
//! is bounded; no assertion depends on timing.
//! Run one at a time: `cargo test --release --test stream -- --test-threads=1`.

mod util;

use lfrt::stream::{Flow, Framed, Limits, Output};
use lfrt::{GroupMetrics, Runtime};
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

fn metrics(rt: &Runtime) -> GroupMetrics {
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
