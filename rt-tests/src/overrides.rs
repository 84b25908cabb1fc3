//! How the `lfrt` command reads a configuration file: `--set PATH=VALUE` and `LFRT_SET`
//! (overrides of the file's values, without editing the file), and the command's own key,
//! `[runtime] metrics`.
//!
//! The overrides edit the file's TOML document, which is then read by lfrt's own loader
//! ([`lfrt::parse_config`]: the same deserializer and validation as a file). Errors are pointed
//! back at their cause: an error in an overridden value names the override
//! (``invalid `--set lane.a.priority=900`: 900: must be 1..=99``), any other error the file and
//! its line there ([`lfrt::config_line`]), as [`lfrt::load_config`]'s do.
//!
//! `[runtime] metrics = "127.0.0.1:9464"` says where `lfrt run` serves live metrics in
//! Prometheus text format ([`crate::live`]). The runtime never reads it, so the library does not
//! know the key: it is taken out of the document here, before lfrt reads the rest, and checked
//! here as `run` would fail on it (see [`Loaded::metrics`]), so `lfrt check` refuses it too.
//!
//! `PATH` is one of
//! * `runtime.KEY`;
//! * `lane.NAME.KEY`, `NAME` the `name` of a `[[lane]]`;
//! * `lane.NAME.handler[I].KEY`, `I` the index of one of its `[[lane.handler]]`s (from 0);
//! * `lane.NAME.bound.KEY`, a key of its `[lane.bound]` table;
//! * `band[I].KEY`, `I` the index of a `[[band]]` (from 0; bands have no names).
//!
//! Only tables the file has can be edited: a new handler, bound table or band would need all of
//! its fields (and a bound table changes what the lane is). `VALUE` is a TOML value (`90`,
//! `[1]`, `"rr"`), or, if it does not parse as one, a string (`policy=rr`).

use lfrt::{Error, HandlerConfig, RuntimeConfig};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

/// A configuration as the `lfrt` command reads it.
#[derive(Debug)]
pub struct Loaded {
    /// What the runtime runs (validated by lfrt).
    pub config: RuntimeConfig,
    /// Where `lfrt run` serves live metrics (`[runtime] metrics`, `--metrics`); `None`: not
    /// served. Checked as `run` would fail on it: an address like `"127.0.0.1:9464"` with an
    /// explicit port and address (a scraper must know the port, and serving every interface
    /// must be written out), bindable now, and not the address of a `tcp-echo` handler (both
    /// are bound at once and the kernel says whether they collide).
    pub metrics: Option<SocketAddr>,
    /// Where each overridden value came from, for the plan.
    pub provenance: Vec<Provenance>,
}

/// Where an override comes from, in the precedence REP-2017 gives them: the file is overridden
/// by the environment ([`OverrideSource::Env`]), which is overridden by the command line
/// ([`OverrideSource::Flag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OverrideSource {
    /// `LFRT_SET` in the environment.
    Env,
    /// A `--set` flag.
    Flag,
    /// A command-line flag that stands for one `--set` (`--metrics ADDR` is
    /// `runtime.metrics=ADDR`): the flag's name, which errors and the plan show instead.
    Shorthand(&'static str),
}

/// One `PATH=VALUE` override of a configuration file's value (the module doc gives `PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Where it was given.
    pub source: OverrideSource,
    /// `PATH=VALUE` as given.
    pub text: String,
}

impl Override {
    /// How errors and the plan name it: `--set lane.a.priority=90`,
    /// `LFRT_SET lane.a.priority=90`, or `--metrics 127.0.0.1:9464` for a shorthand flag.
    pub fn label(&self) -> String {
        match self.source {
            OverrideSource::Env => format!("LFRT_SET {}", self.text),
            OverrideSource::Flag => format!("--set {}", self.text),
            OverrideSource::Shorthand(flag) => {
                let value = self.text.split_once('=').map_or("", |(_, v)| v);
                format!("{flag} {}", value.trim())
            }
        }
    }
}

/// Where one overridden value came from, for the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// The value's path as errors name it: `lane[0].priority`.
    pub path: String,
    /// The override that set it last.
    pub set_by: Override,
    /// Where the file had the value (`file:line`), if it had one.
    pub replaced: Option<String>,
}

