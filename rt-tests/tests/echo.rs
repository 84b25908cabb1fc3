//! The UDP echo service under each architecture of the throughput benchmark (lfrt lane,
//! HS/HA pool, tokio), driven by the load generator: its accounting holds (sent = received +
//! lost, no duplicates) and every datagram comes back verbatim (the generator's padding check
//! covers every byte).

mod util;

use lfrt_tools::loadgen::{self, Clients, LoadConfig, Mode};
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn sockets(n: usize) -> (Vec<UdpSocket>, Vec<u16>) {
    let s: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports = s.iter().map(|s| s.local_addr().unwrap().port()).collect();
    (s, ports)
}

/// A bounded run: exactly `messages` datagrams, closed loop, then a drain.
fn load(ports: Vec<u16>, messages: u64) -> loadgen::LoadReport {
    let mut cfg = LoadConfig::new(
        "127.0.0.1".parse().unwrap(),
        ports,
        Mode::Closed { window: 4 },
    );
    cfg.size = 200;
    cfg.duration = Duration::from_secs(20);
    cfg.drain = Duration::from_secs(2);
    cfg.timeout = Duration::from_secs(2);
    cfg.max_messages = Some(messages);
    loadgen::run(&cfg).unwrap()
}

fn check(arch: &str, r: &loadgen::LoadReport, messages: u64) {
    assert_eq!(r.sent, messages, "{arch}: {r:?}");
    assert_eq!(r.sent, r.received + r.lost, "{arch}: accounting {r:?}");
    assert_eq!(r.duplicates, 0, "{arch}: {r:?}");
    assert_eq!(r.corrupt, 0, "{arch}: an echo was not verbatim {r:?}");
    // Closed loop on loopback with a window of 4: nothing can overflow a socket buffer.
    assert_eq!(r.lost, 0, "{arch}: {r:?}");
}

const MESSAGES: u64 = 20_000;

#[test]
fn lfrt_lane_echoes_every_datagram() {
    let _l = util::rt_lock();
    let (socks, ports) = sockets(4);
    let mut g = lfrt::LaneConfig::new("echo", lfrt::Policy::Fifo, 10);
    g.threads = 2;
    let mut rt = lfrt::Runtime::new(lfrt::RuntimeConfig {
        lanes: vec![g],
        ..Default::default()
    })
    .unwrap();
    let reg = rt.lane("echo").unwrap().registry();
    for s in socks {
        reg.register(Box::new(lfrt::handlers::UdpEcho::new(s, 0).unwrap()))
            .unwrap();
    }
    rt.start().unwrap();
    let r = load(ports, MESSAGES);
    // The built-in echo stamps its sockets' arrivals: every dispatch that took a datagram
    // records the time from the kernel's receive to handler entry (issue 22).
    let mut arrival = lfrt::telemetry::LatencySummary::default();
    assert!(util::wait_until(5, || {
        arrival = rt.telemetry().lane_arrival(0);
        arrival.count > 0
    }));
    let m = rt.shutdown().unwrap();
    check("lfrt", &r, MESSAGES);
    assert!(m[0].dispatched > 0 && m[0].dispatched <= MESSAGES);
    assert!(arrival.count <= m[0].dispatched, "{arrival:?} {m:?}");
    assert!(
        arrival.min_ns >= 1 && arrival.min_ns <= arrival.max_ns,
        "{arrival:?}"
    );
}

#[test]
fn hsha_pool_echoes_every_datagram() {
    let _l = util::rt_lock();
    let (socks, ports) = sockets(4);
    let cfg = lfrt_tools::hsha::HshaConfig {
        workers: 2,
        ..Default::default()
    };
    let pool = lfrt_tools::hsha::HshaPool::start(
        cfg,
        socks
            .into_iter()
            .map(lfrt_tools::hsha::Source::Udp)
            .collect(),
        |_| lfrt_tools::service::Echo { work_us: 0 },
    )
    .unwrap();
    let r = load(ports, MESSAGES);
    let m = pool.shutdown().unwrap();
    check("hsha", &r, MESSAGES);
    assert_eq!(m.served, MESSAGES);
}

#[test]
fn tokio_echoes_every_datagram() {
    let (socks, ports) = sockets(4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .unwrap();
    for s in socks {
        s.set_nonblocking(true).unwrap();
        rt.spawn(async move {
            let s = tokio::net::UdpSocket::from_std(s).unwrap();
            let mut buf = vec![0u8; 2048];
            while let Ok((n, from)) = s.recv_from(&mut buf).await {
                let _ = s.send_to(&buf[..n], from).await;
            }
        });
    }
    let r = load(ports, MESSAGES);
    rt.shutdown_timeout(Duration::from_secs(2));
    check("tokio", &r, MESSAGES);
}

#[test]
fn loadgen_binary_counts_losses_against_a_silent_port() {
    // The separate-process generator (what the benchmark uses): nothing answers, so
    // everything sent is lost, and the JSON says so.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let json = std::env::temp_dir().join(format!("lfrt-loadgen-{}.json", std::process::id()));
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt-loadgen"))
        .args([
            "--ports",
            &port.to_string(),
            "--mode",
            "closed",
            "--window",
            "2",
            "--max-messages",
            "50",
        ])
        .args([
            "--duration",
            "5",
            "--timeout-ms",
            "20",
            "--drain-ms",
            "50",
            "--json",
        ])
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["sent"], 50);
    assert_eq!(v["received"], 0);
    assert_eq!(v["lost"], 50);
}

