//! Render latency result JSON files to PNG charts (`lfrt plot`).
//!
//! Two kinds of input are understood, detected by their shape:
//!
//! * **cyclictest JSON** (`cyclictest --json=FILE -h US`) and lfrt's
//!   compatible output: a top-level `"thread"` map whose entries carry a
//!   `"histogram"` map of latency bucket → count. Drawn as a latency
//!   histogram with a log10 count axis, one series per thread.
//! * **lfrt inversion JSON**: a top-level `"experiments"` array whose entries
//!   carry `"architecture"`, `"n_low"` and `"high": {"p99_us": ..}`. Drawn as
//!   the high-priority p99 against the number of low-priority streams, one
//!   line per architecture.
//!
//! Everything is drawn into an in-memory RGB buffer by this module (lines,
//! markers and a small built-in bitmap font) and encoded with the `png`
//! crate; no system libraries or font files are used.

use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// Error while reading, interpreting or writing a plot.
#[derive(Debug)]
pub enum PlotError {
    /// Reading the input or writing the output file failed.
    Io {
        /// The file that could not be read or written.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The input file is not valid JSON.
    Json {
        /// The input file.
        path: PathBuf,
        /// The underlying parse error.
        source: serde_json::Error,
    },
    /// The input is valid JSON but not a shape that can be plotted.
    Shape {
        /// The input file.
        path: PathBuf,
        /// What was wrong and what was expected.
        reason: String,
    },
    /// Encoding the PNG image failed.
    Encode(String),
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
            PlotError::Encode(msg) => write!(f, "PNG encoding failed: {msg}"),
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlotError::Io { source, .. } => Some(source),
            PlotError::Json { source, .. } => Some(source),
            PlotError::Shape { .. } | PlotError::Encode(_) => None,
        }
    }
}

/// Which chart was drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotKind {
    /// Per-thread latency histogram (cyclictest-style input), log10 count axis.
    LatencyHistogram,
    /// High-priority p99 latency against low-priority load (lfrt inversion input).
    InversionP99,
}

/// Reads `input` (any of the JSON kinds below), draws the right chart, writes a PNG to `output`.
///
/// Accepted inputs are cyclictest-style JSON (a `"thread"` map with per-thread
/// `"histogram"` maps) and lfrt inversion JSON (an `"experiments"` array).
/// The output file is only created once the chart has been rendered.
pub fn plot_file(input: &Path, output: &Path) -> Result<PlotKind, PlotError> {
    let text = std::fs::read_to_string(input).map_err(|source| PlotError::Io {
        path: input.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|source| PlotError::Json {
        path: input.to_path_buf(),
        source,
    })?;
    let (kind, bytes) = render_value(&value).map_err(|e| match e {
        RenderError::Shape(reason) => PlotError::Shape {
            path: input.to_path_buf(),
            reason,
        },
        RenderError::Encode(msg) => PlotError::Encode(format!("{}: {}", output.display(), msg)),
    })?;
    std::fs::write(output, bytes).map_err(|source| PlotError::Io {
        path: output.to_path_buf(),
        source,
    })?;
    Ok(kind)
}

/// Same from an already-parsed value (for tests); returns the PNG bytes.
///
/// The error string describes what was wrong with the value's shape (or, rarely,
/// why PNG encoding failed).
pub fn render(value: &Value) -> Result<(PlotKind, Vec<u8>), String> {
    render_value(value).map_err(|e| match e {
        RenderError::Shape(reason) => reason,
        RenderError::Encode(msg) => format!("PNG encoding failed: {msg}"),
    })
}

// ---------------------------------------------------------------------------
// Dispatch and input interpretation
// ---------------------------------------------------------------------------

enum RenderError {
    Shape(String),
    Encode(String),
}

const EXPECTED: &str = "expected either cyclictest JSON (an object with a \"thread\" map whose \
     entries have a \"histogram\" map, as written by `cyclictest --json=FILE -h US`) or lfrt \
     inversion JSON (an object with an \"experiments\" array of {\"architecture\", \"n_low\", \
     \"high\": {\"p99_us\"}})";

fn render_value(value: &Value) -> Result<(PlotKind, Vec<u8>), RenderError> {
    let Some(root) = value.as_object() else {
        return Err(RenderError::Shape(format!(
            "top-level JSON value is {}, not an object; {EXPECTED}",
            kind_name(value)
        )));
    };
    let (kind, chart) = if field(root, "thread").is_some() {
        (
            PlotKind::LatencyHistogram,
            histogram_chart(root).map_err(RenderError::Shape)?,
        )
    } else if field(root, "experiments").is_some() {
        (
            PlotKind::InversionP99,
            inversion_chart(root).map_err(RenderError::Shape)?,
        )
    } else {
        return Err(RenderError::Shape(format!(
            "no \"thread\" or \"experiments\" key at top level; {EXPECTED}"
        )));
    };
    let canvas = draw_chart(&chart).map_err(RenderError::Shape)?;
    let bytes = encode_png(&canvas).map_err(RenderError::Encode)?;
    Ok((kind, bytes))
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
        .collect()
}

fn histogram_chart(root: &Map<String, Value>) -> Result<Chart, String> {
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
    let unit = match field(root, "unit").and_then(Value::as_str) {
        Some(u) if u.trim().eq_ignore_ascii_case("ns") => "ns",
        _ => "µs",
    };

    let mut keys: Vec<&String> = threads.keys().collect();
    keys.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    });

    let mut series = Vec::new();
    let mut all_integer = true;
    for key in keys {
        let Some(thread) = threads[key.as_str()].as_object() else {
            return Err(format!(
                "thread \"{key}\" is {}, expected an object",
                kind_name(&threads[key.as_str()])
            ));
        };
        let hist = match field(thread, "histogram") {
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
        let mut points = Vec::with_capacity(hist.len());
        for (bucket, count) in hist {
            let x = parse_bucket(bucket).ok_or_else(|| {
                format!("thread \"{key}\": histogram key \"{bucket}\" is not a latency number")
            })?;
            if x.fract() != 0.0 {
                all_integer = false;
            }
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
                points.push((x, c));
            }
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));

        let mut label = format!("T{}", clean_text(key));
        if let Some(g) = field(thread, "group").and_then(Value::as_str) {
            label.push(' ');
            label.push_str(&clean_text(g));
        }
        if let Some(p) = field(thread, "priority").and_then(Value::as_i64) {
            label.push_str(&format!(" P{p}"));
        }
        if points.is_empty() {
            label.push_str(" (no samples)");
        }
        series.push((label, points));
    }

    if series.is_empty() {
        return Err(
            "no thread has a \"histogram\"; run cyclictest (or lfrt) with -h/--histogram \
             (e.g. `cyclictest --json=FILE -h 200`) to record one"
                .to_string(),
        );
    }
    let mut xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let Some(first) = xs.next() else {
        return Err("all thread histograms are empty (no samples recorded)".to_string());
    };
    let (mut x_lo, mut x_hi) = (first.min(0.0), first);
    for x in xs {
        x_lo = x_lo.min(x);
        x_hi = x_hi.max(x);
    }
    let counts = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
    let (mut c_min, mut c_max) = (f64::INFINITY, 0.0f64);
    for c in counts {
        c_min = c_min.min(c);
        c_max = c_max.max(c);
    }

    let n_points: usize = series.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
    let mut title = "latency histogram".to_string();
    if let Some(cmd) = field(root, "cmdline").and_then(Value::as_str) {
        let cmd = clean_text(cmd);
        if !cmd.trim().is_empty() {
            title.push_str(": ");
            title.push_str(cmd.trim());
        }
    }

    let series = series
        .into_iter()
        .enumerate()
        .map(|(i, (label, points))| Series {
            label,
            color: PALETTE[i % PALETTE.len()],
            marker: MARKERS[(i / PALETTE.len()) % MARKERS.len()],
            points,
            line_width: 1.6,
            // Dense histograms get smaller markers; very dense ones none.
            marker_radius: if n_points <= 120 {
                2.6
            } else if n_points <= 400 {
                1.8
            } else {
                0.0
            },
        })
        .collect();

    Ok(Chart {
        title,
        x_title: format!("latency ({unit})"),
        y_title: "count (log scale)".to_string(),
        x_axis: XSpec::Auto {
            lo: x_lo,
            hi: x_hi,
            integer: all_integer,
        },
        y_axis: YSpec::Log {
            min_pos: c_min,
            max: c_max,
        },
        series,
    })
}

