//! The readers of `lfrt plot`'s inputs: cyclictest and `lfrt cyclic --json` histograms,
//! `lfrt run --json` per-lane histograms and `lfrt inversion --json` experiments, each told
//! apart by its content and checked field by field, into per-thread buckets (µs) and
//! per-architecture points. Also the run histogram's format, which `lfrt run` writes with
//! [`latency_histogram`].

use serde_json::{Map, Value};

/// Nanoseconds per bucket of the histograms `lfrt run --json` writes: 1 µs, as OSADL plots.
pub const RUN_BUCKET_NS: u64 = 1000;

/// A latency histogram (ns) as `lfrt run --json` writes it per lane and `lfrt plot` reads it:
/// `{"bucket_ns": 1000, "counts": [[start_ns, count], …]}`, only buckets with samples, by
/// start. Each value is counted at the midpoint of its hdrhistogram bucket, as
/// [`lfrt::telemetry::LatencySummary`] counts it, so the histogram agrees with the summary.
pub fn latency_histogram(h: &hdrhistogram::Histogram<u64>, bucket_ns: u64) -> Value {
    let bucket_ns = bucket_ns.max(1);
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for v in h.iter_recorded() {
        let start = h.median_equivalent(v.value_iterated_to()) / bucket_ns * bucket_ns;
        let n = v.count_since_last_iteration();
        match counts.last_mut() {
            Some(last) if last.0 == start => last.1 += n,
            _ => counts.push((start, n)),
        }
    }
    serde_json::json!({ "bucket_ns": bucket_ns, "counts": counts })
}

const EXPECTED: &str = "expected cyclictest or `lfrt cyclic --json` output (an object with a \
     \"thread\" map whose entries have a \"histogram\" map, as written by `cyclictest \
     --json=FILE -h US`), `lfrt run --json` output (an object with a \"lanes\" array whose \
     entries have a \"latency_histogram\") or `lfrt inversion --json` output (an object with an \"experiments\" \
     array of {\"architecture\", \"n_low\", \"high\": {\"p99_us\"}})";

/// One parsed input file.
pub(crate) enum Input {
    Latency(LatencyRun),
    Inversion(Vec<ArchLine>),
}

/// A cyclictest-style run, in µs.
pub(crate) struct LatencyRun {
    /// `cyclictest`, `lfrt cyclic` or `lfrt run`.
    pub(crate) source: &'static str,
    /// Width of a bucket (µs): 1 for cyclictest and lfrt cyclic, the file's for lfrt run.
    pub(crate) bucket_us: f64,
    /// The recorded command line, if any.
    pub(crate) cmdline: Option<String>,
    pub(crate) threads: Vec<ThreadHist>,
}

pub(crate) struct ThreadHist {
    /// `T<n>`, with the lane and priority where the file has them (lfrt run: the lane).
    pub(crate) label: String,
    /// (bucket start in µs, count), sorted, counts > 0, one entry per bucket.
    pub(crate) buckets: Vec<(f64, f64)>,
    /// Largest latency seen (µs): the file's `max`, or the last bucket.
    pub(crate) max_us: Option<f64>,
}

/// One architecture's (N, high p99 µs) points, sorted by N.
pub(crate) struct ArchLine {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

impl Input {
    pub(crate) fn parse(value: &Value) -> Result<Input, String> {
        let Some(root) = value.as_object() else {
            return Err(format!(
                "top-level JSON value is {}, not an object; {EXPECTED}",
                kind_name(value)
            ));
        };
        if field(root, "thread").is_some() {
            parse_latency(root).map(Input::Latency)
        } else if lanes_of(root).is_some() {
            parse_run(root).map(Input::Latency)
        } else if field(root, "experiments").is_some() {
            parse_inversion(root).map(Input::Inversion)
        } else {
            Err(format!(
                "no \"thread\", \"lanes\" or \"experiments\" key at top level; {EXPECTED}"
            ))
        }
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Looks up `key`, also accepting real cyclictest's spelling with a trailing colon.
fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).or_else(|| obj.get(&format!("{key}:")))
}

/// The `lanes` array of an `lfrt run --json` file, or `groups` in one written before the lane
/// rename (issue 30).
fn lanes_of(root: &Map<String, Value>) -> Option<&Value> {
    field(root, "lanes").or_else(|| field(root, "groups"))
}

fn clean_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_string()
}

