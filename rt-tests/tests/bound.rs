//! Bound handle/thread associations over one multiplexed TCP connection (issue #7).
//!
//! The back-end is an in-test thread on loopback speaking the frame format. Every check is
//! deterministic: deadlines and `wait_until` bounds are liveness limits (seconds), never timing
//! assertions. The pool tests use no SCHED_FIFO; the tests of bound lanes inside the runtime
//! (the last section) do, under `util::rt_lock` and `util::rt_allowed`.

mod util;

#[global_allocator]
static A: lfrt::CountingAlloc = lfrt::CountingAlloc;

use lfrt::bound::{
    decode_header, encode_header, BoundConfig, BoundError, BoundPool, Promotion, Waiter, HEADER_LEN,
};
use lfrt::{Context, Disposition, Event, EventHandler};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const REQUESTS: u32 = 10_000;
/// Requests a thread makes before its allocation baseline is taken.
const WARMUP: u32 = 100;
/// Liveness bound for any single reply (the test fails, it does not hang).
const LIVENESS: Duration = Duration::from_secs(20);

/// A connected pair: (pool side, back-end side).
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn read_frame(r: &mut impl Read) -> Option<(u64, Vec<u8>)> {
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h).ok()?;
    let (id, len) = decode_header(&h);
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).ok()?;
    Some((id, body))
}

fn write_frame(w: &mut impl Write, id: u64, body: &[u8]) {
    w.write_all(&encode_header(id, body.len() as u32)).unwrap();
    w.write_all(body).unwrap();
}

fn deadline() -> Option<Instant> {
    Some(Instant::now() + LIVENESS)
}

/// Request body: thread (u32), sequence (u32), payload (u64).
fn request(thread: u32, seq: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&thread.to_le_bytes());
    b[4..8].copy_from_slice(&seq.to_le_bytes());
    b[8..].copy_from_slice(&payload(thread, seq).to_le_bytes());
    b
}

fn payload(thread: u32, seq: u32) -> u64 {
    (u64::from(thread) << 40 | u64::from(seq)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The back-end's answer to a request body: thread and sequence copied, payload transformed,
/// and `seq % 7` filler bytes so reply lengths vary.
fn answer(req: &[u8]) -> Vec<u8> {
    let mut r = req[..8].to_vec();
    let p = u64::from_le_bytes(req[8..16].try_into().unwrap());
    r.extend_from_slice(&(!p).to_le_bytes());
    let seq = u32::from_le_bytes(req[4..8].try_into().unwrap());
    r.extend(std::iter::repeat_n(0xa5, (seq % 7) as usize));
    r
}

fn reply_ok(reply: &[u8], thread: u32, seq: u32) -> bool {
    reply.len() == 16 + (seq % 7) as usize
        && reply[..4] == thread.to_le_bytes()
        && reply[4..8] == seq.to_le_bytes()
        && reply[8..16] == (!payload(thread, seq)).to_le_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Order {
    Arrival,
    Reverse,
    Random,
}

/// What the back-end added beyond the real replies.
#[derive(Debug, Default)]
struct Injected {
    unknown: u64,
    duplicates: u64,
}

/// Answers in batches of exactly one request per still-active thread (each thread has one
/// request in flight), so the reordering is deterministic: the whole batch in `order`. Every
/// 50th batch also carries a frame with an id the pool never issued and a duplicate of the
/// batch's first reply.
fn backend(s: TcpStream, threads: usize, per_thread: u32, order: Order) -> Injected {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = BufWriter::new(s);
    let mut active = threads;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut batches = 0u64;
    let mut inj = Injected::default();
    let mut batch = Vec::new();
    while active > 0 {
        while batch.len() < active {
            batch.push(read_frame(&mut r).expect("request frame"));
        }
        match order {
            Order::Arrival => {}
            Order::Reverse => batch.reverse(),
            Order::Random => {
                for i in (1..batch.len()).rev() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    batch.swap(i, (rng % (i as u64 + 1)) as usize);
                }
            }
        }
        batches += 1;
        let first = batch[0].0;
        for (id, body) in batch.drain(..) {
            write_frame(&mut w, id, &answer(&body));
            if u32::from_le_bytes(body[4..8].try_into().unwrap()) == per_thread - 1 {
                active -= 1;
            }
        }
        if batches.is_multiple_of(50) {
            // slot 0xffff does not exist in a pool of fewer waiters: unknown
            write_frame(&mut w, 1 << 16 | 0xffff, b"bogus");
            inj.unknown += 1;
            write_frame(&mut w, first, b"duplicate");
            inj.duplicates += 1;
        }
        w.flush().unwrap();
    }
    inj
}

/// One client thread: `REQUESTS` calls; returns (correct replies, wrong replies, allocations
/// after warm-up).
fn client(pool: &BoundPool, thread: u32) -> (u32, u32, u64) {
    let mut w = pool.waiter().unwrap();
    let (mut ok, mut bad) = (0, 0);
    let mut base = 0;
    for seq in 0..REQUESTS {
        if seq == WARMUP {
            base = lfrt::thread_allocations();
        }
        let req = request(thread, seq);
        let reply = pool
            .call(&mut w, &req, deadline())
            .unwrap_or_else(|e| panic!("thread {thread} request {seq}: {e}"));
        if reply_ok(&reply, thread, seq) {
            ok += 1;
        } else {
            bad += 1;
        }
    }
    (ok, bad, lfrt::thread_allocations() - base)
}

fn run_many(order: Order, promotion: Promotion) {
    assert!(lfrt::counting_alloc_active());
    let (a, b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 16,
            max_body: 64,
            promotion,
            max_handles: 0,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let be = std::thread::spawn(move || backend(b, THREADS, REQUESTS, order));
    let hs: Vec<_> = (0..THREADS as u32)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || client(&pool, t))
        })
        .collect();
    let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let inj = be.join().unwrap();
    let s = pool.stats();
    eprintln!("{order:?}/{promotion:?}: {s:?}, injected {inj:?}");
    for (t, &(ok, bad, allocs)) in results.iter().enumerate() {
        assert_eq!(
            (ok, bad),
            (REQUESTS, 0),
            "thread {t} did not get exactly its own replies"
        );
        assert_eq!(
            allocs, 0,
            "thread {t} allocated on the request path after warm-up"
        );
    }
    assert_eq!(s.replies, THREADS as u64 * u64::from(REQUESTS));
    assert_eq!(s.own + s.handoffs, s.replies);
    assert_eq!(
        s.unknown, inj.unknown,
        "frames with never-issued ids are counted and dropped"
    );
    assert_eq!(
        s.late, inj.duplicates,
        "duplicate replies are counted and dropped"
    );
    assert_eq!(s.timeouts, 0);
}

