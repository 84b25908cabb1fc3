//! `lfrt plot` end to end: every kind of result in benches/results/ drawn as SVG and PNG, the
//! files opened again (an XML parser for SVG, a PNG decoder for PNG) and checked for the
//! stated size and every series; bad input fails with exit status 2 and a clear message.

mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The font PNG text is drawn with (lfrt_tools::plot::FONT).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The `lfrt` command, run from the repository root as the README runs it.
fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

fn tmp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-plot-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn plot(inputs: &[&Path], output: &Path, extra: &[&str]) -> Output {
    lfrt()
        .arg("plot")
        .args(inputs)
        .arg("-o")
        .arg(output)
        .args(extra)
        .output()
        .unwrap()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An SVG as drawn: its size, per stroke colour the point counts of its polylines, and the
/// colour of the legend sample drawn just before each text.
struct Svg {
    size: (u32, u32),
    lines: HashMap<String, Vec<usize>>,
    legend: HashMap<String, String>,
    texts: Vec<String>,
}

fn read_svg(path: &Path) -> Svg {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let dim = |a: &str| -> u32 { root.attribute(a).and_then(|v| v.parse().ok()).expect(a) };
    let (mut lines, mut legend, mut texts) = (HashMap::new(), HashMap::new(), Vec::new());
    let mut last_stroke = String::new();
    for n in doc.descendants().filter(|n| n.is_element()) {
        match n.tag_name().name() {
            "polyline" => {
                last_stroke = n.attribute("stroke").unwrap_or("").to_ascii_uppercase();
                let points = n
                    .attribute("points")
                    .unwrap_or("")
                    .split_whitespace()
                    .count();
                lines
                    .entry(last_stroke.clone())
                    .or_insert_with(Vec::new)
                    .push(points);
            }
            "text" => {
                let t = n.text().unwrap_or("").trim().to_string();
                legend.insert(t.clone(), last_stroke.clone());
                texts.push(t);
            }
            _ => {}
        }
    }
    Svg {
        size: (dim("width"), dim("height")),
        lines,
        legend,
        texts,
    }
}

/// Width, height and 8-bit RGB(A) pixels of a PNG.
fn read_png(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let file = std::fs::File::open(path).unwrap();
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("{}: colour type {other:?}", path.display()),
    };
    let pixels = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (info.width, info.height, pixels)
}

