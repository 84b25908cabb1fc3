//! The documentation's relative links: every `[text](path#anchor)` in README.md,
//! BENCHMARKS.md, CHANGELOG.md, CONTRIBUTING.md, docs/*.md and the adapters' READMEs names a
//! file that exists and, for a Markdown file, a heading it has. Moving a section or a page cannot leave a dead link behind.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces become `-`; a repeated heading gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(markdown).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes + 1..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while !seen.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
    }
    seen
}

/// The targets of the inline links `](target)` in the prose of `markdown`.
fn links(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            let target = &rest[..end];
            if !target.contains(char::is_whitespace) {
                out.push(target.to_string());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_names_an_existing_file_and_heading() {
    let root = root();
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "iceoryx2/README.md",
        "zenoh/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    let mut dead = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !file.exists() {
                dead.push(format!("{}: {target}: no such file", page.display()));
            } else if !anchor.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor)
            {
                dead.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
    // The README links every docs page, so this cannot pass by finding no links.
    assert!(checked >= 20, "only {checked} relative links found");
}

#[test]
fn anchors_follow_github() {
    let a = anchors("# A\n## `lfrt run --json` fields\n### 5.4 Lane borrowing (issue 15 §2)\n## A\n```\n# not a heading\n```\n");
    for expected in [
        "a",
        "lfrt-run---json-fields",
        "54-lane-borrowing-issue-15-2",
        "a-1",
    ] {
        assert!(a.contains(expected), "{expected} not in {a:?}");
    }
    assert!(!a.contains("not-a-heading"));
}