/// Reads a configuration file, applies `overrides` in order (give the environment's before the
/// flags': the last one of a path wins), takes the command's own `[runtime] metrics` out and
/// validates the rest as [`lfrt::load_config`] does.
///
/// # Errors
/// As [`lfrt::load_config`], plus an override that is not `PATH=VALUE`, names no existing
/// lane, handler, bound table or band, or sets a value the configuration refuses, and a
/// metrics address `run` could not serve ([`Loaded::metrics`]).
pub fn load(file: &Path, overrides: &[Override]) -> Result<Loaded, Error> {
    let in_file = |line: Option<usize>, field: String, message: String| Error::Config {
        file: Some(file.to_path_buf()),
        line,
        field,
        message,
    };
    // An error of lfrt's loader about this text, pointed at the file.
    let of_file = |e: Error| match e {
        Error::Config {
            line,
            field,
            message,
            ..
        } => in_file(line, field, message),
        other => other,
    };
    let src = std::fs::read_to_string(file)
        .map_err(|e| in_file(None, "file".into(), format!("cannot read: {e}")))?;
    if overrides.is_empty() && lfrt::config_line(&src, METRICS).is_none() {
        // Nothing for this loader to do: lfrt's own, with its exact lines.
        return lfrt::parse_config(&src)
            .map_err(of_file)
            .map(|config| Loaded {
                config,
                metrics: None,
                provenance: Vec::new(),
            });
    }
    // Syntax errors of the file itself first, as lfrt's loader names them (at their lines).
    let mut doc: toml::Table = match toml::from_str(&src) {
        Ok(doc) => doc,
        Err(e) => {
            return Err(match lfrt::parse_config(&src) {
                Err(syntax) => of_file(syntax),
                Ok(_) => in_file(None, "toml".into(), e.message().trim().to_string()),
            })
        }
    };
    // A file that still writes `[[group]]`: lfrt's loader reads it as `[[lane]]` (and refuses
    // both at once); overrides name lanes by the new key.
    if doc.contains_key("group") && !doc.contains_key("lane") {
        if let Some(lanes) = doc.remove("group") {
            tracing::warn!("`[[group]]` is deprecated, write `[[lane]]`; read as `[[lane]]`");
            doc.insert("lane".into(), lanes);
        }
    } else if doc.contains_key("group") {
        return lfrt::parse_config(&src)
            .map_err(of_file)
            .map(|config| Loaded {
                config,
                metrics: None,
                provenance: Vec::new(),
            });
    }
    // Path as errors name it, and the override that set it last.
    let mut applied: Vec<(String, Override)> = Vec::new();
    for o in overrides {
        let path = apply(&mut doc, &o.text).map_err(|message| Error::Config {
            file: None,
            line: None,
            field: o.label(),
            message,
        })?;
        applied.retain(|(p, _)| *p != path);
        applied.push((path, o.clone()));
    }
    let metrics = doc
        .get_mut("runtime")
        .and_then(toml::Value::as_table_mut)
        .and_then(|t| t.remove("metrics"));
    // An error in an overridden value names the override; any other, the file's line of the
    // value, else of its table.
    let blame = |field: String, message: String| match applied.iter().find(|(p, _)| *p == field) {
        Some((_, o)) => Error::Config {
            file: None,
            line: None,
            field: o.label(),
            message,
        },
        None => {
            let line = lfrt::config_line(&src, &field).or_else(|| {
                let table = field.rsplit_once('.').map_or("", |(t, _)| t);
                lfrt::config_line(&src, table)
            });
            in_file(line, field, message)
        }
    };
    let edited = toml::to_string(&doc).map_err(|e| in_file(None, "toml".into(), e.to_string()))?;
    let cfg = lfrt::parse_config(&edited).map_err(|e| match e {
        Error::Config { field, message, .. } => blame(field, message),
        other => other,
    })?;
    let metrics = metrics
        .map(|v| metrics_address(&v, &cfg))
        .transpose()
        .map_err(|message| blame(METRICS.into(), message))?;
    let provenance = applied
        .into_iter()
        .map(|(path, set_by)| Provenance {
            replaced: lfrt::config_line(&src, &path)
                .map(|line| format!("{}:{line}", file.display())),
            path,
            set_by,
        })
        .collect();
    Ok(Loaded {
        config: cfg,
        metrics,
        provenance,
    })
}

/// The path of the command's own key, as errors name it.
const METRICS: &str = "runtime.metrics";

/// `[runtime] metrics`, checked as [`Loaded::metrics`] says.
fn metrics_address(value: &toml::Value, cfg: &RuntimeConfig) -> Result<SocketAddr, String> {
    let addr = value
        .as_str()
        .and_then(|t| t.parse::<SocketAddr>().ok())
        .ok_or_else(|| format!("`{value}` is not an address like \"127.0.0.1:9464\""))?;
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return Err(format!(
            "{addr}: give an explicit address and port, like \"127.0.0.1:9464\" (no port 0, no \
             wildcard address)"
        ));
    }
    let exporter = TcpListener::bind(addr).map_err(|e| format!("cannot bind {addr}: {e}"))?;
    // `run` listens on it beside every tcp-echo handler; lfrt's validation has just bound each
    // handler's address alone, so one that fails while the exporter listens collides with it.
    for (gi, g) in cfg.lanes.iter().enumerate() {
        for (hi, h) in g.handlers.iter().enumerate() {
            if let HandlerConfig::TcpEcho { bind, .. } = h {
                if let Err(e) = TcpListener::bind(bind) {
                    return Err(format!(
                        "{addr} collides with {bind} of `lane[{gi}].handler[{hi}].bind` ({e})"
                    ));
                }
            }
        }
    }
    drop(exporter);
    Ok(addr)
}