/// A plain blocking echo server on each socket (one thread each, bounded by `stop` and a
/// 30 s backstop); returns, per socket, every datagram's source address.
fn plain_echo(socks: Vec<UdpSocket>, stop: &std::sync::atomic::AtomicBool) -> Vec<Vec<SocketAddr>> {
    use std::sync::atomic::Ordering::Relaxed;
    std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .into_iter()
            .map(|sock| {
                s.spawn(move || {
                    sock.set_read_timeout(Some(Duration::from_millis(20)))
                        .unwrap();
                    let (mut buf, mut from_all) = (vec![0u8; 2048], Vec::new());
                    let t0 = Instant::now();
                    while !stop.load(Relaxed) && t0.elapsed() < Duration::from_secs(30) {
                        if let Ok((n, from)) = sock.recv_from(&mut buf) {
                            from_all.push(from);
                            sock.send_to(&buf[..n], from).unwrap();
                        }
                    }
                    from_all
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Runs the generator with `clients` against plain echo servers on 2 ports (window 8 each,
/// exactly 4000 datagrams); returns the report and, per port, the source addresses its
/// server saw.
fn against_plain_echo(clients: Clients) -> (loadgen::LoadReport, Vec<Vec<SocketAddr>>) {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let (socks, ports) = sockets(2);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| plain_echo(socks, &stop));
        let mut cfg = LoadConfig::new(
            "127.0.0.1".parse().unwrap(),
            ports,
            Mode::Closed { window: 8 },
        );
        cfg.clients = clients;
        cfg.duration = Duration::from_secs(20);
        cfg.drain = Duration::from_secs(2);
        cfg.timeout = Duration::from_secs(2);
        cfg.max_messages = Some(4000);
        let r = loadgen::run(&cfg);
        stop.store(true, Relaxed);
        (r.unwrap(), server.join().unwrap())
    })
}

/// Issue 22: the default client shape is many independent clients. Against a trivial std
/// echo server, 2 ports x window 8 come from 16 distinct source ports (8 per port), every
/// datagram was one `send` and every reply one `recv`, and nothing is lost.
#[test]
fn unbatched_loadgen_is_one_socket_per_client_and_one_datagram_per_call() {
    let (r, per_port) = against_plain_echo(Clients::default_for(Mode::Closed { window: 8 }));
    assert_eq!(r.sent, 4000, "{r:?}");
    assert_eq!(r.received, r.sent, "{r:?}");
    assert_eq!((r.lost, r.duplicates, r.corrupt), (0, 0, 0), "{r:?}");
    let seen: usize = per_port.iter().map(Vec::len).sum();
    assert_eq!(seen as u64, r.sent, "the servers saw every datagram once");
    for (p, sources) in per_port.iter().enumerate() {
        let distinct: HashSet<SocketAddr> = sources.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            8,
            "port {p}: one socket per client: {distinct:?}"
        );
    }
    let all: HashSet<SocketAddr> = per_port.iter().flatten().copied().collect();
    assert_eq!(all.len(), 16, "no socket is shared between ports");
    assert_eq!(r.client_sockets, 16);
    assert_eq!(r.send_calls, r.sent, "one datagram per send");
    assert_eq!(r.recv_calls, r.received, "one reply per recv");
}

/// The batched shape, for contrast: one socket per port, the same accounting.
#[test]
fn batched_loadgen_is_one_socket_per_port() {
    let (r, per_port) = against_plain_echo(Clients::Batched);
    assert_eq!(r.sent, 4000, "{r:?}");
    assert_eq!(r.received, r.sent, "{r:?}");
    assert_eq!((r.lost, r.duplicates, r.corrupt), (0, 0, 0), "{r:?}");
    for sources in &per_port {
        let distinct: HashSet<SocketAddr> = sources.iter().copied().collect();
        assert_eq!(distinct.len(), 1, "{distinct:?}");
    }
    assert!(
        r.send_calls <= r.sent && r.recv_calls <= r.received,
        "{r:?}"
    );
}

/// A `TcpEchoStream` whose pending buffer (4 KiB) is smaller than the lane's read buffer
/// (64 KiB), as when a `tcp-echo` lane borrows a thread from a lane with bigger buffers: a
/// client that sends 16 MiB while not reading for a moment still gets every byte back, in
/// order (each read is bounded by what the connection can keep when the peer stops taking
/// the echo).
#[test]
fn tcp_echo_with_a_pending_buffer_smaller_than_the_read_buffer_loses_nothing() {
    use lfrt::handlers::TcpEchoStream;
    use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};

    let _l = util::rt_lock();
    let mut g = LaneConfig::new("echo", Policy::Other, 0);
    g.threads = 1;
    g.buffer_bytes = 64 * 1024;
    let mut rt = Runtime::new(RuntimeConfig {
        lanes: vec![g],
        ..Default::default()
    })
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    // A small receive buffer (no autotuning): the server's writes soon find the socket full.
    nix::sys::socket::setsockopt(&client, nix::sys::socket::sockopt::RcvBuf, &(256 * 1024))
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    rt.lane("echo")
        .unwrap()
        .registry()
        .register(Box::new(TcpEchoStream::new(server, 0, 4096).unwrap()))
        .unwrap();
    rt.start().unwrap();

    const TOTAL: usize = 16 << 20;
    let wire: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut writer = client.try_clone().unwrap();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            writer.write_all(&wire).unwrap();
            writer.shutdown(Shutdown::Write).unwrap();
        });
        // Not reading for a moment fills the socket buffers, so the server's writes return
        // EAGAIN with a full read buffer in hand (the case under test).
        std::thread::sleep(Duration::from_millis(300));
        let mut got = Vec::with_capacity(TOTAL);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match client.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("after {} bytes: {e}", got.len()),
            }
        }
        got
    });
    rt.shutdown().unwrap();
    assert_eq!(got.len(), TOTAL, "echoed bytes");
    assert!(got == wire, "the echo is not verbatim");
}