/// Does a cyclictest command line ask for nanoseconds (`-N`, `--nsecs`, or `N` in a cluster
/// of flags such as `-qmN`)?
fn cmdline_nsecs(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|t| {
        t == "--nsecs"
            || t.strip_prefix('-').is_some_and(|flags| {
                !flags.starts_with('-')
                    && flags.contains('N')
                    && flags.chars().all(|c| c.is_ascii_alphabetic())
            })
    })
}

/// Divisor from the file's unit to µs.
fn unit_per_us(root: &Map<String, Value>) -> Result<f64, String> {
    match field(root, "unit") {
        None => Ok(match field(root, "cmdline").and_then(Value::as_str) {
            Some(cmd) if cmdline_nsecs(cmd) => 1000.0,
            _ => 1.0,
        }),
        Some(Value::String(u)) => match u.trim() {
            "ns" => Ok(1000.0),
            "us" | "µs" | "μs" => Ok(1.0),
            other => Err(format!("\"unit\" is {other:?}, expected \"us\" or \"ns\"")),
        },
        Some(other) => Err(format!(
            "\"unit\" is {}, expected the string \"us\" or \"ns\"",
            kind_name(other)
        )),
    }
}

fn parse_latency(root: &Map<String, Value>) -> Result<LatencyRun, String> {
    let threads = match field(root, "thread") {
        Some(Value::Object(t)) => t,
        Some(other) => {
            return Err(format!(
                "\"thread\" is {}, expected an object mapping thread numbers to thread results",
                kind_name(other)
            ))
        }
        None => return Err("missing \"thread\" object".to_string()),
    };
    let per_us = unit_per_us(root)?;

    let mut keys: Vec<&String> = threads.keys().collect();
    keys.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    });

    let mut out = Vec::new();
    for key in keys {
        let Some(thread) = threads[key.as_str()].as_object() else {
            return Err(format!(
                "thread \"{key}\" is {}, expected an object",
                kind_name(&threads[key.as_str()])
            ));
        };
        let hist = match field(thread, "histogram") {
            // cyclictest without -h: nothing to draw for this thread.
            None | Some(Value::Null) => continue,
            Some(Value::Object(h)) => h,
            Some(other) => {
                return Err(format!(
                    "thread \"{key}\": \"histogram\" is {}, expected an object of \
                     \"latency\": count",
                    kind_name(other)
                ))
            }
        };
        // Re-bucket to 1 µs: floor(latency in µs), then add up the counts that land together
        // (ns input has up to 1000 keys per bucket).
        let mut buckets: Vec<(f64, f64)> = Vec::with_capacity(hist.len());
        for (bucket, count) in hist {
            let x = bucket
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "thread \"{key}\": histogram key \"{bucket}\" is not a non-negative \
                         latency number"
                    )
                })?;
            let c = count
                .as_f64()
                .filter(|c| c.is_finite() && *c >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "thread \"{key}\": histogram count for \"{bucket}\" is {count}, \
                         expected a non-negative number"
                    )
                })?;
            if c > 0.0 {
                buckets.push(((x / per_us).floor(), c));
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(buckets.len());
        for (x, c) in buckets {
            match merged.last_mut() {
                Some(last) if last.0 == x => last.1 += c,
                _ => merged.push((x, c)),
            }
        }
        if merged.iter().any(|b| !b.1.is_finite()) {
            return Err(format!(
                "thread \"{key}\": histogram counts add up to more than can be plotted"
            ));
        }

        let file_max = match field(thread, "max") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|m| m.is_finite() && *m >= 0.0)
                    .ok_or_else(|| {
                        format!("thread \"{key}\": \"max\" is {v}, expected a non-negative number")
                    })?
                    / per_us,
            ),
        };
        let last = merged.last().map(|b| b.0);
        let max_us = match (file_max, last) {
            (Some(m), Some(l)) => Some(m.max(l)),
            (m, l) => m.or(l),
        };

        let mut label = format!("T{}", clean_text(key));
        // `group`: files written before the lane rename (issue 30).
        let lane = field(thread, "lane")
            .or_else(|| field(thread, "group"))
            .and_then(Value::as_str)
            .map(clean_text);
        let prio = field(thread, "priority").and_then(Value::as_i64);
        match (lane, prio) {
            (Some(g), Some(p)) => label.push_str(&format!(" ({g} P{p})")),
            (Some(g), None) => label.push_str(&format!(" ({g})")),
            (None, Some(p)) => label.push_str(&format!(" (P{p})")),
            (None, None) => {}
        }
        if merged.is_empty() {
            label.push_str(" (no samples)");
        }
        out.push(ThreadHist {
            label,
            buckets: merged,
            max_us: if last.is_some() { max_us } else { None },
        });
    }

    if out.is_empty() {
        return Err(
            "no thread has a \"histogram\"; run cyclictest (or lfrt cyclic) with -h/--histogram \
             (e.g. `cyclictest --json=FILE -h 200`) to record one"
                .to_string(),
        );
    }
    if out.iter().all(|t| t.buckets.is_empty()) {
        return Err("all thread histograms are empty (no samples recorded)".to_string());
    }
    let source = if field(root, "lfrt_version").is_some() {
        "lfrt cyclic"
    } else {
        "cyclictest"
    };
    let cmdline = field(root, "cmdline")
        .and_then(Value::as_str)
        .map(clean_text)
        .filter(|c| !c.is_empty());
    Ok(LatencyRun {
        source,
        bucket_us: 1.0,
        cmdline,
        threads: out,
    })
}

