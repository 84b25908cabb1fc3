//! The load: the high UDP stream at a fixed period, the low streams as independent Poisson
//! sources, all `SCHED_OTHER` on the client CPU and bounded by the run's end and a per-stream
//! count; and the pinning of the controller to the client CPU while a run is under way.

use super::probe::{Header, DATAGRAM_BYTES, EF_TOS};
use lfrt::os;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering::*};

/// SplitMix64: a small deterministic generator for the Poisson arrivals.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// An exponentially distributed gap (ns) for a Poisson process of `rate` per second.
    fn exp_gap_ns(&mut self, rate: f64) -> u64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        (-(1.0 - u).ln() / rate * 1e9) as u64
    }
}

fn sleep_until(ns: u64) {
    use nix::sys::time::TimeSpec;
    use nix::time::{clock_nanosleep, ClockId, ClockNanosleepFlags};
    let ts = TimeSpec::new((ns / 1_000_000_000) as _, (ns % 1_000_000_000) as _);
    while lfrt::os::now_ns() < ns {
        if clock_nanosleep(
            ClockId::CLOCK_MONOTONIC,
            ClockNanosleepFlags::TIMER_ABSTIME,
            &ts,
        )
        .is_err()
        {
            std::hint::spin_loop();
        }
    }
}

/// Pins the calling thread to one CPU until dropped, then restores its previous CPU set.
///
/// The controller is pinned to the client CPU only while a run is under way: lfrt validates a
/// lane's CPUs against the *calling* thread's CPU set, so servers are built unpinned.
pub(crate) struct Pinned(Vec<usize>);

impl Pinned {
    pub(crate) fn to(cpu: usize) -> std::io::Result<Pinned> {
        let before = os::affinity(0)?;
        os::set_current_affinity(&[cpu])?;
        Ok(Pinned(before))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = os::set_current_affinity(&self.0);
    }
}

fn client_socket(to: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.connect(to)?;
    Ok(s)
}

pub(crate) fn generator_thread_setup(cpu: usize) {
    let _ = os::set_current_affinity(&[cpu]);
    // Pace to the microsecond rather than the default 50 µs timer slack.
    let _ = nix::sys::prctl::set_timerslack(1_000);
}

/// The high UDP generator: `count` datagrams, one every `period_ns` from `start_ns`, marked
/// DSCP EF if `mark`.
pub(crate) fn high_generator(
    to: SocketAddr,
    mark: bool,
    start_ns: u64,
    period_ns: u64,
    count: u64,
    stop: &AtomicBool,
) -> std::io::Result<u64> {
    let sock = client_socket(to)?;
    if mark {
        os::set_tos(&sock, EF_TOS)?;
    }
    let mut buf = [0u8; DATAGRAM_BYTES];
    let mut sent = 0;
    for seq in 0..count {
        if stop.load(Relaxed) {
            break;
        }
        sleep_until(start_ns + seq * period_ns);
        let sent_ns = lfrt::os::now_ns();
        Header {
            stream: 0,
            seq,
            sent_ns,
        }
        .write(&mut buf);
        if sock.send(&buf).is_ok() {
            sent += 1;
        }
    }
    Ok(sent)
}

/// The low generators: one thread, `to.len()` independent Poisson streams of `rate` each, from
/// `start_ns` to `end_ns`, at most `cap` datagrams per stream. Returns datagrams sent per stream.
pub(crate) fn low_generator(
    to: &[SocketAddr],
    rate: f64,
    start_ns: u64,
    end_ns: u64,
    cap: u64,
    stop: &AtomicBool,
) -> std::io::Result<Vec<u64>> {
    let socks = to
        .iter()
        .map(|&a| client_socket(a))
        .collect::<std::io::Result<Vec<_>>>()?;
    let n = socks.len();
    let mut sent = vec![0u64; n];
    if n == 0 {
        return Ok(sent);
    }
    let mut rngs: Vec<SplitMix> = (0..n)
        .map(|i| SplitMix(0x1F2E_3D4C_5B6A_7988 ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9)))
        .collect();
    let mut next: Vec<u64> = rngs
        .iter_mut()
        .map(|r| start_ns + r.exp_gap_ns(rate))
        .collect();
    let mut seq = vec![0u64; n];
    let mut buf = [0u8; DATAGRAM_BYTES];
    loop {
        if stop.load(Relaxed) {
            break;
        }
        let (i, due) = next
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("n > 0");
        if due >= end_ns {
            break;
        }
        sleep_until(due);
        Header {
            stream: i as u32 + 1,
            seq: seq[i],
            sent_ns: lfrt::os::now_ns(),
        }
        .write(&mut buf);
        if socks[i].send(&buf).is_ok() {
            sent[i] += 1;
        }
        seq[i] += 1;
        next[i] = if seq[i] >= cap {
            u64::MAX
        } else {
            due + rngs[i].exp_gap_ns(rate)
        };
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_gaps_have_the_requested_mean() {
        let mut r = SplitMix(42);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exp_gap_ns(1000.0) as f64).sum::<f64>() / n as f64;
        assert!((mean - 1e6).abs() < 0.05e6, "{mean}");
    }
}