fn parse_bucket(key: &str) -> Option<f64> {
    let k = key.trim();
    if let Ok(v) = k.parse::<u64>() {
        return Some(v as f64);
    }
    k.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn inversion_chart(root: &Map<String, Value>) -> Result<Chart, String> {
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
    let mut groups: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for e in exps {
        let Some(o) = e.as_object() else { continue };
        let arch = field(o, "architecture").and_then(Value::as_str);
        let n = field(o, "n_low").and_then(Value::as_f64);
        let p99 = field(o, "high")
            .and_then(Value::as_object)
            .and_then(|h| field(h, "p99_us"))
            .and_then(Value::as_f64);
        let (Some(arch), Some(n), Some(p99)) = (arch, n, p99) else {
            continue;
        };
        if !n.is_finite() || !p99.is_finite() {
            continue;
        }
        match groups.iter_mut().find(|(a, _)| a == arch) {
            Some((_, pts)) => pts.push((n, p99)),
            None => groups.push((arch.to_string(), vec![(n, p99)])),
        }
    }
    if groups.is_empty() {
        return Err(
            "no entry of \"experiments\" has a string \"architecture\", a numeric \
                    \"n_low\" and a numeric \"high\".\"p99_us\""
                .to_string(),
        );
    }
    let mut ns: Vec<f64> = Vec::new();
    let (mut y_min, mut y_max) = (0.0f64, f64::NEG_INFINITY);
    for (_, pts) in &mut groups {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
        for &(n, p) in pts.iter() {
            ns.push(n);
            y_min = y_min.min(p);
            y_max = y_max.max(p);
        }
    }
    ns.sort_by(f64::total_cmp);
    ns.dedup();
    let (n_lo, n_hi) = (ns[0], ns[ns.len() - 1]);
    let series = groups
        .into_iter()
        .enumerate()
        .map(|(i, (arch, points))| Series {
            label: clean_text(&arch),
            color: PALETTE[i % PALETTE.len()],
            marker: MARKERS[i % MARKERS.len()],
            points,
            line_width: 2.2,
            marker_radius: 4.5,
        })
        .collect();
    Ok(Chart {
        title: "high-priority p99 vs low-priority load".to_string(),
        x_title: "low-priority streams (n_low)".to_string(),
        y_title: "high-priority p99 (µs)".to_string(),
        x_axis: XSpec::At {
            lo: n_lo,
            hi: n_hi,
            ticks: ns,
        },
        y_axis: YSpec::Linear {
            lo: y_min,
            hi: y_max,
        },
        series,
    })
}

// ---------------------------------------------------------------------------
// Chart description and axes
// ---------------------------------------------------------------------------

type Color = [u8; 3];

const WHITE: Color = [255, 255, 255];
const BLACK: Color = [0, 0, 0];
const TEXT: Color = [30, 30, 30];
const GRID: Color = [222, 222, 222];
const GRID_MINOR: Color = [240, 240, 240];
const LEGEND_BORDER: Color = [150, 150, 150];

const PALETTE: [Color; 10] = [
    [31, 105, 180],
    [232, 110, 10],
    [40, 150, 50],
    [205, 35, 40],
    [125, 85, 185],
    [140, 90, 70],
    [215, 90, 175],
    [95, 95, 95],
    [165, 160, 20],
    [20, 165, 185],
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
}

const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
];

struct Series {
    label: String,
    color: Color,
    marker: Marker,
    /// Data points (x, y), sorted by x.
    points: Vec<(f64, f64)>,
    line_width: f64,
    /// 0 disables markers.
    marker_radius: f64,
}

enum XSpec {
    /// Linear axis with automatically chosen nice ticks covering `lo..=hi`.
    Auto { lo: f64, hi: f64, integer: bool },
    /// Linear axis with ticks exactly at the given (sorted) values.
    At { lo: f64, hi: f64, ticks: Vec<f64> },
}

enum YSpec {
    /// Linear from `min(lo, 0)` to a nice value above `hi`.
    Linear { lo: f64, hi: f64 },
    /// log10 axis over whole decades covering `min_pos..=max` (both > 0).
    Log { min_pos: f64, max: f64 },
}

struct Chart {
    title: String,
    x_title: String,
    y_title: String,
    x_axis: XSpec,
    y_axis: YSpec,
    series: Vec<Series>,
}

struct Tick {
    /// Position in axis coordinates (log10 of the value on a log axis).
    pos: f64,
    label: Option<String>,
    major: bool,
}

/// A resolved axis: `lo..hi` in axis coordinates (log10 units on a log axis).
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<Tick>,
}

impl Axis {
    /// Data value to axis coordinate; `None` when not representable (≤ 0 on a log axis).
    fn coord(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            None
        } else if self.log {
            (v > 0.0).then(|| v.log10())
        } else {
            Some(v)
        }
    }

    /// Fraction 0..1 along the axis for an axis coordinate.
    fn frac(&self, c: f64) -> f64 {
        let span = self.hi - self.lo;
        if span > 0.0 && span.is_finite() {
            (c - self.lo) / span
        } else {
            0.5
        }
    }
}

/// A "nice" step (1, 2 or 5 times a power of ten) close to `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw > 0.0 && raw.is_finite()) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let f = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    f * mag
}

/// Formats a tick value with as many decimals as the step needs.
fn fmt_tick(v: f64, step: f64) -> String {
    if v.abs() >= 1e7 && step > 0.0 {
        // Scientific notation with just enough mantissa digits for the step.
        let d = (v.abs().log10().floor() - step.log10().floor()).clamp(0.0, 4.0) as usize;
        return format!("{v:.d$e}");
    }
    let decimals = if step >= 1.0 || step.is_nan() || step <= 0.0 {
        0
    } else {
        ((-step.log10()) - 1e-9).ceil().clamp(0.0, 6.0) as usize
    };
    let s = format!("{v:.decimals$}");
    // Avoid "-0" / "-0.0".
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_string()
    } else {
        s
    }
}

/// Formats an arbitrary value compactly (integers without decimals).
fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Linear axis with nice ticks covering `lo..=hi` plus `pad` (fraction of the range)
/// above `hi`, choosing the densest tick step whose labels still fit in `len_px`.
fn linear_axis(
    lo: f64,
    hi: f64,
    integer: bool,
    pad: f64,
    len_px: f64,
    horizontal: bool,
) -> Result<Axis, String> {
    if !lo.is_finite() || !hi.is_finite() {
        return Err("data values are not finite".to_string());
    }
    let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
    if hi - lo <= 0.0 {
        // Degenerate range (single value): widen around it.
        let w = if hi.abs() > 0.0 { hi.abs() * 0.5 } else { 1.0 };
        if lo >= 0.0 && lo - w < 0.0 {
            lo = 0.0;
            hi += w;
        } else {
            lo -= w;
            hi += w;
        }
    }
    let hi_p = hi + (hi - lo) * pad;
    if !(hi_p - lo).is_finite() {
        return Err("data values are too large to plot".to_string());
    }
    let mut best: Option<Axis> = None;
    for target in (1..=10).rev() {
        let mut step = nice_step((hi_p - lo) / target as f64);
        if integer {
            step = step.max(1.0);
        }
        let a_lo = (lo / step).floor() * step;
        let a_hi = (hi_p / step).ceil() * step;
        let n = ((a_hi - a_lo) / step).round();
        if !((1.0..=200.0).contains(&n) && a_lo.is_finite() && a_hi.is_finite()) {
            continue;
        }
        let n = n as usize;
        let ticks: Vec<Tick> = (0..=n)
            .map(|i| {
                let v = a_lo + step * i as f64;
                Tick {
                    pos: v,
                    label: Some(fmt_tick(v, step)),
                    major: true,
                }
            })
            .collect();
        let spacing = len_px / n as f64;
        let need = if horizontal {
            let w = ticks
                .iter()
                .filter_map(|t| t.label.as_deref())
                .map(|l| text_width(l, FONT_SCALE))
                .max()
                .unwrap_or(0);
            w as f64 + 16.0
        } else {
            (GLYPH_H * FONT_SCALE) as f64 + 18.0
        };
        let axis = Axis {
            lo: a_lo,
            hi: a_hi,
            log: false,
            ticks,
        };
        let fits = spacing >= need;
        best = Some(axis);
        if fits {
            break;
        }
    }
    best.ok_or_else(|| "cannot build an axis for the data range".to_string())
}

