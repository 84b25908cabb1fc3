//! `lfrt plot TRACE`: the time around the worst dispatch of a flight-recorder trace as a
//! picture (SVG or PNG), drawn with plotters the way [`plot`](crate::plot) draws its charts.
//!
//! One row per lane thread, with its dispatches' hand-off (light) and handler (full colour)
//! spans and markers at their due times (▼) and kernel arrivals (●); below them, with the
//! kernel recorder on, one row per CPU with what ran there: a lane thread in its row's colour,
//! another process in grey (dark for real-time ones), IRQs in red. Dashed red lines mark the
//! worst dispatch's due time (0 on the time axis) and its handler entry.

use crate::explain::worst_sample;
use crate::plot::{
    fit_text, load_font, GlyphBitmap, PlotError, PlotKind, Size, FAMILY, FONT, GRID_BOLD,
    GRID_LIGHT, PALETTE, TEXT,
};
use lfrt::telemetry::Sample;
use lfrt::window::{KernelEventKind, Window};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::{BTreeSet, HashMap};
use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How much time `lfrt plot` draws on each side of the worst dispatch without `--around`.
pub const DEFAULT_AROUND: Duration = Duration::from_millis(2);

type DrawResult = Result<(), Box<dyn StdError>>;

/// Thread colours: [`PALETTE`] without its red, which marks IRQs.
const THREAD_COLORS: [RGBColor; 7] = [
    PALETTE[0], PALETTE[2], PALETTE[3], PALETTE[4], PALETTE[7], PALETTE[6], PALETTE[5],
];
const IRQ: RGBColor = PALETTE[1];
const OTHER: RGBColor = RGBColor(175, 175, 175);
const OTHER_RT: RGBColor = RGBColor(95, 95, 95);
const WORST: RGBColor = PALETTE[1];

/// Whether `path` holds a flight-recorder trace (a JSON object with the window's key); `false`
/// for anything else, which the caller reports as it would.
pub fn is_trace(path: &Path) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(rename = "lfrtWindow")]
        window: Option<serde::de::IgnoredAny>,
    }
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Probe>(&b).ok())
        .is_some_and(|p| p.window.is_some())
}

/// `lfrt plot`'s entry: one flight-recorder trace is drawn as a timeline (`around` on each
/// side of its worst dispatch, [`DEFAULT_AROUND`] if `None`); anything else goes to
/// [`plot::plot_files`](crate::plot::plot_files), which refuses `around`.
pub fn plot_files(
    inputs: &[PathBuf],
    output: &Path,
    size: Size,
    around: Option<Duration>,
) -> Result<PlotKind, PlotError> {
    let trace = match inputs {
        [one] if is_trace(one) => one,
        _ if inputs.iter().any(|p| is_trace(p)) => {
            return Err(PlotError::Usage(
                "a flight-recorder trace is drawn alone: give it as the only input".into(),
            ))
        }
        _ if around.is_some() => {
            return Err(PlotError::Usage(
                "--around applies to a flight-recorder trace only".into(),
            ))
        }
        _ => return crate::plot::plot_files(inputs, output, size),
    };
    let format = crate::plot::Format::of(output)?;
    let window = lfrt::window::read_window(trace).map_err(|e| PlotError::Shape {
        path: trace.clone(),
        reason: e.to_string(),
    })?;
    let timeline =
        Timeline::build(&window, around.unwrap_or(DEFAULT_AROUND)).map_err(|reason| {
            PlotError::Shape {
                path: trace.clone(),
                reason,
            }
        })?;
    let draw_err = |reason: String| PlotError::Draw {
        path: output.to_path_buf(),
        reason,
    };
    let dims = (size.width, size.height);
    match format {
        crate::plot::Format::Svg => {
            let svg = render_svg(&timeline, size).map_err(draw_err)?;
            std::fs::write(output, svg).map_err(|source| PlotError::Io {
                path: output.to_path_buf(),
                source,
            })?;
        }
        crate::plot::Format::Png => {
            let font = load_font(Path::new(FONT)).map_err(|reason| PlotError::Font {
                path: PathBuf::from(FONT),
                reason,
            })?;
            let mut rgb = vec![0u8; size.width as usize * size.height as usize * 3];
            {
                let root = GlyphBitmap {
                    inner: BitMapBackend::with_buffer(&mut rgb, dims),
                    font: &font,
                }
                .into_drawing_area();
                draw(&root, &timeline).map_err(|e| draw_err(e.to_string()))?;
                root.present().map_err(|e| draw_err(e.to_string()))?;
            }
            // As plot_files: the file is only created once the picture is drawn.
            let mut file = BitMapBackend::new(output, dims);
            file.blit_bitmap((0, 0), dims, &rgb)
                .and_then(|()| file.present())
                .map_err(|e| draw_err(e.to_string()))?;
        }
    }
    Ok(PlotKind::Timeline)
}

