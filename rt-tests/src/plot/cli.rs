//! `lfrt plot`'s front-end: what the command line asks for (the image size, the format from
//! the output file's extension), the errors it reports, and [`plot_files`], which reads the
//! inputs, draws the chart and writes the file.

use super::chart::Chart;
use super::input::Input;
use super::render::{load_font, render_rgb, render_svg};
use plotters::prelude::*;
use serde_json::Value;
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
    /// Per-thread (cyclictest-style input) or per-lane (lfrt run) latency histogram, log count
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

    pub(crate) fn dims(self) -> (u32, u32) {
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
