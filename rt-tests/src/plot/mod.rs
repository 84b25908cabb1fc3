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
//! * **`lfrt run --json`**: a top-level `"lanes"` array whose entries carry a
//!   `"latency_histogram"` (see [`latency_histogram`]). Drawn like the above, one line per lane
//!   in the file's bucket width, each lane's maximum (`latency_ns.max_ns`) marked.
//! * **`lfrt inversion --json`**: a top-level `"experiments"` array of
//!   `{"architecture", "n_low", "high": {"p99_us"}}`. Drawn as the high-priority p99 against
//!   N (the number of flooding low-priority streams), one line per architecture.
//!
//! The output format follows the extension of `-o`: `.svg` (text as `<text>`, no font needed)
//! or `.png`, whose text is drawn with [`FONT`], a TrueType font read at run time (Debian
//! package `fonts-dejavu-core`). The output file is written only once the chart is drawn.
//!
//! # Layout
//! Read, model, draw and write, one job a file:
//!
//! * `input.rs`: the readers of the four kinds of input, and the histogram format
//!   `lfrt run --json` writes for them ([`latency_histogram`]);
//! * `chart.rs`: the chart model: series, colours and axis ranges, whatever the image format;
//! * `canvas.rs`: the drawing primitives every chart uses: layout, titles, legend, fitted text;
//! * `draw.rs`: what is plotted: the latency and the inversion charts, on a canvas;
//! * `render.rs` and `glyph_bitmap.rs`: the SVG and PNG backends (PNG text with ab_glyph);
//!
//! A flight-recorder trace is drawn as a timeline by [`timeline`](crate::timeline)
//! ([`timeline::plot_files`](crate::timeline::plot_files) tells it from these).
//!
//! * `cli.rs`: `lfrt plot` itself: image size, format, errors, and [`plot_files`].

mod canvas;
mod chart;
mod cli;
mod draw;
mod glyph_bitmap;
mod input;
mod render;
#[cfg(test)]
mod tests;

pub use cli::{plot_files, Format, PlotError, PlotKind, Size, FONT, FONT_PACKAGE};
// What the timeline of a flight-recorder trace (`crate::timeline`) draws with.
pub(crate) use canvas::{fit_text, FAMILY, GRID_BOLD, GRID_LIGHT, TEXT};
pub(crate) use chart::PALETTE;
pub(crate) use glyph_bitmap::GlyphBitmap;
pub use input::{latency_histogram, RUN_BUCKET_NS};
pub(crate) use render::load_font;
