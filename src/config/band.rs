//! `[[band]]`: priority bands on one UDP address, declared in the configuration.
//!
//! ```toml
//! [[band]]
//! bind = "127.0.0.1:7000"
//! classify = { dscp = { 46 = "control", default = "bulk" } }
//! # or: classify = { payload_byte = { offset = 0, map = { 1 = "control" }, default = "bulk" } }
//! handler = "udp-echo"      # the default
//! ```
//!
//! A band table names lanes by value; [`BandConfig::plan`] resolves it into the
//! [`Bands`] plan that [`crate::sources::band::bind`] takes and the lane of each band. Validation and
//! [`Runtime::new`](crate::Runtime::new) both go through `plan`, so what `check` accepts is
//! exactly what `run` binds: `check` even binds the band (sockets and classifier) and releases
//! it, as it does every other address.
//!
//! Band 0 is the default lane's (the kernel sends a datagram too short to hold the byte to
//! socket 0); the other lanes follow in the order of their smallest value.

use super::{addresses_collide, HandlerConfig, Invalid, LaneConfig, RuntimeConfig, Section};
use crate::sources::band::{Bands, Classify};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// What serves each band's socket in its lane (`handler = "udp-echo"`, the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BandHandler {
    /// The built-in UDP echo ([`crate::sources::handlers::UdpEcho`]), as a
    /// `kind = "udp-echo"` handler.
    #[default]
    UdpEcho,
}

/// What a band's classifier reads and which lane each value goes to. Keys are values as
/// written in TOML (`46`), values are lane names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BandClassify {
    /// `dscp = { 46 = "control", default = "bulk" }`: the DSCP (0..=63) of the IPv4 header;
    /// the key `default` names the lane of every other value. IPv6 traffic has no IPv4 TOS
    /// byte: classify it by a payload byte.
    Dscp(BTreeMap<String, String>),
    /// `payload_byte = { offset = 0, map = { 1 = "control" }, default = "bulk" }`: the byte
    /// at `offset` of the datagram's payload (0..=255).
    PayloadByte {
        /// Offset of the byte in the payload.
        offset: u16,
        /// Value → lane.
        map: BTreeMap<String, String>,
        /// The lane of every other value and of datagrams too short to hold the byte.
        #[serde(default)]
        default: Option<String>,
    },
}

/// A `[[band]]` table: one UDP address shared by several lanes, the kernel choosing the lane of
/// each datagram ([`crate::sources::band`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandConfig {
    /// Address every band's socket binds (`SO_REUSEPORT`).
    #[serde(deserialize_with = "super::named::bind")]
    pub bind: SocketAddr,
    /// What the kernel reads, and the lane of each value.
    pub classify: BandClassify,
    /// What serves each band's socket.
    #[serde(default)]
    pub handler: BandHandler,
}

/// A [`BandConfig`] resolved against the lanes: the plan for [`crate::sources::band::bind`] and the
/// lane of each band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandPlan {
    /// The classifier plan; band `i` is served by `lanes[i]`.
    pub bands: Bands,
    /// Lane name of each band; `lanes[0]` is the default lane.
    pub lanes: Vec<String>,
}

