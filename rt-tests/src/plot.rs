//! `lfrt plot`: latency results as SVG or PNG charts, drawn with `plotters`.
//!
//! Four kinds of input are understood, told apart by their content:
//!
//! * **cyclictest JSON** (`cyclictest --json=FILE -h N`) and **`lfrt cyclic --json`**: a
//!   top-level `"thread"` map whose entries carry a `"histogram"` map of latency bucket →
//!   count. Drawn OSADL style: samples per 1 µs bucket on a log axis against latency in µs,
//!   one line per thread, each thread's maximum marked by a dashed vertical line and named in
//!   the legend. The unit is lfrt's `"unit"` field, else µs unless the recorded `cmdline` has
//!   `-N`/`--nsecs` (cyclictest then writes ns and says so nowhere else). Two such files are
//!   overlaid in one chart, the legend naming each file's source (cyclictest or lfrt cyclic).
//! * **`lfrt run --json`**: a top-level `"groups"` array whose entries carry a
//!   `"latency_histogram"` (see [`latency_histogram`]). Drawn like the above, one line per group
//!   in the file's bucket width, each group's maximum (`latency_ns.max_ns`) marked.
//! * **`lfrt inversion --json`**: a top-level `"experiments"` array of
//!   `{"architecture", "n_low", "high": {"p99_us"}}`. Drawn as the high-priority p99 against
//!   N (the number of flooding low-priority streams), one line per architecture.
//!
//! A flight-recorder trace is drawn as a timeline by [`timeline`](crate::timeline)
//! ([`timeline::plot_files`](crate::timeline::plot_files) tells it from these).
//!
//! The output format follows the extension of `-o`: `.svg` (text as `<text>`, no font needed)
//! or `.png`, whose text is drawn with [`FONT`], a TrueType font read at run time (Debian
//! package `fonts-dejavu-core`). The output file is written only once the chart is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::{Map, Value};
use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The TrueType font PNG text is drawn with (Debian package `fonts-dejavu-core`).
pub const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The Debian package that provides [`FONT`].
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// Error while reading, interpreting or writing a plot.
#[derive(Debug)]
pub enum PlotError {
    /// Reading an input or writing the output file failed.
    Io {
        /// The file that could not be read or written.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// An input file is not valid JSON.
    Json {
        /// The input file.
        path: PathBuf,
        /// The underlying parse error.
        source: serde_json::Error,
    },
    /// An input is valid JSON but not a shape that can be plotted (or overlaid).
    Shape {
        /// The input file.
        path: PathBuf,
        /// What was wrong and what was expected.
        reason: String,
    },
    /// The command line asks for something this module cannot do.
    Usage(String),
    /// PNG output needs [`FONT`] and it could not be loaded.
    Font {
        /// The font file.
        path: PathBuf,
        /// Why it could not be used.
        reason: String,
    },
    /// Drawing or encoding the image failed.
    Draw {
        /// The output file.
        path: PathBuf,
        /// What plotters reported.
        reason: String,
    },
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::Io { path, source } => write!(f, "{}: {}", path.display(), source),
            PlotError::Json { path, source } => {
                write!(f, "{}: invalid JSON: {}", path.display(), source)
            }
            PlotError::Shape { path, reason } => {
                write!(f, "{}: cannot plot: {}", path.display(), reason)
            }
            PlotError::Usage(msg) => f.write_str(msg),
            PlotError::Font { path, reason } => write!(
                f,
                "{}: {reason}; PNG output draws its text with this font: install the Debian \
                 package {FONT_PACKAGE} (or write .svg, which needs no font)",
                path.display()
            ),
            PlotError::Draw { path, reason } => {
                write!(f, "{}: drawing failed: {}", path.display(), reason)
            }
        }
    }
}

impl StdError for PlotError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            PlotError::Io { source, .. } => Some(source),
            PlotError::Json { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Which chart was drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// Per-thread (cyclictest-style input) or per-group (lfrt run) latency histogram, log count
    /// axis.
    LatencyHistogram,
    /// High-priority p99 latency against low-priority load (lfrt inversion input).
    InversionP99,
    /// The time around the worst dispatch of a flight-recorder trace
    /// ([`timeline`](crate::timeline)).
    Timeline,
}

/// Image format, from the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Scalable vector graphics; text stays text.
    Svg,
    /// RGB bitmap; text is drawn with [`FONT`].
    Png,
}

impl Format {
    /// The format `path` asks for by its extension (`.svg` or `.png`, any case).
    pub fn of(path: &Path) -> Result<Format, PlotError> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext.eq_ignore_ascii_case("svg") {
            Ok(Format::Svg)
        } else if ext.eq_ignore_ascii_case("png") {
            Ok(Format::Png)
        } else {
            Err(PlotError::Usage(format!(
                "-o/--output {}: the file name must end in .svg or .png (the format follows \
                 the extension)",
                path.display()
            )))
        }
    }
}

/// Image size in pixels (`--size WIDTHxHEIGHT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

impl Size {
    /// The size `lfrt plot` draws without `--size`.
    pub const DEFAULT: Size = Size {
        width: 1000,
        height: 600,
    };
    /// Smallest size the layout (titles, axis labels, legend) fits in.
    pub const MIN: Size = Size {
        width: 400,
        height: 300,
    };
    /// Largest size accepted (a PNG this big is 192 MB of pixels while drawing).
    pub const MAX: Size = Size {
        width: 8000,
        height: 8000,
    };

