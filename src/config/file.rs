//! TOML configuration files: parse into [`RuntimeConfig`], reporting file, line and field.

use super::{GroupConfig, HandlerConfig, OnOverrun, Policy, RtMode, RuntimeConfig};
use crate::error::Error;
use crate::follower_queue::Promotion;
use serde::Deserialize;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    runtime: Option<RawRuntime>,
    #[serde(default)]
    group: Vec<Spanned<RawGroup>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    rt: Option<Spanned<String>>,
    lock_memory: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: Spanned<String>,
    priority: Option<Spanned<i64>>,
    policy: Option<Spanned<String>>,
    threads: Option<Spanned<i64>>,
    cpus: Option<Spanned<Vec<i64>>>,
    promotion: Option<Spanned<String>>,
    thread_priorities: Option<Spanned<Vec<i64>>>,
    buffer_bytes: Option<Spanned<i64>>,
    max_handles: Option<Spanned<i64>>,
    stack_bytes: Option<Spanned<i64>>,
    budget_us: Option<Spanned<i64>>,
    on_overrun: Option<Spanned<String>>,
    #[serde(default)]
    handler: Vec<Spanned<RawHandler>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHandler {
    kind: Spanned<String>,
    bind: Option<Spanned<String>>,
    work_us: Option<Spanned<i64>>,
    interval_us: Option<Spanned<i64>>,
    count: Option<Spanned<i64>>,
    distance_us: Option<Spanned<i64>>,
}

type Key = (Option<usize>, Option<usize>, &'static str);

/// Collects where each field was written, to point errors at it.
struct Spans<'s> {
    src: &'s str,
    file: Option<&'s Path>,
    at: HashMap<Key, Range<usize>>,
}