impl BandConfig {
    /// Resolves the band against `lanes`: every value parses and is in range (DSCP ≤ 63,
    /// byte ≤ 255) and appears once, every lane named is a lane, and the map is total or has
    /// a default (with a total map and no default, the lane of value 0 also takes datagrams
    /// too short to classify).
    ///
    /// # Errors
    /// What is wrong with `classify`, as a message.
    pub fn plan(&self, lanes: &[LaneConfig]) -> Result<BandPlan, String> {
        let (classify, written, default, max, what) = match &self.classify {
            BandClassify::Dscp(m) => (
                Classify::Dscp,
                m.iter()
                    .filter(|(k, _)| *k != "default")
                    .collect::<Vec<_>>(),
                m.get("default"),
                63u16,
                "a DSCP 0..=63 (or `default`)",
            ),
            BandClassify::PayloadByte {
                offset,
                map,
                default,
            } => (
                Classify::PayloadByte(*offset),
                map.iter().collect(),
                default.as_ref(),
                255,
                "a byte value 0..=255 (the default lane goes in `default`, next to `map`)",
            ),
        };
        let lane = |name: &String| -> Result<String, String> {
            if lanes.iter().any(|g| &g.name == name) {
                Ok(name.clone())
            } else {
                let names: Vec<&str> = lanes.iter().map(|g| g.name.as_str()).collect();
                Err(format!(
                    "no [[lane]] named `{name}` (lanes: {})",
                    names.join(", ")
                ))
            }
        };
        let mut values: Vec<(u8, String)> = Vec::with_capacity(written.len());
        for (key, name) in written {
            let v = key
                .parse::<u16>()
                .ok()
                .filter(|v| *v <= max)
                .ok_or_else(|| format!("`{key}` is not {what}"))?;
            let v = v as u8; // ≤ 255
            if values.iter().any(|(seen, _)| *seen == v) {
                return Err(format!("value {v} is mapped twice"));
            }
            values.push((v, lane(name)?));
        }
        values.sort_unstable();
        let default = match default {
            Some(d) => lane(d)?,
            None if values.len() == usize::from(max) + 1 => values[0].1.clone(),
            None => {
                return Err(format!(
                    "the map gives a lane to {} of the {} values and has no `default`: add \
                     default = \"<lane>\" (or map every value)",
                    values.len(),
                    usize::from(max) + 1
                ))
            }
        };
        let mut lanes = vec![default];
        let mut map = Vec::new();
        for (v, name) in values {
            let band = match lanes.iter().position(|l| *l == name) {
                Some(0) => continue, // the default band takes it anyway
                Some(b) => b,
                None => {
                    lanes.push(name);
                    lanes.len() - 1
                }
            };
            map.push((v, band));
        }
        if map.len() > 255 {
            return Err(format!(
                "{} values go to lanes other than the default: at most 255",
                map.len()
            ));
        }
        Ok(BandPlan {
            bands: Bands {
                classify,
                map,
                default: 0,
                count: lanes.len(),
            },
            lanes,
        })
    }
}