// One pool, one back-end thread: configuration, a call, misuse, timeouts, body sizes and
// shutdown.

#[test]
fn config_is_validated() {
    let (a, _b) = pair();
    let bad = BoundConfig {
        max_waiters: 0,
        ..BoundConfig::default()
    };
    assert!(matches!(
        BoundPool::new(a.try_clone().unwrap(), bad),
        Err(lfrt::Error::Config { .. })
    ));
    let bad = BoundConfig {
        max_body: lfrt::bound::MAX_BODY + 1,
        ..BoundConfig::default()
    };
    assert!(matches!(
        BoundPool::new(a.try_clone().unwrap(), bad),
        Err(lfrt::Error::Config { .. })
    ));
    let bad = BoundConfig {
        max_nesting: 0,
        ..BoundConfig::default()
    };
    assert!(matches!(
        BoundPool::new(a, bad),
        Err(lfrt::Error::Config { .. })
    ));
}

#[test]
fn single_call_round_trip_and_misuse() {
    let (a, mut b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 2,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let srv = std::thread::spawn(move || {
        let (id, body) = read_frame(&mut b).unwrap();
        let mut r = body.clone();
        r.reverse();
        write_frame(&mut b, id, &r);
        b
    });
    let mut w = pool.waiter().unwrap();
    assert_eq!(
        pool.join(&mut w, deadline()).unwrap_err(),
        BoundError::NotExpecting
    );
    assert_eq!(&*pool.call(&mut w, b"abc", deadline()).unwrap(), b"cba");
    let _b = srv.join().unwrap();
    // waiter of another pool
    let (c, _d) = pair();
    let other = BoundPool::new(c, BoundConfig::default()).unwrap();
    assert_eq!(other.expecting_response(&mut w), Err(BoundError::WrongPool));
    // slots run out
    let _w2 = pool.waiter().unwrap();
    assert_eq!(pool.waiter().unwrap_err(), BoundError::NoWaiter);
    let s = pool.stats();
    assert_eq!((s.replies, s.own), (1, 1));
}

#[test]
fn timeout_then_late_reply_is_dropped() {
    let (a, mut b) = pair();
    let pool = BoundPool::new(a, BoundConfig::default()).unwrap();
    let mut w = pool.waiter().unwrap();
    let id = pool.expecting_response(&mut w).unwrap();
    pool.send(id, b"x", None).unwrap();
    let (rid, _) = read_frame(&mut b).unwrap();
    assert_eq!(rid, id);
    let soon = Some(Instant::now() + Duration::from_millis(20));
    assert_eq!(pool.join(&mut w, soon).unwrap_err(), BoundError::Timeout);
    // the late reply arrives, then the reply to a new request: only the latter is returned
    write_frame(&mut b, id, b"late");
    let id2 = pool.expecting_response(&mut w).unwrap();
    pool.send(id2, b"y", None).unwrap();
    let (rid2, _) = read_frame(&mut b).unwrap();
    write_frame(&mut b, rid2, b"fresh");
    assert_eq!(&*pool.join(&mut w, deadline()).unwrap(), b"fresh");
    let s = pool.stats();
    assert_eq!((s.late, s.timeouts, s.replies), (1, 1, 1));
}

#[test]
fn reply_body_may_be_exactly_max_body_and_empty() {
    let (a, mut b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_body: 100,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let mut w = pool.waiter().unwrap();
    for len in [100usize, 0, 1] {
        let id = pool.expecting_response(&mut w).unwrap();
        pool.send(id, b"", None).unwrap();
        let (rid, _) = read_frame(&mut b).unwrap();
        write_frame(&mut b, rid, &vec![len as u8; len]);
        assert_eq!(pool.join(&mut w, deadline()).unwrap().len(), len);
    }
}

#[test]
fn shutdown_wakes_a_waiting_thread() {
    let (a, _b) = pair();
    let pool = BoundPool::new(a, BoundConfig::default()).unwrap();
    let p2 = pool.clone();
    let t = std::thread::spawn(move || {
        let mut w = p2.waiter().unwrap();
        let id = p2.expecting_response(&mut w).unwrap();
        p2.send(id, b"never answered", None).unwrap();
        p2.join(&mut w, None).map(|r| r.len())
    });
    assert!(
        util::wait_until(20, || pool.snapshot().0),
        "the waiter never led"
    );
    pool.shutdown();
    assert_eq!(t.join().unwrap(), Err(BoundError::Shutdown));
    let mut w = pool.waiter().unwrap();
    assert_eq!(pool.expecting_response(&mut w), Err(BoundError::Shutdown));
    assert_eq!(pool.serve(&mut w, None), Ok(()));
}

#[test]
fn eight_threads_own_replies_arrival_order() {
    run_many(Order::Arrival, Promotion::Fifo);
}

#[test]
fn eight_threads_own_replies_reverse_order() {
    run_many(Order::Reverse, Promotion::Fifo);
}

#[test]
fn eight_threads_own_replies_random_order() {
    run_many(Order::Random, Promotion::Priority);
}

/// A leader reads the reply of a follower first: it is handed off (specific notification), and
/// the leader returns with its own reply afterwards.
#[test]
fn leader_hands_a_reply_to_its_follower() {
    let (a, b) = pair();
    let pool = BoundPool::new(a, BoundConfig::default()).unwrap();
    let (p1, p2) = (pool.clone(), pool.clone());
    let ta = std::thread::spawn(move || {
        let mut w = p1.waiter().unwrap();
        let r = p1.call(&mut w, b"A", deadline()).unwrap();
        r.to_vec()
    });
    // A leads before B exists: B can only follow.
    assert!(util::wait_until(10, || pool.snapshot().0), "A never led");
    let tb = std::thread::spawn(move || {
        let mut w = p2.waiter().unwrap();
        let r = p2.call(&mut w, b"B", deadline()).unwrap();
        r.to_vec()
    });
    let mut r = BufReader::new(b.try_clone().unwrap());
    let (id1, body1) = read_frame(&mut r).unwrap();
    let (id2, _) = read_frame(&mut r).unwrap();
    let (ida, idb) = if body1 == b"A" {
        (id1, id2)
    } else {
        (id2, id1)
    };
    let mut w = BufWriter::new(b);
    write_frame(&mut w, idb, b"for B");
    write_frame(&mut w, ida, b"for A");
    w.flush().unwrap();
    assert_eq!(tb.join().unwrap(), b"for B");
    assert_eq!(ta.join().unwrap(), b"for A");
    let s = pool.stats();
    assert_eq!((s.handoffs, s.own, s.replies), (1, 1, 2), "{s:?}");
}

/// Starts `n` threads that each make one call the back-end holds back; returns once all of
/// them wait in `join` (one leads, the others are parked).
fn all_threads_waiting(
    pool: &BoundPool,
    n: usize,
) -> Vec<std::thread::JoinHandle<Result<Vec<u8>, BoundError>>> {
    let hs: Vec<_> = (0..n as u32)
        .map(|t| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut w = pool.waiter().unwrap();
                pool.call(&mut w, &request(t, 0), deadline())
                    .map(|r| r.to_vec())
            })
        })
        .collect();
    assert!(
        util::wait_until(10, || pool.snapshot() == (true, n - 1, 0)),
        "threads did not all wait: {:?}",
        pool.snapshot()
    );
    hs
}

