//! PNG text: a plotters bitmap backend whose text is laid out and rasterised with ab_glyph,
//! keeping each glyph's side bearing (plotters' own `ab_glyph` feature drops it; see
//! [`GlyphBitmap`]).

use ab_glyph::{point, Font, FontVec, PxScale, ScaleFont};
use plotters::prelude::BitMapBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
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
