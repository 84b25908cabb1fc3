//! The image backends: a chart drawn into an SVG document (text stays text) or into an RGB
//! buffer for PNG (text rasterised with the font [`load_font`] reads).

use super::chart::Chart;
use super::cli::Size;
use super::draw::draw;
use super::glyph_bitmap::GlyphBitmap;
use plotters::prelude::*;
use std::path::Path;

/// Draws `chart` as SVG and returns the document.
pub(crate) fn render_svg(chart: &Chart, size: Size) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size.dims()).into_drawing_area();
        draw(&root, chart).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Draws `chart` into an RGB buffer (3 bytes a pixel, rows top to bottom), text in `font`.
pub(crate) fn render_rgb(
    chart: &Chart,
    size: Size,
    font: &ab_glyph::FontVec,
) -> Result<Vec<u8>, String> {
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

/// Reads the TrueType font PNG text is drawn with.
pub(crate) fn load_font(path: &Path) -> Result<ab_glyph::FontVec, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read the font: {e}"))?;
    ab_glyph::FontVec::try_from_vec(bytes).map_err(|_| "not a TrueType/OpenType font".to_string())
}