    fn dims(self) -> (u32, u32) {
        (self.width, self.height)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

impl FromStr for Size {
    type Err = String;

    /// Parses `WIDTHxHEIGHT`, e.g. `1000x600`, within [`Size::MIN`]..=[`Size::MAX`].
    fn from_str(s: &str) -> Result<Size, String> {
        let parsed = s
            .split_once(['x', 'X'])
            .and_then(|(w, h)| Some((w.trim().parse().ok()?, h.trim().parse().ok()?)));
        let Some((width, height)) = parsed else {
            return Err(format!(
                "expected WIDTHxHEIGHT in pixels, e.g. {}, got {s:?}",
                Size::DEFAULT
            ));
        };
        let (lo, hi) = (Size::MIN, Size::MAX);
        if !(lo.width..=hi.width).contains(&width) || !(lo.height..=hi.height).contains(&height) {
            return Err(format!(
                "{width}x{height} is outside {lo}..={hi} (width and height each)"
            ));
        }
        Ok(Size { width, height })
    }
}

/// Reads one or two result files, draws the chart and writes it to `output`.
///
/// One input: any of the four kinds (see the module docs). Two inputs: two latency files
/// (cyclictest, lfrt cyclic or lfrt run) with one bucket width, overlaid. The format follows `output`'s extension; the file
/// is only created once the chart has been drawn.
pub fn plot_files(inputs: &[PathBuf], output: &Path, size: Size) -> Result<PlotKind, PlotError> {
    let format = Format::of(output)?;
    if inputs.is_empty() || inputs.len() > 2 {
        return Err(PlotError::Usage(format!(
            "give one result file, or two latency files to overlay (got {})",
            inputs.len()
        )));
    }
    let mut parsed = Vec::with_capacity(inputs.len());
    for path in inputs {
        let text = std::fs::read_to_string(path).map_err(|source| PlotError::Io {
            path: path.clone(),
            source,
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|source| PlotError::Json {
            path: path.clone(),
            source,
        })?;
        let input = Input::parse(&value).map_err(|reason| PlotError::Shape {
            path: path.clone(),
            reason,
        })?;
        parsed.push((path.clone(), input));
    }
    let chart = Chart::build(parsed)?;
    let kind = chart.kind();
    let draw_err = |reason: String| PlotError::Draw {
        path: output.to_path_buf(),
        reason,
    };
    match format {
        Format::Svg => {
            let svg = render_svg(&chart, size).map_err(draw_err)?;
            std::fs::write(output, svg).map_err(|source| PlotError::Io {
                path: output.to_path_buf(),
                source,
            })?;
        }
        Format::Png => {
            let font = load_font(Path::new(FONT)).map_err(|reason| PlotError::Font {
                path: PathBuf::from(FONT),
                reason,
            })?;
            let rgb = render_rgb(&chart, size, &font).map_err(draw_err)?;
            // plotters' encoder (the `image` crate) writes the file; it is only created
            // here, after the picture was drawn into memory.
            let mut file = BitMapBackend::new(output, size.dims());
            file.blit_bitmap((0, 0), size.dims(), &rgb)
                .and_then(|()| file.present())
                .map_err(|e| draw_err(e.to_string()))?;
        }
    }
    Ok(kind)
}

/// Nanoseconds per bucket of the histograms `lfrt run --json` writes: 1 µs, as OSADL plots.
pub const RUN_BUCKET_NS: u64 = 1000;

/// A latency histogram (ns) as `lfrt run --json` writes it per group and `lfrt plot` reads it:
/// `{"bucket_ns": 1000, "counts": [[start_ns, count], …]}`, only buckets with samples, by
/// start. Each value is counted at the midpoint of its hdrhistogram bucket, as
/// [`lfrt::telemetry::LatencySummary`] counts it, so the histogram agrees with the summary.
pub fn latency_histogram(h: &hdrhistogram::Histogram<u64>, bucket_ns: u64) -> Value {
    let bucket_ns = bucket_ns.max(1);
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for v in h.iter_recorded() {
        let start = h.median_equivalent(v.value_iterated_to()) / bucket_ns * bucket_ns;
        let n = v.count_since_last_iteration();
        match counts.last_mut() {
            Some(last) if last.0 == start => last.1 += n,
            _ => counts.push((start, n)),
        }
    }
    serde_json::json!({ "bucket_ns": bucket_ns, "counts": counts })
}

// ---------------------------------------------------------------------------
// Input interpretation
// ---------------------------------------------------------------------------

const EXPECTED: &str = "expected cyclictest or `lfrt cyclic --json` output (an object with a \
     \"thread\" map whose entries have a \"histogram\" map, as written by `cyclictest \
     --json=FILE -h US`), `lfrt run --json` output (an object with a \"groups\" array whose \
     entries have a \"latency_histogram\") or `lfrt inversion --json` output (an object with an \"experiments\" \
     array of {\"architecture\", \"n_low\", \"high\": {\"p99_us\"}})";

/// One parsed input file.
enum Input {
    Latency(LatencyRun),
    Inversion(Vec<ArchLine>),
}

/// A cyclictest-style run, in µs.
struct LatencyRun {
    /// `cyclictest`, `lfrt cyclic` or `lfrt run`.
    source: &'static str,
    /// Width of a bucket (µs): 1 for cyclictest and lfrt cyclic, the file's for lfrt run.
    bucket_us: f64,
    /// The recorded command line, if any.
    cmdline: Option<String>,
    threads: Vec<ThreadHist>,
}

struct ThreadHist {
    /// `T<n>`, with the group and priority where the file has them (lfrt run: the group).
    label: String,
    /// (bucket start in µs, count), sorted, counts > 0, one entry per bucket.
    buckets: Vec<(f64, f64)>,
    /// Largest latency seen (µs): the file's `max`, or the last bucket.
    max_us: Option<f64>,
}

/// One architecture's (N, high p99 µs) points, sorted by N.
struct ArchLine {
    name: String,
    points: Vec<(f64, f64)>,
}

impl Input {
    fn parse(value: &Value) -> Result<Input, String> {
        let Some(root) = value.as_object() else {
            return Err(format!(
                "top-level JSON value is {}, not an object; {EXPECTED}",
                kind_name(value)
            ));
        };
        if field(root, "thread").is_some() {
            parse_latency(root).map(Input::Latency)
        } else if field(root, "groups").is_some() {
            parse_run(root).map(Input::Latency)
        } else if field(root, "experiments").is_some() {
            parse_inversion(root).map(Input::Inversion)
        } else {
            Err(format!(
                "no \"thread\", \"groups\" or \"experiments\" key at top level; {EXPECTED}"
            ))
        }
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Looks up `key`, also accepting real cyclictest's spelling with a trailing colon.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).or_else(|| obj.get(&format!("{key}:")))
}

fn clean_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// Does a cyclictest command line ask for nanoseconds (`-N`, `--nsecs`, or `N` in a cluster
/// of flags such as `-qmN`)?
fn cmdline_nsecs(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|t| {
        t == "--nsecs"
            || t.strip_prefix('-').is_some_and(|flags| {
                !flags.starts_with('-')
                    && flags.contains('N')
                    && flags.chars().all(|c| c.is_ascii_alphabetic())
            })
    })
}

/// Divisor from the file's unit to µs.
fn unit_per_us(root: &Map<String, Value>) -> Result<f64, String> {
    match field(root, "unit") {
        None => Ok(match field(root, "cmdline").and_then(Value::as_str) {
            Some(cmd) if cmdline_nsecs(cmd) => 1000.0,
            _ => 1.0,
        }),
        Some(Value::String(u)) => match u.trim() {
            "ns" => Ok(1000.0),
            "us" | "µs" | "μs" => Ok(1.0),
            other => Err(format!("\"unit\" is {other:?}, expected \"us\" or \"ns\"")),
        },
        Some(other) => Err(format!(
            "\"unit\" is {}, expected the string \"us\" or \"ns\"",
            kind_name(other)
        )),
    }
}

fn parse_latency(root: &Map<String, Value>) -> Result<LatencyRun, String> {
    let threads = match field(root, "thread") {
        Some(Value::Object(t)) => t,
        Some(other) => {
            return Err(format!(
                "\"thread\" is {}, expected an object mapping thread numbers to thread results",
                kind_name(other)
            ))
        }
        None => return Err("missing \"thread\" object".to_string()),
    };
    let per_us = unit_per_us(root)?;

    let mut keys: Vec<&String> = threads.keys().collect();
    keys.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    });

    let mut out = Vec::new();
    for key in keys {
        let Some(thread) = threads[key.as_str()].as_object() else {
            return Err(format!(
                "thread \"{key}\" is {}, expected an object",
                kind_name(&threads[key.as_str()])
            ));
        };
        let hist = match field(thread, "histogram") {
            // cyclictest without -h: nothing to draw for this thread.
            None | Some(Value::Null) => continue,
            Some(Value::Object(h)) => h,
            Some(other) => {
                return Err(format!(
                    "thread \"{key}\": \"histogram\" is {}, expected an object of \
                     \"latency\": count",
                    kind_name(other)
                ))
            }
        };
        // Re-bucket to 1 µs: floor(latency in µs), then add up the counts that land together
        // (ns input has up to 1000 keys per bucket).
        let mut buckets: Vec<(f64, f64)> = Vec::with_capacity(hist.len());
        for (bucket, count) in hist {
            let x = bucket
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "thread \"{key}\": histogram key \"{bucket}\" is not a non-negative \
                         latency number"
                    )
                })?;
            let c = count
                .as_f64()
                .filter(|c| c.is_finite() && *c >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "thread \"{key}\": histogram count for \"{bucket}\" is {count}, \
                         expected a non-negative number"
                    )
                })?;
            if c > 0.0 {
                buckets.push(((x / per_us).floor(), c));
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
        for (x, c) in buckets {
            match merged.last_mut() {
                Some(last) if last.0 == x => last.1 += c,
                _ => merged.push((x, c)),
            }
        }
        if merged.iter().any(|b| !b.1.is_finite()) {
            return Err(format!(
                "thread \"{key}\": histogram counts add up to more than can be plotted"
            ));
        }

        let file_max = match field(thread, "max") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|m| m.is_finite() && *m >= 0.0)
                    .ok_or_else(|| {
                        format!("thread \"{key}\": \"max\" is {v}, expected a non-negative number")
                    })?
                    / per_us,
            ),
        };
        let last = merged.last().map(|b| b.0);
        let max_us = match (file_max, last) {
            (Some(m), Some(l)) => Some(m.max(l)),
            (m, l) => m.or(l),
        };

        let mut label = format!("T{}", clean_text(key));
        let group = field(thread, "group")
            .and_then(Value::as_str)
            .map(clean_text);
        let prio = field(thread, "priority").and_then(Value::as_i64);
        match (group, prio) {
            (Some(g), Some(p)) => label.push_str(&format!(" ({g} P{p})")),
            (Some(g), None) => label.push_str(&format!(" ({g})")),
            (None, Some(p)) => label.push_str(&format!(" (P{p})")),
            (None, None) => {}
        }
        if merged.is_empty() {
            label.push_str(" (no samples)");
        }
        out.push(ThreadHist {
            label,
            buckets: merged,
            max_us: if last.is_some() { max_us } else { None },
        });
    }

    if out.is_empty() {
        return Err(
            "no thread has a \"histogram\"; run cyclictest (or lfrt cyclic) with -h/--histogram \
             (e.g. `cyclictest --json=FILE -h 200`) to record one"
                .to_string(),
        );
    }
    if out.iter().all(|t| t.buckets.is_empty()) {
        return Err("all thread histograms are empty (no samples recorded)".to_string());
    }
    let source = if field(root, "lfrt_version").is_some() {
        "lfrt cyclic"
    } else {
        "cyclictest"
    };
    let cmdline = field(root, "cmdline")
        .and_then(Value::as_str)
        .map(clean_text)
        .filter(|c| !c.is_empty());
    Ok(LatencyRun {
        source,
        bucket_us: 1.0,
        cmdline,
        threads: out,
    })
}