/// The timeline of `window` around its worst dispatch as an SVG document.
pub fn timeline_svg(window: &Window, around: Duration, size: Size) -> Result<String, String> {
    render_svg(&Timeline::build(window, around)?, size)
}

fn render_svg(t: &Timeline, size: Size) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (size.width, size.height)).into_drawing_area();
        draw(&root, t).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

// ---------------------------------------------------------------------------
// The picture's model (format independent)
// ---------------------------------------------------------------------------

struct Timeline {
    title: String,
    subtitle: String,
    /// Time axis, µs from the worst dispatch's first point.
    x: (f64, f64),
    rows: Vec<Row>,
    /// Rows before this one are lane threads, the rest CPUs.
    lane_rows: usize,
    /// The worst dispatch's due time (0) and handler entry, µs.
    marks: Vec<f64>,
}

struct Row {
    label: String,
    /// The colour a lane thread is drawn in.
    swatch: Option<RGBColor>,
    spans: Vec<Span>,
    markers: Vec<(f64, Marker)>,
}

struct Span {
    from: f64,
    to: f64,
    color: RGBColor,
    /// Written inside the span when it fits (what ran on a CPU).
    label: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Marker {
    Due,
    Arrival,
}

fn light(c: RGBColor) -> RGBColor {
    let mix = |v: u8| (f64::from(v) * 0.4 + 255.0 * 0.6).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

impl Timeline {
    fn build(w: &Window, around: Duration) -> Result<Timeline, String> {
        let worst = worst_sample(w).ok_or("the window holds no dispatch to draw around")?;
        let t0 = [
            worst.origin_ns,
            worst.arrival_ns,
            worst.woke_ns,
            worst.start_ns,
        ]
        .into_iter()
        .find(|&t| t != 0)
        .unwrap_or(worst.start_ns);
        let end = worst.end_ns.max(worst.start_ns);
        let around = u64::try_from(around.as_nanos()).unwrap_or(u64::MAX);
        // Zero: the dispatch alone, with a tenth of its length on each side.
        let pad = if around == 0 {
            ((end - t0.min(end)) / 10).max(1_000)
        } else {
            around
        };
        let lo = t0.saturating_sub(pad).max(w.from_ns.min(t0));
        let hi = end.saturating_add(pad).min(w.to_ns.max(end));
        let rel = |ns: u64| (ns as f64 - t0 as f64) / 1000.0;
        let clip = |from: u64, to: u64| -> Option<(f64, f64)> {
            (to >= lo && from <= hi && to >= from).then(|| (rel(from.max(lo)), rel(to.min(hi))))
        };

        let mut rows = Vec::new();
        let mut tid_color: HashMap<i32, RGBColor> = HashMap::new();
        let mut lane_row: HashMap<(u16, u16), usize> = HashMap::new();
        for (li, lane) in w.lanes.iter().enumerate() {
            for (ti, th) in lane.threads.iter().enumerate() {
                let color = THREAD_COLORS[rows.len() % THREAD_COLORS.len()];
                tid_color.insert(th.tid, color);
                if let (Ok(l), Ok(t)) = (u16::try_from(li), u16::try_from(ti)) {
                    lane_row.insert((l, t), rows.len());
                }
                rows.push(Row {
                    label: format!("{}/{ti} (tid {})", lane.name, th.tid),
                    swatch: Some(color),
                    spans: Vec::new(),
                    markers: Vec::new(),
                });
            }
        }
        let lane_rows = rows.len();
        // Samples by thread and entry, so each hand-off starts after the previous handler.
        let mut samples: Vec<&Sample> = w.samples.iter().collect();
        samples.sort_by_key(|s| (s.lane, s.thread, s.start_ns));
        let mut prev_end: HashMap<usize, u64> = HashMap::new();
        for s in samples {
            let Some(&r) = lane_row.get(&(s.lane, s.thread)) else {
                continue;
            };
            let color = rows[r].swatch.unwrap_or(TEXT);
            let after = prev_end.insert(r, s.end_ns.max(s.start_ns)).unwrap_or(0);
            if s.woke_ns != 0 {
                if let Some((a, b)) = clip(s.woke_ns.max(after), s.start_ns) {
                    rows[r].spans.push(Span {
                        from: a,
                        to: b,
                        color: light(color),
                        label: None,
                    });
                }
            }
            if let Some((a, b)) = clip(s.start_ns, s.end_ns.max(s.start_ns)) {
                rows[r].spans.push(Span {
                    from: a,
                    to: b,
                    color,
                    label: None,
                });
            }
            for (at, m) in [(s.origin_ns, Marker::Due), (s.arrival_ns, Marker::Arrival)] {
                if at != 0 && (lo..=hi).contains(&at) {
                    rows[r].markers.push((rel(at), m));
                }
            }
        }

        let cpus: BTreeSet<u16> = w.kernel.iter().map(|e| e.cpu).collect();
        for cpu in cpus {
            let mut row = Row {
                label: format!("CPU {cpu}"),
                swatch: None,
                spans: Vec::new(),
                markers: Vec::new(),
            };
            let mut irqs = Vec::new();
            let mut running: Option<(u64, i32, &str, i32)> = None;
            let mut open: HashMap<u32, (u64, &str)> = HashMap::new();
            let task = |row: &mut Row, (since, tid, comm, prio): (u64, i32, &str, i32), to: u64| {
                let color = match tid_color.get(&tid) {
                    _ if tid == 0 => return,
                    Some(&c) => c,
                    None if (0..100).contains(&prio) => OTHER_RT,
                    None => OTHER,
                };
                if let Some((from, to)) = clip(since, to) {
                    row.spans.push(Span {
                        from,
                        to,
                        color,
                        label: Some(format!("{comm}:{tid}")),
                    });
                }
            };
            for e in w.kernel.iter().filter(|e| e.cpu == cpu) {
                match &e.kind {
                    KernelEventKind::Switch {
                        prev_tid,
                        prev_comm,
                        prev_prio,
                        next_tid,
                        next_comm,
                        next_prio,
                        ..
                    } => {
                        let first = (w.from_ns.min(e.ts_ns), *prev_tid, &**prev_comm, *prev_prio);
                        task(&mut row, running.take().unwrap_or(first), e.ts_ns);
                        running = Some((e.ts_ns, *next_tid, next_comm, *next_prio));
                    }
                    KernelEventKind::IrqEntry { irq, name } => {
                        open.insert(*irq, (e.ts_ns, name));
                    }
                    KernelEventKind::IrqExit { irq } => {
                        let Some((from, name)) = open.remove(irq) else {
                            continue;
                        };
                        if let Some((a, b)) = clip(from, e.ts_ns) {
                            irqs.push(Span {
                                from: a,
                                to: b,
                                color: IRQ,
                                label: Some(format!("irq {irq} {name}")),
                            });
                        }
                    }
                    _ => {}
                }
            }
            if let Some(run) = running {
                task(&mut row, run, w.to_ns.max(hi));
            }
            // IRQs over the task they interrupted.
            row.spans.extend(irqs);
            rows.push(row);
        }

        let lane_name = w
            .lanes
            .get(usize::from(worst.lane))
            .map_or_else(|| format!("#{}", worst.lane), |l| l.name.clone());
        let trigger = match w.trigger.kind {
            lfrt::window::TriggerKind::Latency { .. } => "latency trigger",
            lfrt::window::TriggerKind::Overrun { .. } => "overrun trigger",
            lfrt::window::TriggerKind::Demand => "taken on demand",
        };
        let kernel = if w.kernel.is_empty() {
            "kernel recorder off: lane threads only"
        } else {
            "CPU rows: lane threads in their colour, other processes grey (dark: real-time), IRQs red"
        };
        Ok(Timeline {
            title: format!(
                "Flight recorder ({trigger}): lane {lane_name}/{} latency {:.1} µs, handler {:.1} µs",
                worst.thread,
                worst.latency_ns() as f64 / 1000.0,
                (end - worst.start_ns) as f64 / 1000.0
            ),
            subtitle: format!(
                "0 = its {}; light = hand-off, full = handler, ▼ due, ● kernel arrival; {kernel}",
                if worst.origin_ns != 0 {
                    "due time"
                } else if worst.arrival_ns != 0 {
                    "kernel arrival"
                } else {
                    "wake-up"
                }
            ),
            x: (rel(lo), rel(hi).max(rel(lo) + 0.001)),
            rows,
            lane_rows,
            marks: vec![rel(t0), rel(worst.start_ns)],
        })
    }
}

// ---------------------------------------------------------------------------
// Drawing
// ---------------------------------------------------------------------------

/// Time axis labels: µs, without trailing zeros.
fn fmt_us(v: f64) -> String {
    let s = format!("{v:.1}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, t: &Timeline) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    // Sizes chosen for 1000x600 and scaled with the image, as plot's charts.
    let k = (f64::from(w) / 1000.0)
        .min(f64::from(h) / 600.0)
        .clamp(0.7, 2.0);
    let px = |v: f64| (v * k).round() as i32;
    let font = |size: f64| TextStyle::from((FAMILY, size * k).into_font()).color(&TEXT);
    let margin = px(12.0);

    let title_style = font(20.0).pos(Pos::new(HPos::Center, VPos::Top));
    let title = fit_text(root, &t.title, &title_style, w as i32 - 2 * margin)?;
    root.draw(&Text::new(title, (w as i32 / 2, margin), title_style))?;
    let sub_style = font(13.0)
        .color(&RGBColor(90, 90, 90))
        .pos(Pos::new(HPos::Center, VPos::Top));
    let top = margin + px(26.0);
    let sub = fit_text(root, &t.subtitle, &sub_style, w as i32 - 2 * margin)?;
    root.draw(&Text::new(sub, (w as i32 / 2, top), sub_style))?;
    let (_, area) = root.split_vertically(top + px(24.0));

    // Room for the longest row label.
    let label_style = font(13.0).pos(Pos::new(HPos::Right, VPos::Center));
    let mut label_w = 0;
    for r in &t.rows {
        label_w = label_w.max(root.estimate_text_size(&r.label, &label_style)?.0 as i32);
    }
    let label_area = (label_w + px(30.0)).min(w as i32 / 3);
    let n = t.rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&area)
        .margin(margin)
        .margin_right(margin * 2)
        .x_label_area_size(px(50.0))
        .y_label_area_size(label_area)
        .build_cartesian_2d(t.x.0..t.x.1, 0f64..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(((f64::from(w) / (90.0 * k)) as usize).max(3))
        .x_label_formatter(&|v| fmt_us(*v))
        .x_desc("time (µs)")
        .label_style(font(13.0))
        .axis_desc_style(font(15.0))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .max_light_lines(4)
        .draw()?;

    // Row i is drawn from the top: y in [n - i - 1, n - i].
    let band = |i: usize, inset: f64| (n - i as f64 - 1.0 + inset, n - i as f64 - inset);
    // A span is at least one pixel wide.
    let (px0, px1) = (
        chart.backend_coord(&(t.x.0, 0.0)).0,
        chart.backend_coord(&(t.x.1, 0.0)).0,
    );
    let min_w = (t.x.1 - t.x.0) / f64::from((px1 - px0).max(1));
    let plot = chart.plotting_area();
    for (i, row) in t.rows.iter().enumerate() {
        if i > 0 {
            let y = n - i as f64;
            let color = if i == t.lane_rows {
                RGBColor(120, 120, 120)
            } else {
                GRID_BOLD
            };
            plot.draw(&PathElement::new(
                vec![(t.x.0, y), (t.x.1, y)],
                color.stroke_width(1),
            ))?;
        }
        let (y0, y1) = band(i, 0.18);
        for s in &row.spans {
            // IRQs: a strip along the bottom of the task they interrupted.
            let (y0, y1) = if s.color == IRQ {
                (y0, y0 + 0.22)
            } else {
                (y0, y1)
            };
            plot.draw(&Rectangle::new(
                [(s.from, y0), (s.to.max(s.from + min_w), y1)],
                s.color.filled(),
            ))?;
        }
        // The names of what ran, inside their spans where they fit, above the IRQ strip.
        for s in row.spans.iter().filter(|s| s.color != IRQ) {
            let Some(name) = &s.label else { continue };
            let (x0, y) = chart.backend_coord(&(s.from, y0 + (y1 - y0) * 0.62));
            let x1 = chart.backend_coord(&(s.to, 0.0)).0;
            let c = s.color;
            let luma = 0.3 * f64::from(c.0) + 0.6 * f64::from(c.1) + 0.1 * f64::from(c.2);
            let ink = if luma < 140.0 { WHITE } else { TEXT };
            let style = font(11.0)
                .color(&ink)
                .pos(Pos::new(HPos::Left, VPos::Center));
            let (tw, _) = root.estimate_text_size(name, &style)?;
            if tw as i32 + px(8.0) <= x1 - x0 {
                root.draw(&Text::new(name.clone(), (x0 + px(4.0), y), style))?;
            }
        }
        for &(at, m) in &row.markers {
            let (x, y) = chart.backend_coord(&(at, y1));
            let r = px(5.0);
            match m {
                Marker::Due => root.draw(&Polygon::new(
                    vec![(x - r, y - r), (x + r, y - r), (x, y + r / 2)],
                    TEXT.filled(),
                ))?,
                Marker::Arrival => {
                    root.draw(&Circle::new((x, y), r as u32 / 2 + 1, TEXT.filled()))?
                }
            }
        }
        let (lx, ly) = chart.backend_coord(&(t.x.0, (y0 + y1) / 2.0));
        let label = fit_text(root, &row.label, &label_style, label_area - px(30.0))?;
        root.draw(&Text::new(label, (lx - px(22.0), ly), label_style.clone()))?;
        if let Some(c) = row.swatch {
            let s = px(6.0);
            let x = lx - px(14.0);
            root.draw(&Rectangle::new(
                [(x - s, ly - s), (x + s, ly + s)],
                c.filled(),
            ))?;
        }
    }
    for &m in &t.marks {
        if (t.x.0..=t.x.1).contains(&m) {
            chart.draw_series(DashedLineSeries::new(
                [(m, 0.0), (m, n)],
                6,
                4,
                WORST.stroke_width(1),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::fixture;

    fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect()
    }

    #[test]
    fn one_row_label_per_thread_and_per_cpu() {
        let svg = timeline_svg(&fixture::hog(), DEFAULT_AROUND, Size::DEFAULT).unwrap();
        let texts = texts(&svg);
        for label in [
            "control/0 (tid 1001)",
            "control/1 (tid 1002)",
            "bulk/0 (tid 2001)",
            "CPU 2",
            "CPU 3",
        ] {
            assert_eq!(
                texts.iter().filter(|t| *t == label).count(),
                1,
                "{label} in {texts:?}"
            );
        }
        assert!(texts
            .iter()
            .any(|t| t.starts_with("Flight recorder (latency trigger)")));
    }

    #[test]
    fn without_kernel_events_only_the_lane_threads() {
        let mut w = fixture::hog();
        w.kernel.clear();
        let t = Timeline::build(&w, DEFAULT_AROUND).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.lane_rows, 3);
        assert!(t.subtitle.contains("kernel recorder off"));
        let svg = timeline_svg(&w, DEFAULT_AROUND, Size::DEFAULT).unwrap();
        assert!(!texts(&svg).iter().any(|t| t.starts_with("CPU ")));
    }

    #[test]
    fn the_worst_dispatch_and_what_ran_instead_are_drawn() {
        let w = fixture::hog();
        let t = Timeline::build(&w, Duration::ZERO).unwrap();
        // 0 is the due time: 100 µs after the window's start; the dispatch ends at 140 µs.
        assert_eq!(t.marks, [0.0, 132.0]);
        assert!(t.x.0 < 0.0 && t.x.1 > 140.0 && t.x.1 < 160.0, "{:?}", t.x);
        // Row 0 (control/0): its hand-off and handler.
        let spans: Vec<(f64, f64)> = t.rows[0].spans.iter().map(|s| (s.from, s.to)).collect();
        assert_eq!(spans, [(130.0, 132.0), (132.0, 140.0)]);
        assert_eq!(t.rows[0].markers.len(), 1);
        // CPU 2: the hog (a real-time process: dark grey) until the lane thread, then the
        // lane thread in its row's colour; the IRQ in red.
        let cpu2 = t.rows.iter().find(|r| r.label == "CPU 2").unwrap();
        let colors: Vec<RGBColor> = cpu2.spans.iter().map(|s| s.color).collect();
        assert_eq!(colors, [OTHER_RT, THREAD_COLORS[0], IRQ]);
        // PNG drawing goes through the same code; the SVG of a zero margin is valid too.
        texts(&timeline_svg(&w, Duration::ZERO, Size::DEFAULT).unwrap());
    }

    #[test]
    fn plot_files_tells_a_trace_from_other_results() {
        let dir = std::env::temp_dir().join(format!("lfrt-timeline-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("trace.json");
        lfrt::window::write_chrome_trace(&fixture::hog(), &trace).unwrap();
        let svg = dir.join("out.svg");
        let kind = plot_files(std::slice::from_ref(&trace), &svg, Size::DEFAULT, None).unwrap();
        assert_eq!(kind, PlotKind::Timeline);
        assert!(texts(&std::fs::read_to_string(&svg).unwrap()).contains(&"CPU 2".to_string()));
        // --around is for traces; a trace is drawn alone.
        let other = dir.join("other.json");
        std::fs::write(&other, "{\"thread\": {}}").unwrap();
        let err = plot_files(
            std::slice::from_ref(&other),
            &svg,
            Size::DEFAULT,
            Some(Duration::from_millis(1)),
        )
        .unwrap_err();
        assert!(err.to_string().contains("--around"), "{err}");
        let err =
            plot_files(&[trace.clone(), other.clone()], &svg, Size::DEFAULT, None).unwrap_err();
        assert!(err.to_string().contains("alone"), "{err}");
        // Anything else is plot's.
        let err = plot_files(std::slice::from_ref(&other), &svg, Size::DEFAULT, None).unwrap_err();
        assert!(matches!(err, PlotError::Shape { .. }), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