/// Every thread waits for a reply the back-end holds back until a client got answers to all its
/// requests, which only the waiting threads can serve: they must serve them (hybrid), or this
/// deadlocks (and fails at the liveness bound).
#[test]
fn every_thread_waiting_still_serves_client_requests() {
    const CLIENT_REQUESTS: usize = 200;
    let (a, b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 16,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = udp.local_addr().unwrap();
    pool.registry()
        .register(Box::new(lfrt::handlers::UdpEcho::new(udp, 0).unwrap()))
        .unwrap();

    let (go_tx, go_rx) = mpsc::channel::<()>();
    let be = std::thread::spawn(move || {
        let mut r = BufReader::new(b.try_clone().unwrap());
        let reqs: Vec<_> = (0..THREADS).map(|_| read_frame(&mut r).unwrap()).collect();
        go_rx.recv().unwrap(); // hold every reply until the clients were served
        let mut w = BufWriter::new(b);
        for (id, body) in reqs {
            write_frame(&mut w, id, &answer(&body));
        }
        w.flush().unwrap();
    });
    let hs = all_threads_waiting(&pool, THREADS);

    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(LIVENESS)).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..CLIENT_REQUESTS as u32 {
        client.send_to(&i.to_le_bytes(), addr).unwrap();
        let (n, _) = client
            .recv_from(&mut buf)
            .expect("client request not served while every thread waits");
        assert_eq!(&buf[..n], &i.to_le_bytes());
    }
    go_tx.send(()).unwrap();
    for (t, h) in hs.into_iter().enumerate() {
        let reply = h.join().unwrap().unwrap();
        assert!(reply_ok(&reply, t as u32, 0), "thread {t}");
    }
    be.join().unwrap();
    let s = pool.stats();
    assert!(
        s.inline >= 1,
        "client requests must have been served inline by waiting threads: {s:?}"
    );
    assert_eq!(s.replies, THREADS as u64);
}

/// A client-facing handler that forwards each datagram to the back-end (its own waiter) and
/// answers the client with the back-end's reply: a bound call made from an unbound handler.
struct Forward {
    sock: UdpSocket,
    pool: BoundPool,
    waiter: Waiter,
    /// Calls made, and allocations counted around calls after the first `WARMUP`.
    calls: u32,
    allocs: Arc<AtomicU64>,
}

impl Forward {
    fn new(sock: UdpSocket, pool: &BoundPool, allocs: &Arc<AtomicU64>) -> Forward {
        Forward {
            sock,
            pool: pool.clone(),
            waiter: pool.waiter().unwrap(),
            calls: 0,
            allocs: allocs.clone(),
        }
    }
}

impl EventHandler for Forward {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _ev: &Event, ctx: &mut Context) -> Disposition {
        let buf = ctx.buffer();
        while let Ok((n, from)) = self.sock.recv_from(buf) {
            let before = lfrt::thread_allocations();
            match self.pool.call(&mut self.waiter, &buf[..n], deadline()) {
                Ok(reply) => {
                    let _ = self.sock.send_to(&reply, from);
                }
                Err(_) => {
                    let _ = self.sock.send_to(b"error", from);
                }
            }
            // The call includes whatever this thread did while it waited: leading, handing off
            // replies, running other handlers inline.
            self.calls += 1;
            if self.calls > WARMUP / 10 {
                self.allocs
                    .fetch_add(lfrt::thread_allocations() - before, Relaxed);
            }
        }
        Disposition::Rearm
    }
}