/// `lfrt run --json`: each group's `latency_histogram`, labelled with its name and priority.
fn parse_run(root: &Map<String, Value>) -> Result<LatencyRun, String> {
    let groups = match field(root, "groups") {
        Some(Value::Array(g)) if !g.is_empty() => g,
        Some(Value::Array(_)) => return Err("\"groups\" is empty; nothing to plot".to_string()),
        Some(other) => {
            return Err(format!(
                "\"groups\" is {}, expected an array of {{\"metrics\", \"latency_ns\", \
                 \"latency_histogram\"}}",
                kind_name(other)
            ))
        }
        None => return Err("missing \"groups\" array".to_string()),
    };
    let mut bucket_ns: Option<u64> = None;
    let mut out = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let at = format!("groups[{i}]");
        let g = g
            .as_object()
            .ok_or_else(|| format!("{at} is {}, expected an object", kind_name(g)))?;
        let metrics = field(g, "metrics").and_then(Value::as_object);
        let name = metrics
            .and_then(|m| field(m, "name"))
            .and_then(Value::as_str)
            .map(clean_text)
            .ok_or_else(|| format!("{at}: missing \"metrics\": {{\"name\"}}"))?;
        let hist = match field(g, "latency_histogram") {
            Some(Value::Object(h)) => h,
            Some(other) => {
                return Err(format!(
                    "{at} (group `{name}`): \"latency_histogram\" is {}, expected an object \
                     {{\"bucket_ns\", \"counts\"}}",
                    kind_name(other)
                ))
            }
            None => {
                return Err(format!(
                    "{at} (group `{name}`): no \"latency_histogram\"; this file was written by \
                     an lfrt run without histograms: run it again with this version"
                ))
            }
        };
        let width = field(hist, "bucket_ns")
            .and_then(Value::as_u64)
            .filter(|w| *w > 0)
            .ok_or_else(|| {
                format!("{at}.latency_histogram.bucket_ns: expected a whole number of ns above 0")
            })?;
        match bucket_ns {
            Some(w) if w != width => {
                return Err(format!(
                    "{at}.latency_histogram.bucket_ns is {width}, groups[0]'s is {w}: one file \
                     has one bucket width"
                ))
            }
            _ => bucket_ns = Some(width),
        }
        let counts = field(hist, "counts")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                format!("{at}.latency_histogram.counts: expected an array of [start_ns, count]")
            })?;
        let mut buckets: Vec<(f64, f64)> = Vec::with_capacity(counts.len());
        for (j, pair) in counts.iter().enumerate() {
            let pair = pair
                .as_array()
                .filter(|p| p.len() == 2)
                .and_then(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
                .ok_or_else(|| {
                    format!(
                        "{at}.latency_histogram.counts[{j}] is {pair}, expected [start_ns, count] \
                         (whole numbers)"
                    )
                })?;
            if buckets
                .last()
                .is_some_and(|b| b.0 >= pair.0 as f64 / 1000.0)
            {
                return Err(format!(
                    "{at}.latency_histogram.counts[{j}]: bucket starts must increase"
                ));
            }
            if pair.1 > 0 {
                buckets.push((pair.0 as f64 / 1000.0, pair.1 as f64));
            }
        }
        let file_max = field(g, "latency_ns")
            .and_then(Value::as_object)
            .and_then(|l| field(l, "max_ns"))
            .and_then(Value::as_f64)
            .filter(|m| m.is_finite() && *m > 0.0)
            .map(|m| m / 1000.0);
        let last = buckets.last().map(|b| b.0);
        let max_us = last.map(|l| file_max.map_or(l, |m| m.max(l)));
        let mut label = name;
        if let Some(p) = metrics
            .and_then(|m| field(m, "priority"))
            .and_then(Value::as_i64)
        {
            label.push_str(&format!(" (P{p})"));
        }
        if buckets.is_empty() {
            label.push_str(" (no samples)");
        }
        out.push(ThreadHist {
            label,
            buckets,
            max_us,
        });
    }
    if out.iter().all(|t| t.buckets.is_empty()) {
        return Err("every group's latency histogram is empty (no samples recorded)".to_string());
    }
    let duration = field(root, "duration_s").and_then(Value::as_f64);
    Ok(LatencyRun {
        source: "lfrt run",
        bucket_us: bucket_ns.unwrap_or(RUN_BUCKET_NS) as f64 / 1000.0,
        cmdline: Some(match duration {
            Some(d) => format!("dispatch latency per group, {d:.1} s run"),
            None => "dispatch latency per group".to_string(),
        }),
        threads: out,
    })
}

fn parse_inversion(root: &Map<String, Value>) -> Result<Vec<ArchLine>, String> {
    let exps = match field(root, "experiments") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "\"experiments\" is {}, expected an array",
                kind_name(other)
            ))
        }
        None => return Err("missing \"experiments\" array".to_string()),
    };
    if exps.is_empty() {
        return Err("\"experiments\" is empty; nothing to plot".to_string());
    }
    // Architectures in order of first appearance, each with its (n_low, p99) points.
    let mut lines: Vec<ArchLine> = Vec::new();
    for (i, e) in exps.iter().enumerate() {
        let Some(o) = e.as_object() else {
            return Err(format!(
                "experiments[{i}] is {}, expected an object with \"architecture\", \"n_low\" \
                 and \"high\": {{\"p99_us\"}}",
                kind_name(e)
            ));
        };
        let arch = match field(o, "architecture") {
            Some(Value::String(s)) => clean_text(s),
            Some(v) => {
                return Err(format!(
                    "experiments[{i}].architecture is {}, expected a string",
                    kind_name(v)
                ))
            }
            None => return Err(format!("experiments[{i}]: missing \"architecture\"")),
        };
        let number = |v: Option<&Value>, name: &str| match v {
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("experiments[{i}].{name} is {v}, expected a finite number")),
            None => Err(format!("experiments[{i}]: missing \"{name}\"")),
        };
        let n = number(field(o, "n_low"), "n_low")?;
        let high = match field(o, "high") {
            Some(Value::Object(h)) => h,
            Some(v) => {
                return Err(format!(
                    "experiments[{i}].high is {}, expected an object with \"p99_us\"",
                    kind_name(v)
                ))
            }
            None => {
                return Err(format!(
                    "experiments[{i}]: missing \"high\" (with \"p99_us\")"
                ))
            }
        };
        let p99 = number(field(high, "p99_us"), "high.p99_us")?;
        match lines.iter_mut().find(|l| l.name == arch) {
            Some(l) => l.points.push((n, p99)),
            None => lines.push(ArchLine {
                name: arch,
                points: vec![(n, p99)],
            }),
        }
    }
    for l in &mut lines {
        l.points
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    }
    Ok(lines)
}