/// Whole decades `(lo, hi)` (exponents of ten) covering counts `min_pos..=max`.
///
/// The bottom is at most 10^0 (so a count of 1 is always on the chart) and the
/// range spans at least one decade.
fn log_decades(min_pos: f64, max: f64) -> (i32, i32) {
    let clamp = |e: f64| {
        if e.is_finite() {
            e.clamp(-300.0, 300.0) as i32
        } else {
            0
        }
    };
    let lo = if min_pos > 0.0 {
        clamp(min_pos.log10().floor()).min(0)
    } else {
        0
    };
    let hi = if max > 0.0 {
        clamp(max.log10().ceil())
    } else {
        0
    };
    (lo, hi.max(lo + 1))
}

/// Label for 10^e: plain digits for small exponents, `1e<e>` otherwise.
fn fmt_pow10(e: i32) -> String {
    match e {
        0..=4 => format!("{}", 10u64.pow(e as u32)),
        -3..=-1 => format!("0.{}1", "0".repeat((-e - 1) as usize)),
        _ => format!("1e{e}"),
    }
}

/// Log10 axis over decades `lo..=hi` with labelled decade ticks (every `every`-th
/// decade labelled) and unlabelled minor ticks at 2..9 when there are few decades.
fn log_axis(lo: i32, hi: i32, len_px: f64) -> Axis {
    let decades = (hi - lo).max(1);
    let per_decade = len_px / decades as f64;
    let need = (GLYPH_H * FONT_SCALE) as f64 + 8.0;
    let every = ((need / per_decade).ceil() as i32).max(1);
    let mut ticks = Vec::new();
    for e in lo..=hi {
        ticks.push(Tick {
            pos: e as f64,
            label: ((e - lo) % every == 0).then(|| fmt_pow10(e)),
            major: true,
        });
        if e < hi && decades <= 8 {
            for k in 2..=9 {
                ticks.push(Tick {
                    pos: e as f64 + (k as f64).log10(),
                    label: None,
                    major: false,
                });
            }
        }
    }
    let pad = 0.03 * decades as f64;
    Axis {
        lo: lo as f64 - pad,
        hi: hi as f64 + pad,
        log: true,
        ticks,
    }
}

// ---------------------------------------------------------------------------
// Chart drawing
// ---------------------------------------------------------------------------

const WIDTH: i64 = 900;
const HEIGHT: i64 = 560;
const FONT_SCALE: i64 = 2;
const TITLE_TOP: i64 = 16;
const PLOT_TOP: i64 = 54;
const PLOT_BOTTOM: i64 = HEIGHT - 78;
const PLOT_RIGHT_MARGIN: i64 = 28;
const TICK_LEN: i64 = 6;

/// Pixel rectangle, `x0..x1` × `y0..y1` (end exclusive).
#[derive(Debug, Clone, Copy)]
struct PixRect {
    x0: i64,
    y0: i64,
    x1: i64,
    y1: i64,
}

impl PixRect {
    fn contains(&self, x: f64, y: f64) -> bool {
        x >= self.x0 as f64 && x < self.x1 as f64 && y >= self.y0 as f64 && y < self.y1 as f64
    }
}

fn draw_chart(chart: &Chart) -> Result<Canvas, String> {
    let plot_h = (PLOT_BOTTOM - PLOT_TOP) as f64;
    let y_axis = match chart.y_axis {
        YSpec::Linear { lo, hi } => linear_axis(lo.min(0.0), hi, false, 0.06, plot_h, false)?,
        YSpec::Log { min_pos, max } => {
            let (lo, hi) = log_decades(min_pos, max);
            log_axis(lo, hi, plot_h)
        }
    };
    // Left margin: y title (rotated) + gap + widest tick label + tick.
    let y_label_w = y_axis
        .ticks
        .iter()
        .filter_map(|t| t.label.as_deref())
        .map(|l| text_width(l, FONT_SCALE))
        .max()
        .unwrap_or(0);
    let y_title_x = 14;
    let left = y_title_x + LINE_H * FONT_SCALE + 10 + y_label_w + TICK_LEN + 6;
    let right = WIDTH - PLOT_RIGHT_MARGIN;
    let plot_w = (right - left) as f64;

    let x_axis = match &chart.x_axis {
        XSpec::Auto { lo, hi, integer } => {
            let mut axis = linear_axis(lo.min(0.0), *hi, *integer, 0.02, plot_w, true)?;
            // Small margin so points at the lowest value are not hidden by the frame.
            axis.lo -= (axis.hi - axis.lo) * 0.015;
            axis
        }
        XSpec::At { lo, hi, ticks } => {
            if !lo.is_finite() || !hi.is_finite() || !(hi - lo).is_finite() {
                return Err("n_low values are too large to plot".to_string());
            }
            let span = hi - lo;
            let pad = if span > 0.0 { span * 0.05 } else { 1.0 };
            Axis {
                lo: lo - pad,
                hi: hi + pad,
                log: false,
                ticks: ticks
                    .iter()
                    .map(|&v| Tick {
                        pos: v,
                        label: Some(fmt_value(v)),
                        major: true,
                    })
                    .collect(),
            }
        }
    };

    let mut cv = Canvas::new(WIDTH, HEIGHT, WHITE);
    let px = |c: f64| left as f64 + x_axis.frac(c) * plot_w;
    let py = |c: f64| PLOT_BOTTOM as f64 - y_axis.frac(c) * plot_h;
    // Data area inside the frame lines.
    let clip = PixRect {
        x0: left + 1,
        y0: PLOT_TOP + 1,
        x1: right,
        y1: PLOT_BOTTOM,
    };

    // Gridlines (minor first so major ones win).
    for major in [false, true] {
        let color = if major { GRID } else { GRID_MINOR };
        for t in y_axis.ticks.iter().filter(|t| t.major == major) {
            let y = py(t.pos).round() as i64;
            if y > PLOT_TOP && y < PLOT_BOTTOM {
                cv.fill_rect(left + 1, y, right - left - 1, 1, color);
            }
        }
        for t in x_axis.ticks.iter().filter(|t| t.major == major) {
            let x = px(t.pos).round() as i64;
            if x > left && x < right {
                cv.fill_rect(x, PLOT_TOP + 1, 1, PLOT_BOTTOM - PLOT_TOP - 1, color);
            }
        }
    }

    // Series in pixel coordinates.
    let pix_series: Vec<Vec<(f64, f64)>> = chart
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter_map(|&(x, y)| {
                    let cx = x_axis.coord(x)?;
                    let cy = y_axis.coord(y)?;
                    Some((px(cx), py(cy)))
                })
                .collect()
        })
        .collect();
    for (s, pts) in chart.series.iter().zip(&pix_series) {
        for w in pts.windows(2) {
            cv.segment(w[0], w[1], s.line_width, s.color, clip);
        }
    }
    for (s, pts) in chart.series.iter().zip(&pix_series) {
        if s.marker_radius > 0.0 || pts.len() == 1 {
            let r = if s.marker_radius > 0.0 {
                s.marker_radius
            } else {
                2.5
            };
            for &p in pts {
                cv.marker(p, s.marker, r, s.color, clip);
            }
        }
    }

    // Frame.
    cv.fill_rect(left, PLOT_TOP, right - left + 1, 1, BLACK);
    cv.fill_rect(left, PLOT_BOTTOM, right - left + 1, 1, BLACK);
    cv.fill_rect(left, PLOT_TOP, 1, PLOT_BOTTOM - PLOT_TOP + 1, BLACK);
    cv.fill_rect(right, PLOT_TOP, 1, PLOT_BOTTOM - PLOT_TOP + 1, BLACK);

    // Y ticks and labels.
    let glyph_px = GLYPH_H * FONT_SCALE;
    for t in &y_axis.ticks {
        let y = py(t.pos).round() as i64;
        if !(PLOT_TOP..=PLOT_BOTTOM).contains(&y) {
            continue;
        }
        let len = if t.major { TICK_LEN } else { TICK_LEN / 2 };
        cv.fill_rect(left - len, y, len, 1, BLACK);
        if let Some(l) = &t.label {
            let w = text_width(l, FONT_SCALE);
            cv.text(
                left - TICK_LEN - 6 - w,
                y - glyph_px / 2,
                l,
                FONT_SCALE,
                TEXT,
            );
        }
    }
    // X ticks and labels (skip labels that would collide with the previous one).
    let mut last_label_end = i64::MIN;
    for t in &x_axis.ticks {
        let x = px(t.pos).round() as i64;
        if x < left || x > right {
            continue;
        }
        let len = if t.major { TICK_LEN } else { TICK_LEN / 2 };
        cv.fill_rect(x, PLOT_BOTTOM + 1, 1, len, BLACK);
        if let Some(l) = &t.label {
            let w = text_width(l, FONT_SCALE);
            let lx = (x - w / 2).min(WIDTH - 2 - w).max(2);
            if lx > last_label_end + 8 {
                cv.text(lx, PLOT_BOTTOM + TICK_LEN + 6, l, FONT_SCALE, TEXT);
                last_label_end = lx + w;
            }
        }
    }

    // Axis titles.
    let xt = fit_text(&chart.x_title, (right - left) as usize, FONT_SCALE);
    let xw = text_width(&xt, FONT_SCALE);
    cv.text(
        left + (right - left - xw) / 2,
        PLOT_BOTTOM + TICK_LEN + 6 + glyph_px + 14,
        &xt,
        FONT_SCALE,
        TEXT,
    );
    let yt = fit_text(
        &chart.y_title,
        (PLOT_BOTTOM - PLOT_TOP) as usize,
        FONT_SCALE,
    );
    let yw = text_width(&yt, FONT_SCALE);
    cv.text_up(
        y_title_x,
        (PLOT_TOP + PLOT_BOTTOM) / 2 + yw / 2,
        &yt,
        FONT_SCALE,
        TEXT,
    );

    // Title.
    let title = fit_text(&chart.title, (WIDTH - 24) as usize, FONT_SCALE);
    let tw = text_width(&title, FONT_SCALE);
    cv.text((WIDTH - tw) / 2, TITLE_TOP, &title, FONT_SCALE, BLACK);

    draw_legend(&mut cv, chart, &pix_series, clip);
    Ok(cv)
}

