//! What is plotted: the latency histogram chart (log count axis, a dashed line at each series'
//! maximum) and the inversion chart (p99 against N, one marked line per architecture), each
//! drawn from the chart model with the canvas' primitives.

use super::canvas::{draw_legend, titled, DrawResult, Layout, GRID_BOLD, GRID_LIGHT};
use super::chart::{fmt_axis, Body, Chart, InversionBody, LatencyBody};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Draws `chart` on `root`: its titles, then its body below them.
pub(crate) fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (l, area) = titled(root, &chart.title, chart.subtitle.as_deref())?;
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
