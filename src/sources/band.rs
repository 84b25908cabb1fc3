//! Priority bands on one port, classified in the kernel.
//!
//! A service exposes one UDP port, and its clients mark their urgency: the DSCP in the IP
//! header (e.g. EF, 46) or a priority byte in the application header. [`bind`] opens one
//! socket per band on that port with `SO_REUSEPORT` and attaches a classic BPF program
//! (`SO_ATTACH_REUSEPORT_CBPF`) that reads the mark and returns the band's socket. So the
//! kernel itself puts each datagram into its band's socket: there is no user-space classifier
//! and no queue, and a flood of low-band traffic never wakes, delays or fills the high band.
//! Register each band's socket with the lane that should serve it.
//!
//! ```text
//!   clients ──▶ 127.0.0.1:7000 ──▶ cBPF: DSCP 46 → band 0, else band 1
//!                                    │                    │
//!                          socket 0 (lane "control")   socket 1 (lane "bulk")
//! ```
//!
//! # Kernel facts this relies on (checked by the tests on loopback)
//! * For UDP the program sees the payload at offset 0 and the IPv4 header through the
//!   `SKF_NET_OFF` offset, so the DSCP is readable.
//! * A band index the program returns selects the socket bound at that position; a load past the
//!   end of a short datagram aborts the program with 0. lfrt therefore binds the default band's
//!   socket first, so short datagrams land in the default band too.
//! * The IPv4 TOS byte is only read for IPv4; classify IPv6 traffic by a payload byte.

use crate::sys::reuseport::{self, Field};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// What the kernel reads to choose a band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classify {
    /// The DSCP (0..=63) of the IPv4 header.
    Dscp,
    /// The payload byte at this offset (a priority byte in the application header).
    PayloadByte(u16),
}

/// A band plan: what to read, which value goes to which band, and the band for everything
/// else (including datagrams too short to hold the byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bands {
    /// What the kernel reads.
    pub classify: Classify,
    /// `(value, band)`: datagrams whose mark is `value` go to `band`. At most 255 entries.
    pub map: Vec<(u8, usize)>,
    /// The band of every other datagram.
    pub default: usize,
    /// How many bands (sockets) to open; every band in `map` and `default` is below it.
    pub count: usize,
}