/// `lfrt run --json`: each lane's `latency_histogram`, labelled with its name and priority.
fn parse_run(root: &Map<String, Value>) -> Result<LatencyRun, String> {
    let lanes = match lanes_of(root) {
        Some(Value::Array(g)) if !g.is_empty() => g,
        Some(Value::Array(_)) => return Err("\"lanes\" is empty; nothing to plot".to_string()),
        Some(other) => {
            return Err(format!(
                "\"lanes\" is {}, expected an array of {{\"metrics\", \"latency_ns\", \
                 \"latency_histogram\"}}",
                kind_name(other)
            ))
        }
        None => return Err("missing \"lanes\" array".to_string()),
    };
    let mut bucket_ns: Option<u64> = None;
    let mut out = Vec::with_capacity(lanes.len());
    for (i, g) in lanes.iter().enumerate() {
        let at = format!("lanes[{i}]");
        let g = g
            .as_object()
            .ok_or_else(|| format!("{at} is {}, expected an object", kind_name(g)))?;
        let metrics = field(g, "metrics").and_then(Value::as_object);
        let name = metrics
            .and_then(|m| field(m, "name"))
            .and_then(Value::as_str)
            .map(clean_text)
            .ok_or_else(|| format!("{at}: missing \"metrics\": {{\"name\"}}"))?;
        let hist = match field(g, "latency_histogram") {
            Some(Value::Object(h)) => h,
            Some(other) => {
                return Err(format!(
                    "{at} (lane `{name}`): \"latency_histogram\" is {}, expected an object \
                     {{\"bucket_ns\", \"counts\"}}",
                    kind_name(other)
                ))
            }
            None => {
                return Err(format!(
                    "{at} (lane `{name}`): no \"latency_histogram\"; this file was written by \
                     an lfrt run without histograms: run it again with this version"
                ))
            }
        };
        let width = field(hist, "bucket_ns")
            .and_then(Value::as_u64)
            .filter(|w| *w > 0)
            .ok_or_else(|| {
                format!("{at}.latency_histogram.bucket_ns: expected a whole number of ns above 0")
            })?;
        match bucket_ns {
            Some(w) if w != width => {
                return Err(format!(
                    "{at}.latency_histogram.bucket_ns is {width}, lanes[0]'s is {w}: one file \
                     has one bucket width"
                ))
            }
            _ => bucket_ns = Some(width),
        }
        let counts = field(hist, "counts")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                format!("{at}.latency_histogram.counts: expected an array of [start_ns, count]")
            })?;
        let mut buckets: Vec<(f64, f64)> = Vec::with_capacity(counts.len());
        for (j, pair) in counts.iter().enumerate() {
            let pair = pair
                .as_array()
                .filter(|p| p.len() == 2)
                .and_then(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
                .ok_or_else(|| {
                    format!(
                        "{at}.latency_histogram.counts[{j}] is {pair}, expected [start_ns, count] \
                         (whole numbers)"
                    )
                })?;
            if buckets
                .last()
                .is_some_and(|b| b.0 >= pair.0 as f64 / 1000.0)
            {
                return Err(format!(
                    "{at}.latency_histogram.counts[{j}]: bucket starts must increase"
                ));
            }
            if pair.1 > 0 {
                buckets.push((pair.0 as f64 / 1000.0, pair.1 as f64));
            }
        }
        let file_max = field(g, "latency_ns")
            .and_then(Value::as_object)
            .and_then(|l| field(l, "max_ns"))
            .and_then(Value::as_f64)
            .filter(|m| m.is_finite() && *m > 0.0)
            .map(|m| m / 1000.0);
        let last = buckets.last().map(|b| b.0);
        let max_us = last.map(|l| file_max.map_or(l, |m| m.max(l)));
        let mut label = name;
        if let Some(p) = metrics
            .and_then(|m| field(m, "priority"))
            .and_then(Value::as_i64)
        {
            label.push_str(&format!(" (P{p})"));
        }
        if buckets.is_empty() {
            label.push_str(" (no samples)");
        }
        out.push(ThreadHist {
            label,
            buckets,
            max_us,
        });
    }
    if out.iter().all(|t| t.buckets.is_empty()) {
        return Err("every lane's latency histogram is empty (no samples recorded)".to_string());
    }
    let duration = field(root, "duration_s").and_then(Value::as_f64);
    Ok(LatencyRun {
        source: "lfrt run",
        bucket_us: bucket_ns.unwrap_or(RUN_BUCKET_NS) as f64 / 1000.0,
        cmdline: Some(match duration {
            Some(d) => format!("dispatch latency per lane, {d:.1} s run"),
            None => "dispatch latency per lane".to_string(),
        }),
        threads: out,
    })
}

