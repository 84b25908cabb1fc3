//! Drawing primitives, whatever is plotted: the layout that scales text and spacing with the
//! image, the colours of text and grid, titles, text shortened to fit, and the legend box. A
//! chart of any kind (see `draw.rs`) is drawn with these on a plotters drawing area of either
//! backend (`render.rs`).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error as StdError;

pub(crate) const TEXT: RGBColor = RGBColor(30, 30, 30);
pub(crate) const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);
pub(crate) const GRID_LIGHT: RGBColor = RGBColor(240, 240, 240);
pub(crate) const FAMILY: &str = "sans-serif";

pub(crate) type DrawResult = Result<(), Box<dyn StdError>>;

/// Text sizes and spacing for one image size: chosen for 1000x600 and scaled with the image
/// (by the smaller of width/1000 and height/600, kept within 0.7..=2), so small images keep
/// room for the data and large ones are not all whitespace.
pub(crate) struct Layout {
    pub(crate) title: f64,
    pub(crate) subtitle: f64,
    pub(crate) label: f64,
    pub(crate) desc: f64,
    pub(crate) legend: f64,
    /// Legend: row height, inner padding, sample line length, distance from the plot's corner.
    pub(crate) row: i32,
    pub(crate) pad: i32,
    pub(crate) sample: i32,
    pub(crate) inset: i32,
    pub(crate) margin: i32,
    pub(crate) x_label_area: i32,
    pub(crate) y_label_area: i32,
    /// How many x labels fit: one per ~85 px at the default size.
    pub(crate) x_labels: usize,
}

impl Layout {
    pub(crate) fn of(width: u32, height: u32) -> Layout {
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
    pub(crate) fn plot_height<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> i32 {
        let (_, h) = area.dim_in_pixel();
        (h as i32 - 2 * self.margin - self.x_label_area).max(1)
    }

    /// Most legend rows shown in a plot `plot_h` high; more series than that end in
    /// "+ k more".
    pub(crate) fn legend_rows(&self, entries: usize, plot_h: i32) -> usize {
        let fit = ((f64::from(plot_h) * 0.35) as i32 / self.row).max(1) as usize;
        entries.min(fit)
    }

    /// Fraction of the plot's height, from the top, that a legend of `rows` rows covers
    /// (with some air below it): the data's range is stretched so that nothing is drawn
    /// there.
    pub(crate) fn legend_fraction(&self, rows: usize, plot_h: i32) -> f64 {
        let h = rows as i32 * self.row + 2 * self.pad + 2 * self.inset;
        (f64::from(h) / f64::from(plot_h)).clamp(0.05, 0.45)
    }

    pub(crate) fn chart_builder<'a, 'b, DB: DrawingBackend>(
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

    pub(crate) fn font(&self, size: f64) -> TextStyle<'static> {
        TextStyle::from((FAMILY, size).into_font()).color(&TEXT)
    }
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
pub(crate) fn draw_legend<DB: DrawingBackend>(
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

/// Fills `root` with white and draws `title` and, under it, `subtitle` centred across its top,
/// each shortened to fit. Returns the layout for `root`'s size and the area below the titles.
pub(crate) fn titled<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: Option<&str>,
) -> Result<(Layout, DrawingArea<DB, Shift>), Box<dyn StdError>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (w, h) = root.dim_in_pixel();
    let l = Layout::of(w, h);
    let top = l.margin;
    let title_style = l.font(l.title).pos(Pos::new(HPos::Center, VPos::Top));
    let title = fit_text(root, title, &title_style, w as i32 - 2 * l.margin)?;
    root.draw(&Text::new(title, (w as i32 / 2, top), title_style))?;
    let mut title_h = top + (l.title * 1.3) as i32;
    if let Some(sub) = subtitle {
        let style = l
            .font(l.subtitle)
            .color(&RGBColor(90, 90, 90))
            .pos(Pos::new(HPos::Center, VPos::Top));
        let sub = fit_text(root, sub, &style, w as i32 - 2 * l.margin)?;
        root.draw(&Text::new(sub, (w as i32 / 2, title_h), style))?;
        title_h += (l.subtitle * 1.3) as i32;
    }
    let (_, area) = root.split_vertically(title_h);
    Ok((l, area))
}
