//! A report's two forms: the table `lfrt-loadgen` prints and the JSON document `--json`
//! writes (the report's fields plus the run's configuration).

use super::config::{Clients, LoadConfig, Mode};
use super::report::LoadReport;
use super::sockets::IO_BATCH;

/// The JSON document written by `--json`: the report's fields plus a
/// `"config"` object describing the run.
pub fn report_json(report: &LoadReport, cfg: &LoadConfig, threads: usize) -> serde_json::Value {
    let mut v = serde_json::to_value(report).expect("LoadReport serializes");
    let mut config = serde_json::json!({
        "target": cfg.target.to_string(),
        "ports": cfg.ports,
        "size": cfg.size,
        "duration_s": cfg.duration.as_secs_f64(),
        "drain_ms": cfg.drain.as_secs_f64() * 1e3,
        "timeout_ms": cfg.timeout.as_secs_f64() * 1e3,
        "max_messages": cfg.max_messages,
        "threads": threads,
        "clients": cfg.clients.name(),
        "clients_per_port": cfg.clients.per_port(),
    });
    let mode = serde_json::to_value(cfg.mode).expect("Mode serializes");
    if let (Some(c), serde_json::Value::Object(m)) = (config.as_object_mut(), mode) {
        c.extend(m);
    }
    v.as_object_mut()
        .expect("LoadReport is a JSON object")
        .insert("config".to_string(), config);
    v
}

/// A human-readable table of the report.
pub fn format_report(report: &LoadReport, cfg: &LoadConfig, threads: usize) -> String {
    let mode = match cfg.mode {
        Mode::Closed { window } => format!("closed loop, window {window}/port"),
        Mode::Open { rate_per_s } => format!("open loop, {rate_per_s} msgs/s"),
    };
    let r = report;
    let clients = match cfg.clients {
        Clients::Unbatched { per_port } => {
            format!("{per_port} independent client(s) per port, one datagram per call")
        }
        Clients::Batched => format!("one batched socket per port, up to {IO_BATCH} per call"),
    };
    let mut s = format!(
        "lfrt-loadgen: {mode} -> {} ports {:?}, {} B, {} thread(s), {clients}\n",
        cfg.target, cfg.ports, cfg.size, threads
    );
    let saturated = if r.generator_saturated {
        " GEN-SATURATED: this run measures the generator"
    } else {
        ""
    };
    let rows: [(&str, String); 15] = [
        ("sent", r.sent.to_string()),
        ("received", r.received.to_string()),
        ("lost", r.lost.to_string()),
        ("duplicates", r.duplicates.to_string()),
        ("corrupt", r.corrupt.to_string()),
        ("late_sends", r.late_sends.to_string()),
        ("send_errors", r.send_errors.to_string()),
        ("duration", format!("{:.3} s", r.duration_s)),
        (
            "throughput",
            format!("{:.1} msgs/s", r.throughput_msgs_per_s),
        ),
        (
            "rtt p50/p99",
            format!("{:.1} / {:.1} us", r.rtt_us.p50, r.rtt_us.p99),
        ),
        (
            "rtt p99.9/max",
            format!("{:.1} / {:.1} us", r.rtt_us.p999, r.rtt_us.max),
        ),
        ("rtt mean", format!("{:.1} us", r.rtt_us.mean)),
        (
            "port fairness",
            format!(
                "{:.3} (least-served port / mean of {} ports)",
                r.port_fairness,
                r.received_per_port.len()
            ),
        ),
        (
            "syscalls",
            format!(
                "{} send, {} recv ({} sockets)",
                r.send_calls, r.recv_calls, r.client_sockets
            ),
        ),
        (
            "generator cpu",
            format!(
                "{:.0} % busiest thread, {:.0} % all{saturated}",
                r.generator_cpu_pct, r.generator_cpu_total_pct
            ),
        ),
    ];
    for (k, v) in rows {
        s.push_str(&format!("  {k:<14} {v:>20}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::report::{merge, new_histogram, GEN_SATURATED_PCT};
    use crate::loadgen::wire::NS_PER_S;
    use crate::loadgen::worker::{Counters, WorkerResult};
    use std::net::{IpAddr, Ipv4Addr};

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn json_report_has_expected_fields() {
        let cfg = LoadConfig::new(LOCAL, vec![7000], Mode::Open { rate_per_s: 10 });
        let report = merge(
            vec![WorkerResult {
                c: Counters {
                    sent: 3,
                    received: 2,
                    ..Counters::default()
                },
                lost: 1,
                hist: new_histogram().unwrap(),
                active_end_ns: NS_PER_S,
                per_port: vec![(0, 2)],
                cpu_ns: 900_000_000,
                wall_ns: NS_PER_S,
            }],
            0,
        )
        .unwrap();
        let v = report_json(&report, &cfg, 1);
        for k in [
            "sent",
            "received",
            "lost",
            "duplicates",
            "corrupt",
            "late_sends",
            "duration_s",
            "throughput_msgs_per_s",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        for k in ["p50", "p99", "p999", "max", "mean"] {
            assert!(v["rtt_us"].get(k).is_some(), "missing rtt_us.{k}");
        }
        assert_eq!(v["config"]["mode"], "open");
        assert_eq!(v["config"]["rate_per_s"], 10);
        assert_eq!(v["throughput_msgs_per_s"], 2.0);
        assert_eq!(v["received_per_port"], serde_json::json!([2]));
        assert_eq!(v["port_fairness"], 1.0);
        assert_eq!(v["config"]["clients"], "unbatched");
        assert_eq!(v["generator_cpu_pct"], 90.0);
        assert_eq!(
            v["generator_saturated"], true,
            "90 % > {GEN_SATURATED_PCT} %"
        );
        for k in [
            "send_calls",
            "recv_calls",
            "client_sockets",
            "generator_cpu_total_pct",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
    }
}