fn draw_legend(cv: &mut Canvas, chart: &Chart, pix_series: &[Vec<(f64, f64)>], clip: PixRect) {
    if chart.series.is_empty() {
        return;
    }
    const ROW_H: i64 = 22;
    const SWATCH_W: i64 = 30;
    const PAD: i64 = 8;
    const MAX_LABEL_CHARS: usize = 26;
    let labels: Vec<String> = chart
        .series
        .iter()
        .map(|s| {
            fit_text(
                &s.label,
                MAX_LABEL_CHARS * 6 * FONT_SCALE as usize,
                FONT_SCALE,
            )
        })
        .collect();
    let max_rows = (((clip.y1 - clip.y0) - 2 * PAD - 16) / ROW_H).max(1) as usize;
    let label_w = labels
        .iter()
        .map(|l| text_width(l, FONT_SCALE))
        .max()
        .unwrap_or(0);
    let col_w = SWATCH_W + 8 + label_w + 14;
    let max_cols = (((clip.x1 - clip.x0) - 2 * PAD - 16) / col_w).max(1) as usize;
    let n = labels.len();
    let (cols, shown, more) = if n <= max_rows * max_cols {
        (n.div_ceil(max_rows), n, 0)
    } else {
        // Last slot says how many more there are.
        let shown = max_rows * max_cols - 1;
        (max_cols, shown, n - shown)
    };
    let rows = (shown + usize::from(more > 0)).div_ceil(cols).max(1);
    let box_w = cols as i64 * col_w + PAD;
    let box_h = rows as i64 * ROW_H + PAD;

    // Pick the inside corner that covers the fewest data samples.
    let inset = 10;
    let corners = [
        (clip.x1 - inset - box_w, clip.y0 + inset),
        (clip.x0 + inset, clip.y0 + inset),
        (clip.x1 - inset - box_w, clip.y1 - inset - box_h),
        (clip.x0 + inset, clip.y1 - inset - box_h),
    ];
    let mut samples = Vec::new();
    for pts in pix_series {
        for w in pts.windows(2) {
            let (a, b) = (w[0], w[1]);
            let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
            let k = (len / 6.0).ceil().clamp(1.0, 400.0) as usize;
            for i in 0..k {
                let t = i as f64 / k as f64;
                samples.push((a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t));
            }
        }
        if let Some(&p) = pts.last() {
            samples.push(p);
        }
    }
    let (bx, by) = corners
        .iter()
        .copied()
        .min_by_key(|&(x, y)| {
            let r = PixRect {
                x0: x - 6,
                y0: y - 6,
                x1: x + box_w + 6,
                y1: y + box_h + 6,
            };
            samples.iter().filter(|p| r.contains(p.0, p.1)).count()
        })
        .unwrap_or(corners[0]);

    cv.blend_rect(bx, by, box_w, box_h, WHITE, 0.9);
    cv.rect_outline(bx, by, box_w, box_h, LEGEND_BORDER);
    let full = PixRect {
        x0: 0,
        y0: 0,
        x1: WIDTH,
        y1: HEIGHT,
    };
    let glyph_px = GLYPH_H * FONT_SCALE;
    for (i, (s, label)) in chart.series.iter().zip(&labels).take(shown).enumerate() {
        let (c, r) = (i / rows, i % rows);
        let x = bx + PAD + c as i64 * col_w;
        let yc = by + PAD / 2 + r as i64 * ROW_H + ROW_H / 2;
        let y = yc as f64 + 0.5;
        cv.segment(
            (x as f64, y),
            ((x + SWATCH_W) as f64, y),
            s.line_width,
            s.color,
            full,
        );
        let mr = if s.marker_radius > 0.0 {
            s.marker_radius
        } else {
            2.5
        };
        cv.marker(((x + SWATCH_W / 2) as f64, y), s.marker, mr, s.color, full);
        cv.text(x + SWATCH_W + 8, yc - glyph_px / 2, label, FONT_SCALE, TEXT);
    }
    if more > 0 {
        let i = shown;
        let (c, r) = (i / rows, i % rows);
        let x = bx + PAD + c as i64 * col_w;
        let yc = by + PAD / 2 + r as i64 * ROW_H + ROW_H / 2;
        cv.text(
            x + SWATCH_W + 8,
            yc - glyph_px / 2,
            &format!("+{more} more"),
            FONT_SCALE,
            TEXT,
        );
    }
}

// ---------------------------------------------------------------------------
// Raster canvas
// ---------------------------------------------------------------------------

struct Canvas {
    w: i64,
    h: i64,
    data: Vec<u8>,
}

impl Canvas {
    fn new(w: i64, h: i64, bg: Color) -> Canvas {
        let n = (w.max(0) * h.max(0)) as usize;
        let mut data = Vec::with_capacity(n * 3);
        for _ in 0..n {
            data.extend_from_slice(&bg);
        }
        Canvas { w, h, data }
    }

