//! Whole runs against bounded echo-server threads on loopback: closed and open loop, batched
//! and independent clients, several threads, and servers that drop, duplicate or corrupt
//! echoes, each counted exactly.

use super::sockets::SOCKET_RCVBUF;
use super::wire::header;
use super::*;
use nix::sys::socket::{setsockopt, sockopt};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// What a test server does with one datagram (it may modify it); returns
/// how many copies to send back.
type Behaviour = fn(&mut [u8]) -> usize;

fn seq_of(buf: &[u8]) -> u64 {
    header(buf).0
}

fn echo(_: &mut [u8]) -> usize {
    1
}

fn drop_every_10th_dup_some(buf: &mut [u8]) -> usize {
    let s = seq_of(buf);
    if s % 10 == 9 {
        0
    } else if s % 7 == 3 {
        2
    } else {
        1
    }
}

fn corrupting(buf: &mut [u8]) -> usize {
    let s = seq_of(buf);
    if s % 5 == 2 {
        let last = buf.len() - 1;
        buf[last] ^= 0x40; // padding
    } else if s % 5 == 4 {
        buf[16] ^= 0x01; // port index
    } else if s.is_multiple_of(10) {
        buf[9] ^= 0x10; // timestamp
    }
    1
}

fn is_corrupted(s: u64) -> bool {
    s % 5 == 2 || s % 5 == 4 || s.is_multiple_of(10)
}