/// As above, but serving a client request itself needs the back-end (nested bound call inside
/// an inline handler). The back-end answers the nested calls at once and holds the outer ones.
#[test]
fn waiting_threads_serve_requests_that_call_the_back_end() {
    const CLIENT_REQUESTS: u32 = 100;
    let (a, b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 16,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_nonblocking(true).unwrap();
    let addr = sock.local_addr().unwrap();
    let allocs = Arc::new(AtomicU64::new(0));
    pool.registry()
        .register(Box::new(Forward::new(sock, &pool, &allocs)))
        .unwrap();

    let be = std::thread::spawn(move || {
        let mut r = BufReader::new(b.try_clone().unwrap());
        let mut w = b;
        let mut held = Vec::new();
        // outer requests are 16 bytes, nested ones 4; release the outer ones after the last
        // nested request
        let mut nested = 0;
        while nested < CLIENT_REQUESTS || held.len() < THREADS {
            let (id, body) = read_frame(&mut r).unwrap();
            if body.len() == 16 {
                held.push((id, body));
            } else {
                let mut rep = body.clone();
                rep.reverse();
                write_frame(&mut w, id, &rep);
                nested += 1;
            }
        }
        for (id, body) in held {
            write_frame(&mut w, id, &answer(&body));
        }
    });
    let hs = all_threads_waiting(&pool, THREADS);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(LIVENESS)).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..CLIENT_REQUESTS {
        client.send_to(&i.to_be_bytes(), addr).unwrap();
        let (n, _) = client
            .recv_from(&mut buf)
            .expect("client request not served while every thread waits");
        assert_eq!(
            &buf[..n],
            &i.to_le_bytes(),
            "the back-end's reply to this very request"
        );
    }
    for (t, h) in hs.into_iter().enumerate() {
        assert!(
            reply_ok(&h.join().unwrap().unwrap(), t as u32, 0),
            "thread {t}"
        );
    }
    be.join().unwrap();
    let s = pool.stats();
    assert_eq!(
        s.replies,
        THREADS as u64 + u64::from(CLIENT_REQUESTS),
        "{s:?}"
    );
    assert_eq!(
        allocs.load(Relaxed),
        0,
        "allocations on the nested call path after warm-up"
    );
    pool.close(); // drops the handler (and its waiter and pool clone)
}

