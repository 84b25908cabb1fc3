//! TOML configuration files: [`RuntimeConfig`] through serde, errors pointed at file, line
//! and field.
//!
//! The text is parsed once into toml's spanned document ([`DeTable`]), which serde then reads
//! into the configuration types. [`Places`] indexes the document (which section and key each
//! span belongs to) so that every error names a field path and its line:
//! * a serde error carries a span: the key or value it is about (`threads = "two"`), or the
//!   header of the table it is about (`missing field`, and every error inside a
//!   `[[lane.handler]]`, whose fields name themselves, see `named` in the parent module);
//! * a validation error ([`Invalid`]) names a section and field: the line is that key's, or
//!   its table's when the key was left out.

use super::{split_named, Invalid, RuntimeConfig, Section};
use crate::error::Error;
use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::de::{DeTable, DeValue};

/// Reads and validates a configuration file. Nothing is started.
///
/// # Errors
/// [`Error::Config`] naming the file, the line and the field (`lane[1].priority`) for syntax
/// errors, unknown keys, wrong types and everything [`RuntimeConfig::validate`] refuses
/// (out-of-range values, duplicate priorities, missing CPUs, colliding addresses, a plan larger
/// than memory, ports in use now); the field is `file` if the file cannot be read.
pub fn load(file: &Path) -> Result<RuntimeConfig, Error> {
    let src = std::fs::read_to_string(file).map_err(|e| Error::Config {
        file: Some(file.to_path_buf()),
        line: None,
        field: "file".into(),
        message: format!("cannot read: {e}"),
    })?;
    parse_inner(&src, Some(file))
}

/// Parses and validates configuration text, as [`load`] does a file (errors carry line numbers
/// but no file name).
pub fn parse(src: &str) -> Result<RuntimeConfig, Error> {
    parse_inner(src, None)
}

/// The 1-based line where `path` is written in the TOML text `src`: a key as errors name it
/// (`runtime.rt`, `lane[1].priority`, `lane[0].handler[2].bind`, `band[0].bind`), or a
/// table (`lane[1]`, `lane[0].bound`, `band[0]`: the line of its header).
///
/// `None` if the text does not parse, or does not write that key or table. Tools that edit a
/// configuration before loading it (the `lfrt` command's `--set`) use it to point an error, or
/// the value an override replaces, at the line of the original file.
///
/// # Examples
/// ```
/// let src = "[[lane]]\nname = \"a\"\npriority = 50\n";
/// assert_eq!(lfrt::config_line(src, "lane[0].priority"), Some(3));
/// assert_eq!(lfrt::config_line(src, "lane[0]"), Some(1));
/// assert_eq!(lfrt::config_line(src, "lane[0].threads"), None);
/// ```
pub fn line(src: &str, path: &str) -> Option<usize> {
    let mut doc = DeTable::parse(src).ok()?;
    // An old key is found by its new name, as errors name it.
    let _ = rename_deprecated(src, doc.get_mut());
    let places = Places::of(doc.get_ref());
    let key = places
        .keys
        .iter()
        .find(|(s, k, _, _)| s.path(k) == path)
        .map(|(_, _, span, _)| span.start);
    let table = || {
        places
            .tables
            .iter()
            .find(|(s, _)| *s != Section::Root && s.path("") == path)
            .map(|(_, span)| span.start)
    };
    key.or_else(table).map(|at| line_of(src, at))
}

fn parse_inner(src: &str, file: Option<&Path>) -> Result<RuntimeConfig, Error> {
    let error = |span: Option<Range<usize>>, field: String, message: &str| Error::Config {
        file: file.map(Path::to_path_buf),
        line: span.map(|s| line_of(src, s.start)),
        field,
        message: message.to_string(),
    };
    let (cfg, places) =
        deserialize(src).map_err(|(span, field, message)| error(span, field, &message))?;
    cfg.validate().map_err(|inv: Invalid| {
        error(
            places.find(inv.section, inv.field),
            inv.path(),
            &inv.message,
        )
    })?;
    Ok(cfg)
}