    fn index(&self, x: i64, y: i64) -> Option<usize> {
        (x >= 0 && y >= 0 && x < self.w && y < self.h).then(|| ((y * self.w + x) * 3) as usize)
    }

    #[cfg(test)]
    fn get(&self, x: i64, y: i64) -> Option<Color> {
        let i = self.index(x, y)?;
        Some([self.data[i], self.data[i + 1], self.data[i + 2]])
    }

    fn put(&mut self, x: i64, y: i64, c: Color) {
        if let Some(i) = self.index(x, y) {
            self.data[i..i + 3].copy_from_slice(&c);
        }
    }

    /// Blends `c` over the pixel with opacity `a` (0..1).
    fn blend(&mut self, x: i64, y: i64, c: Color, a: f64) {
        if a.is_nan() || a <= 0.0 {
            return;
        }
        let a = a.min(1.0);
        if let Some(i) = self.index(x, y) {
            for (dst, &src) in self.data[i..i + 3].iter_mut().zip(&c) {
                let old = *dst as f64;
                *dst = (old + (src as f64 - old) * a).round().clamp(0.0, 255.0) as u8;
            }
        }
    }

    fn fill_rect(&mut self, x: i64, y: i64, w: i64, h: i64, c: Color) {
        for yy in y.max(0)..(y + h).min(self.h) {
            for xx in x.max(0)..(x + w).min(self.w) {
                self.put(xx, yy, c);
            }
        }
    }

    fn blend_rect(&mut self, x: i64, y: i64, w: i64, h: i64, c: Color, a: f64) {
        for yy in y.max(0)..(y + h).min(self.h) {
            for xx in x.max(0)..(x + w).min(self.w) {
                self.blend(xx, yy, c, a);
            }
        }
    }

    fn rect_outline(&mut self, x: i64, y: i64, w: i64, h: i64, c: Color) {
        self.fill_rect(x, y, w, 1, c);
        self.fill_rect(x, y + h - 1, w, 1, c);
        self.fill_rect(x, y, 1, h, c);
        self.fill_rect(x + w - 1, y, 1, h, c);
    }

    /// Anti-aliased line segment of the given width, clipped to `clip`.
    fn segment(&mut self, a: (f64, f64), b: (f64, f64), width: f64, c: Color, clip: PixRect) {
        if ![a.0, a.1, b.0, b.1].iter().all(|v| v.is_finite()) {
            return;
        }
        let r = width / 2.0;
        let pad = r + 1.0;
        let x0 = ((a.0.min(b.0) - pad).floor().max(clip.x0 as f64)) as i64;
        let x1 = ((a.0.max(b.0) + pad).ceil().min((clip.x1 - 1) as f64)) as i64;
        let y0 = ((a.1.min(b.1) - pad).floor().max(clip.y0 as f64)) as i64;
        let y1 = ((a.1.max(b.1) + pad).ceil().min((clip.y1 - 1) as f64)) as i64;
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len2 = dx * dx + dy * dy;
        for y in y0..=y1 {
            for x in x0..=x1 {
                let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
                let t = if len2 > 0.0 {
                    (((px - a.0) * dx + (py - a.1) * dy) / len2).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let (qx, qy) = (a.0 + t * dx - px, a.1 + t * dy - py);
                let d = (qx * qx + qy * qy).sqrt();
                self.blend(x, y, c, (r + 0.5 - d).clamp(0.0, 1.0));
            }
        }
    }

    /// Filled, anti-aliased marker centred at `p`, clipped to `clip`.
    fn marker(&mut self, p: (f64, f64), kind: Marker, r: f64, c: Color, clip: PixRect) {
        if !(p.0.is_finite() && p.1.is_finite() && r > 0.0) {
            return;
        }
        // Convex polygons as lists of vertices (clockwise on screen).
        let poly: Vec<(f64, f64)> = match kind {
            Marker::Circle => Vec::new(),
            Marker::Square => {
                let s = r * 0.9;
                vec![(-s, -s), (s, -s), (s, s), (-s, s)]
            }
            Marker::Triangle => {
                let s = r * 1.25;
                vec![(0.0, -s), (s * 0.95, s * 0.7), (-s * 0.95, s * 0.7)]
            }
            Marker::Diamond => {
                let s = r * 1.3;
                vec![(0.0, -s), (s, 0.0), (0.0, s), (-s, 0.0)]
            }
        };
        let ext = r * 1.4 + 1.0;
        let x0 = ((p.0 - ext).floor().max(clip.x0 as f64)) as i64;
        let x1 = ((p.0 + ext).ceil().min((clip.x1 - 1) as f64)) as i64;
        let y0 = ((p.1 - ext).floor().max(clip.y0 as f64)) as i64;
        let y1 = ((p.1 + ext).ceil().min((clip.y1 - 1) as f64)) as i64;
        for y in y0..=y1 {
            for x in x0..=x1 {
                let (dx, dy) = (x as f64 + 0.5 - p.0, y as f64 + 0.5 - p.1);
                // Signed distance to the shape's edge (positive outside).
                let sd = if poly.is_empty() {
                    (dx * dx + dy * dy).sqrt() - r
                } else {
                    let mut m = f64::NEG_INFINITY;
                    for i in 0..poly.len() {
                        let (a, b) = (poly[i], poly[(i + 1) % poly.len()]);
                        let (ex, ey) = (b.0 - a.0, b.1 - a.1);
                        let len = (ex * ex + ey * ey).sqrt();
                        if len > 0.0 {
                            // Outward normal for clockwise (screen) winding.
                            let (nx, ny) = (ey / len, -ex / len);
                            m = m.max((dx - a.0) * nx + (dy - a.1) * ny);
                        }
                    }
                    m
                };
                self.blend(x, y, c, (0.5 - sd).clamp(0.0, 1.0));
            }
        }
    }

    /// Draws `s` with its top-left corner at (x, y).
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: Color) {
        for (i, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            let gx = x + i as i64 * ADVANCE * scale;
            for (row, bits) in g.iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) != 0 {
                        self.fill_rect(gx + col * scale, y + row as i64 * scale, scale, scale, c);
                    }
                }
            }
        }
    }

    /// Draws `s` rotated 90° counter-clockwise (reading bottom to top); (x, y) is
    /// the bottom-left corner of the rotated text block.
    fn text_up(&mut self, x: i64, y: i64, s: &str, scale: i64, c: Color) {
        for (i, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..GLYPH_W {
                    if bits & (1 << (GLYPH_W - 1 - col)) != 0 {
                        let tx = i as i64 * ADVANCE + col; // along the text
                        let ty = row as i64; // across the text
                        self.fill_rect(x + ty * scale, y - (tx + 1) * scale, scale, scale, c);
                    }
                }
            }
        }
    }
}

fn encode_png(cv: &Canvas) -> Result<Vec<u8>, String> {
    let (w, h) = (
        u32::try_from(cv.w).map_err(|e| e.to_string())?,
        u32::try_from(cv.h).map_err(|e| e.to_string())?,
    );
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| e.to_string())?;
    writer
        .write_image_data(&cv.data)
        .map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Bitmap font
// ---------------------------------------------------------------------------

/// Glyph cell: 5 columns; rows 0..=6 are the cap height (baseline under row 6),
/// rows 7..=8 hold descenders.
const GLYPH_W: i64 = 5;
const GLYPH_H: i64 = 7;
const LINE_H: i64 = 9;
/// Horizontal advance per character, in font pixels (glyph plus one column gap).
const ADVANCE: i64 = 6;

/// Width in pixels of `s` drawn at `scale`.
fn text_width(s: &str, scale: i64) -> i64 {
    let n = s.chars().count() as i64;
    if n == 0 {
        0
    } else {
        (n * ADVANCE - 1) * scale
    }
}

