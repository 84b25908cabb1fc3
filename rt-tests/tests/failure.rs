//! Failure paths of the built-in handlers: exhaustion, overload and bad input never spin, never
//! starve other handles and never drop work without counting it; an exposed echo is warned of.
//! Every test runs on loopback, bounds its own time and load, and stops by itself.
//! Run one at a time: `cargo test --test failure -- --test-threads=1`.

mod util;

use lfrt::handlers::{TcpEcho, UdpEcho};
use lfrt::{LaneConfig, LaneMetrics, Policy, RtMode};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

/// The `lfrt` command, run from the repository root.
fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

fn tmp(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-failure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// A time-shared (SCHED_OTHER) lane of one thread: the behaviour under test does not depend
/// on the policy, and a defect that spins must not freeze the machine while it is shown.
fn one_thread_lane(name: &str) -> LaneConfig {
    let mut g = LaneConfig::new(name, Policy::Other, 0);
    g.threads = 1;
    g.buffer_bytes = 4096;
    g
}

/// Sends `msg` on `c` and reads its echo (at most 10 s: a liveness bound).
fn echo(c: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(msg).unwrap();
    let mut buf = vec![0u8; msg.len()];
    c.read_exact(&mut buf).expect("no echo within 10 s");
    buf
}

/// Descriptors `lfrt run` may open: about 10 go to the process itself (stdio, the lane's epoll
/// set and shutdown eventfd, the listener and its gate and retry timer, the JSON file), so about
/// 20 are left for connections.
const NOFILE: u32 = 32;
/// Connections opened at once: twice what the limit leaves room for.
const CONNECTIONS: usize = 2 * NOFILE as usize;

#[test]
fn a_listener_out_of_descriptors_pauses_counts_and_recovers() {
    let _l = util::rt_lock();
    let test = "a_listener_out_of_descriptors_pauses_counts_and_recovers";
    if !util::tools_installed(test, &["prlimit"]) {
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = tmp(
        "nofile.toml",
        &format!(
            "[[lane]]\nname = \"tcp\"\npriority = 0\npolicy = \"other\"\nthreads = 1\n\
             buffer_bytes = 4096\nmax_handles = 256\n\
             [[lane.handler]]\nkind = \"tcp-echo\"\nbind = \"127.0.0.1:{port}\"\n"
        ),
    );
    let json = conf.with_extension("json");
    let _ = std::fs::remove_file(&json);
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg(env!("CARGO_BIN_EXE_lfrt"))
        .arg("run")
        .arg(&conf)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = ("127.0.0.1", port);
    let mut first = None;
    assert!(
        util::wait_until(10, || {
            first = TcpStream::connect(addr).ok();
            first.is_some()
        }),
        "lfrt did not listen within 10 s"
    );
    let mut first = first.unwrap();
    assert_eq!(echo(&mut first, b"up"), b"up");

    // More connections than descriptors: the kernel completes every handshake into the listen
    // backlog, lfrt accepts until EMFILE and the rest stay queued, keeping the listener
    // readable. Hold that state: the defect dispatched the listener ~650,000 times a second.
    let mut held: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    // Free descriptors: lfrt closes its side of each closed connection, then accepts (and
    // closes) the queued ones, then the new one, which must be served.
    held.push(first);
    for c in held.drain(..) {
        c.shutdown(Shutdown::Both).unwrap();
    }
    let mut late = TcpStream::connect(addr).unwrap();
    assert_eq!(
        echo(&mut late, b"served again"),
        b"served again",
        "the listener did not recover"
    );
    drop(late);

    // SAFETY: kill with a valid pid and signal.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let m = &v["lanes"][0]["metrics"];
    let dispatched = m["dispatched"].as_u64().unwrap();
    let episodes = m["accept_exhausted"].as_u64().unwrap();
    // Connections and their closes take ~2 dispatches each, the paused listener 100 a second.
    assert!(
        dispatched < 5_000,
        "{dispatched} dispatches: the listener spun on EMFILE ({m})"
    );
    assert!(episodes >= 1, "no exhaustion counted: {m}\n{err}");
    let logged = err.matches("TCP listener cannot accept").count() as u64;
    assert!(
        (1..=episodes).contains(&logged),
        "{logged} log lines for {episodes} episodes: {err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("accept_exhausted={episodes}")),
        "{stdout}"
    );
}

#[test]
fn a_streaming_connection_does_not_starve_another_on_a_one_thread_lane() {
    let _l = util::rt_lock();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Reads of at most 64 bytes, each followed by 1 ms of work: the server takes 64 KB/s, so a
    // client that writes as fast as it can keeps its connection's queue full (the initial
    // receive window alone is 1 s of work); the queue never drains while it writes.
    let mut g = one_thread_lane("tcp");
    g.buffer_bytes = 64;
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    rt.lane("tcp")
        .unwrap()
        .registry()
        .register(Box::new(TcpEcho::new(l, 1000, 64, 64).unwrap()))
        .unwrap();
    rt.start().unwrap();

    let stop = AtomicBool::new(false);
    let echoed = AtomicU64::new(0);
    let served_while_streaming = std::thread::scope(|s| {
        let busy = TcpStream::connect(addr).unwrap();
        let mut busy_rx = busy.try_clone().unwrap();
        let mut busy_tx = busy;
        let (stop, echoed) = (&stop, &echoed);
        let writer = s.spawn(move || {
            let chunk = [0x5au8; 4096];
            // Bounded: stops when told, or after 20 s whatever happens.
            let end = std::time::Instant::now() + Duration::from_secs(20);
            while !stop.load(Relaxed) && std::time::Instant::now() < end {
                if busy_tx.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = busy_tx.shutdown(Shutdown::Both);
        });
        s.spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = busy_rx.read(&mut buf) {
                if n == 0 {
                    break;
                }
                echoed.fetch_add(n as u64, Relaxed);
            }
        });
        // The thread is in the busy connection's handler before the second one arrives.
        assert!(
            util::wait_until(10, || echoed.load(Relaxed) >= 1024),
            "the busy connection was not echoed"
        );
        let mut quiet = TcpStream::connect(addr).unwrap();
        quiet
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        quiet.write_all(b"me too").unwrap();
        let mut buf = [0u8; 6];
        let got = quiet.read_exact(&mut buf);
        let streaming = !writer.is_finished();
        stop.store(true, Relaxed);
        // Closing the server's side ends both client threads at once (the busy connection
        // still has a second of queued work).
        rt.shutdown().unwrap();
        got.is_ok() && streaming && &buf == b"me too"
    });
    assert!(
        served_while_streaming,
        "a connection was not served within 10 s while another one streamed"
    );
}

fn only_lane(mut m: Vec<LaneMetrics>) -> LaneMetrics {
    assert_eq!(m.len(), 1);
    m.remove(0)
}

#[test]
fn a_datagram_longer_than_its_slot_is_counted_and_the_rest_still_echoed() {
    let _l = util::rt_lock();
    let mut g = one_thread_lane("udp");
    g.buffer_bytes = 64;
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap();
    rt.lane("udp")
        .unwrap()
        .registry()
        .register(Box::new(UdpEcho::new(s, 0).unwrap()))
        .unwrap();
    rt.start().unwrap();
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.send_to(&[1u8; 100], addr).unwrap();
    c.send_to(b"fits", addr).unwrap();
    let mut buf = [0u8; 256];
    let (n, _) = c.recv_from(&mut buf).expect("no echo within 10 s");
    assert_eq!(&buf[..n], b"fits", "the oversize datagram was echoed");
    let m = only_lane(rt.shutdown().unwrap());
    assert_eq!(m.datagrams_truncated, 1, "{m:?}");
}

#[test]
fn a_connection_beyond_the_handle_table_is_closed_and_counted() {
    let _l = util::rt_lock();
    let mut g = one_thread_lane("tcp");
    g.max_handles = 2; // the listener and one connection
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![g]);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reg = rt.lane("tcp").unwrap().registry();
    reg.register(Box::new(TcpEcho::new(l, 0, 64, 64 * 1024).unwrap()))
        .unwrap();
    rt.start().unwrap();
    let mut served = TcpStream::connect(addr).unwrap();
    assert_eq!(echo(&mut served, b"one"), b"one");
    let mut refused = TcpStream::connect(addr).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 8];
    match refused.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the connection beyond the table was not closed: {other:?}"),
    }
    assert_eq!(
        echo(&mut served, b"two"),
        b"two",
        "the first one still works"
    );
    let m = only_lane(rt.shutdown().unwrap());
    assert_eq!(m.connections_refused, 1, "{m:?}");
}

