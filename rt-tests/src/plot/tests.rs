//! Tests of `lfrt plot`, from parsed JSON to the pixels and SVG elements drawn: inputs read
//! and refused, chart models, both backends, and [`plot_files`](super::plot_files) on files.

use super::canvas::FAMILY;
use super::chart::{bucket_runs, Chart, FILE_COLORS, PALETTE};
use super::glyph_bitmap::GlyphBitmap;
use super::input::{Input, LatencyRun};
use super::render::{load_font, render_rgb, render_svg};
use super::*;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

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
                  "cpu": 1, "lane": "ctrl", "priority": 80}
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
                         "max": 250000, "lane": "cyclic", "priority": 80}}
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
/// hdrhistogram midpoint, and reads back as µs buckets labelled by lane.
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
    let file = json!({"duration_s": 1.0, "lanes": [
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
    for g in wide["lanes"].as_array_mut().unwrap() {
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