/// `s`, shortened with "..." so that it fits in `max_px` at `scale`.
fn fit_text(s: &str, max_px: usize, scale: i64) -> String {
    let max_px = max_px as i64;
    if text_width(s, scale) <= max_px {
        return s.to_string();
    }
    let max_chars = ((max_px / scale + 1) / ADVANCE).max(3) as usize;
    let mut out: String = s.chars().take(max_chars.saturating_sub(3)).collect();
    out = out.trim_end().to_string();
    out.push_str("...");
    out
}

/// Font table: each glyph as up to 9 rows of 5 cells ('#' = ink), rows separated by '|'.
const GLYPHS: &[(char, &str)] = &[
    (' ', ""),
    ('0', ".###.|#...#|#..##|#.#.#|##..#|#...#|.###."),
    ('1', "..#..|.##..|..#..|..#..|..#..|..#..|.###."),
    ('2', ".###.|#...#|....#|...#.|..#..|.#...|#####"),
    ('3', "####.|....#|....#|.###.|....#|....#|####."),
    ('4', "...#.|..##.|.#.#.|#..#.|#####|...#.|...#."),
    ('5', "#####|#....|####.|....#|....#|#...#|.###."),
    ('6', "..##.|.#...|#....|####.|#...#|#...#|.###."),
    ('7', "#####|....#|...#.|..#..|.#...|.#...|.#..."),
    ('8', ".###.|#...#|#...#|.###.|#...#|#...#|.###."),
    ('9', ".###.|#...#|#...#|.####|....#|...#.|.##.."),
    ('A', ".###.|#...#|#...#|#####|#...#|#...#|#...#"),
    ('B', "####.|#...#|#...#|####.|#...#|#...#|####."),
    ('C', ".###.|#...#|#....|#....|#....|#...#|.###."),
    ('D', "####.|#...#|#...#|#...#|#...#|#...#|####."),
    ('E', "#####|#....|#....|####.|#....|#....|#####"),
    ('F', "#####|#....|#....|####.|#....|#....|#...."),
    ('G', ".###.|#...#|#....|#.###|#...#|#...#|.####"),
    ('H', "#...#|#...#|#...#|#####|#...#|#...#|#...#"),
    ('I', ".###.|..#..|..#..|..#..|..#..|..#..|.###."),
    ('J', "..###|...#.|...#.|...#.|...#.|#..#.|.##.."),
    ('K', "#...#|#..#.|#.#..|##...|#.#..|#..#.|#...#"),
    ('L', "#....|#....|#....|#....|#....|#....|#####"),
    ('M', "#...#|##.##|#.#.#|#.#.#|#...#|#...#|#...#"),
    ('N', "#...#|#...#|##..#|#.#.#|#..##|#...#|#...#"),
    ('O', ".###.|#...#|#...#|#...#|#...#|#...#|.###."),
    ('P', "####.|#...#|#...#|####.|#....|#....|#...."),
    ('Q', ".###.|#...#|#...#|#...#|#.#.#|#..#.|.##.#"),
    ('R', "####.|#...#|#...#|####.|#.#..|#..#.|#...#"),
    ('S', ".####|#....|#....|.###.|....#|....#|####."),
    ('T', "#####|..#..|..#..|..#..|..#..|..#..|..#.."),
    ('U', "#...#|#...#|#...#|#...#|#...#|#...#|.###."),
    ('V', "#...#|#...#|#...#|#...#|#...#|.#.#.|..#.."),
    ('W', "#...#|#...#|#...#|#.#.#|#.#.#|#.#.#|.#.#."),
    ('X', "#...#|#...#|.#.#.|..#..|.#.#.|#...#|#...#"),
    ('Y', "#...#|#...#|.#.#.|..#..|..#..|..#..|..#.."),
    ('Z', "#####|....#|...#.|..#..|.#...|#....|#####"),
    ('a', ".....|.....|.###.|....#|.####|#...#|.####"),
    ('b', "#....|#....|####.|#...#|#...#|#...#|####."),
    ('c', ".....|.....|.###.|#....|#....|#....|.###."),
    ('d', "....#|....#|.####|#...#|#...#|#...#|.####"),
    ('e', ".....|.....|.###.|#...#|#####|#....|.###."),
    ('f', "..##.|.#..#|.#...|###..|.#...|.#...|.#..."),
    ('g', ".....|.....|.####|#...#|#...#|#...#|.####|....#|.###."),
    ('h', "#....|#....|####.|#...#|#...#|#...#|#...#"),
    ('i', "..#..|.....|.##..|..#..|..#..|..#..|.###."),
    ('j', "...#.|.....|..##.|...#.|...#.|...#.|...#.|#..#.|.##.."),
    ('k', "#....|#....|#..#.|#.#..|##...|#.#..|#..#."),
    ('l', ".##..|..#..|..#..|..#..|..#..|..#..|.###."),
    ('m', ".....|.....|##.#.|#.#.#|#.#.#|#.#.#|#.#.#"),
    ('n', ".....|.....|#.##.|##..#|#...#|#...#|#...#"),
    ('o', ".....|.....|.###.|#...#|#...#|#...#|.###."),
    ('p', ".....|.....|####.|#...#|#...#|#...#|####.|#....|#...."),
    ('q', ".....|.....|.####|#...#|#...#|#...#|.####|....#|....#"),
    ('r', ".....|.....|#.##.|##..#|#....|#....|#...."),
    ('s', ".....|.....|.####|#....|.###.|....#|####."),
    ('t', ".#...|.#...|###..|.#...|.#...|.#..#|..##."),
    ('u', ".....|.....|#...#|#...#|#...#|#..##|.##.#"),
    ('v', ".....|.....|#...#|#...#|#...#|.#.#.|..#.."),
    ('w', ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#."),
    ('x', ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#"),
    ('y', ".....|.....|#...#|#...#|#...#|#...#|.####|....#|.###."),
    ('z', ".....|.....|#####|...#.|..#..|.#...|#####"),
    ('µ', ".....|.....|#...#|#...#|#...#|#..##|###.#|#....|#...."),
    ('.', ".....|.....|.....|.....|.....|.##..|.##.."),
    (',', ".....|.....|.....|.....|.....|.##..|.##..|..#..|.#..."),
    ('-', ".....|.....|.....|.###.|.....|.....|....."),
    ('_', ".....|.....|.....|.....|.....|.....|.....|#####"),
    ('/', "....#|....#|...#.|..#..|.#...|#....|#...."),
    ('\\', "#....|#....|.#...|..#..|...#.|....#|....#"),
    ('(', "...#.|..#..|.#...|.#...|.#...|..#..|...#."),
    (')', ".#...|..#..|...#.|...#.|...#.|..#..|.#..."),
    ('[', ".###.|.#...|.#...|.#...|.#...|.#...|.###."),
    (']', ".###.|...#.|...#.|...#.|...#.|...#.|.###."),
    ('{', "...##|..#..|..#..|##...|..#..|..#..|...##"),
    ('}', "##...|..#..|..#..|...##|..#..|..#..|##..."),
    ('<', "....#|...#.|..#..|.#...|..#..|...#.|....#"),
    ('>', "#....|.#...|..#..|...#.|..#..|.#...|#...."),
    (':', ".....|.##..|.##..|.....|.##..|.##..|....."),
    (';', ".....|.##..|.##..|.....|.##..|.##..|..#..|.#..."),
    ('%', "##..#|##..#|...#.|..#..|.#...|#..##|#..##"),
    ('=', ".....|.....|#####|.....|#####|.....|....."),
    ('+', ".....|..#..|..#..|#####|..#..|..#..|....."),
    ('*', ".....|#.#.#|.###.|#####|.###.|#.#.#|....."),
    ('!', "..#..|..#..|..#..|..#..|..#..|.....|..#.."),
    ('?', ".###.|#...#|....#|...#.|..#..|.....|..#.."),
    ('"', ".#.#.|.#.#.|.#.#."),
    ('\'', "..#..|..#..|..#.."),
    ('`', ".#...|..#.."),
    ('#', ".#.#.|.#.#.|#####|.#.#.|#####|.#.#.|.#.#."),
    ('&', ".##..|#..#.|#.#..|.#...|#.#.#|#..#.|.##.#"),
    ('$', "..#..|.####|#.#..|.###.|..#.#|####.|..#.."),
    ('@', ".###.|#...#|#.###|#.#.#|#.###|#....|.###."),
    ('^', "..#..|.#.#.|#...#"),
    ('~', ".....|.....|.#...|#.#.#|...#.|.....|....."),
    ('|', "..#..|..#..|..#..|..#..|..#..|..#..|..#..|..#.."),
];

/// Shown for characters the font does not have.
const MISSING_GLYPH: &str = "#####|#...#|#...#|#...#|#...#|#...#|#####";

/// Row bitmaps (bit 4 = leftmost column) for `ch`.
fn glyph(ch: char) -> [u8; 9] {
    let ch = match ch {
        'μ' => 'µ', // Greek mu looks the same as the micro sign.
        '\t' => ' ',
        c => c,
    };
    let pattern = GLYPHS
        .iter()
        .find(|(c, _)| *c == ch)
        .map(|(_, p)| *p)
        .unwrap_or(MISSING_GLYPH);
    let mut rows = [0u8; 9];
    if pattern.is_empty() {
        return rows;
    }
    for (row, line) in rows.iter_mut().zip(pattern.split('|')) {
        for (col, cell) in line.chars().take(GLYPH_W as usize).enumerate() {
            if cell == '#' {
                *row |= 1 << (GLYPH_W as usize - 1 - col);
            }
        }
    }
    rows
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().expect("valid PNG header");
        let size = reader.output_buffer_size().expect("buffer size");
        let mut buf = vec![0u8; size];
        let info = reader.next_frame(&mut buf).expect("decodable frame");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
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
            "num_threads": 2,
            "thread": {
                "0": {"histogram": h0, "cycles": 100000, "min": 20, "avg": 40.5, "max": 90, "cpu": 0},
                "1": {"histogram": h1, "cycles": 100000, "min": 25, "avg": 70.1, "max": 141,
                      "cpu": 1, "group": "ctrl", "priority": 80}
            }
        })
    }

    fn inversion_value() -> Value {
        let mut exps = Vec::new();
        for (arch, base, slope) in [
            ("lanes", 18.0, 0.4),
            ("single_pool", 20.0, 9.0),
            ("hsha", 35.0, 3.5),
        ] {
            for n in [0u64, 1, 2, 4, 8, 16] {
                exps.push(json!({
                    "architecture": arch,
                    "n_low": n,
                    "high": {"p50_us": base / 2.0, "p99_us": base + slope * n as f64, "max_us": 500.0},
                    "low": {"p99_us": 1000.0}
                }));
            }
        }
        json!({"experiments": exps, "lock": [{"kind": "pi", "p99_us": 3.0}]})
    }

    fn count_color(buf: &[u8], w: u32, region: (u32, u32, u32, u32), c: Color) -> usize {
        let (x0, y0, x1, y1) = region;
        let mut n = 0;
        for y in y0..y1 {
            for x in x0..x1 {
                let i = ((y * w + x) * 3) as usize;
                if buf[i..i + 3] == c {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn renders_cyclictest_histogram() {
        let (kind, bytes) = render(&cyclictest_value()).expect("renders");
        assert_eq!(kind, PlotKind::LatencyHistogram);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        let (w, h, buf) = decode(&bytes);
        assert_eq!((w, h), (WIDTH as u32, HEIGHT as u32));
        // Plot area (inside the frame) contains lots of ink.
        let region = (150, PLOT_TOP as u32 + 2, 860, PLOT_BOTTOM as u32 - 2);
        let white = count_color(&buf, w, region, WHITE);
        let total = ((region.2 - region.0) * (region.3 - region.1)) as usize;
        assert!(
            total - white > 2000,
            "only {} non-white pixels",
            total - white
        );
        // Both series colours appear.
        assert!(count_color(&buf, w, region, PALETTE[0]) > 50);
        assert!(count_color(&buf, w, region, PALETTE[1]) > 50);
    }

    #[test]
    fn renders_inversion_chart() {
        let (kind, bytes) = render(&inversion_value()).expect("renders");
        assert_eq!(kind, PlotKind::InversionP99);
        let (w, h, buf) = decode(&bytes);
        assert_eq!((w, h), (900, 560));
        let region = (150, PLOT_TOP as u32 + 2, 860, PLOT_BOTTOM as u32 - 2);
        for c in &PALETTE[..3] {
            assert!(
                count_color(&buf, w, region, *c) > 50,
                "colour {c:?} missing"
            );
        }
    }

    #[test]
    fn histogram_series_labels_and_ranges() {
        let chart = histogram_chart(cyclictest_value().as_object().unwrap()).unwrap();
        assert_eq!(chart.series.len(), 2);
        assert_eq!(chart.series[0].label, "T0");
        assert_eq!(chart.series[1].label, "T1 ctrl P80");
        assert!(chart.title.starts_with("latency histogram: cyclictest -q"));
        assert_eq!(chart.x_title, "latency (µs)");
        match chart.x_axis {
            XSpec::Auto { lo, hi, integer } => {
                assert_eq!((lo, hi, integer), (0.0, 140.0, true));
            }
            XSpec::At { .. } => panic!("wrong x axis"),
        }
        let mut v = cyclictest_value();
        v["unit"] = json!("ns");
        let chart = histogram_chart(v.as_object().unwrap()).unwrap();
        assert_eq!(chart.x_title, "latency (ns)");
    }

    #[test]
    fn threads_sorted_numerically_and_empty_threads_skipped() {
        let v = json!({"thread": {
            "10": {"histogram": {"5": 1}},
            "2": {"histogram": {"3": 4}},
            "3": {"cycles": 5},
        }});
        let chart = histogram_chart(v.as_object().unwrap()).unwrap();
        let labels: Vec<_> = chart.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["T2", "T10"]);
    }

    #[test]
    fn single_bucket_and_single_point_render() {
        for v in [
            json!({"thread": {"0": {"histogram": {"0": 1}}}}),
            json!({"thread": {"0": {"histogram": {"17": 123456}}}}),
            json!({"thread": {"0": {"histogram": {"17": 5, "18": 0}}, "1": {"histogram": {}}}}),
            json!({"experiments": [{"architecture": "lanes", "n_low": 4, "high": {"p99_us": 12.5}}]}),
            json!({"experiments": [{"architecture": "hsha", "n_low": 0, "high": {"p99_us": 0.0}}]}),
        ] {
            let (_, bytes) = render(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
            let (w, h, _) = decode(&bytes);
            assert_eq!((w, h), (900, 560));
        }
    }

    #[test]
    fn extreme_values_do_not_panic() {
        for v in [
            json!({"thread": {"0": {"histogram": {"1e300": 1, "0": 1.5e300}}}}),
            json!({"thread": {"0": {"histogram": {"-5": 3, "5": 0.001}}}}),
            json!({"thread": {"0": {"histogram": {"18446744073709551615": 18446744073709551615u64}}}}),
            json!({"experiments": [{"architecture": "a", "n_low": 1e308, "high": {"p99_us": -1e308}},
                                   {"architecture": "b", "n_low": -1e308, "high": {"p99_us": 1e308}}]}),
            json!({"experiments": [{"architecture": "a\u{1}\n", "n_low": 1, "high": {"p99_us": 1e-300}}]}),
        ] {
            let _ = render(&v);
        }
        let many: Map<String, Value> = (0..100)
            .map(|i| (i.to_string(), json!({"histogram": {"1": i + 1, "2": 1}})))
            .collect();
        let (_, bytes) = render(&json!({ "thread": many })).expect("renders many threads");
        decode(&bytes);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let cases = [
            (json!([1, 2]), "not an object"),
            (json!({"foo": 1}), "expected either"),
            (json!({"thread": 5}), "\"thread\" is a number"),
            (json!({"thread": {}}), "-h/--histogram"),
            (
                json!({"thread": {"0": {"cycles": 10, "min": 1}}}),
                "-h/--histogram",
            ),
            (json!({"thread": {"0": 7}}), "thread \"0\""),
            (
                json!({"thread": {"0": {"histogram": []}}}),
                "\"histogram\" is an array",
            ),
            (
                json!({"thread": {"0": {"histogram": {"abc": 1}}}}),
                "\"abc\"",
            ),
            (
                json!({"thread": {"0": {"histogram": {"1": -4}}}}),
                "non-negative",
            ),
            (
                json!({"thread": {"0": {"histogram": {"1": "x"}}}}),
                "non-negative",
            ),
            (json!({"thread": {"0": {"histogram": {"1": 0}}}}), "empty"),
            (json!({"experiments": {}}), "expected an array"),
            (json!({"experiments": []}), "empty"),
            (
                json!({"experiments": [{"architecture": "lanes"}]}),
                "p99_us",
            ),
            (json!({"experiments": [1, "x", null]}), "p99_us"),
        ];
        for (v, needle) in cases {
            let err = render(&v).expect_err(&v.to_string());
            assert!(err.contains(needle), "{v}: {err:?} lacks {needle:?}");
        }
    }

    #[test]
    fn log_axis_helpers() {
        assert_eq!(log_decades(1.0, 216.0), (0, 3));
        assert_eq!(log_decades(1.0, 1.0), (0, 1));
        assert_eq!(log_decades(1.0, 1000.0), (0, 3));
        assert_eq!(log_decades(3.0, 1001.0), (0, 4));
        assert_eq!(log_decades(0.05, 10.0), (-2, 1));
        assert_eq!(log_decades(f64::INFINITY, 0.0), (0, 1));
        assert_eq!(fmt_pow10(0), "1");
        assert_eq!(fmt_pow10(3), "1000");
        assert_eq!(fmt_pow10(6), "1e6");
        assert_eq!(fmt_pow10(-2), "0.01");

        let axis = log_axis(0, 4, 400.0);
        assert!(axis.log);
        let majors: Vec<_> = axis.ticks.iter().filter(|t| t.major).collect();
        assert_eq!(majors.len(), 5);
        assert_eq!(majors[2].label.as_deref(), Some("100"));
        assert_eq!(axis.ticks.iter().filter(|t| !t.major).count(), 4 * 8);
        // 10 lies halfway between 1 and 100; zero and negatives are not drawable.
        let f = |v: f64| axis.frac(axis.coord(v).unwrap());
        assert!((f(10.0) - (f(1.0) + f(100.0)) / 2.0).abs() < 1e-12);
        assert!(f(1.0) > 0.0 && f(10000.0) < 1.0);
        assert_eq!(axis.coord(0.0), None);
        assert_eq!(axis.coord(-3.0), None);
        // Many decades: labels thinned out, no minor ticks.
        let wide = log_axis(0, 19, 200.0);
        let labelled = wide.ticks.iter().filter(|t| t.label.is_some()).count();
        assert!((2..20).contains(&labelled));
        assert!(wide.ticks.iter().all(|t| t.major));
    }

    #[test]
    fn linear_axis_helpers() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(17.0), 20.0);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(fmt_tick(0.30000000000000004, 0.1), "0.3");
        assert_eq!(fmt_tick(-0.0, 1.0), "0");
        assert_eq!(fmt_tick(250.0, 50.0), "250");
        assert_eq!(fmt_tick(2e9, 5e8), "2.0e9");
        assert_eq!(fmt_tick(3e12, 1e12), "3e12");
        let a = linear_axis(0.0, 137.0, true, 0.02, 700.0, true).unwrap();
        assert_eq!(a.lo, 0.0);
        assert!(a.hi >= 137.0);
        assert!(a.ticks.len() >= 3 && a.ticks.len() <= 11);
        let a = linear_axis(0.0, 0.0, true, 0.02, 700.0, true).unwrap();
        assert!(a.hi > a.lo && a.ticks.iter().all(|t| t.pos.fract() == 0.0));
        assert!(linear_axis(0.0, f64::INFINITY, false, 0.0, 100.0, false).is_err());
    }

    #[test]
    fn glyph_table_is_well_formed() {
        for (i, (c, p)) in GLYPHS.iter().enumerate() {
            assert!(
                GLYPHS[..i].iter().all(|(d, _)| d != c),
                "duplicate glyph {c:?}"
            );
            if p.is_empty() {
                continue;
            }
            let rows: Vec<_> = p.split('|').collect();
            assert!(rows.len() <= LINE_H as usize, "{c:?} too tall");
            for r in rows {
                assert_eq!(r.len(), 5, "{c:?} row {r:?}");
                assert!(r.chars().all(|x| x == '#' || x == '.'), "{c:?} row {r:?}");
            }
        }
        for c in ('0'..='9')
            .chain('A'..='Z')
            .chain('a'..='z')
            .chain(".,-_/():%µ".chars())
        {
            assert!(GLYPHS.iter().any(|(g, _)| *g == c), "missing glyph {c:?}");
        }
        assert_eq!(glyph('1')[0], 0b00100);
        assert_eq!(glyph('μ'), glyph('µ'));
        assert_eq!(glyph('\u{2603}'), glyph('\u{2604}'));
        assert_eq!(text_width("", 2), 0);
        assert_eq!(text_width("ab", 1), 11);
        assert_eq!(fit_text("short", 100, 1), "short");
        let fitted = fit_text(&"x".repeat(100), 120, 2);
        assert!(fitted.ends_with("...") && text_width(&fitted, 2) <= 120);
    }

    #[test]
    fn canvas_drawing_is_clipped() {
        let mut cv = Canvas::new(20, 20, WHITE);
        let clip = PixRect {
            x0: 5,
            y0: 5,
            x1: 15,
            y1: 15,
        };
        cv.segment((-100.0, 10.0), (100.0, 10.0), 3.0, BLACK, clip);
        cv.marker((5.0, 5.0), Marker::Triangle, 4.0, BLACK, clip);
        cv.segment((f64::NAN, 0.0), (1.0, 1.0), 3.0, BLACK, clip);
        assert_eq!(cv.get(2, 10), Some(WHITE));
        assert_eq!(cv.get(17, 10), Some(WHITE));
        assert_eq!(cv.get(10, 10), Some(BLACK));
        assert_eq!(cv.get(4, 4), Some(WHITE));
        assert_eq!(cv.get(99, 0), None);
        cv.text(-3, -3, "µs 1", 2, BLACK);
        cv.text_up(100, 100, "x", 1, BLACK);
    }

    #[test]
    fn plot_file_reads_and_writes() {
        let dir = std::env::temp_dir().join(format!("lfrt-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in.json");
        let output = dir.join("out.png");
        std::fs::write(&input, inversion_value().to_string()).unwrap();
        assert_eq!(plot_file(&input, &output).unwrap(), PlotKind::InversionP99);
        let bytes = std::fs::read(&output).unwrap();
        assert_eq!(decode(&bytes).0, 900);

        let missing = dir.join("missing.json");
        let err = plot_file(&missing, &output).unwrap_err();
        assert!(matches!(err, PlotError::Io { .. }));
        assert!(err.to_string().contains("missing.json"));

        std::fs::write(&input, "{not json").unwrap();
        let err = plot_file(&input, &output).unwrap_err();
        assert!(matches!(err, PlotError::Json { .. }));
        assert!(err.to_string().contains("in.json"));

        std::fs::write(&input, "{\"thread\": {}}").unwrap();
        let err = plot_file(&input, &dir.join("never.png")).unwrap_err();
        assert!(matches!(err, PlotError::Shape { .. }));
        assert!(err.to_string().contains("in.json") && err.to_string().contains("-h"));
        assert!(!dir.join("never.png").exists());

        std::fs::write(&input, cyclictest_value().to_string()).unwrap();
        let err = plot_file(&input, &dir).unwrap_err();
        assert!(matches!(err, PlotError::Io { .. }));
        std::fs::remove_dir_all(&dir).ok();
    }
}