impl RuntimeConfig {
    /// Every `[[band]]`: its plan ([`BandConfig::plan`]), `dscp` only on an IPv4 address, an
    /// address that collides neither with another band's nor with a `udp-echo` handler's (the
    /// band's sockets share their port only among themselves), and room for its sockets in
    /// each lane's `max_handles`.
    pub(super) fn check_bands(&self) -> Result<(), Invalid> {
        let bad = |b: usize, field: &'static str, message: String| Invalid {
            section: Section::Band(b),
            field,
            message,
        };
        let mut extra = vec![0usize; self.lanes.len()];
        for (bi, b) in self.bands.iter().enumerate() {
            let plan = b.plan(&self.lanes).map_err(|m| bad(bi, "classify", m))?;
            if plan.bands.classify == Classify::Dscp && b.bind.is_ipv6() {
                return Err(bad(
                    bi,
                    "classify",
                    format!(
                        "dscp on {}: the classifier reads the DSCP of the IPv4 header, and an \
                         IPv6 socket receives IPv6 datagrams, whose traffic class it does not \
                         read; classify by payload_byte, or bind an IPv4 address",
                        b.bind
                    ),
                ));
            }
            if let Some(other) = self.bands[..bi]
                .iter()
                .position(|o| addresses_collide(o.bind, b.bind))
            {
                return Err(bad(
                    bi,
                    "bind",
                    format!(
                        "{} collides with {} of `band[{other}].bind`: give each band its own \
                         address (one band holds every lane of its port)",
                        b.bind, self.bands[other].bind
                    ),
                ));
            }
            for (gi, g) in self.lanes.iter().enumerate() {
                for (hi, h) in g.handlers.iter().enumerate() {
                    if let HandlerConfig::UdpEcho { bind, .. } = *h {
                        if addresses_collide(bind, b.bind) {
                            return Err(bad(
                                bi,
                                "bind",
                                format!(
                                    "{} collides with {bind} of `lane[{gi}].handler[{hi}].bind`",
                                    b.bind
                                ),
                            ));
                        }
                    }
                }
            }
            for lane in &plan.lanes {
                if let Some(gi) = self.lanes.iter().position(|g| g.name == *lane) {
                    extra[gi] += 1;
                }
            }
        }
        for (gi, g) in self.lanes.iter().enumerate() {
            let handles = g.configured_handles() + extra[gi];
            if extra[gi] > 0 && handles > g.max_handles {
                return Err(Invalid {
                    section: Section::Lane(gi),
                    field: "max_handles",
                    message: format!(
                        "{handles} handles configured ({} of them band sockets) but max_handles \
                         is {}",
                        extra[gi], g.max_handles
                    ),
                });
            }
        }
        Ok(())
    }

    /// Binds every band (sockets and classifier) and releases it at once, as `check_binds`
    /// does for the handlers' addresses.
    pub(super) fn check_band_binds(&self) -> Result<(), Invalid> {
        for (bi, b) in self.bands.iter().enumerate() {
            let plan = b.plan(&self.lanes).map_err(|m| Invalid {
                section: Section::Band(bi),
                field: "classify",
                message: m,
            })?;
            crate::sources::band::bind(b.bind, &plan.bands).map_err(|e| Invalid {
                section: Section::Band(bi),
                field: "bind",
                message: format!("cannot bind the band on {}: {e}", b.bind),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    fn lanes() -> Vec<LaneConfig> {
        vec![
            LaneConfig::new("control", Policy::Fifo, 80),
            LaneConfig::new("bulk", Policy::Fifo, 20),
            LaneConfig::new("log", Policy::Fifo, 10),
        ]
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn band(classify: BandClassify) -> BandConfig {
        BandConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            classify,
            handler: BandHandler::UdpEcho,
        }
    }

    #[test]
    fn the_default_lane_is_band_zero_and_values_sort_numerically() {
        let b = band(BandClassify::Dscp(map(&[
            ("46", "control"),
            ("10", "log"),
            ("9", "control"),
            ("0", "bulk"),
            ("default", "bulk"),
        ])));
        let p = b.plan(&lanes()).unwrap();
        assert_eq!(p.lanes, ["bulk", "control", "log"]);
        assert_eq!(p.bands.classify, Classify::Dscp);
        assert_eq!(p.bands.default, 0);
        assert_eq!(p.bands.count, 3);
        // Value 0 goes to the default lane anyway: no entry for it.
        assert_eq!(p.bands.map, vec![(9, 1), (10, 2), (46, 1)]);
    }

    #[test]
    fn a_total_map_needs_no_default() {
        let all: Vec<(String, String)> = (0..64)
            .map(|v| {
                (
                    v.to_string(),
                    if v == 46 { "control" } else { "bulk" }.to_string(),
                )
            })
            .collect();
        let b = band(BandClassify::Dscp(all.into_iter().collect()));
        let p = b.plan(&lanes()).unwrap();
        assert_eq!(p.lanes, ["bulk", "control"]);
        assert_eq!(p.bands.map, vec![(46, 1)]);
        // A total byte map of 256 values fits: the lane of value 0 is the default.
        let bytes: BTreeMap<String, String> = (0..256)
            .map(|v| (v.to_string(), ["control", "bulk"][v % 2].to_string()))
            .collect();
        let p = band(BandClassify::PayloadByte {
            offset: 3,
            map: bytes,
            default: None,
        })
        .plan(&lanes())
        .unwrap();
        assert_eq!(p.lanes, ["control", "bulk"]);
        assert_eq!(p.bands.map.len(), 128);
        assert_eq!(p.bands.classify, Classify::PayloadByte(3));
    }

    #[test]
    fn bad_maps_are_refused_with_the_reason() {
        let refused = |c: BandClassify| band(c).plan(&lanes()).unwrap_err();
        let e = refused(BandClassify::Dscp(map(&[("46", "control")])));
        assert!(e.contains("no `default`"), "{e}");
        let e = refused(BandClassify::Dscp(map(&[
            ("64", "control"),
            ("default", "bulk"),
        ])));
        assert!(e.contains("`64` is not a DSCP 0..=63"), "{e}");
        let e = refused(BandClassify::Dscp(map(&[
            ("46", "contrl"),
            ("default", "bulk"),
        ])));
        assert!(e.contains("no [[lane]] named `contrl`"), "{e}");
        let e = refused(BandClassify::Dscp(map(&[
            ("46", "control"),
            ("default", "nope"),
        ])));
        assert!(e.contains("`nope`"), "{e}");
        let e = refused(BandClassify::Dscp(map(&[
            ("46", "control"),
            ("046", "bulk"),
            ("default", "bulk"),
        ])));
        assert!(e.contains("mapped twice"), "{e}");
        let e = refused(BandClassify::PayloadByte {
            offset: 0,
            map: map(&[("256", "control")]),
            default: Some("bulk".into()),
        });
        assert!(e.contains("`256` is not a byte value"), "{e}");
        let e = refused(BandClassify::PayloadByte {
            offset: 0,
            map: map(&[("1", "control"), ("default", "bulk")]),
            default: None,
        });
        assert!(e.contains("next to `map`"), "{e}");
    }

    #[test]
    fn bands_collide_with_bands_and_udp_handlers_and_fill_max_handles() {
        let cfg = |bands: Vec<BandConfig>, lanes: Vec<LaneConfig>| RuntimeConfig {
            trace: Default::default(),
            rt: crate::RtMode::BestEffort,
            lock_memory: false,
            lanes,
            bands,
        };
        let at = |b: &BandConfig, addr: &str| BandConfig {
            bind: addr.parse().unwrap(),
            ..b.clone()
        };
        let b = band(BandClassify::Dscp(map(&[
            ("46", "control"),
            ("default", "bulk"),
        ])));
        let e = cfg(
            vec![at(&b, "127.0.0.1:7000"), at(&b, "0.0.0.0:7000")],
            lanes(),
        )
        .check_bands()
        .unwrap_err();
        assert_eq!(e.path(), "band[1].bind");
        assert!(e.message.contains("band[0].bind"), "{}", e.message);
        cfg(
            vec![at(&b, "127.0.0.1:7000"), at(&b, "127.0.0.1:7001")],
            lanes(),
        )
        .check_bands()
        .unwrap();
        let mut g = lanes();
        g[2].handlers.push(HandlerConfig::UdpEcho {
            bind: "127.0.0.1:7000".parse().unwrap(),
        });
        let e = cfg(vec![at(&b, "127.0.0.1:7000")], g)
            .check_bands()
            .unwrap_err();
        assert_eq!(e.path(), "band[0].bind");
        let mut g = lanes();
        g[0].max_handles = 1;
        let e = cfg(vec![at(&b, "127.0.0.1:7000"), at(&b, "127.0.0.1:7001")], g)
            .check_bands()
            .unwrap_err();
        assert_eq!(e.path(), "lane[0].max_handles");
        let e = cfg(vec![at(&b, "[::1]:7000")], lanes())
            .check_bands()
            .unwrap_err();
        assert_eq!(e.path(), "band[0].classify");
        assert!(e.message.contains("IPv4 header"), "{}", e.message);
        let payload = band(BandClassify::PayloadByte {
            offset: 0,
            map: map(&[("1", "control")]),
            default: Some("bulk".into()),
        });
        cfg(vec![at(&payload, "[::1]:7000")], lanes())
            .check_bands()
            .unwrap();
    }
}