/// Threads with nothing to wait for `serve` the pool: they read the connection, hand off
/// replies and run handlers that call the back-end (the OLTP front-end's shape).
#[test]
fn serving_threads_forward_client_requests() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: u32 = 500;
    let (a, b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 16,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let allocs = Arc::new(AtomicU64::new(0));
    let mut addrs = Vec::new();
    for _ in 0..CLIENTS {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_nonblocking(true).unwrap();
        addrs.push(sock.local_addr().unwrap());
        pool.registry()
            .register(Box::new(Forward::new(sock, &pool, &allocs)))
            .unwrap();
    }
    let be = std::thread::spawn(move || {
        let mut r = BufReader::new(b.try_clone().unwrap());
        let mut w = b;
        while let Some((id, mut body)) = read_frame(&mut r) {
            body.reverse();
            write_frame(&mut w, id, &body);
        }
    });
    let servers: Vec<_> = (0..3)
        .map(|_| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut w = pool.waiter().unwrap();
                pool.serve(&mut w, None)
            })
        })
        .collect();
    let clients: Vec<_> = addrs
        .into_iter()
        .map(|addr| {
            std::thread::spawn(move || {
                let c = UdpSocket::bind("127.0.0.1:0").unwrap();
                c.set_read_timeout(Some(LIVENESS)).unwrap();
                let mut buf = [0u8; 16];
                for i in 0..PER_CLIENT {
                    c.send_to(&i.to_be_bytes(), addr).unwrap();
                    let (n, _) = c.recv_from(&mut buf).expect("reply");
                    assert_eq!(&buf[..n], &i.to_le_bytes());
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    pool.shutdown();
    for s in servers {
        assert_eq!(s.join().unwrap(), Ok(()));
    }
    be.join().unwrap();
    assert_eq!(pool.stats().replies, CLIENTS as u64 * u64::from(PER_CLIENT));
    assert_eq!(
        allocs.load(Relaxed),
        0,
        "allocations on the serve/call path after warm-up"
    );
    pool.close();
}

/// The back-end does something to the connection after reading every thread's request; every
/// waiter must wake with `expect`.
fn every_waiter_fails(make: impl FnOnce(TcpStream) + Send + 'static, expect: BoundError) {
    let (a, b) = pair();
    let pool = BoundPool::new(
        a,
        BoundConfig {
            max_waiters: 16,
            max_body: 64,
            ..BoundConfig::default()
        },
    )
    .unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let be = std::thread::spawn(move || {
        let mut r = BufReader::new(b.try_clone().unwrap());
        for _ in 0..THREADS {
            read_frame(&mut r).unwrap();
        }
        go_rx.recv().unwrap();
        make(b);
    });
    let hs = all_threads_waiting(&pool, THREADS);
    go_tx.send(()).unwrap();
    be.join().unwrap();
    for h in hs {
        assert_eq!(h.join().unwrap(), Err(expect));
    }
    assert_eq!(pool.failure(), Some(expect));
    let mut w = pool.waiter().unwrap();
    assert_eq!(
        pool.expecting_response(&mut w),
        Err(expect),
        "later calls fail at once"
    );
}

#[test]
fn dropped_connection_wakes_every_waiter() {
    every_waiter_fails(drop, BoundError::Closed);
}

#[test]
fn truncated_header_is_rejected() {
    every_waiter_fails(
        |mut b| {
            b.write_all(&encode_header(1 << 16, 4)[..7]).unwrap();
        },
        BoundError::Truncated { have: 7 },
    );
}

#[test]
fn truncated_body_is_rejected() {
    every_waiter_fails(
        |mut b| {
            b.write_all(&encode_header(1 << 16, 10)).unwrap();
            b.write_all(b"abc").unwrap();
        },
        BoundError::Truncated {
            have: HEADER_LEN + 3,
        },
    );
}

/// An oversized length closes the connection from the pool's side: the back-end reads EOF.
fn oversized(len: u32) {
    let (tx, rx) = mpsc::channel();
    every_waiter_fails(
        move |mut b| {
            b.write_all(&encode_header(1 << 16, len)).unwrap();
            let mut x = [0u8; 1];
            tx.send(b.read(&mut x).map(|n| n == 0).unwrap_or(true))
                .unwrap();
        },
        BoundError::Oversized { len, max: 64 },
    );
    assert!(rx.recv().unwrap(), "the pool closed the connection");
}

#[test]
fn oversized_frame_is_rejected() {
    oversized(65);
}

#[test]
fn absurd_length_is_rejected_without_allocation_or_overflow() {
    oversized(u32::MAX);
}

/// The reply that arrives after its waiter timed out is dropped (counted late), and the next
/// request on the same waiter gets its own reply. The back-end holds each first reply until the
/// second request arrives, so the timeout is certain.
#[test]
fn timeouts_do_not_confuse_later_replies() {
    const ROUNDS: u32 = 20;
    let (a, b) = pair();
    let pool = BoundPool::new(a, BoundConfig::default()).unwrap();
    let be = std::thread::spawn(move || {
        let mut r = BufReader::new(b.try_clone().unwrap());
        let mut w = b;
        for _ in 0..ROUNDS {
            let (id1, body1) = read_frame(&mut r).unwrap();
            let (id2, body2) = read_frame(&mut r).unwrap();
            write_frame(&mut w, id1, &body1); // late
            write_frame(&mut w, id2, &body2);
        }
    });
    let mut w = pool.waiter().unwrap();
    for round in 0..ROUNDS {
        let id = pool.expecting_response(&mut w).unwrap();
        pool.send(id, b"first", None).unwrap();
        let soon = Some(Instant::now() + Duration::from_millis(2));
        assert_eq!(pool.join(&mut w, soon).unwrap_err(), BoundError::Timeout);
        let second = round.to_le_bytes();
        assert_eq!(&*pool.call(&mut w, &second, deadline()).unwrap(), &second);
    }
    be.join().unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.timeouts, s.late, s.replies),
        (u64::from(ROUNDS), u64::from(ROUNDS), u64::from(ROUNDS)),
        "{s:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Bound lanes inside the runtime (`LaneConfig::bound`, `[lane.bound]`).

/// A back-end on loopback for a runtime's bound lane: accepts one connection (within
/// `LIVENESS`), then answers every request frame with its body reversed until EOF and returns
/// how many frames it read. With `held`, it answers nothing and sends each request's id there.
fn loopback_backend(
    held: Option<mpsc::Sender<u64>>,
) -> (std::net::SocketAddr, std::thread::JoinHandle<u64>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let end = Instant::now() + LIVENESS;
        let s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => panic!("no connection from the bound lane: {e}"),
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(LIVENESS)).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let mut n = 0;
        while let Some((id, mut body)) = read_frame(&mut r) {
            n += 1;
            match &held {
                Some(tx) => {
                    let _ = tx.send(id);
                }
                None => {
                    body.reverse();
                    write_frame(&mut w, id, &body);
                }
            }
        }
        n
    });
    (addr, h)
}

/// A FIFO bound lane `front` connected to `addr`.
fn bound_lane(addr: std::net::SocketAddr, priority: u8, threads: usize) -> lfrt::LaneConfig {
    let mut g = lfrt::LaneConfig::new("front", lfrt::Policy::Fifo, priority);
    g.threads = threads;
    g.max_handles = 16;
    g.buffer_bytes = 256;
    g.bound = Some(lfrt::BoundLane {
        max_waiters: 16,
        max_body: 64,
        ..lfrt::BoundLane::new(addr)
    });
    g
}

/// Relays each datagram to the back-end through the bound pool and answers with the reply
/// (`error` if the call failed). Counts dispatches on the runtime's threads (`on_runtime`) and
/// on threads neither the runtime's nor `also` (`strangers`), and allocations around calls
/// after a warm-up.
struct Relay {
    sock: UdpSocket,
    pool: BoundPool,
    waiter: Waiter,
    /// The bound lane's index and its threads' tids, by thread index.
    lane: usize,
    runtime_threads: Vec<i32>,
    also: i32,
    on_runtime: Arc<AtomicU64>,
    strangers: Arc<AtomicU64>,
    /// Dispatches on a runtime thread whose `Context` names another lane or thread.
    misplaced: Arc<AtomicU64>,
    calls: u32,
    allocs: Arc<AtomicU64>,
}

impl EventHandler for Relay {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _ev: &Event, ctx: &mut Context) -> Disposition {
        let tid = lfrt::os::gettid();
        if self.runtime_threads.contains(&tid) {
            self.on_runtime.fetch_add(1, Relaxed);
            if ctx.lane() != self.lane || self.runtime_threads.get(ctx.thread_index()) != Some(&tid)
            {
                self.misplaced.fetch_add(1, Relaxed);
            }
        } else if tid != self.also {
            self.strangers.fetch_add(1, Relaxed);
        }
        let buf = ctx.buffer();
        while let Ok((n, from)) = self.sock.recv_from(buf) {
            let before = lfrt::thread_allocations();
            match self.pool.call(&mut self.waiter, &buf[..n], deadline()) {
                Ok(reply) => {
                    let _ = self.sock.send_to(&reply, from);
                }
                Err(_) => {
                    let _ = self.sock.send_to(b"error", from);
                }
            }
            self.calls += 1;
            if self.calls > WARMUP / 10 {
                self.allocs
                    .fetch_add(lfrt::thread_allocations() - before, Relaxed);
            }
        }
        Disposition::Rearm
    }
}

/// Dispatch counts of the `Relay`s: on the runtime's threads, elsewhere, allocations.
#[derive(Default)]
struct RelayCounts {
    on_runtime: Arc<AtomicU64>,
    strangers: Arc<AtomicU64>,
    misplaced: Arc<AtomicU64>,
    allocs: Arc<AtomicU64>,
}