/// Readable names for `lfrt inversion`'s architectures; others are shown as written.
fn arch_label(name: &str) -> String {
    match name {
        "lanes" => "lfrt lanes".to_string(),
        "single_pool" => "lfrt shared pool".to_string(),
        "hsha" => "HS/HA".to_string(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Chart model (format independent)
// ---------------------------------------------------------------------------

/// Series colours: clearly distinct on white, in order of use.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Overlaid files: the first file's threads in cool colours, the second's in warm ones.
const FILE_COLORS: [[RGBColor; 4]; 2] = [
    [PALETTE[0], PALETTE[7], PALETTE[4], PALETTE[2]],
    [PALETTE[1], PALETTE[3], PALETTE[6], PALETTE[5]],
];

pub(crate) const TEXT: RGBColor = RGBColor(30, 30, 30);
pub(crate) const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);
pub(crate) const GRID_LIGHT: RGBColor = RGBColor(240, 240, 240);
pub(crate) const FAMILY: &str = "sans-serif";

struct Chart {
    title: String,
    subtitle: Option<String>,
    body: Body,
}

enum Body {
    Latency(LatencyBody),
    Inversion(InversionBody),
}

struct LatencyBody {
    series: Vec<LatencySeries>,
    /// Width of a bucket (µs).
    bucket_us: f64,
    /// Right end of the latency axis (µs).
    x_hi: f64,
    /// Bottom of the count axis; empty buckets are drawn here.
    y_lo: f64,
    /// Largest bucket count.
    c_max: f64,
}

struct LatencySeries {
    label: String,
    color: RGBColor,
    /// One line per run of adjacent non-empty buckets (see [`bucket_runs`]).
    runs: Vec<Vec<(f64, f64)>>,
    max_us: Option<f64>,
}

struct InversionSeries {
    label: String,
    color: RGBColor,
    /// (N, p99 µs), sorted by N.
    points: Vec<(f64, f64)>,
}

struct InversionBody {
    series: Vec<InversionSeries>,
    x: (f64, f64),
    /// Every N is a whole number: label the axis with integers.
    x_integer: bool,
    y: (f64, f64),
}

impl Chart {
    fn kind(&self) -> PlotKind {
        match self.body {
            Body::Latency(_) => PlotKind::LatencyHistogram,
            Body::Inversion(_) => PlotKind::InversionP99,
        }
    }

    fn build(inputs: Vec<(PathBuf, Input)>) -> Result<Chart, PlotError> {
        let two = inputs.len() == 2;
        let mut runs = Vec::new();
        for (path, input) in inputs {
            match input {
                Input::Inversion(lines) if !two => {
                    return inversion_chart(lines)
                        .map_err(|reason| PlotError::Shape { path, reason })
                }
                Input::Inversion(_) => {
                    return Err(PlotError::Shape {
                        path,
                        reason: "lfrt inversion results cannot be overlaid; two inputs must \
                                 both be latency histograms (cyclictest, lfrt cyclic or lfrt run)"
                            .to_string(),
                    })
                }
                Input::Latency(run) => runs.push((path, run)),
            }
        }
        latency_chart(runs)
    }
}

/// Widest count range a latency chart draws (largest count / half the smallest).
const MAX_COUNT_SPAN: f64 = 1e20;

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn latency_chart(runs: Vec<(PathBuf, LatencyRun)>) -> Result<Chart, PlotError> {
    let overlay = runs.len() > 1;
    let bucket_us = runs[0].1.bucket_us;
    if let Some((path, run)) = runs.iter().find(|(_, r)| r.bucket_us != bucket_us) {
        return Err(PlotError::Shape {
            path: path.clone(),
            reason: format!(
                "its buckets are {} µs wide, the first file's {} µs: overlaid histograms need one \
                 bucket width",
                fmt_axis(run.bucket_us),
                fmt_axis(bucket_us)
            ),
        });
    }
    // Each file's name in the legend: its source, and the file name if both are alike.
    let same_source = overlay && runs.windows(2).all(|w| w[0].1.source == w[1].1.source);
    let mut series = Vec::new();
    let (mut x_max, mut c_max, mut c_min) = (0.0f64, 0.0f64, f64::INFINITY);
    for (file, (path, run)) in runs.iter().enumerate() {
        let prefix = match (overlay, same_source) {
            (false, _) => String::new(),
            (true, false) => format!("{}: ", run.source),
            (true, true) => format!(
                "{} ({}): ",
                run.source,
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
        };
        for (thread, t) in run.threads.iter().enumerate() {
            for &(x, c) in &t.buckets {
                x_max = x_max.max(x);
                c_max = c_max.max(c);
                c_min = c_min.min(c);
            }
            if let Some(m) = t.max_us {
                x_max = x_max.max(m);
            }
            let mut label = format!("{prefix}{}", t.label);
            if let Some(m) = t.max_us {
                label.push_str(&format!(", max {} µs", fmt_us(m)));
            }
            let color = if overlay {
                let family = &FILE_COLORS[file % FILE_COLORS.len()];
                family[thread % family.len()]
            } else {
                PALETTE[thread % PALETTE.len()]
            };
            series.push((label, color, t));
        }
    }
    // Counts below 1 only come from hand-made files; keep the bottom under every point.
    let y_lo = c_min.min(1.0) / 2.0;
    let x_hi = (x_max + (x_max * 0.03).max(2.0)).ceil();
    // plotters' log axis loops (nearly) forever over an absurd number of decades.
    let span = c_max / y_lo;
    if !x_hi.is_finite() || !span.is_finite() || span > MAX_COUNT_SPAN {
        let (path, _) = &runs[0];
        return Err(PlotError::Shape {
            path: path.clone(),
            reason: format!(
                "latencies up to {x_max:e} µs and counts from {c_min:e} to {c_max:e} are too \
                 large to plot (counts may span at most 20 decades)"
            ),
        });
    }
    let series = series
        .into_iter()
        .map(|(label, color, t)| LatencySeries {
            label,
            color,
            runs: bucket_runs(&t.buckets, bucket_us, y_lo),
            max_us: t.max_us,
        })
        .collect();

    let (title, subtitle) = if overlay {
        let names: Vec<&str> = runs.iter().map(|(_, r)| r.source).collect();
        let files: Vec<String> = runs
            .iter()
            .map(|(p, _)| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        (
            format!("Latency: {}", names.join(" vs ")),
            Some(files.join(" vs ")),
        )
    } else {
        let run = &runs[0].1;
        (format!("Latency: {}", run.source), run.cmdline.clone())
    };
    Ok(Chart {
        title,
        subtitle,
        body: Body::Latency(LatencyBody {
            series,
            bucket_us,
            x_hi,
            y_lo,
            c_max,
        }),
    })
}

/// The lines through a histogram's buckets (`width` µs each): one per run of adjacent non-empty
/// buckets, rising
/// from `floor` (the bottom of the log axis) at its first bucket, through each bucket's count
/// and back to `floor` at its last. An isolated sample is a spike; nothing is drawn over empty
/// buckets.
fn bucket_runs(buckets: &[(f64, f64)], width: f64, floor: f64) -> Vec<Vec<(f64, f64)>> {
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    for (i, &(x, c)) in buckets.iter().enumerate() {
        // Starts are whole multiples of the width; half a width of slack absorbs rounding.
        let joins_previous = i > 0 && buckets[i - 1].0 + width * 1.5 > x;
        if !joins_previous {
            if let Some(run) = runs.last_mut() {
                run.push((buckets[i - 1].0, floor));
            }
            runs.push(vec![(x, floor)]);
        }
        if let Some(run) = runs.last_mut() {
            run.push((x, c));
        }
    }
    if let (Some(run), Some(&(x, _))) = (runs.last_mut(), buckets.last()) {
        run.push((x, floor));
    }
    runs
}

fn inversion_chart(lines: Vec<ArchLine>) -> Result<Chart, String> {
    let pts = || lines.iter().flat_map(|l| l.points.iter());
    let (mut x_lo, mut x_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y_lo, mut y_hi) = (0.0f64, f64::NEG_INFINITY);
    for &(n, p) in pts() {
        x_lo = x_lo.min(n);
        x_hi = x_hi.max(n);
        y_lo = y_lo.min(p);
        y_hi = y_hi.max(p);
    }
    let x_integer = pts().all(|&(n, _)| n.fract() == 0.0);
    let pad = ((x_hi - x_lo) * 0.03).max(if x_hi > x_lo { 0.0 } else { 1.0 });
    if y_hi <= y_lo {
        y_hi = y_lo + 1.0;
    }
    // The axes get some air (and the legend's room) added; that must stay a number.
    if !((x_hi - x_lo) * 4.0).is_finite() || !((y_hi - y_lo) * 4.0).is_finite() {
        return Err(format!(
            "n_low from {x_lo:e} to {x_hi:e} and p99_us from {y_lo:e} to {y_hi:e} are too \
             large to plot"
        ));
    }
    let series = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| InversionSeries {
            label: arch_label(&l.name),
            color: PALETTE[i % PALETTE.len()],
            points: l.points,
        })
        .collect();
    Ok(Chart {
        title: "Priority inversion: high-priority p99 vs low-priority load".to_string(),
        subtitle: None,
        body: Body::Inversion(InversionBody {
            series,
            x: (x_lo - pad, x_hi + pad),
            x_integer,
            y: (y_lo, y_hi),
        }),
    })
}

// ---------------------------------------------------------------------------
// Drawing
// ---------------------------------------------------------------------------

pub(crate) use glyph_bitmap::GlyphBitmap;

type DrawResult = Result<(), Box<dyn StdError>>;

/// Text sizes and spacing for one image size: chosen for 1000x600 and scaled with the image
/// (by the smaller of width/1000 and height/600, kept within 0.7..=2), so small images keep
/// room for the data and large ones are not all whitespace.
struct Layout {
    title: f64,
    subtitle: f64,
    label: f64,
    desc: f64,
    legend: f64,
    /// Legend: row height, inner padding, sample line length, distance from the plot's corner.
    row: i32,
    pad: i32,
    sample: i32,
    inset: i32,
    margin: i32,
    x_label_area: i32,
    y_label_area: i32,
    /// How many x labels fit: one per ~85 px at the default size.
    x_labels: usize,
}

impl Layout {
    fn of(width: u32, height: u32) -> Layout {
        let k = (f64::from(width) / 1000.0)
            .min(f64::from(height) / 600.0)
            .clamp(0.7, 2.0);
        let px = |v: f64| (v * k).round() as i32;
        Layout {
            title: 24.0 * k,
            subtitle: 15.0 * k,
            label: 15.0 * k,
            desc: 17.0 * k,
            legend: 15.0 * k,
            row: px(21.0),
            pad: px(8.0),
            sample: px(28.0),
            inset: px(10.0),
            margin: px(12.0),
            x_label_area: px(55.0),
            y_label_area: px(80.0),
            x_labels: ((f64::from(width) / (85.0 * k)) as usize).max(3),
        }
    }

    /// Pixel height of the plotting area ChartBuilder leaves in `area`.
    fn plot_height<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> i32 {
        let (_, h) = area.dim_in_pixel();
        (h as i32 - 2 * self.margin - self.x_label_area).max(1)
    }

    /// Most legend rows shown in a plot `plot_h` high; more series than that end in
    /// "+ k more".
    fn legend_rows(&self, entries: usize, plot_h: i32) -> usize {
        let fit = ((f64::from(plot_h) * 0.35) as i32 / self.row).max(1) as usize;
        entries.min(fit)
    }

    /// Fraction of the plot's height, from the top, that a legend of `rows` rows covers
    /// (with some air below it): the data's range is stretched so that nothing is drawn
    /// there.
    fn legend_fraction(&self, rows: usize, plot_h: i32) -> f64 {
        let h = rows as i32 * self.row + 2 * self.pad + 2 * self.inset;
        (f64::from(h) / f64::from(plot_h)).clamp(0.05, 0.45)
    }

    fn chart_builder<'a, 'b, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
    ) -> ChartBuilder<'a, 'b, DB> {
        let mut b = ChartBuilder::on(area);
        b.margin(self.margin)
            .margin_right(self.margin * 2)
            .x_label_area_size(self.x_label_area)
            .y_label_area_size(self.y_label_area);
        b
    }

    fn font(&self, size: f64) -> TextStyle<'static> {
        TextStyle::from((FAMILY, size).into_font()).color(&TEXT)
    }
}

/// Draws `chart` as SVG and returns the document.
fn render_svg(chart: &Chart, size: Size) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size.dims()).into_drawing_area();
        draw(&root, chart).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Draws `chart` into an RGB buffer (3 bytes a pixel, rows top to bottom), text in `font`.
