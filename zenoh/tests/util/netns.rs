//! Two hosts on one machine: a network namespace joined to this one by a veth pair, with both
//! ends' egress limited by `tc` (HTB at a rate, `pfifo_fast` under it: three bands by the
//! packets' TOS, so a link marked `IPTOS_LOWDELAY` with Zenoh's `#dscp=0x10` goes first, as on a
//! network that honours DSCP), so that a flood fills the link and not the CPU. Needs root
//! (`ip netns`). (This VM's kernel has neither `fq_codel` nor `prio` nor `netem`.)
//! Shared by the tests (`tests/bridge.rs`) and the benchmark (`benches/latency.rs`).

use std::io;
use std::process::{Command, Stdio};

/// A namespace `ns` reached at `peer_ip` from this one (`host_ip`), deleted on drop.
pub struct Hosts {
    /// The namespace's name.
    pub ns: String,
    /// This side's address.
    pub host_ip: String,
    /// The namespace's address.
    pub peer_ip: String,
    host_if: String,
}

fn run(args: &[&str]) -> io::Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Whether this process may make namespaces (root, and `ip` installed).
#[allow(dead_code)]
pub fn available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Hosts {
    /// Makes the namespace and the veth pair; with `rate_mbit`, shapes both directions to it.
    pub fn new(tag: &str, rate_mbit: Option<u32>) -> io::Result<Hosts> {
        let id = std::process::id() % 200 + 20;
        let ns = format!("lfrt-{tag}-{}", std::process::id());
        let host_if = format!("lz{}h", std::process::id() % 100_000);
        let peer_if = format!("lz{}p", std::process::id() % 100_000);
        let hosts = Hosts {
            ns: ns.clone(),
            host_ip: format!("10.213.{id}.1"),
            peer_ip: format!("10.213.{id}.2"),
            host_if: host_if.clone(),
        };
        // Leftovers of a run that was killed.
        let _ = run(&["ip", "netns", "del", &ns]);
        let _ = run(&["ip", "link", "del", &host_if]);
        run(&["ip", "netns", "add", &ns])?;
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ])?;
        run(&["ip", "link", "set", &peer_if, "netns", &ns])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", hosts.host_ip),
            "dev",
            &host_if,
        ])?;
        run(&["ip", "link", "set", &host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &ns];
            all.extend_from_slice(args);
            run(&all)
        };
        inside(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", hosts.peer_ip),
            "dev",
            &peer_if,
        ])?;
        inside(&["ip", "link", "set", &peer_if, "up"])?;
        inside(&["ip", "link", "set", "lo", "up"])?;
        if let Some(rate) = rate_mbit {
            // Shape packets as a wire sees them: without segmentation offloads a veth hands the
            // qdisc 64 KiB super-packets, and one of them holds the link for 52 ms at 10 Mbit/s
            // whatever band a small packet is in.
            for (dev, exec) in [(&host_if, false), (&peer_if, true)] {
                let off = [
                    "ethtool",
                    "-K",
                    dev.as_str(),
                    "tso",
                    "off",
                    "gso",
                    "off",
                    "gro",
                    "off",
                ];
                if exec {
                    inside(&off)?;
                } else {
                    run(&off)?;
                }
            }
            let rate = format!("{rate}mbit");
            for (dev, exec) in [(&host_if, false), (&peer_if, true)] {
                let shape = |args: &[&str]| if exec { inside(args) } else { run(args) };
                shape(&[
                    "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
                ])?;
                shape(&[
                    "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
                    "rate", &rate, "ceil", &rate,
                ])?;
                shape(&[
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "parent",
                    "1:1",
                    "pfifo_fast",
                ])?;
            }
        }
        Ok(hosts)
    }

    /// `exe` to be run inside the namespace.
    pub fn command(&self, exe: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(exe);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.ns]);
        let _ = run(&["ip", "link", "del", &self.host_if]);
    }
}
