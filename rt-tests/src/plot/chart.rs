//! The chart model, whatever the image format: from parsed inputs to titled series with their
//! colours, lines and axis ranges. A latency chart turns each thread's buckets into lines that
//! rise from the log axis' floor and fall back to it ([`bucket_runs`]); an inversion chart has
//! one line of (N, p99) points per architecture.

use super::cli::{PlotError, PlotKind};
use super::input::{ArchLine, Input, LatencyRun};
use plotters::style::RGBColor;
use std::path::PathBuf;

/// Readable names for `lfrt inversion`'s architectures; others are shown as written.
pub(crate) fn arch_label(name: &str) -> String {
    match name {
        "lanes" => "lfrt lanes".to_string(),
        "single_pool" => "lfrt shared pool".to_string(),
        "hsha" => "HS/HA".to_string(),
        other => other.to_string(),
    }
}

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
pub(crate) const FILE_COLORS: [[RGBColor; 4]; 2] = [
    [PALETTE[0], PALETTE[7], PALETTE[4], PALETTE[2]],
    [PALETTE[1], PALETTE[3], PALETTE[6], PALETTE[5]],
];

pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) subtitle: Option<String>,
    pub(crate) body: Body,
}

pub(crate) enum Body {
    Latency(LatencyBody),
    Inversion(InversionBody),
}

pub(crate) struct LatencyBody {
    pub(crate) series: Vec<LatencySeries>,
    /// Width of a bucket (µs).
    pub(crate) bucket_us: f64,
    /// Right end of the latency axis (µs).
    pub(crate) x_hi: f64,
    /// Bottom of the count axis; empty buckets are drawn here.
    pub(crate) y_lo: f64,
    /// Largest bucket count.
    pub(crate) c_max: f64,
}

pub(crate) struct LatencySeries {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    /// One line per run of adjacent non-empty buckets (see [`bucket_runs`]).
    pub(crate) runs: Vec<Vec<(f64, f64)>>,
    pub(crate) max_us: Option<f64>,
}

pub(crate) struct InversionSeries {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    /// (N, p99 µs), sorted by N.
    pub(crate) points: Vec<(f64, f64)>,
}

pub(crate) struct InversionBody {
    pub(crate) series: Vec<InversionSeries>,
    pub(crate) x: (f64, f64),
    /// Every N is a whole number: label the axis with integers.
    pub(crate) x_integer: bool,
    pub(crate) y: (f64, f64),
}

impl Chart {
    pub(crate) fn kind(&self) -> PlotKind {
        match self.body {
            Body::Latency(_) => PlotKind::LatencyHistogram,
            Body::Inversion(_) => PlotKind::InversionP99,
        }
    }

    pub(crate) fn build(inputs: Vec<(PathBuf, Input)>) -> Result<Chart, PlotError> {
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
pub(crate) const MAX_COUNT_SPAN: f64 = 1e20;

pub(crate) fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(crate) fn latency_chart(runs: Vec<(PathBuf, LatencyRun)>) -> Result<Chart, PlotError> {
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
pub(crate) fn bucket_runs(buckets: &[(f64, f64)], width: f64, floor: f64) -> Vec<Vec<(f64, f64)>> {
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

pub(crate) fn inversion_chart(lines: Vec<ArchLine>) -> Result<Chart, String> {
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

pub(crate) fn fmt_axis(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