fn render_rgb(chart: &Chart, size: Size, font: &ab_glyph::FontVec) -> Result<Vec<u8>, String> {
    let mut rgb = vec![0u8; size.width as usize * size.height as usize * 3];
    {
        let root = GlyphBitmap {
            inner: BitMapBackend::with_buffer(&mut rgb, size.dims()),
            font,
        }
        .into_drawing_area();
        draw(&root, chart).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(rgb)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let l = Layout::of(w, h);
    let top = l.margin;
    let title_style = l.font(l.title).pos(Pos::new(HPos::Center, VPos::Top));
    let title = fit_text(root, &chart.title, &title_style, w as i32 - 2 * l.margin)?;
    root.draw(&Text::new(title, (w as i32 / 2, top), title_style))?;
    let mut title_h = top + (l.title * 1.3) as i32;
    if let Some(sub) = &chart.subtitle {
        let style = l
            .font(l.subtitle)
            .color(&RGBColor(90, 90, 90))
            .pos(Pos::new(HPos::Center, VPos::Top));
        let sub = fit_text(root, sub, &style, w as i32 - 2 * l.margin)?;
        root.draw(&Text::new(sub, (w as i32 / 2, title_h), style))?;
        title_h += (l.subtitle * 1.3) as i32;
    }
    let (_, area) = root.split_vertically(title_h);
    match &chart.body {
        Body::Latency(b) => draw_latency(root, &area, &l, b),
        Body::Inversion(b) => draw_inversion(root, &area, &l, b),
    }
}

/// Count axis labels: the powers of ten as plain numbers (1, 10, …, 10000, then 1e5 …).
fn fmt_count(v: f64) -> String {
    if (1.0..1e5).contains(&v) {
        format!("{}", v.round())
    } else if v >= 1e5 {
        format!("{v:e}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn fmt_axis(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn draw_latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    l: &Layout,
    b: &LatencyBody,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let plot_h = l.plot_height(area);
    let rows = l.legend_rows(b.series.len(), plot_h);
    // Log axis: the data's top decade ends where the legend begins.
    let f = l.legend_fraction(rows, plot_h);
    let (lo, top) = (b.y_lo.ln(), (b.c_max * 1.5).ln());
    let y_hi = (lo + (top - lo) / (1.0 - f)).exp();

    let mut chart = l
        .chart_builder(area)
        .build_cartesian_2d(0f64..b.x_hi, (b.y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc(format!(
            "latency (µs), {} µs buckets",
            fmt_axis(b.bucket_us)
        ))
        .y_desc("samples per bucket (log scale)")
        .x_label_formatter(&|v| fmt_axis(*v))
        .y_label_formatter(&|v| fmt_count(*v))
        .x_labels(l.x_labels)
        .label_style(l.font(l.label))
        .axis_desc_style(l.font(l.desc))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(4)
        .draw()?;
    for s in &b.series {
        let style = s.color.stroke_width(1);
        chart.draw_series(
            s.runs
                .iter()
                .map(|run| PathElement::new(run.clone(), style)),
        )?;
    }
    for s in &b.series {
        if let Some(m) = s.max_us {
            chart.draw_series(DashedLineSeries::new(
                [(m, b.y_lo), (m, y_hi)],
                6,
                4,
                s.color.stroke_width(2),
            ))?;
        }
    }
    let entries: Vec<(&str, RGBColor)> = b
        .series
        .iter()
        .map(|s| (s.label.as_str(), s.color))
        .collect();
    draw_legend(
        root,
        l,
        chart.plotting_area().get_pixel_range(),
        &entries,
        rows,
        false,
    )
}

fn draw_inversion<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    l: &Layout,
    b: &InversionBody,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let plot_h = l.plot_height(area);
    let rows = l.legend_rows(b.series.len(), plot_h);
    let f = l.legend_fraction(rows, plot_h);
    let (y_lo, top) = (b.y.0, b.y.1 * 1.05);
    let y_hi = y_lo + (top - y_lo) / (1.0 - f);

    let x_fmt = |v: &f64| {
        if b.x_integer && v.fract() != 0.0 {
            String::new()
        } else {
            fmt_axis(*v)
        }
    };
    let mut chart = l
        .chart_builder(area)
        .build_cartesian_2d(b.x.0..b.x.1, y_lo..y_hi)?;
    chart
        .configure_mesh()
        .x_desc("low-priority streams flooding the server (N)")
        .y_desc("high-priority p99 latency (µs)")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| fmt_axis(*v))
        .x_labels(l.x_labels)
        .label_style(l.font(l.label))
        .axis_desc_style(l.font(l.desc))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(4)
        .draw()?;
    for s in &b.series {
        chart.draw_series(
            LineSeries::new(s.points.iter().copied(), s.color.stroke_width(2)).point_size(4),
        )?;
    }
    let entries: Vec<(&str, RGBColor)> = b
        .series
        .iter()
        .map(|s| (s.label.as_str(), s.color))
        .collect();
    draw_legend(
        root,
        l,
        chart.plotting_area().get_pixel_range(),
        &entries,
        rows,
        true,
    )
}

/// Shortens `text` with "…" until it is at most `max_w` pixels wide.
pub(crate) fn fit_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle,
    max_w: i32,
) -> Result<String, Box<dyn StdError>>
where
    DB::ErrorType: 'static,
{
    let width = |s: &str| area.estimate_text_size(s, style).map(|(w, _)| w as i32);
    if width(text)? <= max_w {
        return Ok(text.to_string());
    }
    let mut chars: Vec<char> = text.chars().collect();
    while !chars.is_empty() {
        chars.pop();
        let s: String = chars.iter().chain(['…'].iter()).collect();
        if width(&s)? <= max_w {
            return Ok(s);
        }
    }
    Ok(String::new())
}

/// The legend, in the top right corner of the plot (`plot` is its pixel range on `root`): a
/// framed box with one row per series, a line of the series' colour and its label (a dot on
/// the line when the series marks its points). Drawn here rather than with plotters'
/// `configure_series_labels`, which sizes its box with plotters' built-in width guess instead
/// of the backend's measure, so PNG labels would overflow it.
fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    l: &Layout,
    plot: (std::ops::Range<i32>, std::ops::Range<i32>),
    entries: &[(&str, RGBColor)],
    rows: usize,
    dots: bool,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    if entries.is_empty() {
        return Ok(());
    }
    let style = l.font(l.legend).pos(Pos::new(HPos::Left, VPos::Center));
    let max_label = (plot.0.end - plot.0.start) * 7 / 10 - l.sample - 3 * l.pad;
    let mut shown: Vec<(String, Option<RGBColor>)> = Vec::with_capacity(rows);
    for (i, &(label, color)) in entries.iter().enumerate() {
        if i + 1 == rows && entries.len() > rows {
            shown.push((format!("+ {} more", entries.len() - i), None));
            break;
        }
        shown.push((fit_text(root, label, &style, max_label)?, Some(color)));
    }
    let mut text_w = 0;
    for (label, _) in &shown {
        text_w = text_w.max(root.estimate_text_size(label, &style)?.0 as i32);
    }
    let w = l.pad * 3 + l.sample + text_w;
    let h = shown.len() as i32 * l.row + 2 * l.pad;
    let x0 = plot.0.end - l.inset - w;
    let y0 = plot.1.start + l.inset;
    root.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        WHITE.filled(),
    ))?;
    root.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        RGBColor(160, 160, 160).stroke_width(1),
    ))?;
    for (i, (label, color)) in shown.iter().enumerate() {
        let y = y0 + l.pad + i as i32 * l.row + l.row / 2;
        let x = x0 + l.pad;
        if let Some(c) = color {
            root.draw(&PathElement::new(
                vec![(x, y), (x + l.sample, y)],
                c.stroke_width(3),
            ))?;
            if dots {
                root.draw(&Circle::new((x + l.sample / 2, y), 4, c.filled()))?;
            }
        }
        root.draw(&Text::new(
            label.clone(),
            (x + l.sample + l.pad, y),
            style.clone(),
        ))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// PNG text
// ---------------------------------------------------------------------------

/// Reads the TrueType font PNG text is drawn with.
pub(crate) fn load_font(path: &Path) -> Result<ab_glyph::FontVec, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the font: {e}"))?;
    ab_glyph::FontVec::try_from_vec(bytes).map_err(|_| "not a TrueType/OpenType font".to_string())
}

mod glyph_bitmap {
    use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
    use plotters::prelude::BitMapBackend;
    use plotters_backend::text_anchor::{HPos, VPos};
    use plotters_backend::{
        BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend,
        DrawingErrorKind,
    };

    type Error = <BitMapBackend<'static> as DrawingBackend>::ErrorType;

