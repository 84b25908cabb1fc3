//! Issue 15: `[[band]]` in a configuration. A runtime started from TOML text binds each band's
//! sockets on one port and registers them with their lanes; the kernel puts each datagram in
//! the lane its mark names (the IPv4 DSCP set with `IP_TOS`, or a payload byte), unknown
//! values and datagrams too short to hold the byte in the default lane, each exactly once.
//!
//! The lane that served a datagram is read back from the per-lane `dispatched` counters: the
//! datagrams are sent one at a time, each waits for its echo, so each one is exactly one
//! dispatch of exactly one lane.

mod util;

use lfrt::Runtime;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// A port that was free a moment ago.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(dscp_port: u16, byte_port: u16) -> String {
    format!(
        r#"
[runtime]
rt = "best-effort"

[[lane]]
name = "control"
priority = 30
threads = 2
buffer_bytes = 2048

[[lane]]
name = "bulk"
priority = 20
threads = 1
buffer_bytes = 2048

[[band]]
bind = "127.0.0.1:{dscp_port}"
classify = {{ dscp = {{ 46 = "control", 10 = "control", default = "bulk" }} }}

[[band]]
bind = "127.0.0.1:{byte_port}"
classify = {{ payload_byte = {{ offset = 1, map = {{ 1 = "control" }}, default = "bulk" }} }}
handler = "udp-echo"
"#
    )
}

/// One kind of datagram: the client socket it leaves from (with its TOS), its payload after
/// the id byte, and the lane that must serve it (0 = control, 1 = bulk).
struct Case {
    name: &'static str,
    client: UdpSocket,
    to: SocketAddr,
    tail: &'static [u8],
    lane: usize,
}

fn client(tos: u8) -> UdpSocket {
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    if tos != 0 {
        lfrt::os::set_tos(&c, tos).unwrap();
    }
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

#[test]
fn datagrams_land_in_the_lane_their_mark_names() {
    let _l = util::rt_lock();
    let (dscp_port, byte_port) = (free_port(), free_port());
    let cfg = lfrt::parse_config(&config(dscp_port, byte_port)).expect("valid config");
    let mut rt = Runtime::new(cfg).expect("runtime");
    rt.start().expect("start");
    let dscp: SocketAddr = format!("127.0.0.1:{dscp_port}").parse().unwrap();
    let byte: SocketAddr = format!("127.0.0.1:{byte_port}").parse().unwrap();
    let cases = [
        ("dscp EF 46", client(46 << 2), dscp, &[0u8, 0][..], 0),
        ("dscp AF11 10", client(10 << 2), dscp, &[0, 0][..], 0),
        ("dscp CS1 8: unknown", client(8 << 2), dscp, &[0, 0][..], 1),
        ("dscp 0: unknown", client(0), dscp, &[0, 0][..], 1),
        ("byte 1", client(0), byte, &[1, 0xAA][..], 0),
        ("byte 9: unknown", client(0), byte, &[9, 0xAA][..], 1),
        ("too short for byte 1", client(0), byte, &[][..], 1),
        // The byte band does not read the DSCP.
        ("byte 9 sent with EF", client(46 << 2), byte, &[9][..], 1),
    ]
    .map(|(name, client, to, tail, lane)| Case {
        name,
        client,
        to,
        tail,
        lane,
    });
    let dispatched = |rt: &Runtime| -> [u64; 2] {
        let m = rt.metrics();
        [m[0].dispatched, m[1].dispatched]
    };
    let mut want = [0u64; 2];
    let mut buf = [0u8; 64];
    let mut id = 0u8;
    for round in 0..5 {
        for c in &cases {
            let mut d = vec![id];
            d.extend_from_slice(c.tail);
            c.client.send_to(&d, c.to).unwrap();
            let (n, from) = c
                .client
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("{} (round {round}): no echo: {e}", c.name));
            assert_eq!((&buf[..n], from), (&d[..], c.to), "{}", c.name);
            want[c.lane] += 1;
            // The counter is updated after the handler returns: wait for it, then it must be
            // exactly one more dispatch, in the expected lane.
            assert!(
                util::wait_until(5, || dispatched(&rt).iter().sum::<u64>()
                    >= want[0] + want[1]),
                "{}: dispatch not counted",
                c.name
            );
            assert_eq!(dispatched(&rt), want, "{} (round {round})", c.name);
            id += 1;
        }
    }
    // Nothing duplicated: no client gets a second echo.
    for c in &cases {
        c.client
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        assert!(
            c.client.recv_from(&mut buf).is_err(),
            "{}: a datagram was echoed twice",
            c.name
        );
    }
    let m = rt.metrics();
    assert_eq!(
        [m[0].handles, m[1].handles],
        [2, 2],
        "two bands, each with one socket in each lane"
    );
    let m = rt.shutdown().unwrap();
    assert_eq!(
        [m[0].dispatched, m[1].dispatched],
        [15, 25],
        "control: EF, AF11, byte 1 × 5 rounds; bulk: the other five × 5"
    );
}