/// What went wrong where: span, field path, message.
type Located = (Option<Range<usize>>, String, String);

/// Parses and deserializes without validating.
fn deserialize(src: &str) -> Result<(RuntimeConfig, Places), Located> {
    // A syntax error has a position but no document to find a field in.
    let mut doc = DeTable::parse(src)
        .map_err(|e| (e.span(), "toml".to_string(), e.message().trim().to_string()))?;
    for (line, old, new) in rename_deprecated(src, doc.get_mut())? {
        tracing::warn!(
            "line {line}: `[[{old}]]` is deprecated, write `[[{new}]]` (and `[{new}.…]` for its \
             sub-tables); read as `[[{new}]]`"
        );
    }
    let places = Places::of(doc.get_ref());
    let cfg = RuntimeConfig::deserialize(toml::de::Deserializer::from(doc)).map_err(|e| {
        let located = places.locate(&e);
        later_handler(src, &places, &located.1).unwrap_or(located)
    })?;
    Ok((cfg, places))
}

/// Top-level keys that were renamed, old name first. A file that writes the old name is read
/// as if it wrote the new one, with a warning naming both; one that writes both is refused.
pub(crate) const RENAMED_KEYS: [(&str, &str); 1] = [("group", "lane")];

/// Applies [`RENAMED_KEYS`] to the parsed document, before anything else reads it, so every
/// error and the plan name the new key. Returns the renames made, each with the line of the
/// old key.
fn rename_deprecated(
    src: &str,
    doc: &mut DeTable<'_>,
) -> Result<Vec<(usize, &'static str, &'static str)>, Located> {
    let mut renamed = Vec::new();
    for (old, new) in RENAMED_KEYS {
        let Some((key, value)) = doc.remove_entry(old) else {
            continue;
        };
        let span = key.span();
        if doc.contains_key(new) {
            return Err((
                Some(span),
                old.to_string(),
                format!("`[[{old}]]` is the old name of `[[{new}]]`: write one of them, not both"),
            ));
        }
        renamed.push((line_of(src, span.start), old, new));
        doc.insert(toml::Spanned::new(span, new.into()), value);
    }
    Ok(renamed)
}

/// The field a serde message names (a handler field's `` `x`: `` prefix, or `unknown field `x``
/// / `missing field `x``) and the message to show: without the prefix, else whole.
fn named_field(whole: &str) -> (Option<&str>, &str) {
    match split_named(whole) {
        Some((field, rest)) => (Some(field), rest),
        None => {
            let quoted = ["unknown field `", "missing field `"]
                .iter()
                .find_map(|p| whole.strip_prefix(p))
                .and_then(|rest| rest.split('`').next());
            (quoted, whole)
        }
    }
}

/// serde reads the `kind`-tagged handler tables through a buffer without positions, so an error
/// in any `[[lane.handler]]` of a lane comes back with the span of the whole array, which
/// `locate` places at the lane's first handler. When the lane has several handlers, each is
/// deserialized on its own to find the one that fails, and its own error is placed in it.
fn later_handler(src: &str, places: &Places, path: &str) -> Option<Located> {
    let lane: usize = path
        .strip_prefix("lane[")?
        .split_once("].handler")?
        .0
        .parse()
        .ok()?;
    let doc: toml::Table = src.parse().ok()?;
    let handlers = doc
        .get("lane")?
        .as_array()?
        .get(lane)?
        .get("handler")?
        .as_array()?;
    if handlers.len() < 2 {
        return None;
    }
    // The first handler that fails on its own is the culprit.
    let (i, e) = handlers.iter().enumerate().find_map(|(i, item)| {
        super::HandlerConfig::deserialize(item.clone())
            .err()
            .map(|e| (i, e))
    })?;
    let (field, message) = named_field(e.message().trim());
    let (field, message) = (field.unwrap_or("").to_string(), message.to_string());
    let section = Section::Handler { lane, handler: i };
    if field.is_empty() {
        // No field named (a bad `kind` tag): keep `locate`'s answer if it is in this handler,
        // else name the tag.
        if path.starts_with(&section.path("")) {
            return None;
        }
        let span = places.find(section, "kind")?;
        return Some((Some(span), section.path("kind"), message));
    }
    // Not placeable (the item is not a table): keep `locate`'s answer.
    let span = places.find(section, &field)?;
    Some((Some(span), section.path(&field), message))
}