/// Registers one `Relay` per UDP socket on the lane `front` of a started runtime (`also`: a
/// thread besides the runtime's that may run them: a caller of the pool, whose `join` runs
/// the lane's handlers inline while it leads); returns the sockets' addresses.
fn relays(
    rt: &lfrt::Runtime,
    n: usize,
    also: i32,
    counts: &RelayCounts,
) -> Vec<std::net::SocketAddr> {
    let pool = rt.lane("front").unwrap().bound_pool().unwrap();
    let lane = rt
        .config()
        .lanes
        .iter()
        .position(|g| g.name == "front")
        .unwrap();
    let runtime_threads: Vec<i32> = rt
        .thread_ids()
        .into_iter()
        .filter(|&(g, _, _)| g == lane)
        .map(|(_, _, t)| t)
        .collect();
    (0..n)
        .map(|_| {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            sock.set_nonblocking(true).unwrap();
            let addr = sock.local_addr().unwrap();
            rt.lane("front")
                .unwrap()
                .registry()
                .register(Box::new(Relay {
                    sock,
                    waiter: pool.waiter().unwrap(),
                    pool: pool.clone(),
                    lane,
                    runtime_threads: runtime_threads.clone(),
                    also,
                    misplaced: counts.misplaced.clone(),
                    on_runtime: counts.on_runtime.clone(),
                    strangers: counts.strangers.clone(),
                    calls: 0,
                    allocs: counts.allocs.clone(),
                }))
                .unwrap();
            addr
        })
        .collect()
}

/// The runtime spawns a bound lane's threads like any lane's: policy, per-thread priority
/// and affinity as configured, read back from the kernel; they all join the pool (one leads,
/// the other follows); shutdown from idle stops them and closes the connection.
#[test]
fn bound_lane_threads_run_at_their_policy_priority_and_cpus() {
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "bound_lane_threads_run_at_their_policy_priority_and_cpus",
        30,
    ) {
        return;
    }
    let last = *lfrt::os::available_cpus().last().unwrap();
    let (addr, be) = loopback_backend(None);
    let mut g = bound_lane(addr, 30, 2);
    g.thread_priorities = Some(vec![30, 25]);
    g.cpus = Some(vec![last]);
    let mut rt = util::runtime(lfrt::RtMode::Required, false, vec![g]);
    assert!(rt.start().unwrap().rt_applied);
    let ids = rt.thread_ids();
    assert_eq!(ids.len(), 2);
    for (_, t, tid) in ids {
        let want = lfrt::os::Sched::Fifo([30, 25][t]);
        assert_eq!(lfrt::os::read_back(tid).unwrap(), want, "thread {t}");
        assert_eq!(lfrt::os::affinity(tid).unwrap(), vec![last], "thread {t}");
        let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
        assert_eq!(name.trim(), format!("lf-front-{t}"));
    }
    assert!(
        util::wait_until(5, || {
            let m = &rt.metrics()[0];
            m.leader_present && m.followers == 1
        }),
        "both threads serve the pool: {:?}",
        rt.metrics()[0]
    );
    let m = rt.metrics();
    assert_eq!(m[0].kernel_sched, ["fifo 30", "fifo 25"]);
    assert_eq!(m[0].bound.map(|b| b.replies), Some(0));
    let m = rt.shutdown_within(Duration::from_secs(5)).unwrap();
    assert!(!m[0].leader_present && m[0].followers == 0, "{:?}", m[0]);
    assert_eq!(be.join().unwrap(), 0, "the connection closed, nothing sent");
}

/// Requests from clients reach handlers of the bound lane that run on the runtime's own
/// threads, and each is forwarded and answered exactly once; an outside thread calls the same
/// pool meanwhile. Counted on both ends: frames the back-end read, replies the pool delivered,
/// each client's replies in order (a lost or duplicated reply would break the sequence). The
/// bound lane is the runtime's second, after an idle unbound one: its handlers' `Context`
/// names it and their thread.
#[test]
fn requests_through_a_runtime_bound_lane_arrive_exactly_once() {
    const CLIENTS: usize = 4;
    const PER_CLIENT: u32 = 300;
    const OUTSIDE: u32 = 200;
    let _l = util::rt_lock();
    if !util::rt_allowed(
        "requests_through_a_runtime_bound_lane_arrive_exactly_once",
        20,
    ) {
        return;
    }
    let (addr, be) = loopback_backend(None);
    let mut idle = lfrt::LaneConfig::new("idle", lfrt::Policy::Fifo, 10);
    idle.threads = 1;
    let mut rt = util::runtime(
        lfrt::RtMode::Required,
        false,
        vec![idle, bound_lane(addr, 20, 3)],
    );
    rt.start().unwrap();
    let counts = RelayCounts::default();
    // The outside caller (this thread) may run the relays inline while it leads the pool.
    let addrs = relays(&rt, CLIENTS, lfrt::os::gettid(), &counts);
    let clients: Vec<_> = addrs
        .into_iter()
        .map(|addr| {
            std::thread::spawn(move || {
                let c = UdpSocket::bind("127.0.0.1:0").unwrap();
                c.set_read_timeout(Some(LIVENESS)).unwrap();
                let mut buf = [0u8; 16];
                for i in 0..PER_CLIENT {
                    c.send_to(&i.to_be_bytes(), addr).unwrap();
                    let (n, _) = c.recv_from(&mut buf).expect("reply");
                    assert_eq!(&buf[..n], &i.to_le_bytes(), "request {i}");
                }
            })
        })
        .collect();
    let pool = rt.lane("front").unwrap().bound_pool().unwrap();
    let mut w = pool.waiter().unwrap();
    for i in 0..OUTSIDE {
        let reply = pool.call(&mut w, &i.to_be_bytes(), deadline()).unwrap();
        assert_eq!(&*reply, &i.to_le_bytes());
    }
    for c in clients {
        c.join().unwrap();
    }
    drop(w);
    let m = rt.shutdown_within(Duration::from_secs(5)).unwrap();
    let total = CLIENTS as u64 * u64::from(PER_CLIENT) + u64::from(OUTSIDE);
    assert_eq!(be.join().unwrap(), total, "frames the back-end read");
    assert_eq!(m[0].bound, None, "the unbound lane");
    let m = &m[1];
    let s = m.bound.unwrap();
    assert_eq!((s.replies, s.late, s.unknown), (total, 0, 0), "{s:?}");
    assert_eq!(
        counts.strangers.load(Relaxed),
        0,
        "a handler ran on a thread neither the runtime's nor the caller's"
    );
    assert!(
        counts.on_runtime.load(Relaxed) > 0,
        "no handler ran on the runtime's threads"
    );
    assert_eq!(
        counts.misplaced.load(Relaxed),
        0,
        "a Context named another lane or thread"
    );
    assert!(m.dispatched > 0 && m.dispatched == s.dispatched, "{m:?}");
    assert_eq!(m.kernel_sched, ["fifo 20"; 3]);
    assert_eq!(
        counts.allocs.load(Relaxed),
        0,
        "allocations on the bound call path after warm-up"
    );
}