    /// A `BitMapBackend` whose text is laid out and rasterised with ab_glyph directly.
    ///
    /// plotters' own `ab_glyph` feature (0.3.7, and its master as of 2026-11) places each
    /// glyph's ink at the pen position and drops the glyph's left side bearing, so narrow
    /// glyphs drift left and numbers read wrong ("1918" drawn as "191 8"). Here each glyph is
    /// positioned at its pen position and drawn where its outline's pixel bounds say. Sizes
    /// follow the SVG backend: a style of size `s` is a font of `s / 1.24` pixels per em.
    pub(crate) struct GlyphBitmap<'a> {
        pub(crate) inner: BitMapBackend<'a>,
        pub(crate) font: &'a FontVec,
    }

    /// One line of text laid out on a baseline at y = 0 starting at x = 0.
    struct Line {
        glyphs: Vec<ab_glyph::Glyph>,
        width: f32,
        /// Pixels per em.
        em: f32,
        ascent: f32,
        descent: f32,
    }

    impl GlyphBitmap<'_> {
        fn layout(&self, text: &str, size: f64) -> Line {
            let em = (size / 1.24) as f32;
            let units = self.font.units_per_em().unwrap_or(1000.0);
            let scale = PxScale::from(em * self.font.height_unscaled() / units);
            let font = self.font.as_scaled(scale);
            let mut glyphs = Vec::with_capacity(text.len());
            let (mut x, mut prev) = (0.0f32, None);
            for c in text.chars() {
                let id = font.glyph_id(c);
                if let Some(p) = prev {
                    x += font.kern(p, id);
                }
                glyphs.push(id.with_scale_and_position(scale, point(x, 0.0)));
                x += font.h_advance(id);
                prev = Some(id);
            }
            Line {
                glyphs,
                width: x,
                em,
                ascent: font.ascent(),
                descent: font.descent(),
            }
        }
    }

    impl DrawingBackend for GlyphBitmap<'_> {
        type ErrorType = Error;

        fn get_size(&self) -> (u32, u32) {
            self.inner.get_size()
        }

        fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.ensure_prepared()
        }

        fn present(&mut self) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.present()
        }

        fn draw_pixel(
            &mut self,
            point: BackendCoord,
            color: BackendColor,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.draw_pixel(point, color)
        }

        fn draw_line<S: BackendStyle>(
            &mut self,
            from: BackendCoord,
            to: BackendCoord,
            style: &S,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.draw_line(from, to, style)
        }

        fn draw_rect<S: BackendStyle>(
            &mut self,
            upper_left: BackendCoord,
            bottom_right: BackendCoord,
            style: &S,
            fill: bool,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.draw_rect(upper_left, bottom_right, style, fill)
        }

        fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            path: I,
            style: &S,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.draw_path(path, style)
        }

        fn draw_circle<S: BackendStyle>(
            &mut self,
            center: BackendCoord,
            radius: u32,
            style: &S,
            fill: bool,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.draw_circle(center, radius, style, fill)
        }

        fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
            &mut self,
            vert: I,
            style: &S,
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.fill_polygon(vert, style)
        }

        fn blit_bitmap(
            &mut self,
            pos: BackendCoord,
            size: (u32, u32),
            src: &[u8],
        ) -> Result<(), DrawingErrorKind<Error>> {
            self.inner.blit_bitmap(pos, size, src)
        }

        fn estimate_text_size<S: BackendTextStyle>(
            &self,
            text: &str,
            style: &S,
        ) -> Result<(u32, u32), DrawingErrorKind<Error>> {
            let line = self.layout(text, style.size());
            Ok((
                line.width.ceil() as u32,
                (line.ascent - line.descent).ceil() as u32,
            ))
        }

        fn draw_text<S: BackendTextStyle>(
            &mut self,
            text: &str,
            style: &S,
            pos: BackendCoord,
        ) -> Result<(), DrawingErrorKind<Error>> {
            let color = style.color();
            if color.alpha == 0.0 {
                return Ok(());
            }
            let line = self.layout(text, style.size());
            // Offset of the anchor from the start of the baseline, before rotation. A centred
            // line puts the middle of its digits and capitals (about 0.72 em tall) there.
            let dx = match style.anchor().h_pos {
                HPos::Left => 0.0,
                HPos::Center => -line.width / 2.0,
                HPos::Right => -line.width,
            };
            let dy = match style.anchor().v_pos {
                VPos::Top => line.ascent,
                VPos::Center => 0.36 * line.em,
                VPos::Bottom => line.descent,
            };
            let transform = style.transform();
            for glyph in line.glyphs {
                let Some(outline) = self.font.outline_glyph(glyph) else {
                    continue; // blank (a space)
                };
                let bounds = outline.px_bounds();
                let mut result = Ok(());
                outline.draw(|gx, gy, coverage| {
                    if result.is_err() || coverage <= 0.0 {
                        return;
                    }
                    let x = (bounds.min.x + gx as f32 + dx).round() as i32;
                    let y = (bounds.min.y + gy as f32 + dy).round() as i32;
                    let (tx, ty) = transform.transform(x, y);
                    let ink = BackendColor {
                        alpha: color.alpha * f64::from(coverage.min(1.0)),
                        rgb: color.rgb,
                    };
                    result = self.inner.draw_pixel((pos.0 + tx, pos.1 + ty), ink);
                });
                result?;
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Builds the chart for in-memory inputs named like files.
    fn chart(inputs: &[(&str, Value)]) -> Result<Chart, String> {
        let mut parsed = Vec::new();
        for (name, v) in inputs {
            parsed.push((PathBuf::from(name), Input::parse(v)?));
        }
        Chart::build(parsed).map_err(|e| e.to_string())
    }

    fn latency(v: &Value) -> LatencyRun {
        match Input::parse(v) {
            Ok(Input::Latency(run)) => run,
            Ok(Input::Inversion(_)) => panic!("parsed as inversion"),
            Err(e) => panic!("{e}"),
        }
    }

    fn cyclictest_value() -> Value {
        let mut h0 = Map::new();
        let mut h1 = Map::new();
        for us in 0..150u64 {
            let c0 = (5000.0 * (-((us as f64 - 40.0) / 8.0).powi(2)).exp()).round() as u64;
            let c1 = (900.0 * (-((us as f64 - 70.0) / 15.0).powi(2)).exp()).round() as u64;
            if c0 > 0 {
                h0.insert(us.to_string(), json!(c0));
            }
            if c1 > 0 {
                h1.insert(us.to_string(), json!(c1));
            }
        }
        h1.insert("140".into(), json!(1));
        json!({
            "file_version": 1,
            "cmdline:": "cyclictest -q -l 100000 -i 500 -h 200 --json=/tmp/ct.json -m -t 2",
            "rt_test_version:": "2.40",
            "num_threads": 2,
            "thread": {
                "0": {"histogram": h0, "cycles": 100000, "min": 20, "avg": 40.5, "max": 90, "cpu": 0},
                "1": {"histogram": h1, "cycles": 100000, "min": 25, "avg": 70.1, "max": 141,
                      "cpu": 1, "group": "ctrl", "priority": 80}
            }
        })
    }

    /// `lfrt cyclic -N --json` output: ns, with a unit field and lfrt's version.
    fn lfrt_value() -> Value {
        json!({
            "file_version": 1,
            "cmdline": "lfrt cyclic -N -h 1000000 -t 1 --json=x",
            "lfrt_version": "0.1.0",
            "unit": "ns",
            "thread": {"0": {"histogram": {"20100": 7, "20900": 5, "21500": 40, "90000": 1},
                             "max": 250000, "group": "cyclic", "priority": 80}}
        })
    }

    fn inversion_value() -> Value {
        let mut exps = Vec::new();
        for (arch, base, slope) in [
            ("lanes", 18.0, 0.4),
            ("single_pool", 20.0, 9.0),
            ("hsha", 35.0, 3.5),
            ("custom", 50.0, 1.0),
        ] {
            for n in [0u64, 1, 2, 4, 8, 16] {
                exps.push(json!({
                    "architecture": arch,
                    "n_low": n,
                    "high": {"p50_us": base / 2.0, "p99_us": base + slope * n as f64},
                }));
            }
        }
        json!({"experiments": exps, "lock": []})
    }

    /// What an SVG holds: its size, its text, and per stroke colour the number of points of
    /// each polyline drawn in it.
    struct SvgSummary {
        size: (u32, u32),
        texts: Vec<String>,
        lines: std::collections::HashMap<String, Vec<usize>>,
    }

    fn summarize_svg(svg: &str) -> SvgSummary {
        let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let dim = |a: &str| root.attribute(a).and_then(|v| v.parse().ok()).expect(a);
        let mut lines = std::collections::HashMap::<String, Vec<usize>>::new();
        for n in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
            let points = n
                .attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .count();
            let stroke = n.attribute("stroke").unwrap_or("").to_ascii_uppercase();
            lines.entry(stroke).or_default().push(points);
        }
        let texts = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect();
        SvgSummary {
            size: (dim("width"), dim("height")),
            texts,
            lines,
        }
    }

    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    fn system_font(test: &str) -> Option<ab_glyph::FontVec> {
        match load_font(Path::new(FONT)) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("SKIP {test}: {FONT}: {e} (install {FONT_PACKAGE}; CI does)");
                None
            }
        }
    }

    fn count_color(rgb: &[u8], c: RGBColor) -> usize {
        rgb.chunks_exact(3)
            .filter(|p| p == &[c.0, c.1, c.2])
            .count()
    }

    #[test]
    fn latency_svg_has_the_stated_size_one_line_set_per_thread_and_a_legend() {
        let size = Size {
            width: 800,
            height: 500,
        };
        let svg = render_svg(&chart(&[("ct.json", cyclictest_value())]).unwrap(), size).unwrap();
        let s = summarize_svg(&svg);
        assert_eq!(s.size, (800, 500));
        assert!(
            s.texts.iter().any(|t| t == "T0, max 90.0 µs"),
            "{:?}",
            s.texts
        );
        assert!(s.texts.iter().any(|t| t == "T1 (ctrl P80), max 141 µs"));
        assert!(s.texts.iter().any(|t| t == "Latency: cyclictest"));
        assert!(s
            .texts
            .iter()
            .any(|t| t.starts_with("cyclictest -q -l 100000")));
        assert!(s.texts.iter().any(|t| t.starts_with("latency (µs)")));
        for (i, c) in PALETTE[..2].iter().enumerate() {
            let lines = &s.lines[&hex(*c)];
            // The histogram: a run over the contiguous buckets (T1 also has an isolated
            // spike at 140 µs, 3 points: floor, count, floor)...
            let longest = lines.iter().max().unwrap();
            assert!(*longest > 40, "series {i}: {lines:?}");
            if i == 1 {
                assert!(lines.contains(&3), "spike missing: {lines:?}");
            }
            // ... and the dashed max line and the legend sample (2 points each).
            assert!(lines.iter().filter(|&&n| n == 2).count() >= 2, "{lines:?}");
        }
        assert!(!s.lines.contains_key(&hex(PALETTE[2])));
    }

    #[test]
    fn inversion_svg_names_every_architecture_with_one_point_per_n() {
        let svg = render_svg(
            &chart(&[("inv.json", inversion_value())]).unwrap(),
            Size::DEFAULT,
        )
        .unwrap();
        let s = summarize_svg(&svg);
        assert_eq!(s.size, (1000, 600));
        for (i, name) in ["lfrt lanes", "lfrt shared pool", "HS/HA", "custom"]
            .iter()
            .enumerate()
        {
            assert!(s.texts.iter().any(|t| t == name), "{name}: {:?}", s.texts);
            let lines = &s.lines[&hex(PALETTE[i])];
            assert_eq!(lines.iter().max(), Some(&6), "{name}: {lines:?}");
        }
        assert!(s.texts.iter().any(|t| t.contains("p99")));
        assert!(s.texts.iter().any(|t| t.contains("(N)")));
    }

    #[test]
    fn overlay_names_each_files_source_in_the_legend() {
        let c = chart(&[("a.json", cyclictest_value()), ("b.json", lfrt_value())]).unwrap();
        let s = summarize_svg(&render_svg(&c, Size::DEFAULT).unwrap());
        assert!(s
            .texts
            .iter()
            .any(|t| t == "Latency: cyclictest vs lfrt cyclic"));
        assert!(s.texts.iter().any(|t| t == "cyclictest: T0, max 90.0 µs"));
        assert!(s
            .texts
            .iter()
            .any(|t| t == "cyclictest: T1 (ctrl P80), max 141 µs"));
        // 250000 ns; the buckets are 1 µs: 20100 and 20900 ns share bucket 20.
        assert!(
            s.texts
                .iter()
                .any(|t| t == "lfrt cyclic: T0 (cyclic P80), max 250 µs"),
            "{:?}",
            s.texts
        );
        // Cool colours for the first file, warm ones for the second.
        for c in [FILE_COLORS[0][0], FILE_COLORS[0][1], FILE_COLORS[1][0]] {
            assert!(s.lines.contains_key(&hex(c)), "{c:?}");
        }
        // Two files from the same source are told apart by their names.
        let c = chart(&[("x.json", lfrt_value()), ("y.json", lfrt_value())]).unwrap();
        let s = summarize_svg(&render_svg(&c, Size::DEFAULT).unwrap());
        assert!(s
            .texts
            .iter()
            .any(|t| t.starts_with("lfrt cyclic (x.json): T0")));
        assert!(s
            .texts
            .iter()
            .any(|t| t.starts_with("lfrt cyclic (y.json): T0")));
    }

    #[test]
    fn png_has_the_stated_size_and_every_series_colour() {
        let Some(font) = system_font("png_has_the_stated_size_and_every_series_colour") else {
            return;
        };
        let size = Size {
            width: 640,
            height: 400,
        };
        /// Inputs, and the colours their series must show in.
        type Case<'a> = (&'a [(&'a str, Value)], &'a [RGBColor]);
        let cases: [Case; 3] = [
            (&[("ct.json", cyclictest_value())], &PALETTE[..2]),
            (&[("inv.json", inversion_value())], &PALETTE[..4]),
            (
                &[("a.json", cyclictest_value()), ("b.json", lfrt_value())],
                &[FILE_COLORS[0][0], FILE_COLORS[0][1], FILE_COLORS[1][0]],
            ),
        ];
        for (inputs, colors) in cases {
            let rgb = render_rgb(&chart(inputs).unwrap(), size, &font).unwrap();
            assert_eq!(rgb.len(), 640 * 400 * 3);
            for c in colors {
                let n = count_color(&rgb, *c);
                assert!(n > 100, "{c:?}: {n} pixels");
            }
            // Text was drawn: the title's dark ink in the top band.
            let dark = rgb[..640 * 40 * 3]
                .chunks_exact(3)
                .filter(|p| p.iter().all(|&v| v < 100))
                .count();
            assert!(dark > 50, "title ink: {dark}");
        }
    }

    /// plotters' own ab_glyph text drops each glyph's left side bearing; GlyphBitmap keeps it.
    #[test]
    fn png_text_keeps_each_glyphs_side_bearing() {
        let Some(font) = system_font("png_text_keeps_each_glyphs_side_bearing") else {
            return;
        };
        let (w, h) = (200u32, 100u32);
        let mut rgb = vec![255u8; (w * h * 3) as usize];
        {
            let root = GlyphBitmap {
                inner: BitMapBackend::with_buffer(&mut rgb, (w, h)),
                font: &font,
            }
            .into_drawing_area();
            let style = TextStyle::from((FAMILY, 62.0).into_font())
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Top));
            root.draw(&Text::new("1", (20, 10), style)).unwrap();
            root.present().unwrap();
        }
        let first_ink = (0..w)
            .find(|&x| (0..h).any(|y| rgb[((y * w + x) * 3) as usize] < 128))
            .expect("ink");
        // DejaVu's '1' starts 0.11 em right of the pen; 62 / 1.24 = 50 px per em.
        use ab_glyph::{Font, ScaleFont};
        let em = 62.0 / 1.24;
        let scale = em * font.height_unscaled() / font.units_per_em().unwrap();
        let bearing = font.as_scaled(scale).h_side_bearing(font.glyph_id('1'));
        assert!(bearing > 3.0, "{bearing}");
        assert!(
            (first_ink as f32 - (20.0 + bearing)).abs() <= 1.5,
            "ink starts at {first_ink}, pen 20, bearing {bearing}"
        );
    }

    #[test]
    fn nanoseconds_are_detected_and_rebucketed_to_whole_microseconds() {
        // Real cyclictest says -N only in its command line.
        let mut v = json!({
            "cmdline:": "cyclictest -m -p 80 -qN -h 2000000 --json=x",
            "thread": {"0": {"histogram": {"5601": 1, "5999": 2, "6000": 4, "9000": 1}, "max": 3106247}}
        });
        let run = latency(&v);
        assert_eq!(run.source, "cyclictest");
        assert_eq!(run.threads[0].buckets, [(5.0, 3.0), (6.0, 4.0), (9.0, 1.0)]);
        assert_eq!(run.threads[0].max_us, Some(3106.247));
        for cmd in ["cyclictest -N", "cyclictest --nsecs -q", "cyclictest -mN"] {
            v["cmdline:"] = json!(cmd);
            assert_eq!(latency(&v).threads[0].buckets[0].0, 5.0, "{cmd}");
        }
        for cmd in [
            "cyclictest -q",
            "cyclictest --json=/tmp/-N",
            "cyclictest -h2000N",
        ] {
            v["cmdline:"] = json!(cmd);
            assert_eq!(latency(&v).threads[0].buckets[0].0, 5601.0, "{cmd}");
        }
        // lfrt's unit field decides over the command line.
        v["unit"] = json!("us");
        v["cmdline:"] = json!("lfrt cyclic -N");
        assert_eq!(latency(&v).threads[0].buckets[0].0, 5601.0);
        v["unit"] = json!("ns");
        assert_eq!(latency(&v).threads[0].buckets[0].0, 5.0);
        v["unit"] = json!("ms");
        let err = Input::parse(&v).err().unwrap();
        assert!(err.contains("\"unit\" is \"ms\""), "{err}");
        // The file's max wins when it lies past the histogram (overflowed samples); the last
        // bucket stands in when there is no max.
        let run = latency(&json!({"thread": {"0": {"histogram": {"3": 1, "7": 2}}}}));
        assert_eq!(run.threads[0].max_us, Some(7.0));
        assert_eq!(run.source, "cyclictest");
        assert_eq!(latency(&lfrt_value()).source, "lfrt cyclic");
    }

    /// `lfrt run --json`'s histogram holds every value once, in the 1 µs bucket of its
    /// hdrhistogram midpoint, and reads back as µs buckets labelled by group.
    #[test]
    fn run_histograms_round_trip() {
        let mut h = lfrt::telemetry::new_histogram();
        for v in [1, 999, 1000, 1999, 5000, 5000, 5000] {
            h.record(v).unwrap();
        }
        let hist = latency_histogram(&h, RUN_BUCKET_NS);
        assert_eq!(
            hist,
            json!({"bucket_ns": 1000, "counts": [[0, 2], [1000, 2], [5000, 3]]})
        );
        let file = json!({"duration_s": 1.0, "groups": [
            {"metrics": {"name": "control", "priority": 80}, "latency_ns": {"max_ns": 5000},
             "latency_histogram": hist},
            {"metrics": {"name": "idle", "priority": 10}, "latency_ns": {"max_ns": 0},
             "latency_histogram": {"bucket_ns": 1000, "counts": []}}]});
        let run = latency(&file);
        assert_eq!((run.source, run.bucket_us), ("lfrt run", 1.0));
        assert_eq!(run.threads[0].label, "control (P80)");
        assert_eq!(run.threads[0].buckets, [(0.0, 2.0), (1.0, 2.0), (5.0, 3.0)]);
        assert_eq!(run.threads[0].max_us, Some(5.0));
        assert_eq!(run.threads[1].label, "idle (P10) (no samples)");
        assert_eq!(run.threads[1].max_us, None);
        // A run's histogram may be overlaid on a cyclictest one only with the same buckets.
        let mut wide = file.clone();
        for g in wide["groups"].as_array_mut().unwrap() {
            g["latency_histogram"]["bucket_ns"] = json!(2000);
        }
        let cyclic = json!({"thread": {"0": {"histogram": {"3": 1}}}});
        let e = chart(&[("run.json", wide), ("ct.json", cyclic)])
            .err()
            .unwrap();
        assert!(e.contains("one bucket width"), "{e}");
    }

    #[test]
    fn bucket_runs_rise_from_and_return_to_the_floor() {
        let b = [
            (3.0, 5.0),
            (4.0, 6.0),
            (5.0, 2.0),
            (9.0, 1.0),
            (11.0, 4.0),
            (12.0, 1.0),
        ];
        assert_eq!(
            bucket_runs(&b, 1.0, 0.5),
            [
                vec![(3.0, 0.5), (3.0, 5.0), (4.0, 6.0), (5.0, 2.0), (5.0, 0.5)],
                vec![(9.0, 0.5), (9.0, 1.0), (9.0, 0.5)],
                vec![(11.0, 0.5), (11.0, 4.0), (12.0, 1.0), (12.0, 0.5)],
            ]
        );
        assert!(bucket_runs(&[], 1.0, 0.5).is_empty());
    }

    #[test]
    fn threads_sorted_numerically_and_threads_without_histogram_skipped() {
        let v = json!({"thread": {
            "10": {"histogram": {"5": 1}},
            "2": {"histogram": {"3": 4}},
            "3": {"cycles": 5},
            "4": {"histogram": {"7": 0}},
        }});
        let labels: Vec<_> = latency(&v).threads.into_iter().map(|t| t.label).collect();
        assert_eq!(labels, ["T2", "T4 (no samples)", "T10"]);
    }

    #[test]
    fn bad_shapes_are_errors_naming_the_field() {
        let cases = [
            (json!([1, 2]), "not an object"),
            (json!({"foo": 1}), "expected cyclictest"),
            (json!({"thread": 5}), "\"thread\" is a number"),
            (json!({"thread": {}}), "-h/--histogram"),
            (
                json!({"thread": {"0": {"cycles": 10, "min": 1}}}),
                "-h/--histogram",
            ),
            (json!({"thread": {"0": 7}}), "thread \"0\" is a number"),
            (
                json!({"thread": {"0": {"histogram": []}}}),
                "\"histogram\" is an array",
            ),
            (
                json!({"thread": {"0": {"histogram": {"abc": 1}}}}),
                "\"abc\"",
            ),
            (json!({"thread": {"0": {"histogram": {"-5": 1}}}}), "\"-5\""),
            (
                json!({"thread": {"0": {"histogram": {"1": -4}}}}),
                "non-negative",
            ),
            (
                json!({"thread": {"0": {"histogram": {"1": "x"}}}}),
                "non-negative",
            ),
            (json!({"thread": {"0": {"histogram": {"1": 0}}}}), "empty"),
            (
                json!({"thread": {"0": {"histogram": {"1": 1}, "max": "x"}}}),
                "\"max\"",
            ),
            (
                json!({"thread": {"0": {"histogram": {"1": 1}}}, "unit": 3}),
                "\"unit\"",
            ),
            (json!({"experiments": {}}), "expected an array"),
            (json!({"experiments": []}), "empty"),
            (json!({"experiments": [1]}), "experiments[0] is a number"),
            (
                json!({"experiments": [{"n_low": 1}]}),
                "missing \"architecture\"",
            ),
            (
                json!({"experiments": [{"architecture": "a", "n_low": "2", "high": {"p99_us": 1}}]}),
                "experiments[0].n_low",
            ),
            (
                json!({"experiments": [{"architecture": "a", "n_low": 1, "high": {"p99_us": 1}},
                                       {"architecture": "b", "n_low": 1, "high": {}}]}),
                "experiments[1]: missing \"high.p99_us\"",
            ),
        ];
        for (v, needle) in cases {
            let err = match Input::parse(&v) {
                Ok(_) => panic!("{v}: parsed"),
                Err(e) => e,
            };
            assert!(err.contains(needle), "{v}: {err:?} lacks {needle:?}");
        }
        // Inversion results cannot be overlaid.
        let err = chart(&[
            ("ct.json", cyclictest_value()),
            ("inv.json", inversion_value()),
        ])
        .err()
        .unwrap();
        assert!(
            err.starts_with("inv.json: cannot plot") && err.contains("overlaid"),
            "{err}"
        );
    }

    #[test]
    fn odd_but_valid_values_render() {
        let many: Map<String, Value> = (0..40)
            .map(|i| (i.to_string(), json!({"histogram": {"1": i + 1, "2": 1}})))
            .collect();
        for v in [
            json!({"thread": {"0": {"histogram": {"0": 1}}}}),
            json!({"thread": {"0": {"histogram": {"17": 123456}}}}),
            json!({"thread": {"0": {"histogram": {"5": 0.001, "6": 2.5}}}}),
            json!({"thread": {"0": {"histogram": {"18446744073709551615": 18446744073709551615u64}}}}),
            json!({"thread": {"0": {"histogram": {"1e300": 1, "0": 3}}}}),
            json!({"thread": {"0": {"histogram": {"1e308": 1}, "max": 1.7e308}}}),
            json!({ "thread": many }),
            json!({"experiments": [{"architecture": "lanes", "n_low": 4, "high": {"p99_us": 12.5}}]}),
            json!({"experiments": [{"architecture": "a\u{1}\n", "n_low": 0, "high": {"p99_us": 0.0}}]}),
            json!({"experiments": [{"architecture": "a", "n_low": 0.5, "high": {"p99_us": -3.0}},
                                   {"architecture": "b", "n_low": 1e12, "high": {"p99_us": 1e12}}]}),
        ] {
            let c = chart(&[("x.json", v.clone())]).unwrap_or_else(|e| panic!("{v}: {e}"));
            let s = summarize_svg(&render_svg(&c, Size::MIN).unwrap());
            assert_eq!(s.size, (400, 300), "{v}");
        }
        // Too large to draw is an error, not a panic or a hang.
        for v in [
            json!({"thread": {"0": {"histogram": {"1e308": 1}, "max": 1.79e308}}}),
            json!({"thread": {"0": {"histogram": {"1": 1.5e300}}}}),
            json!({"thread": {"0": {"histogram": {"1": 1e20, "2": 1}}}}),
            json!({"experiments": [{"architecture": "a", "n_low": 1, "high": {"p99_us": -1e308}},
                                   {"architecture": "b", "n_low": 2, "high": {"p99_us": 1e308}}]}),
            json!({"experiments": [{"architecture": "a", "n_low": -1e308, "high": {"p99_us": 1}},
                                   {"architecture": "a", "n_low": 1e308, "high": {"p99_us": 1}}]}),
        ] {
            let err = chart(&[("x.json", v.clone())])
                .err()
                .unwrap_or_else(|| panic!("{v} drew"));
            assert!(
                err.starts_with("x.json: cannot plot") && err.contains("too large"),
                "{v}: {err}"
            );
        }
    }

    #[test]
    fn size_and_format_come_from_the_command_line() {
        assert_eq!(
            "1200x700".parse::<Size>(),
            Ok(Size {
                width: 1200,
                height: 700
            })
        );
        assert_eq!(
            "640X400".parse::<Size>().map(|s| s.to_string()),
            Ok("640x400".into())
        );
        for bad in ["", "1200", "x700", "12a0x700", "-1x700", "1200x700x3"] {
            let err = bad.parse::<Size>().unwrap_err();
            assert!(err.contains("WIDTHxHEIGHT"), "{bad}: {err}");
        }
        for bad in ["100x100", "9000x600"] {
            assert!(
                bad.parse::<Size>().unwrap_err().contains("outside"),
                "{bad}"
            );
        }
        assert_eq!(Format::of(Path::new("a/b.svg")).unwrap(), Format::Svg);
        assert_eq!(Format::of(Path::new("b.PNG")).unwrap(), Format::Png);
        for bad in ["b.jpg", "b", "b.svg.txt"] {
            let err = Format::of(Path::new(bad)).unwrap_err().to_string();
            assert!(
                err.contains("-o/--output") && err.contains(".svg or .png"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_missing_font_names_the_package_to_install() {
        let err = load_font(Path::new("/nonexistent/DejaVuSans.ttf")).unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        let not_a_font = load_font(Path::new(env!("CARGO_MANIFEST_PATH"))).unwrap_err();
        assert!(not_a_font.contains("not a TrueType"), "{not_a_font}");
        let shown = PlotError::Font {
            path: PathBuf::from(FONT),
            reason: err,
        }
        .to_string();
        assert!(
            shown.contains(FONT_PACKAGE) && shown.contains(FONT),
            "{shown}"
        );
    }

    #[test]
    fn plot_files_writes_only_finished_charts_and_names_the_bad_file() {
        let dir = std::env::temp_dir().join(format!("lfrt-plot-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.json");
        std::fs::write(&input, inversion_value().to_string()).unwrap();
        let svg = dir.join("out.svg");
        let kind = plot_files(std::slice::from_ref(&input), &svg, Size::DEFAULT).unwrap();
        assert_eq!(kind, PlotKind::InversionP99);
        assert_eq!(
            summarize_svg(&std::fs::read_to_string(&svg).unwrap()).size,
            (1000, 600)
        );

        let missing = dir.join("missing.json");
        let err = plot_files(&[missing], &svg, Size::DEFAULT).unwrap_err();
        assert!(matches!(err, PlotError::Io { .. }));
        assert!(err.to_string().contains("missing.json"));

        std::fs::write(&input, "{not json").unwrap();
        let err = plot_files(std::slice::from_ref(&input), &svg, Size::DEFAULT).unwrap_err();
        assert!(matches!(err, PlotError::Json { .. }));
        assert!(err.to_string().contains("in.json"));

        std::fs::write(&input, "{\"thread\": {}}").unwrap();
        let never = dir.join("never.svg");
        let err = plot_files(std::slice::from_ref(&input), &never, Size::DEFAULT).unwrap_err();
        assert!(matches!(err, PlotError::Shape { .. }));
        assert!(err.to_string().contains("in.json") && err.to_string().contains("-h"));
        assert!(!never.exists());

        // The extension is checked before any input is read.
        let err = plot_files(
            &[dir.join("missing.json")],
            &dir.join("x.gif"),
            Size::DEFAULT,
        )
        .unwrap_err();
        assert!(matches!(err, PlotError::Usage(_)), "{err}");
        let three = vec![input.clone(), input.clone(), input.clone()];
        let err = plot_files(&three, &svg, Size::DEFAULT).unwrap_err();
        assert!(err.to_string().contains("got 3"), "{err}");

        std::fs::write(&input, cyclictest_value().to_string()).unwrap();
        let err = plot_files(&[input], &dir.join("sub").join("x.svg"), Size::DEFAULT).unwrap_err();
        assert!(matches!(err, PlotError::Io { .. }), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