/// Opens one nonblocking socket per band on `addr` (port 0 picks one free port for all) and
/// attaches the classifier. The returned vector is indexed by band.
///
/// # Errors
/// `InvalidInput` for a plan whose bands are out of range or whose map has more than 255
/// entries or a DSCP above 63, and for DSCP classification on an IPv6 address; the kernel's
/// error if a socket cannot be bound (the port is taken by a socket without `SO_REUSEPORT`) or
/// the program is refused.
///
/// # Examples
/// ```no_run
/// use lfrt::band::{bind, Bands, Classify};
/// // DSCP EF (46) to band 0, everything else to band 1.
/// let plan = Bands { classify: Classify::Dscp, map: vec![(46, 0)], default: 1, count: 2 };
/// let sockets = bind("127.0.0.1:7000".parse().unwrap(), &plan)?;
/// // control.registry().register(Box::new(UdpEcho::new(sockets.remove(0), 0)?))?; ...
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn bind(addr: SocketAddr, plan: &Bands) -> io::Result<Vec<UdpSocket>> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if plan.count == 0 || plan.default >= plan.count {
        return Err(invalid(format!(
            "default band {} is not below the band count {}",
            plan.default, plan.count
        )));
    }
    if plan.map.len() > 255 {
        return Err(invalid("at most 255 band map entries".into()));
    }
    if plan.classify == Classify::Dscp && addr.is_ipv6() {
        // The program reads the IPv4 TOS byte; for IPv6 that byte is not the traffic class.
        return Err(invalid(format!(
            "{addr}: the DSCP is read from the IPv4 header only; classify IPv6 by a payload byte"
        )));
    }
    for &(value, band) in &plan.map {
        if band >= plan.count {
            return Err(invalid(format!(
                "band {band} for value {value} is out of range"
            )));
        }
        if plan.classify == Classify::Dscp && value > 63 {
            return Err(invalid(format!("DSCP {value} is above 63")));
        }
    }
    // Socket position 0 is the default band (a failed load returns 0); the other bands follow
    // in order.
    let position = |band: usize| -> u32 {
        if band == plan.default {
            0
        } else if band < plan.default {
            band as u32 + 1
        } else {
            band as u32
        }
    };
    let cases: Vec<(u8, u32)> = plan.map.iter().map(|&(v, b)| (v, position(b))).collect();
    let field = match plan.classify {
        Classify::Dscp => Field::Dscp,
        Classify::PayloadByte(offset) => Field::PayloadByte(u32::from(offset)),
    };
    let program = reuseport::classifier(field, &cases, 0);
    let mut by_position: Vec<Option<UdpSocket>> = reuseport::bind_lane(addr, plan.count, &program)?
        .into_iter()
        .map(Some)
        .collect();
    Ok((0..plan.count)
        .map(|band| {
            by_position[position(band) as usize]
                .take()
                .expect("one socket per band")
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Reads every datagram each band's socket holds (waiting up to 2 s for `expected` in all).
    fn drain(bands: &[UdpSocket], expected: usize) -> Vec<Vec<Vec<u8>>> {
        let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); bands.len()];
        let end = Instant::now() + Duration::from_secs(2);
        let mut buf = [0u8; 256];
        while got.iter().map(Vec::len).sum::<usize>() < expected && Instant::now() < end {
            for (b, s) in bands.iter().enumerate() {
                while let Ok(n) = s.recv(&mut buf) {
                    got[b].push(buf[..n].to_vec());
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        got
    }

    #[test]
    fn payload_byte_picks_the_band_and_unknown_values_go_to_the_default() {
        let plan = Bands {
            classify: Classify::PayloadByte(1),
            map: vec![(7, 0), (3, 2)],
            default: 1,
            count: 3,
        };
        let bands = bind("127.0.0.1:0".parse().unwrap(), &plan).unwrap();
        let addr = bands[0].local_addr().unwrap();
        assert!(
            bands.iter().all(|s| s.local_addr().unwrap() == addr),
            "one port"
        );
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0;
        for seq in 0..60u8 {
            let mark = [7, 3, 9][usize::from(seq % 3)];
            client.send_to(&[seq, mark, 0xAA], addr).unwrap();
            sent += 1;
        }
        client.send_to(&[200], addr).unwrap(); // too short to hold byte 1: default band
        sent += 1;
        let got = drain(&bands, sent);
        let marks = |b: usize| got[b].iter().map(|d| d.get(1).copied()).collect::<Vec<_>>();
        assert_eq!(got[0].len(), 20, "value 7 -> band 0");
        assert!(marks(0).iter().all(|m| *m == Some(7)));
        assert_eq!(got[2].len(), 20, "value 3 -> band 2");
        assert!(marks(2).iter().all(|m| *m == Some(3)));
        assert_eq!(
            got[1].len(),
            21,
            "value 9 and the short datagram -> default band 1"
        );
        assert!(marks(1).iter().all(|m| *m == Some(9) || m.is_none()));
        // Exactly once: every sequence number arrived in exactly one band.
        let mut seqs: Vec<u8> = got.iter().flatten().map(|d| d[0]).collect();
        seqs.sort_unstable();
        let mut want: Vec<u8> = (0..60).chain([200]).collect();
        want.sort_unstable();
        assert_eq!(seqs, want, "nothing lost or duplicated");
    }

    #[test]
    fn dscp_from_the_ip_header_picks_the_band() {
        let plan = Bands {
            classify: Classify::Dscp,
            map: vec![(46, 0)],
            default: 1,
            count: 2,
        };
        let bands = bind("127.0.0.1:0".parse().unwrap(), &plan).unwrap();
        let addr = bands[0].local_addr().unwrap();
        let ef = UdpSocket::bind("127.0.0.1:0").unwrap();
        reuseport::set_tos(&ef, 46 << 2).unwrap();
        let af11 = UdpSocket::bind("127.0.0.1:0").unwrap();
        reuseport::set_tos(&af11, 10 << 2).unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        for i in 0..30u8 {
            ef.send_to(&[b'e', i], addr).unwrap();
            af11.send_to(&[b'a', i], addr).unwrap();
            plain.send_to(&[b'p', i], addr).unwrap();
        }
        let got = drain(&bands, 90);
        assert_eq!(got[0].len(), 30, "{:?}", got[0]);
        assert!(got[0].iter().all(|d| d[0] == b'e'), "only EF in band 0");
        assert_eq!(got[1].len(), 60);
        assert!(got[1].iter().all(|d| d[0] != b'e'));
    }

    #[test]
    fn plans_out_of_range_are_refused() {
        let ok = Bands {
            classify: Classify::Dscp,
            map: vec![(46, 0)],
            default: 1,
            count: 2,
        };
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for bad in [
            Bands {
                default: 2,
                ..ok.clone()
            },
            Bands {
                map: vec![(46, 5)],
                ..ok.clone()
            },
            Bands {
                map: vec![(64, 0)],
                ..ok.clone()
            },
        ] {
            let e = bind(addr, &bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
        // DSCP on IPv6 would read the wrong byte: refused before any socket is opened.
        let v6: SocketAddr = "[::1]:0".parse().unwrap();
        let e = bind(v6, &ok).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("IPv4 header only"), "{e}");
    }
}