/// Shutdown while a runtime bound thread waits for a reply that never comes: the call fails
/// with `Shutdown` at once (the handler answers `error`), the threads return well within the
/// deadline, and the back-end sees the connection close.
#[test]
fn bound_lane_shuts_down_mid_request() {
    let _l = util::rt_lock();
    if !util::rt_allowed("bound_lane_shuts_down_mid_request", 20) {
        return;
    }
    let (held_tx, held) = mpsc::channel();
    let (addr, be) = loopback_backend(Some(held_tx));
    let mut rt = util::runtime(lfrt::RtMode::Required, false, vec![bound_lane(addr, 20, 2)]);
    rt.start().unwrap();
    let counts = RelayCounts::default();
    let to = relays(&rt, 1, 0, &counts)[0];
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(LIVENESS)).unwrap();
    c.send_to(b"never answered", to).unwrap();
    held.recv_timeout(LIVENESS)
        .expect("the request reached the back-end");
    // A runtime thread now waits in `join` (deadline LIVENESS): shutdown must not wait for it.
    let m = rt.shutdown_within(Duration::from_secs(5)).unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = c.recv_from(&mut buf).expect("the handler answered");
    assert_eq!(&buf[..n], b"error");
    assert_eq!(be.join().unwrap(), 1);
    let s = m[0].bound.unwrap();
    assert_eq!((s.replies, s.timeouts), (0, 0), "{s:?}");
    assert_eq!(counts.strangers.load(Relaxed), 0);
    assert_eq!(
        counts.on_runtime.load(Relaxed),
        1,
        "one dispatch, on a runtime thread"
    );
}