/// 1-based line of a byte offset.
fn line_of(src: &str, offset: usize) -> usize {
    src.as_bytes()[..offset.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Whether a span covers an offset (a zero-length span covers its start).
fn covers(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

/// Where each table and key of a document is written.
struct Places {
    /// Tables: a `[runtime]` / `[[lane]]` / `[[lane.handler]]` header, or an inline table.
    tables: Vec<(Section, Range<usize>)>,
    /// Keys: section, key, span of the key, span of its value.
    keys: Vec<(Section, String, Range<usize>, Range<usize>)>,
}

impl Places {
    fn of(doc: &DeTable<'_>) -> Places {
        let mut places = Places {
            tables: Vec::new(),
            keys: Vec::new(),
        };
        places.walk(doc, Section::Root);
        places
    }

    /// Records `table`'s keys, descending into the tables the configuration has:
    /// `runtime`, `lane[g]`, `lane[g].handler[h]`, `band[b]`. Anything else is a key of its section.
    fn walk(&mut self, table: &DeTable<'_>, section: Section) {
        for (key, value) in table.iter() {
            let name = key.get_ref().as_ref();
            match (section, name, value.get_ref()) {
                (Section::Root, "runtime", DeValue::Table(t)) => {
                    self.tables.push((Section::Runtime, value.span()));
                    self.walk(t, Section::Runtime);
                }
                (Section::Lane(g), "bound", DeValue::Table(t)) => {
                    self.tables.push((Section::Bound(g), value.span()));
                    self.walk(t, Section::Bound(g));
                }
                (Section::Root, "lane" | "band", DeValue::Array(items))
                | (Section::Lane(_), "handler", DeValue::Array(items))
                    if !items.is_empty() && items.iter().all(|v| v.get_ref().is_table()) =>
                {
                    let inner = |i| match section {
                        Section::Lane(lane) => Section::Handler { lane, handler: i },
                        _ if name == "band" => Section::Band(i),
                        _ => Section::Lane(i),
                    };
                    // An inline array (`handler = [{ … }]`) reports errors in its items at the
                    // array's span: that is one item's only if there is one item.
                    let inline = items.first().is_some_and(|i| i.span() != value.span());
                    match items.len() {
                        1 if inline => self.tables.push((inner(0), value.span())),
                        _ if inline => {
                            self.keys
                                .push((section, name.to_string(), key.span(), value.span()));
                        }
                        _ => {}
                    }
                    for (i, item) in items.iter().enumerate() {
                        if let DeValue::Table(t) = item.get_ref() {
                            self.tables.push((inner(i), item.span()));
                            self.walk(t, inner(i));
                        }
                    }
                }
                _ => self
                    .keys
                    .push((section, name.to_string(), key.span(), value.span())),
            }
        }
    }

    /// The span of `field` in `section`, or of the section's table if the field is not written.
    fn find(&self, section: Section, field: &str) -> Option<Range<usize>> {
        self.keys
            .iter()
            .find(|(s, k, _, _)| *s == section && k == field)
            .map(|(_, _, key, _)| key.clone())
            .or_else(|| {
                self.tables
                    .iter()
                    .find(|(s, _)| *s == section)
                    .map(|(_, span)| span.clone())
            })
    }

    /// Places a serde error: the key or value its span falls on, else the table whose header it
    /// falls on, with the field the message names (`unknown field `x``, `missing field `x``, or
    /// a handler field's `` `x`: `` prefix).
    fn locate(&self, e: &toml::de::Error) -> Located {
        let whole = e.message().trim();
        let (named, message) = named_field(whole);
        let Some(span) = e.span() else {
            return (
                None,
                named.unwrap_or("toml").to_string(),
                message.to_string(),
            );
        };
        if let Some((section, key, _, _)) = self
            .keys
            .iter()
            .find(|(_, _, k, v)| covers(k, span.start) || covers(v, span.start))
        {
            // A field named in the message but not this key (an item of an inline array of
            // handlers) stays in the message.
            let message = if named.is_some_and(|n| n != key) && split_named(whole).is_some() {
                whole
            } else {
                message
            };
            return (Some(span), section.path(key), message.to_string());
        }
        // The innermost table: an inline `bound = { … }` lies inside its lane's table.
        if let Some((section, header)) = self
            .tables
            .iter()
            .filter(|(_, t)| covers(t, span.start))
            .min_by_key(|(_, t)| t.len())
        {
            let field = named.unwrap_or("");
            let span = self.find(*section, field).unwrap_or(header.clone());
            return (Some(span), section.path(field), message.to_string());
        }
        let field = named.unwrap_or("toml").to_string();
        (Some(span), field, message.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HandlerConfig, Promotion};

    const GOOD: &str = r#"
[runtime]
rt = "best-effort"
lock_memory = false

[[lane]]
name = "control"
priority = 80
threads = 2
promotion = "lifo"

[[lane.handler]]
kind = "timer"
interval_us = 1000

[[lane]]
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
        assert_eq!(c.lanes.len(), 2);
        assert_eq!(c.lanes[0].promotion, Promotion::Lifo);
        assert_eq!(
            c.lanes[0].handlers,
            vec![HandlerConfig::Timer {
                interval_us: 1000,
                count: 1,
                distance_us: 0
            }]
        );
    }

    /// `borrow_from` / `max_borrowed` errors carry the line of their key (or of the key that
    /// makes them wrong), so `lfrt check` refuses exactly what `run` would.
    #[test]
    fn borrowing_errors_name_line_and_field() {
        let control = |extra: &str| {
            GOOD.replace(
                "promotion = \"lifo\"\n",
                &format!("promotion = \"lifo\"\n{extra}"),
            )
        };
        let c = parse(&control("borrow_from = [\"bulk\"]\n")).unwrap();
        assert_eq!(
            (c.lanes[0].borrow_from.clone(), c.lanes[0].max_borrowed),
            (vec!["bulk".to_string()], None)
        );
        for (src, at, says) in [
            (
                control("borrow_from = [\"bulk\"]\nmax_borrowed = 2\n"),
                (12, "lane[0].max_borrowed"),
                "1..=1",
            ),
            (
                control("borrow_from = [\"blk\"]\n"),
                (11, "lane[0].borrow_from"),
                "not the name",
            ),
            (
                control("borrow_from = [\"control\"]\n"),
                (11, "lane[0].borrow_from"),
                "itself",
            ),
            (
                control("max_borrowed = 1\n"),
                (11, "lane[0].max_borrowed"),
                "without `borrow_from`",
            ),
            (
                GOOD.replace(
                    "threads = 1\n",
                    "threads = 1\nborrow_from = [\"control\"]\n",
                ),
                (20, "lane[1].borrow_from"),
                "not below",
            ),
        ] {
            let (line, field, msg) = err(&src);
            assert_eq!((line, field.as_str()), (Some(at.0), at.1), "{msg}");
            assert!(msg.contains(says), "{msg}");
        }
    }

    #[test]
    fn priority_out_of_range_names_line_and_field() {
        let (line, field, msg) = err(&GOOD.replace("priority = 20", "priority = 120"));
        assert_eq!(
            (line, field.as_str()),
            (Some(18), "lane[1].priority"),
            "{msg}"
        );
    }

    #[test]
    fn duplicate_priority() {
        let (line, field, msg) = err(&GOOD.replace("priority = 20", "priority = 80"));
        assert_eq!((line, field.as_str()), (Some(18), "lane[1].priority"));
        assert!(msg.contains("control"), "{msg}");
    }

    #[test]
    fn missing_cpu() {
        let (line, field, _) = err(&GOOD.replace("threads = 1", "threads = 1\ncpus = [4096]"));
        assert_eq!((line, field.as_str()), (Some(20), "lane[1].cpus"));
    }

    #[test]
    fn zero_threads() {
        let (line, field, _) = err(&GOOD.replace("threads = 1", "threads = 0"));
        assert_eq!((line, field.as_str()), (Some(19), "lane[1].threads"));
    }

    #[test]
    fn unknown_key() {
        let (line, field, msg) = err(&GOOD.replace("threads = 1", "wokers = 1"));
        assert_eq!(
            (line, field.as_str()),
            (Some(19), "lane[1].wokers"),
            "{msg}"
        );
        assert!(msg.contains("unknown field"), "{msg}");
        let (line, field, _) = err(&GOOD.replace("lock_memory", "lock_memroy"));
        assert_eq!((line, field.as_str()), (Some(4), "runtime.lock_memroy"));
        let (line, field, _) = err(&format!("threads = 1\n{GOOD}"));
        assert_eq!((line, field.as_str()), (Some(1), "threads"));
    }

    /// `[runtime] metrics` is the `lfrt` command's key (its Prometheus exporter), read by the
    /// tools crate: the library, which serves no metrics, refuses it like any unknown key.
    #[test]
    fn metrics_is_the_commands_key_not_the_librarys() {
        let with = "lock_memory = false\nmetrics = \"127.0.0.1:9464\"";
        let (line, field, msg) = err(&GOOD.replace("lock_memory = false", with));
        assert_eq!(
            (line, field.as_str()),
            (Some(5), "runtime.metrics"),
            "{msg}"
        );
        assert!(msg.contains("unknown field"), "{msg}");
    }

    #[test]
    fn unknown_promotion() {
        let (line, field, msg) = err(&GOOD.replace("\"lifo\"", "\"random\""));
        assert_eq!((line, field.as_str()), (Some(10), "lane[0].promotion"));
        assert!(msg.contains("`priority`"), "{msg}");
    }

    /// A wrong type named only the document: ``invalid `toml`: invalid type: string "two",
    /// expected i64``.
    #[test]
    fn wrong_type_names_its_field() {
        let (line, field, msg) = err(&GOOD.replace("threads = 1", "threads = \"two\""));
        assert_eq!(
            (line, field.as_str()),
            (Some(19), "lane[1].threads"),
            "{msg}"
        );
        assert!(msg.contains("string \"two\""), "{msg}");
        let (line, field, _) = err(&GOOD.replace("lock_memory = false", "lock_memory = 1"));
        assert_eq!((line, field.as_str()), (Some(4), "runtime.lock_memory"));
        let (line, field, _) = err(&GOOD.replace("threads = 1", "cpus = [0, -1]"));
        assert_eq!((line, field.as_str()), (Some(19), "lane[1].cpus"));
        let (line, field, _) = err(&GOOD.replace("priority = 20", "priority = 300"));
        assert_eq!((line, field.as_str()), (Some(18), "lane[1].priority"));
    }

    #[test]
    fn handler_errors_name_their_field_and_line() {
        let (line, field, msg) = err(&GOOD.replace("interval_us = 1000", "interval_us = \"x\""));
        assert_eq!(
            (line, field.as_str()),
            (Some(14), "lane[0].handler[0].interval_us")
        );
        assert_eq!(msg, "invalid type: string \"x\", expected u64");
        let (line, field, _) = err(&GOOD.replace("interval_us = 1000", "count = 2"));
        assert_eq!(
            (line, field.as_str()),
            (Some(12), "lane[0].handler[0].interval_us"),
            "missing: the handler's header line"
        );
        let (line, field, msg) = err(&GOOD.replace("\"timer\"", "\"timr\""));
        assert_eq!(
            (line, field.as_str()),
            (Some(13), "lane[0].handler[0].kind")
        );
        assert!(msg.contains("`udp-echo`"), "{msg}");
        let (line, field, _) = err(&GOOD.replace("kind = \"timer\"\n", ""));
        assert_eq!(
            (line, field.as_str()),
            (Some(12), "lane[0].handler[0].kind")
        );
    }

    #[test]
    fn inline_handler_tables_are_placed_too() {
        let one = "[[lane]]\nname = \"a\"\npriority = 50\nhandler = [{ kind = \"timer\", interval_us = \"x\" }]\n";
        let (line, field, _) = err(one);
        assert_eq!(
            (line, field.as_str()),
            (Some(4), "lane[0].handler[0].interval_us")
        );
        // With two items toml does not say which one; each item is then checked on its own.
        let two = one.replace("[{", "[{ kind = \"timer\", interval_us = 5 }, {");
        let (line, field, msg) = err(&two);
        assert_eq!(
            (line, field.as_str()),
            (Some(4), "lane[0].handler[1].interval_us")
        );
        assert!(msg.starts_with("invalid type"), "{msg}");
        let lanes = "lane = [{ name = \"a\", priority = \"high\" }]\n";
        let (line, field, _) = err(lanes);
        assert_eq!((line, field.as_str()), (Some(1), "lane[0].priority"));
    }

    #[test]
    fn missing_name_and_priority() {
        let (line, field, msg) = err(&GOOD.replace("name = \"bulk\"\n", ""));
        assert_eq!((line, field.as_str()), (Some(16), "lane[1].name"), "{msg}");
        let (line, field, msg) = err(&GOOD.replace("priority = 20\n", ""));
        assert_eq!((line, field.as_str()), (Some(16), "lane[1].priority"));
        assert!(msg.contains("missing"), "{msg}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let (line, field, _) = err(&GOOD.replace("threads = 1", "threads = [1,"));
        assert_eq!((line, field.as_str()), (Some(19), "toml"));
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
            (Some(14), "lane[0].handler[0].bind")
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
            (Some(14), "lane[0].handler[0].bind")
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
            (Some(15), "lane[0].handler[0].bind")
        );
    }

    /// Hardening item 11c: `load` refuses an out-of-range value with file, line and field.
    #[test]
    fn load_validates_ranges() {
        let dir = std::env::temp_dir().join(format!("lfrt-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("threads.toml");
        std::fs::write(&p, GOOD.replace("threads = 1", "threads = 65")).unwrap();
        let e = load(&p).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "{}:19: invalid `lane[1].threads`: 65",
                p.display()
            )),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_shipped_config_is_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                // Everything but the bind probe and the machine's memory (ports may be taken by
                // a concurrently running test).
                let src = std::fs::read_to_string(&p).unwrap();
                let (c, _) = deserialize(&src).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
                c.check_settings(&crate::sys::sched::online_cpus())
                    .unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
                assert!(!c.lanes.is_empty(), "{}", p.display());
                n += 1;
            }
        }
        assert!(n >= 2);
    }

    const BANDS: &str = r#"
[[lane]]
name = "control"
priority = 80

[[lane]]
name = "bulk"
priority = 20

[[band]]
bind = "127.0.0.1:0"
classify = { dscp = { 46 = "control", default = "bulk" } }
handler = "udp-echo"
"#;

    #[test]
    fn bands_parse() {
        let c = parse(BANDS).unwrap();
        assert_eq!(c.bands.len(), 1);
        let p = c.bands[0].plan(&c.lanes).unwrap();
        assert_eq!(p.lanes, ["bulk", "control"]);
        assert_eq!(p.bands.map, vec![(46, 1)]);
        let payload = BANDS.replace(
            "{ dscp = { 46 = \"control\", default = \"bulk\" } }",
            "{ payload_byte = { offset = 2, map = { 1 = \"control\", 7 = \"control\" }, default = \"bulk\" } }",
        );
        let c = parse(&payload).unwrap();
        let p = c.bands[0].plan(&c.lanes).unwrap();
        assert_eq!(
            p.bands.classify,
            crate::sources::band::Classify::PayloadByte(2)
        );
        assert_eq!(p.bands.map, vec![(1, 1), (7, 1)]);
    }

    /// Every band error names `band[i].<field>` and its line.
    #[test]
    fn band_errors_name_their_field_and_line() {
        let cases: &[(&str, &str, usize, &str, &str)] = &[
            // (replace, with, line, field, message contains)
            (
                "46 = \"control\"",
                "46 = \"contrl\"",
                12,
                "band[0].classify",
                "no [[lane]] named `contrl`",
            ),
            (
                "default = \"bulk\"",
                "default = \"bluk\"",
                12,
                "band[0].classify",
                "`bluk`",
            ),
            (
                ", default = \"bulk\"",
                "",
                12,
                "band[0].classify",
                "no `default`",
            ),
            (
                "46 =",
                "64 =",
                12,
                "band[0].classify",
                "`64` is not a DSCP 0..=63",
            ),
            (
                "dscp =",
                "dcsp =",
                12,
                "band[0].classify",
                "unknown variant `dcsp`",
            ),
            (
                "\"udp-echo\"",
                "\"tcp-echo\"",
                13,
                "band[0].handler",
                "unknown variant",
            ),
            (
                "handler =",
                "hanlder =",
                13,
                "band[0].hanlder",
                "unknown field",
            ),
            (
                "127.0.0.1:0",
                "127.0.0.1:99999",
                11,
                "band[0].bind",
                "not an address",
            ),
            (
                "bind = \"127.0.0.1:0\"\n",
                "",
                10,
                "band[0].bind",
                "missing field",
            ),
            (
                "handler",
                "work_us = 100001\nhandler",
                13,
                "band[0].work_us",
                "at most 100000",
            ),
        ];
        for &(from, to, line, field, contains) in cases {
            let src = BANDS.replace(from, to);
            assert_ne!(src, BANDS, "{from}");
            let (l, f, msg) = err(&src);
            assert_eq!(
                (l, f.as_str()),
                (Some(line), field),
                "{from} -> {to}: {msg}"
            );
            assert!(msg.contains(contains), "{from} -> {to}: {msg}");
        }
        let payload = BANDS.replace(
            "{ dscp = { 46 = \"control\", default = \"bulk\" } }",
            "{ payload_byte = { offset = 0, map = { 300 = \"control\" }, default = \"bulk\" } }",
        );
        let (l, f, msg) = err(&payload);
        assert_eq!((l, f.as_str()), (Some(12), "band[0].classify"));
        assert!(msg.contains("`300` is not a byte value"), "{msg}");
        // A second band on the same address: its own bind line.
        let two = format!(
            "{}\n[[band]]\nbind = \"0.0.0.0:47000\"\nclassify = {{ dscp = {{ default = \"bulk\" }} }}\n",
            BANDS.replace("127.0.0.1:0", "127.0.0.1:47000")
        );
        let (l, f, msg) = err(&two);
        assert_eq!((l, f.as_str()), (Some(16), "band[1].bind"), "{msg}");
        assert!(msg.contains("band[0].bind"), "{msg}");
    }

    /// A band on a port a `udp-echo` handler holds without `SO_REUSEPORT` is refused at the
    /// band's line, and so is a port taken now by another process's socket.
    #[test]
    fn band_bind_conflicts_are_found_at_validation() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let src = BANDS.replace("127.0.0.1:0", &held.local_addr().unwrap().to_string());
        let (l, f, msg) = err(&src);
        assert_eq!((l, f.as_str()), (Some(11), "band[0].bind"), "{msg}");
        assert!(msg.contains("in use"), "{msg}");
        let echo = BANDS.replace(
            "priority = 20\n",
            "priority = 20\n[[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:47001\"\n",
        )
        .replace("127.0.0.1:0", "127.0.0.1:47001");
        let (l, f, msg) = err(&echo);
        assert_eq!((l, f.as_str()), (Some(14), "band[0].bind"), "{msg}");
        assert!(msg.contains("lane[1].handler[0].bind"), "{msg}");
    }
}