/// The index in `item[INDEX]`, or an error naming the expected form.
fn index(part: &str, item: &str) -> Result<usize, String> {
    part.strip_prefix(item)
        .and_then(|p| p.strip_prefix('['))
        .and_then(|p| p.strip_suffix(']'))
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("`{part}`: expected {item}[INDEX], like {item}[0]"))
}

/// Applies `PATH=VALUE` to the document; returns the path as errors name it
/// (`lane[0].handler[1].bind`).
fn apply(doc: &mut toml::Table, text: &str) -> Result<String, String> {
    let (path, value) = text
        .split_once('=')
        .ok_or("expected PATH=VALUE, like lane.control.priority=90")?;
    let value = value.trim();
    // A TOML value, else the text as a string (`policy=rr`).
    let value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut parts: Vec<&str> = path.trim().split('.').collect();
    if parts.first() == Some(&"group") {
        tracing::warn!("`--set group.…` is deprecated, write `lane.…`");
        parts[0] = "lane";
    }
    match parts.as_slice() {
        ["runtime", key] => {
            let runtime = doc
                .entry("runtime")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let t = runtime
                .as_table_mut()
                .ok_or("`runtime` in the file is not a table")?;
            t.insert(key.to_string(), value);
            Ok(format!("runtime.{key}"))
        }
        ["lane", name, key] => {
            let (gi, g) = named_lane(doc, name)?;
            g.insert(key.to_string(), value);
            Ok(format!("lane[{gi}].{key}"))
        }
        ["lane", name, "bound", key] => {
            let (gi, g) = named_lane(doc, name)?;
            let bound = g
                .get_mut("bound")
                .and_then(toml::Value::as_table_mut)
                .ok_or_else(|| format!("lane `{name}` has no [lane.bound] table"))?;
            bound.insert(key.to_string(), value);
            Ok(format!("lane[{gi}].bound.{key}"))
        }
        ["lane", name, handler, key] if handler.starts_with("handler") => {
            let hi = index(handler, "handler")?;
            let (gi, g) = named_lane(doc, name)?;
            let h = nth_table(g, "handler", hi).map_err(|count| {
                format!(
                    "lane `{name}` has {count} [[lane.handler]] table(s); handler[{hi}] \
                     is not one of them"
                )
            })?;
            h.insert(key.to_string(), value);
            Ok(format!("lane[{gi}].handler[{hi}].{key}"))
        }
        [band, key] if band.starts_with("band") => {
            let bi = index(band, "band")?;
            let b = nth_table(doc, "band", bi).map_err(|count| {
                format!("the file has {count} [[band]] table(s); band[{bi}] is not one of them")
            })?;
            b.insert(key.to_string(), value);
            Ok(format!("band[{bi}].{key}"))
        }
        _ => Err(format!(
            "`{path}`: give runtime.KEY, lane.NAME.KEY, lane.NAME.handler[I].KEY, \
             lane.NAME.bound.KEY or band[I].KEY (NAME a [[lane]]'s name, I an index from 0)"
        )),
    }
}

/// The `i`th table of the array of tables `key` in `t`; else how many it has.
fn nth_table<'a>(
    t: &'a mut toml::Table,
    key: &str,
    i: usize,
) -> Result<&'a mut toml::Table, usize> {
    let items = t
        .get_mut(key)
        .and_then(toml::Value::as_array_mut)
        .map_or(&mut [][..], Vec::as_mut_slice);
    let count = items.len();
    items
        .get_mut(i)
        .and_then(toml::Value::as_table_mut)
        .ok_or(count)
}

/// The `[[lane]]` table named `name`, with its index.
fn named_lane<'a>(
    doc: &'a mut toml::Table,
    name: &str,
) -> Result<(usize, &'a mut toml::Table), String> {
    let lanes = doc
        .get_mut("lane")
        .and_then(toml::Value::as_array_mut)
        .ok_or("the file has no [[lane]]")?;
    let (gi, g) = lanes
        .iter_mut()
        .enumerate()
        .find(|(_, g)| g.get("name").and_then(toml::Value::as_str) == Some(name))
        .ok_or_else(|| format!("no [[lane]] named `{name}` in the file"))?;
    let t = g.as_table_mut().ok_or("a [[lane]] that is not a table")?;
    Ok((gi, t))
}
