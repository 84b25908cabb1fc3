//! examples/service.rs runs from one command and its admin endpoint answers with live counters.

mod util;

#[test]
fn the_service_example_serves_live_counters_and_stops_on_request() {
    let test = "the_service_example_serves_live_counters_and_stops_on_request";
    if !util::rt_allowed(test, 90) {
        return;
    }
    let _l = util::rt_lock();
    // cargo builds the examples next to the test binaries: target/<profile>/examples/.
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/service");
    assert!(example.exists(), "{} not built", example.display());
    let out = std::process::Command::new(&example)
        .arg("2")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two admin queries, one a second; the second is `stop`, which ends the run.
    let dispatched = |at: &str, group: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("admin @{at}: {group} dispatched=")))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {group} counter at {at}: {text}"))
    };
    for group in ["control", "feed"] {
        let (first, second) = (dispatched("1s", group), dispatched("2s", group));
        assert!(
            first > 0 && second > first,
            "{group}: {first} then {second}: live, not final"
        );
    }
    assert!(
        text.contains("control  dispatched=") && text.contains("kernel: fifo 90"),
        "{text}"
    );
}