fn parse_inversion(root: &Map<String, Value>) -> Result<Vec<ArchLine>, String> {
    let exps = match field(root, "experiments") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "\"experiments\" is {}, expected an array",
                kind_name(other)
            ))
        }
        None => return Err("missing \"experiments\" array".to_string()),
    };
    if exps.is_empty() {
        return Err("\"experiments\" is empty; nothing to plot".to_string());
    }
    // Architectures in order of first appearance, each with its (n_low, p99) points.
    let mut lines: Vec<ArchLine> = Vec::new();
    for (i, e) in exps.iter().enumerate() {
        let Some(o) = e.as_object() else {
            return Err(format!(
                "experiments[{i}] is {}, expected an object with \"architecture\", \"n_low\" \
                 and \"high\": {{\"p99_us\"}}",
                kind_name(e)
            ));
        };
        let arch = match field(o, "architecture") {
            Some(Value::String(s)) => clean_text(s),
            Some(v) => {
                return Err(format!(
                    "experiments[{i}].architecture is {}, expected a string",
                    kind_name(v)
                ))
            }
            None => return Err(format!("experiments[{i}]: missing \"architecture\"")),
        };
        let number = |v: Option<&Value>, name: &str| match v {
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("experiments[{i}].{name} is {v}, expected a finite number")),
            None => Err(format!("experiments[{i}]: missing \"{name}\"")),
        };
        let n = number(field(o, "n_low"), "n_low")?;
        let high = match field(o, "high") {
            Some(Value::Object(h)) => h,
            Some(v) => {
                return Err(format!(
                    "experiments[{i}].high is {}, expected an object with \"p99_us\"",
                    kind_name(v)
                ))
            }
            None => {
                return Err(format!(
                    "experiments[{i}]: missing \"high\" (with \"p99_us\")"
                ))
            }
        };
        let p99 = number(field(high, "p99_us"), "high.p99_us")?;
        match lines.iter_mut().find(|l| l.name == arch) {
            Some(l) => l.points.push((n, p99)),
            None => lines.push(ArchLine {
                name: arch,
                points: vec![(n, p99)],
            }),
        }
    }
    for l in &mut lines {
        l.points
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    }
    Ok(lines)
}