fn rgb_of(hex: &str) -> [u8; 3] {
    let v = u32::from_str_radix(hex.trim_start_matches('#'), 16).expect(hex);
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

#[test]
fn every_result_kind_draws_as_svg_and_png_with_every_series() {
    let dir = tmp_dir("kinds");
    let ct = Path::new("benches/results/cyclictest.json");
    let lf = Path::new("benches/results/lfrt-cyclic.json");
    let inv = Path::new("benches/results/inversion.json");
    // (inputs, legend labels, the longest line each series must have)
    let cases: [(&str, Vec<&Path>, Vec<&str>, usize); 4] = [
        (
            "cyclictest",
            vec![ct],
            vec!["T0, max 3106 µs", "T1, max 1918 µs"],
            20,
        ),
        (
            "lfrt",
            vec![lf],
            vec![
                "T0 (cyclic P80), max 3081 µs",
                "T1 (cyclic P80), max 4413 µs",
            ],
            20,
        ),
        (
            "inversion",
            vec![inv],
            vec!["lfrt lanes", "lfrt shared pool", "HS/HA"],
            6,
        ),
        (
            "overlay",
            vec![ct, lf],
            vec![
                "cyclictest: T0, max 3106 µs",
                "cyclictest: T1, max 1918 µs",
                "lfrt cyclic: T0 (cyclic P80), max 3081 µs",
                "lfrt cyclic: T1 (cyclic P80), max 4413 µs",
            ],
            20,
        ),
    ];
    let font = Path::new(FONT).exists();
    if !font {
        util::skip(
            "every_result_kind_draws_as_svg_and_png_with_every_series (PNG half)",
            &format!("{FONT} missing (Debian fonts-dejavu-core; CI installs it)"),
        );
    }
    for (name, inputs, labels, longest) in cases {
        let svg_path = dir.join(format!("{name}.svg"));
        ok(&plot(&inputs, &svg_path, &[]));
        let svg = read_svg(&svg_path);
        assert_eq!(svg.size, (1000, 600), "{name}: the default size");
        let mut colors = Vec::new();
        for label in &labels {
            let color = svg
                .legend
                .get(*label)
                .unwrap_or_else(|| panic!("{name}: no legend {label:?} in {:?}", svg.texts));
            let lines = &svg.lines[color];
            assert!(
                lines.iter().max().unwrap() >= &longest,
                "{name}: {label}: lines {lines:?}"
            );
            assert!(!colors.contains(color), "{name}: {color} used twice");
            colors.push(color.clone());
        }

        if !font {
            continue;
        }
        let png_path = dir.join(format!("{name}.png"));
        ok(&plot(&inputs, &png_path, &["--size", "800x480"]));
        let (w, h, pixels) = read_png(&png_path);
        assert_eq!((w, h), (800, 480), "{name}: --size");
        for (label, color) in labels.iter().zip(&colors) {
            let rgb = rgb_of(color);
            let n = pixels.iter().filter(|p| **p == rgb).count();
            assert!(n > 100, "{name}: {label} ({color}): {n} pixels");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_fails_with_status_2_naming_the_file_or_the_flag() {
    let dir = tmp_dir("bad");
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let good = Path::new("benches/results/cyclictest.json");
    let inv = Path::new("benches/results/inversion.json");
    let not_json = write("notjson.json", "latency: 5 us");
    let shape = write("shape.json", r#"{"something": "else"}"#);
    let empty = write("empty.json", r#"{"thread": {"0": {"histogram": {}}}}"#);
    let out = dir.join("out.svg");
    /// Inputs, output, other arguments, and what the error message must contain.
    type Case<'a> = (Vec<&'a Path>, &'a Path, Vec<&'a str>, Vec<&'a str>);
    let cases: [Case; 7] = [
        (
            vec![&not_json],
            &out,
            vec![],
            vec!["notjson.json", "invalid JSON"],
        ),
        (
            vec![&shape],
            &out,
            vec![],
            vec!["shape.json", "expected cyclictest"],
        ),
        (vec![&empty], &out, vec![], vec!["empty.json", "empty"]),
        (
            vec![good],
            &dir.join("out.jpg"),
            vec![],
            vec!["-o/--output", ".svg or .png"],
        ),
        (
            vec![good, inv],
            &out,
            vec![],
            vec!["inversion.json", "overlaid"],
        ),
        (
            vec![good, good, good],
            &out,
            vec![],
            vec!["no more were expected"],
        ),
        (
            vec![good],
            &out,
            vec!["--size", "big"],
            vec!["--size", "WIDTHxHEIGHT"],
        ),
    ];
    for (inputs, output, extra, needles) in cases {
        let o = plot(&inputs, output, &extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{inputs:?} {extra:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{inputs:?} {extra:?}: {err:?} lacks {n:?}");
        }
        assert!(!output.exists(), "{} written on error", output.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// One SVG polyline: stroke colour (upper case), stroke width and its points.
type Polyline = (String, String, Vec<(f64, f64)>);

/// Every polyline of an SVG.
fn polylines(path: &Path) -> Vec<Polyline> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .map(|n| {
            let points = n
                .attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').expect("x,y");
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            (
                n.attribute("stroke").unwrap_or("").to_ascii_uppercase(),
                n.attribute("stroke-width").unwrap_or("1").to_string(),
                points,
            )
        })
        .collect()
}

/// `lfrt run --json` from a real (short, light) run of two lanes is drawn as one histogram
/// per lane in its own colour, each with a dashed vertical line at its maximum, to the right
/// of every bucket of that lane; the JSON's histogram holds every sample of its summary.
#[test]
fn run_json_draws_one_series_per_lane_with_its_max() {
    let dir = tmp_dir("run");
    let config = dir.join("two.toml");
    std::fs::write(
        &config,
        "[runtime]\nrt = \"best-effort\"\n\n\
         [[lane]]\nname = \"control\"\npriority = 80\nthreads = 2\n\
         [[lane.handler]]\nkind = \"timer\"\ninterval_us = 1000\n\n\
         [[lane]]\nname = \"bulk\"\npriority = 20\nthreads = 1\n\
         [[lane.handler]]\nkind = \"timer\"\ninterval_us = 2000\n",
    )
    .unwrap();
    let json = dir.join("run.json");
    {
        // Where permitted the lanes run SCHED_FIFO: under the RT test lock.
        let _lock = util::rt_lock();
        let out = lfrt()
            .arg("run")
            .arg(&config)
            .args(["-D", "1"])
            .arg("--json")
            .arg(&json)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        ok(&out);
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let lanes = v["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 2);
    // (legend label prefix, max in µs, last bucket start in µs)
    let mut expected = Vec::new();
    for g in lanes {
        let h = &g["latency_histogram"];
        assert_eq!(h["bucket_ns"], 1000, "{h}");
        let counts = h["counts"].as_array().unwrap();
        let total: u64 = counts.iter().map(|c| c[1].as_u64().unwrap()).sum();
        assert_eq!(total, g["latency_ns"]["count"].as_u64().unwrap(), "{g}");
        assert!(total > 100, "a 1 s run of a 1-2 ms timer: {total} samples");
        let last_us = counts.last().unwrap()[0].as_f64().unwrap() / 1000.0;
        let max_us = g["latency_ns"]["max_ns"].as_f64().unwrap() / 1000.0;
        assert!(max_us >= last_us, "max {max_us} below bucket {last_us}");
        let m = &g["metrics"];
        expected.push((
            format!("{} (P{}), max ", m["name"].as_str().unwrap(), m["priority"]),
            max_us,
        ));
    }

    let svg_path = dir.join("run.svg");
    ok(&plot(&[&json], &svg_path, &[]));
    let svg = read_svg(&svg_path);
    assert!(
        svg.texts.iter().any(|t| t == "latency (µs), 1 µs buckets"),
        "{:?}",
        svg.texts
    );
    let labels: Vec<&String> = svg.texts.iter().filter(|t| t.contains(", max ")).collect();
    assert_eq!(labels.len(), 2, "one legend entry per lane: {labels:?}");
    let lines = polylines(&svg_path);
    let mut colors = Vec::new();
    for (prefix, max_us) in &expected {
        let label = labels
            .iter()
            .find(|t| t.starts_with(prefix.as_str()))
            .unwrap_or_else(|| panic!("no legend {prefix:?} in {labels:?}"));
        let shown: f64 = label[prefix.len()..]
            .trim_end_matches(" µs")
            .parse()
            .unwrap();
        assert!(
            (shown - max_us).abs() <= 0.01 * max_us,
            "{label} vs {max_us}"
        );
        let color = &svg.legend[label.as_str()];
        assert!(!colors.contains(color), "{color} used twice");
        colors.push(color.clone());
        // The histogram: thin lines; the max marker: dashes at one x, right of every bucket.
        let data: Vec<f64> = lines
            .iter()
            .filter(|(c, w, p)| c == color && w == "1" && p.len() >= 3)
            .flat_map(|(_, _, p)| p.iter().map(|q| q.0))
            .collect();
        assert!(!data.is_empty(), "{label}: no histogram lines");
        let dashes: Vec<&Vec<(f64, f64)>> = lines
            .iter()
            .filter(|(c, w, p)| c == color && w == "2" && p.len() == 2)
            .map(|(_, _, p)| p)
            .collect();
        assert!(dashes.len() >= 3, "{label}: no dashed max line");
        let x = dashes[0][0].0;
        assert!(
            dashes.iter().all(|d| d[0].0 == x && d[1].0 == x),
            "{label}: the max line is not vertical"
        );
        let rightmost = data.iter().cloned().fold(f64::MIN, f64::max);
        assert!(
            x >= rightmost,
            "{label}: max at x={x}, a bucket at {rightmost}"
        );
    }

    if Path::new(FONT).exists() {
        let png_path = dir.join("run.png");
        ok(&plot(&[&json], &png_path, &["--size", "800x480"]));
        let (w, h, pixels) = read_png(&png_path);
        assert_eq!((w, h), (800, 480));
        for color in &colors {
            let rgb = rgb_of(color);
            let n = pixels.iter().filter(|p| **p == rgb).count();
            assert!(n > 100, "{color}: {n} pixels");
        }
    } else {
        util::skip(
            "run_json_draws_one_series_per_lane_with_its_max (PNG half)",
            &format!("{FONT} missing (Debian fonts-dejavu-core; CI installs it)"),
        );
    }

    // A run JSON without histograms says what is missing.
    let mut old = v.clone();
    for g in old["lanes"].as_array_mut().unwrap() {
        g.as_object_mut().unwrap().remove("latency_histogram");
    }
    let old_path = dir.join("old.json");
    std::fs::write(&old_path, old.to_string()).unwrap();
    let o = plot(&[&old_path], &dir.join("old.svg"), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("old.json") && err.contains("no \"latency_histogram\""),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