impl Spans<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.src[..offset.min(self.src.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    fn error(&self, span: Option<Range<usize>>, field: String, message: String) -> Error {
        Error::Config {
            file: self.file.map(Path::to_path_buf),
            line: span.map(|s| self.line_of(s.start)),
            field,
            message,
        }
    }

    /// The span of a field, falling back to its enclosing table (for defaulted fields).
    fn find(
        &self,
        g: Option<usize>,
        h: Option<usize>,
        field: &'static str,
    ) -> Option<Range<usize>> {
        self.at
            .get(&(g, h, field))
            .or_else(|| self.at.get(&(g, h, "")))
            .or_else(|| self.at.get(&(g, None, "")))
            .cloned()
    }
}

fn path(g: Option<usize>, h: Option<usize>, field: &str) -> String {
    match (g, h) {
        (Some(g), Some(h)) => format!("group[{g}].handler[{h}].{field}"),
        (Some(g), None) => format!("group[{g}].{field}"),
        _ => format!("runtime.{field}"),
    }
}

/// Reads and validates a configuration file. Nothing is started.
///
/// # Errors
/// [`Error::Config`] naming the file, the line and the field (`group[1].priority`) for syntax
/// errors, unknown keys, wrong types, out-of-range values, duplicate priorities, missing CPUs,
/// bad addresses and ports in use; [`Error::Io`] if the file cannot be read.
pub fn load(file: &Path) -> Result<RuntimeConfig, Error> {
    let src = std::fs::read_to_string(file).map_err(|e| Error::Config {
        file: Some(file.to_path_buf()),
        line: None,
        field: "file".into(),
        message: format!("cannot read: {e}"),
    })?;
    parse_inner(&src, Some(file))
}

/// Parses and validates configuration text (errors carry line numbers but no file name).
pub fn parse(src: &str) -> Result<RuntimeConfig, Error> {
    parse_inner(src, None)
}

fn parse_inner(src: &str, file: Option<&Path>) -> Result<RuntimeConfig, Error> {
    let mut spans = Spans {
        src,
        file,
        at: HashMap::new(),
    };
    let raw: RawFile = toml::from_str(src).map_err(|e| {
        let msg = e.message().trim().to_string();
        let field = msg
            .split('`')
            .nth(1)
            .filter(|_| msg.starts_with("unknown field") || msg.starts_with("missing field"))
            .unwrap_or("toml")
            .to_string();
        spans.error(e.span(), field, msg)
    })?;
    let cfg = convert(raw, &mut spans)?;
    cfg.validate().map_err(|inv| {
        let span = spans.find(inv.group, inv.handler, inv.field);
        spans.error(span, inv.path(), inv.message)
    })?;
    Ok(cfg)
}

fn convert(raw: RawFile, spans: &mut Spans<'_>) -> Result<RuntimeConfig, Error> {
    let mut cfg = RuntimeConfig::default();
    if let Some(rt) = raw.runtime {
        if let Some(mode) = rt.rt {
            cfg.rt = match mode.get_ref().as_str() {
                "best-effort" => RtMode::BestEffort,
                "required" => RtMode::Required,
                other => {
                    return Err(spans.error(
                        Some(mode.span()),
                        "runtime.rt".into(),
                        format!("`{other}`: expected \"best-effort\" or \"required\""),
                    ))
                }
            };
        }
        cfg.lock_memory = rt.lock_memory.unwrap_or(false);
    }
    for (gi, rg) in raw.group.into_iter().enumerate() {
        let g = Some(gi);
        spans.at.insert((g, None, ""), rg.span());
        let rg = rg.into_inner();
        let mut out = GroupConfig::new(rg.name.get_ref().clone(), 0);
        spans.at.insert((g, None, "name"), rg.name.span());

        macro_rules! int {
            ($field:ident, $ty:ty) => {
                match rg.$field {
                    Some(v) => {
                        spans.at.insert((g, None, stringify!($field)), v.span());
                        Some(<$ty>::try_from(*v.get_ref()).map_err(|_| {
                            spans.error(
                                Some(v.span()),
                                path(g, None, stringify!($field)),
                                format!("{} is out of range", v.get_ref()),
                            )
                        })?)
                    }
                    None => None,
                }
            };
        }
        macro_rules! word {
            ($field:ident, $($name:literal => $val:expr),+) => {
                match rg.$field {
                    Some(v) => {
                        spans.at.insert((g, None, stringify!($field)), v.span());
                        Some(match v.get_ref().as_str() {
                            $($name => $val,)+
                            other => return Err(spans.error(Some(v.span()), path(g, None, stringify!($field)),
                                format!(concat!("`{}`: expected one of", $(" \"", $name, "\""),+), other))),
                        })
                    }
                    None => None,
                }
            };
        }

        out.policy =
            word!(policy, "fifo" => Policy::Fifo, "rr" => Policy::Rr, "other" => Policy::Other)
                .unwrap_or_default();
        out.priority = match int!(priority, u8) {
            Some(p) => p,
            None if out.policy == Policy::Other => 0,
            None => {
                return Err(spans.error(
                    spans.find(g, None, ""),
                    path(g, None, "priority"),
                    "missing: SCHED_FIFO/RR groups need a priority 1..=99".into(),
                ))
            }
        };
        out.threads = int!(threads, usize).unwrap_or(out.threads);
        out.promotion = word!(promotion, "priority" => Promotion::Priority, "lifo" => Promotion::Lifo, "fifo" => Promotion::Fifo).unwrap_or_default();
        out.buffer_bytes = int!(buffer_bytes, usize).unwrap_or(out.buffer_bytes);
        out.max_handles = int!(max_handles, usize).unwrap_or(out.max_handles);
        out.stack_bytes = int!(stack_bytes, usize).unwrap_or(out.stack_bytes);
        out.budget_us = int!(budget_us, u64);
        out.on_overrun =
            word!(on_overrun, "report" => OnOverrun::Report, "demote" => OnOverrun::Demote)
                .unwrap_or_default();
        if let Some(c) = rg.cpus {
            spans.at.insert((g, None, "cpus"), c.span());
            let list = c
                .get_ref()
                .iter()
                .map(|&x| usize::try_from(x))
                .collect::<Result<Vec<_>, _>>();
            out.cpus = Some(list.map_err(|_| {
                spans.error(
                    Some(c.span()),
                    path(g, None, "cpus"),
                    "CPU numbers are 0 or more".into(),
                )
            })?);
        }
        if let Some(tp) = rg.thread_priorities {
            spans.at.insert((g, None, "thread_priorities"), tp.span());
            let list = tp
                .get_ref()
                .iter()
                .map(|&x| u8::try_from(x))
                .collect::<Result<Vec<_>, _>>();
            out.thread_priorities = Some(list.map_err(|_| {
                spans.error(
                    Some(tp.span()),
                    path(g, None, "thread_priorities"),
                    "priorities are 1..=99".into(),
                )
            })?);
        }
        for (hi, rh) in rg.handler.into_iter().enumerate() {
            let h = Some(hi);
            spans.at.insert((g, h, ""), rh.span());
            let rh = rh.into_inner();
            spans.at.insert((g, h, "kind"), rh.kind.span());
            let mut get = |v: Option<Spanned<i64>>,
                           field: &'static str,
                           default: Option<u64>|
             -> Result<u64, Error> {
                match v {
                    Some(v) => {
                        spans.at.insert((g, h, field), v.span());
                        u64::try_from(*v.get_ref()).map_err(|_| {
                            spans.error(
                                Some(v.span()),
                                path(g, h, field),
                                format!("{} is negative", v.get_ref()),
                            )
                        })
                    }
                    None => default.ok_or_else(|| {
                        spans.error(spans.find(g, h, ""), path(g, h, field), "missing".into())
                    }),
                }
            };
            let kind = rh.kind.get_ref().as_str();
            let allowed: &[&str] = match kind {
                "udp-echo" | "tcp-echo" => &["bind", "work_us"],
                "timer" => &["interval_us", "count", "distance_us"],
                other => {
                    return Err(spans.error(
                        Some(rh.kind.span()),
                        path(g, h, "kind"),
                        format!("`{other}`: expected one of \"udp-echo\", \"tcp-echo\", \"timer\""),
                    ))
                }
            };
            let present = [
                ("bind", rh.bind.as_ref().map(|s| s.span())),
                ("work_us", rh.work_us.as_ref().map(|s| s.span())),
                ("interval_us", rh.interval_us.as_ref().map(|s| s.span())),
                ("count", rh.count.as_ref().map(|s| s.span())),
                ("distance_us", rh.distance_us.as_ref().map(|s| s.span())),
            ];
            if let Some((f, span)) = present
                .iter()
                .find(|(f, s)| s.is_some() && !allowed.contains(f))
            {
                return Err(spans.error(
                    span.clone(),
                    path(g, h, f),
                    format!("not a setting of kind \"{kind}\" (it takes {allowed:?})"),
                ));
            }
            let handler = match kind {
                "timer" => HandlerConfig::Timer {
                    interval_us: get(rh.interval_us, "interval_us", None)?,
                    count: get(rh.count, "count", Some(1))? as usize,
                    distance_us: get(rh.distance_us, "distance_us", Some(0))?,
                },
                _ => {
                    let work_us = get(rh.work_us, "work_us", Some(0))?;
                    let bind = match rh.bind {
                        Some(b) => {
                            spans.at.insert((g, h, "bind"), b.span());
                            b.get_ref().parse().map_err(|_| {
                                spans.error(
                                    Some(b.span()),
                                    path(g, h, "bind"),
                                    format!(
                                        "`{}` is not an address like \"127.0.0.1:7000\"",
                                        b.get_ref()
                                    ),
                                )
                            })?
                        }
                        None => {
                            return Err(spans.error(
                                spans.find(g, h, ""),
                                path(g, h, "bind"),
                                "missing: an address like \"127.0.0.1:7000\"".into(),
                            ))
                        }
                    };
                    if kind == "udp-echo" {
                        HandlerConfig::UdpEcho { bind, work_us }
                    } else {
                        HandlerConfig::TcpEcho { bind, work_us }
                    }
                }
            };
            out.handlers.push(handler);
        }
        cfg.groups.push(out);
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[runtime]
rt = "best-effort"
lock_memory = false

[[group]]
name = "control"
priority = 80
threads = 2
promotion = "lifo"

[[group.handler]]
kind = "timer"
interval_us = 1000

[[group]]
name = "bulk"
priority = 20
threads = 1
"#;

    fn err(src: &str) -> (Option<usize>, String, String) {
        match parse(src).unwrap_err() {
            Error::Config {
                line,
                field,
                message,
                ..
            } => (line, field, message),
            other => panic!("not a config error: {other}"),
        }
    }

    #[test]
    fn good_file_parses() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.groups.len(), 2);
        assert_eq!(c.groups[0].promotion, Promotion::Lifo);
        assert_eq!(
            c.groups[0].handlers,
            vec![HandlerConfig::Timer {
                interval_us: 1000,
                count: 1,
                distance_us: 0
            }]
        );
    }

    #[test]
    fn priority_out_of_range_names_line_and_field() {
        let (line, field, msg) = err(&GOOD.replace("priority = 20", "priority = 120"));
        assert_eq!(
            (line, field.as_str()),
            (Some(18), "group[1].priority"),
            "{msg}"
        );
    }

    #[test]
    fn duplicate_priority() {
        let (line, field, msg) = err(&GOOD.replace("priority = 20", "priority = 80"));
        assert_eq!((line, field.as_str()), (Some(18), "group[1].priority"));
        assert!(msg.contains("control"), "{msg}");
    }

    #[test]
    fn missing_cpu() {
        let (line, field, _) = err(&GOOD.replace("threads = 1", "threads = 1\ncpus = [4096]"));
        assert_eq!((line, field.as_str()), (Some(20), "group[1].cpus"));
    }

    #[test]
    fn zero_threads() {
        let (line, field, _) = err(&GOOD.replace("threads = 1", "threads = 0"));
        assert_eq!((line, field.as_str()), (Some(19), "group[1].threads"));
    }

    #[test]
    fn unknown_key() {
        let (line, field, msg) = err(&GOOD.replace("threads = 1", "wokers = 1"));
        assert_eq!((line, field.as_str()), (Some(19), "wokers"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");
    }

    #[test]
    fn unknown_promotion() {
        let (line, field, msg) = err(&GOOD.replace("\"lifo\"", "\"random\""));
        assert_eq!((line, field.as_str()), (Some(10), "group[0].promotion"));
        assert!(msg.contains("\"priority\""), "{msg}");
    }

    #[test]
    fn bad_address_and_port_in_use() {
        let src = GOOD.replace(
            "kind = \"timer\"\ninterval_us = 1000",
            "kind = \"udp-echo\"\nbind = \"127.0.0.1:99999\"",
        );
        let (line, field, _) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (Some(14), "group[0].handler[0].bind")
        );
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let src = GOOD.replace(
            "kind = \"timer\"\ninterval_us = 1000",
            &format!(
                "kind = \"udp-echo\"\nbind = \"{}\"",
                held.local_addr().unwrap()
            ),
        );
        let (line, field, msg) = err(&src);
        assert_eq!(
            (line, field.as_str()),
            (Some(14), "group[0].handler[0].bind")
        );
        assert!(msg.contains("in use"), "{msg}");
    }

    #[test]
    fn handler_setting_of_other_kind() {
        let (line, field, _) = err(&GOOD.replace(
            "interval_us = 1000",
            "interval_us = 1000\nbind = \"127.0.0.1:1\"",
        ));
        assert_eq!(
            (line, field.as_str()),
            (Some(15), "group[0].handler[0].bind")
        );
    }

    #[test]
    fn every_shipped_config_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                // Parse only (ports may be taken by a concurrently running test): check syntax and ranges.
                let src = std::fs::read_to_string(&p).unwrap();
                let raw: RawFile =
                    toml::from_str(&src).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                let mut spans = Spans {
                    src: &src,
                    file: Some(&p),
                    at: HashMap::new(),
                };
                let c = convert(raw, &mut spans).unwrap_or_else(|e| panic!("{e}"));
                assert!(!c.groups.is_empty(), "{}", p.display());
                n += 1;
            }
        }
        assert!(n >= 2);
    }
}
