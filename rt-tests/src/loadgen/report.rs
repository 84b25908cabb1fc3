//! The result accounting: what a run reports ([`LoadReport`], [`RttSummary`]), merged from its
//! threads' counts, round-trip histograms, per-port service and CPU time, with the invariant
//! `sent == received + lost` checked on the way.

use super::wire::NS_PER_S;
use super::worker::WorkerResult;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io;

/// Above this CPU share (% of one CPU, busiest generator thread) a run measures the
/// generator rather than the server: reports flag it (`generator_saturated`).
pub const GEN_SATURATED_PCT: f64 = 80.0;

/// Round-trip-time percentiles in microseconds (all 0 when nothing was received).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RttSummary {
    /// Median RTT in µs.
    pub p50: f64,
    /// 99th percentile RTT in µs.
    pub p99: f64,
    /// 99.9th percentile RTT in µs.
    pub p999: f64,
    /// Largest RTT in µs.
    pub max: f64,
    /// Mean RTT in µs.
    pub mean: f64,
}

/// Result of one run. `sent == received + lost` always holds.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Datagrams handed to the kernel successfully.
    pub sent: u64,
    /// Unique sent datagrams whose intact echo came back.
    pub received: u64,
    /// `sent - received` after the drain.
    pub lost: u64,
    /// Intact echoes of a datagram that had already been received.
    pub duplicates: u64,
    /// Echoes that match nothing that was sent (wrong size, port index,
    /// sequence, timestamp or padding). They are not counted as received.
    pub corrupt: u64,
    /// Open loop: sends that missed their deadline by more than
    /// max(100 µs, one interval), plus slots skipped because the sender fell
    /// more than max(10 ms, two intervals) behind. Always 0 in closed loop.
    pub late_sends: u64,
    /// Send attempts the kernel refused (ECONNREFUSED twice in a row,
    /// EAGAIN, ENOBUFS); they are not counted in `sent`.
    pub send_errors: u64,
    /// Active seconds: from the start until sending stopped or the last
    /// reply arrived, whichever is later.
    pub duration_s: f64,
    /// `received / duration_s`.
    pub throughput_msgs_per_s: f64,
    /// Round-trip times.
    pub rtt_us: RttSummary,
    /// Datagrams received per target port, in `LoadConfig::ports` order.
    pub received_per_port: Vec<u64>,
    /// Per-port fairness: the least-served port's `received` over the mean per port (1.0 =
    /// every port served equally; 0.0 when nothing was received).
    pub port_fairness: f64,
    /// System calls that sent datagrams (`send` or `sendmmsg`): equals `sent` with
    /// unbatched clients.
    pub send_calls: u64,
    /// System calls that returned datagrams (`recv` or `recvmmsg`): equals `received +
    /// duplicates + corrupt` with unbatched clients.
    pub recv_calls: u64,
    /// Distinct client sockets (source ports) the datagrams were sent from.
    pub client_sockets: usize,
    /// CPU share of the busiest generator thread over its send phase, in % of one CPU
    /// (`CLOCK_THREAD_CPUTIME_ID` / wall time).
    pub generator_cpu_pct: f64,
    /// CPU time of all generator threads over the send phase, in % of one CPU.
    pub generator_cpu_total_pct: f64,
    /// `generator_cpu_pct` > [`GEN_SATURATED_PCT`]: the figures measure the generator.
    pub generator_saturated: bool,
}

/// The least-served port's count over the mean count per port: 1.0 when every port got the
/// same service, 0.0 when nothing was received (or there are no ports).
pub fn port_fairness(per_port: &[u64]) -> f64 {
    let total: u64 = per_port.iter().sum();
    match per_port.iter().min() {
        Some(&min) if total > 0 => min as f64 * per_port.len() as f64 / total as f64,
        _ => 0.0,
    }
}

/// `part` in % of `whole` (0 when `whole` is 0).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

pub(crate) fn merge(results: Vec<WorkerResult>, start_ns: u64) -> io::Result<LoadReport> {
    let mut hist = new_histogram()?;
    let mut r = LoadReport {
        sent: 0,
        received: 0,
        lost: 0,
        duplicates: 0,
        corrupt: 0,
        late_sends: 0,
        send_errors: 0,
        duration_s: 0.0,
        throughput_msgs_per_s: 0.0,
        rtt_us: RttSummary::default(),
        received_per_port: Vec::new(),
        port_fairness: 0.0,
        send_calls: 0,
        recv_calls: 0,
        client_sockets: 0,
        generator_cpu_pct: 0.0,
        generator_cpu_total_pct: 0.0,
        generator_saturated: false,
    };
    let mut end_ns = start_ns;
    let ports = results
        .iter()
        .flat_map(|w| w.per_port.iter().map(|&(index, _)| index as usize + 1))
        .max()
        .unwrap_or(0);
    r.received_per_port = vec![0; ports];
    let (mut cpu_total, mut wall_max) = (0u64, 0u64);
    for w in results {
        for &(index, received) in &w.per_port {
            r.received_per_port[index as usize] += received;
        }
        r.send_calls += w.c.send_calls;
        r.recv_calls += w.c.recv_calls;
        r.client_sockets += w.per_port.len();
        cpu_total += w.cpu_ns;
        wall_max = wall_max.max(w.wall_ns);
        r.generator_cpu_pct = r.generator_cpu_pct.max(pct(w.cpu_ns, w.wall_ns));
        r.sent += w.c.sent;
        r.received += w.c.received;
        r.lost += w.lost;
        r.duplicates += w.c.duplicates;
        r.corrupt += w.c.corrupt;
        r.late_sends += w.c.late_sends;
        r.send_errors += w.c.send_errors;
        end_ns = end_ns.max(w.active_end_ns);
        hist.add(&w.hist)
            .map_err(|e| io::Error::other(format!("merging RTT histograms: {e:?}")))?;
    }
    assert_eq!(
        r.sent,
        r.received + r.lost,
        "accounting invariant sent == received + lost violated"
    );
    r.port_fairness = port_fairness(&r.received_per_port);
    r.generator_cpu_total_pct = pct(cpu_total, wall_max);
    r.generator_saturated = r.generator_cpu_pct > GEN_SATURATED_PCT;
    r.duration_s = end_ns.saturating_sub(start_ns) as f64 / NS_PER_S as f64;
    r.throughput_msgs_per_s = if r.duration_s > 0.0 {
        r.received as f64 / r.duration_s
    } else {
        0.0
    };
    if !hist.is_empty() {
        let us = |ns: u64| ns as f64 / 1000.0;
        r.rtt_us = RttSummary {
            p50: us(hist.value_at_quantile(0.50)),
            p99: us(hist.value_at_quantile(0.99)),
            p999: us(hist.value_at_quantile(0.999)),
            max: us(hist.max()),
            mean: hist.mean() / 1000.0,
        };
    }
    Ok(r)
}

pub(crate) fn new_histogram() -> io::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 10 * NS_PER_S, 3)
        .map_err(|e| io::Error::other(format!("creating RTT histogram: {e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_fairness_is_the_least_served_port_over_the_mean() {
        assert_eq!(port_fairness(&[]), 0.0);
        assert_eq!(port_fairness(&[0, 0]), 0.0);
        assert_eq!(port_fairness(&[5, 5, 5]), 1.0);
        assert_eq!(port_fairness(&[50, 100, 150]), 0.5);
    }
}