/// A bounded echo server thread on an ephemeral 127.0.0.1 port.
struct TestServer {
    port: u16,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl TestServer {
    fn start(behaviour: Behaviour) -> TestServer {
        Self::start_on(LOCAL, behaviour).expect("bind test server")
    }

    fn start_on(ip: IpAddr, behaviour: Behaviour) -> io::Result<TestServer> {
        let sock = UdpSocket::bind((ip, 0))?;
        let _ = setsockopt(&sock, sockopt::RcvBuf, &SOCKET_RCVBUF);
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("set read timeout");
        let port = sock.local_addr().expect("local addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let started = Instant::now();
            let mut buf = vec![0u8; 65536];
            // Hard bound so a failing test can never leave it running.
            while !stop2.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                assert!(from.ip().is_loopback());
                let copies = if n >= HEADER_LEN {
                    behaviour(&mut buf[..n])
                } else {
                    1
                };
                for _ in 0..copies {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        Ok(TestServer {
            port,
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn servers(n: usize, behaviour: Behaviour) -> (Vec<TestServer>, Vec<u16>) {
    let s: Vec<TestServer> = (0..n).map(|_| TestServer::start(behaviour)).collect();
    let ports = s.iter().map(|s| s.port).collect();
    (s, ports)
}

fn config(ports: Vec<u16>, mode: Mode) -> LoadConfig {
    let mut cfg = LoadConfig::new(LOCAL, ports, mode);
    cfg.duration = Duration::from_millis(300);
    // Generous: the drain ends early once everything is answered.
    cfg.drain = Duration::from_secs(2);
    cfg
}

fn assert_clean(r: &LoadReport) {
    assert!(r.sent > 0, "{r:?}");
    assert_eq!(r.sent, r.received + r.lost, "{r:?}");
    assert_eq!(r.lost, 0, "{r:?}");
    assert_eq!(r.duplicates, 0, "{r:?}");
    assert_eq!(r.corrupt, 0, "{r:?}");
    assert_eq!(r.send_errors, 0, "{r:?}");
    assert!(r.rtt_us.p50 > 0.0 && r.rtt_us.max >= r.rtt_us.p99, "{r:?}");
    assert!(r.throughput_msgs_per_s > 0.0, "{r:?}");
}

#[test]
fn ipv6_loopback_target() {
    let ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let Ok(server) = TestServer::start_on(ip, echo) else {
        eprintln!("skipping: no IPv6 loopback on this machine");
        return;
    };
    let mut cfg = config(vec![server.port], Mode::Closed { window: 2 });
    cfg.target = ip;
    cfg.max_messages = Some(100);
    let r = run(&cfg).unwrap();
    assert_clean(&r);
    assert_eq!(r.sent, 100);
}

#[test]
fn closed_loop_against_echo_server() {
    let (_s, ports) = servers(2, echo);
    let cfg = config(ports, Mode::Closed { window: 4 });
    let r = run(&cfg).unwrap();
    // Visible with `cargo test closed_loop -- --nocapture`.
    println!("{}", format_report(&r, &cfg, 1));
    assert_clean(&r);
    assert_eq!(r.late_sends, 0);
}

/// The batched shape against the same server: same accounting, one socket per port,
/// and no more system calls than datagrams.
#[test]
fn batched_closed_loop_against_echo_server() {
    let (_s, ports) = servers(2, echo);
    let mut cfg = config(ports, Mode::Closed { window: 8 });
    cfg.clients = Clients::Batched;
    cfg.max_messages = Some(2000);
    cfg.duration = Duration::from_secs(10);
    let r = run(&cfg).unwrap();
    assert_clean(&r);
    assert_eq!(r.sent, 2000);
    assert_eq!(r.client_sockets, 2);
    assert!(
        r.send_calls <= r.sent && r.recv_calls <= r.received,
        "{r:?}"
    );
}

/// Unbatched clients (2 per port sharing a window of 5) make one system call per datagram
/// each way; more clients than the window holds are refused.
#[test]
fn unbatched_clients_make_one_call_per_datagram_and_fit_the_window() {
    let (_s, ports) = servers(2, echo);
    let mut cfg = config(ports, Mode::Closed { window: 5 });
    cfg.clients = Clients::Unbatched { per_port: 2 };
    cfg.max_messages = Some(1000);
    cfg.duration = Duration::from_secs(10);
    let r = run_threaded(&cfg, 2).unwrap();
    assert_clean(&r);
    assert_eq!(r.sent, 1000);
    assert_eq!(r.client_sockets, 4);
    assert_eq!(r.send_calls, r.sent);
    assert_eq!(r.recv_calls, r.received);
    let mut bad = cfg.clone();
    bad.clients = Clients::Unbatched { per_port: 6 };
    let e = run(&bad).unwrap_err();
    assert!(e.to_string().contains("exceed the window"), "{e}");
    bad.clients = Clients::Unbatched { per_port: 0 };
    assert_eq!(run(&bad).unwrap_err().kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn open_loop_against_echo_server() {
    let (_s, ports) = servers(2, echo);
    let mut cfg = config(ports, Mode::Open { rate_per_s: 2000 });
    cfg.size = 200;
    let r = run(&cfg).unwrap();
    assert_clean(&r);
    // No more than the schedule allows: 0.3 s at 2000/s.
    assert!(r.sent <= 600, "{r:?}");
}

#[test]
fn max_messages_bounds_the_run_and_threads_share_it() {
    let (_s, ports) = servers(3, echo);
    let mut cfg = config(ports, Mode::Closed { window: 2 });
    cfg.duration = Duration::from_secs(10);
    cfg.max_messages = Some(301);
    for threads in [1, 2, 3] {
        let r = run_threaded(&cfg, threads).unwrap();
        assert_clean(&r);
        assert_eq!(r.sent, 301, "threads={threads}");
    }
}

/// Sequence numbers are 0..sent when there is one thread and no send fails.
fn expected(sent: u64, pred: impl Fn(u64) -> bool) -> u64 {
    (0..sent).filter(|&s| pred(s)).count() as u64
}

#[test]
fn drops_and_duplicates_counted_exactly_closed_loop() {
    let (_s, ports) = servers(2, drop_every_10th_dup_some);
    let mut cfg = config(ports, Mode::Closed { window: 4 });
    cfg.duration = Duration::from_secs(10);
    cfg.max_messages = Some(400);
    cfg.timeout = Duration::from_millis(20);
    cfg.drain = Duration::from_millis(300);
    let r = run(&cfg).unwrap();
    assert_eq!(r.sent, 400, "{r:?}");
    assert_eq!(r.send_errors, 0, "{r:?}");
    assert_eq!(r.lost, expected(400, |s| s % 10 == 9), "{r:?}");
    assert_eq!(
        r.duplicates,
        expected(400, |s| s % 10 != 9 && s % 7 == 3),
        "{r:?}"
    );
    assert_eq!(r.corrupt, 0, "{r:?}");
    assert_eq!(r.sent, r.received + r.lost);
}

#[test]
fn drops_and_duplicates_counted_exactly_open_loop() {
    let (_s, ports) = servers(2, drop_every_10th_dup_some);
    let mut cfg = config(ports, Mode::Open { rate_per_s: 2000 });
    cfg.duration = Duration::from_secs(10);
    cfg.max_messages = Some(200);
    cfg.drain = Duration::from_millis(300);
    let r = run(&cfg).unwrap();
    assert_eq!(r.sent, 200, "{r:?}");
    assert_eq!(r.lost, expected(200, |s| s % 10 == 9), "{r:?}");
    assert_eq!(
        r.duplicates,
        expected(200, |s| s % 10 != 9 && s % 7 == 3),
        "{r:?}"
    );
    assert_eq!(r.corrupt, 0, "{r:?}");
}

#[test]
fn corrupted_echoes_are_counted() {
    let (_s, ports) = servers(2, corrupting);
    let mut cfg = config(ports, Mode::Closed { window: 4 });
    cfg.duration = Duration::from_secs(10);
    cfg.max_messages = Some(300);
    cfg.timeout = Duration::from_millis(20);
    cfg.drain = Duration::from_millis(300);
    let r = run(&cfg).unwrap();
    assert_eq!(r.sent, 300, "{r:?}");
    let bad = expected(300, is_corrupted);
    assert_eq!(r.corrupt, bad, "{r:?}");
    assert_eq!(r.lost, bad, "{r:?}");
    assert_eq!(r.received, 300 - bad, "{r:?}");
    assert_eq!(r.duplicates, 0, "{r:?}");
}

#[test]
fn no_listener_counts_everything_lost() {
    // Reserve an ephemeral port, then free it so nothing listens there.
    let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(vec![port], Mode::Closed { window: 1 });
    cfg.max_messages = Some(10);
    cfg.timeout = Duration::from_millis(5);
    cfg.drain = Duration::from_millis(20);
    let r = run(&cfg).unwrap();
    assert_eq!(r.sent + r.send_errors, 10, "{r:?}");
    assert_eq!(r.received, 0, "{r:?}");
    assert_eq!(r.lost, r.sent, "{r:?}");
}