/// A bound lane whose back-end does not listen fails `Runtime::new`, naming the lane and
/// the address; nothing is started.
#[test]
fn bound_lane_without_a_back_end_is_an_error_naming_it() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // closed again: nothing listens there
    let err = lfrt::Runtime::new(lfrt::RuntimeConfig {
        lanes: vec![bound_lane(addr, 20, 1)],
        ..lfrt::RuntimeConfig::default()
    })
    .unwrap_err();
    assert!(matches!(err, lfrt::Error::Connect { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("lane `front`") && text.contains(&addr.to_string()),
        "{text}"
    );
}

fn toml_file(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-bound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const BOUND_TOML: &str = "[[lane]]\nname = \"front\"\npriority = 20\nthreads = 2\n\
    [lane.bound]\nconnect = \"127.0.0.1:7100\"\nmax_waiters = 8\nmax_body = 512\n";

/// `[lane.bound]` is read into `LaneConfig::bound` (defaults for what is left out, in the
/// table or inline), and every bad field is refused naming file, line and field: wrong values
/// of its own keys, unknown and missing keys, lane settings a bound pool cannot honour.
#[test]
fn toml_bound_lane_is_parsed_and_bad_fields_are_named() {
    let cfg = lfrt::parse_config(BOUND_TOML).unwrap();
    assert_eq!(
        cfg.lanes[0].bound,
        Some(lfrt::BoundLane {
            max_waiters: 8,
            max_body: 512,
            ..lfrt::BoundLane::new("127.0.0.1:7100".parse().unwrap())
        })
    );
    let inline =
        "[[lane]]\nname = \"front\"\npriority = 20\nbound = { connect = \"127.0.0.1:7100\" }\n";
    assert_eq!(
        lfrt::parse_config(inline).unwrap().lanes[0].bound,
        Some(lfrt::BoundLane::new("127.0.0.1:7100".parse().unwrap()))
    );
    assert_eq!(
        lfrt::parse_config("[[lane]]\nname = \"g\"\npriority = 20\n")
            .unwrap()
            .lanes[0]
            .bound,
        None
    );

    let head = "[[lane]]\nname = \"front\"\npriority = 20\nthreads = 2\n";
    let cases: &[(&str, &str, usize, &str, &str)] = &[
        // (file name, body after the lane's keys, line, field, part of the message)
        (
            "addr.toml",
            "[lane.bound]\nconnect = \"localhost\"\n",
            6,
            "lane[0].bound.connect",
            "not an address",
        ),
        (
            "wild.toml",
            "[lane.bound]\nconnect = \"0.0.0.0:7100\"\n",
            6,
            "lane[0].bound.connect",
            "no wildcard",
        ),
        (
            "port0.toml",
            "[lane.bound]\nconnect = \"127.0.0.1:0\"\n",
            6,
            "lane[0].bound.connect",
            "no port 0",
        ),
        (
            "missing.toml",
            "[lane.bound]\nmax_waiters = 8\n",
            5,
            "lane[0].bound.connect",
            "missing field",
        ),
        (
            "unknown.toml",
            "[lane.bound]\nconnect = \"127.0.0.1:7100\"\ncolour = 1\n",
            7,
            "lane[0].bound.colour",
            "unknown field",
        ),
        (
            "waiters.toml",
            "[lane.bound]\nconnect = \"127.0.0.1:7100\"\nmax_waiters = 1\n",
            7,
            "lane[0].bound.max_waiters",
            "for 2 threads",
        ),
        (
            "body.toml",
            "[lane.bound]\nconnect = \"127.0.0.1:7100\"\nmax_body = 0\n",
            7,
            "lane[0].bound.max_body",
            "not in 1..=",
        ),
        (
            "nesting.toml",
            "bound = { connect = \"127.0.0.1:7100\", max_nesting = 0 }\n",
            5,
            "lane[0].bound.max_nesting",
            "at least 1",
        ),
        (
            "type.toml",
            "bound = { connect = \"127.0.0.1:7100\", max_body = \"big\" }\n",
            5,
            "lane[0].bound.max_body",
            "invalid type",
        ),
        (
            "concurrent.toml",
            "promotion = \"concurrent\"\n[lane.bound]\nconnect = \"127.0.0.1:7100\"\n",
            5,
            "lane[0].promotion",
            "concurrent",
        ),
        (
            "budget.toml",
            "budget_us = 100\n[lane.bound]\nconnect = \"127.0.0.1:7100\"\n",
            5,
            "lane[0].budget_us",
            "watchdog",
        ),
    ];
    for &(name, body, line, field, what) in cases {
        let p = toml_file(name, &format!("{head}{body}"));
        match lfrt::load_config(&p) {
            Err(lfrt::Error::Config {
                file: Some(f),
                line: Some(l),
                field: fd,
                message,
            }) => {
                assert_eq!(
                    (f, l, fd.as_str()),
                    (p.clone(), line, field),
                    "{name}: {message}"
                );
                assert!(message.contains(what), "{name}: {message}");
            }
            other => panic!("{name}: expected a config error, got {other:?}"),
        }
    }
}

/// `lfrt check` refuses an invalid bound lane as `run` would (exit 2, file:line:field) and
/// accepts the shipped one, printing its bound settings in the plan without connecting.
#[test]
fn lfrt_check_validates_bound_lanes() {
    let lfrt = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt"));
        c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        c
    };
    let bad = toml_file(
        "check.toml",
        "[[lane]]\nname = \"front\"\npriority = 20\nthreads = 4\n[lane.bound]\nconnect = \"127.0.0.1:7100\"\nmax_waiters = 2\n",
    );
    for cmd in ["check", "run"] {
        let out = lfrt().arg(cmd).arg(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains(&format!("{}:7:", bad.display()))
                && err.contains("lane[0].bound.max_waiters"),
            "{cmd}: {err}"
        );
    }
    let out = lfrt()
        .args(["check", "configs/oltp-front.toml"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("bound connect=127.0.0.1:7100 max_waiters=64"),
        "{text}"
    );
}

/// Issue #20 defect 7: a standalone pool took `Promotion::Concurrent` silently, although its
/// threads share one connection that only the leader reads. Refused, naming the field, as a
/// bound lane's configuration is.
#[test]
fn a_standalone_pool_refuses_concurrent_promotion() {
    let (a, _b) = pair();
    let e = BoundPool::new(
        a,
        BoundConfig {
            promotion: Promotion::Concurrent,
            ..BoundConfig::default()
        },
    )
    .map(drop)
    .expect_err("concurrent promotion refused");
    let text = e.to_string();
    assert!(
        matches!(e, lfrt::Error::Config { .. })
            && text.contains("bound.promotion")
            && text.contains("concurrent"),
        "{text}"
    );
}

/// A handler that reports it runs, then sleeps 1 s (it returns by itself, so its detached
/// thread ends).
struct Sleeper {
    bell: lfrt::Notifier,
    running: Arc<std::sync::atomic::AtomicBool>,
}

impl EventHandler for Sleeper {
    fn source(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
    fn handle(&mut self, _ev: &Event, _ctx: &mut Context) -> Disposition {
        let _ = self.bell.take();
        self.running.store(true, Relaxed);
        std::thread::sleep(Duration::from_secs(1));
        Disposition::Rearm
    }
}

/// Issue #20 defect 7: a bound lane's handler still running at the shutdown deadline was not
/// named in `Error::Unfinished` (its threads did not stamp their dispatches); it is now, as a
/// Leader/Followers lane's is.
#[test]
fn shutdown_within_names_a_stuck_bound_lane_handler() {
    let _l = util::rt_lock();
    if !util::rt_allowed("shutdown_within_names_a_stuck_bound_lane_handler", 20) {
        return;
    }
    let (addr, _be) = loopback_backend(None);
    let mut rt = util::runtime(lfrt::RtMode::Required, false, vec![bound_lane(addr, 20, 1)]);
    let running = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bell = lfrt::Notifier::new().unwrap();
    let ring = bell.as_fd().try_clone_to_owned().unwrap();
    let token = rt
        .lane("front")
        .unwrap()
        .registry()
        .register(Box::new(Sleeper {
            bell,
            running: running.clone(),
        }))
        .unwrap();
    rt.start().unwrap();
    nix::unistd::write(&ring, &1u64.to_ne_bytes()).unwrap();
    assert!(util::wait_until(10, || running.load(Relaxed)));
    match rt.shutdown_within(Duration::from_millis(50)) {
        Err(lfrt::Error::Unfinished { handlers, .. }) => {
            let want = format!("lane `front` thread lf-front-0 handle {}", token.index());
            assert_eq!(handlers.len(), 1, "{handlers:?}");
            assert!(handlers[0].contains(&want), "{handlers:?}");
        }
        other => panic!("expected Unfinished naming the handler, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(1100));
}