/// A `tcp-echo` listener serves at most `max_connections` connections from its preallocated
/// table: one more is closed unserved and counted in `connections_refused`, never dropped
/// silently, and an entry freed by a closed connection serves the next one.
#[test]
fn a_connection_beyond_the_echo_table_is_refused_and_counted_and_a_freed_entry_reused() {
    let _l = util::rt_lock();
    let mut rt = util::runtime(RtMode::BestEffort, false, vec![one_thread_lane("tcp")]);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let reg = rt.lane("tcp").unwrap().registry();
    reg.register(Box::new(TcpEcho::new(l, 0, 1, 4096).unwrap()))
        .unwrap();
    rt.start().unwrap();
    let mut served = TcpStream::connect(addr).unwrap();
    assert_eq!(echo(&mut served, b"one"), b"one");
    let mut refused = TcpStream::connect(addr).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 8];
    match refused.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the connection beyond the table was not closed: {other:?}"),
    }
    assert_eq!(
        echo(&mut served, b"two"),
        b"two",
        "the first one still works"
    );
    // Closing the first gives its entry back (its handle is removed: only the listener is
    // left); the next connection is served from it.
    served.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(
        served.read(&mut buf).unwrap(),
        0,
        "closed after the peer's EOF"
    );
    assert!(util::wait_until(10, || reg.len() == 1));
    let mut next = TcpStream::connect(addr).unwrap();
    assert_eq!(echo(&mut next, b"three"), b"three");
    let m = only_lane(rt.shutdown().unwrap());
    assert_eq!(m.connections_refused, 1, "{m:?}");
}

#[test]
fn check_warns_about_an_echo_bound_beyond_loopback_and_still_exits_0() {
    let body = |ip: &str| {
        format!(
            "[[lane]]\nname = \"g\"\npriority = 10\nthreads = 1\n\
             [[lane.handler]]\nkind = \"udp-echo\"\nbind = \"{ip}:0\"\n\
             [[lane.handler]]\nkind = \"tcp-echo\"\nbind = \"{ip}:0\"\n"
        )
    };
    let open = tmp("open.toml", &body("0.0.0.0"));
    let out = lfrt().arg("check").arg(&open).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for (h, kind) in [(0, "udp-echo"), (1, "tcp-echo")] {
        assert!(
            err.lines().any(|l| l.contains("warning")
                && l.contains(&format!("lane[0].handler[{h}] ({kind}"))
                && l.contains("0.0.0.0:0")),
            "no warning for handler {h} on stderr: {err}"
        );
    }
    assert!(err.contains("reflects datagrams"), "{err}");
    let closed = tmp("loopback.toml", &body("127.0.0.1"));
    let out = lfrt().arg("check").arg(&closed).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("warning"), "loopback warned about: {err}");
}
