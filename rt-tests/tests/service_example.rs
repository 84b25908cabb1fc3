//! examples/service.rs runs from one command and its admin endpoint answers with live counters.

mod util;

#[test]
fn the_service_example_serves_live_counters_and_stops_on_request() {
    let test = "the_service_example_serves_live_counters_and_stops_on_request";
    if !util::rt_allowed(test, 90) {
        return;
    }
    let _l = util::rt_lock();
    let text = util::run_example("service", &["2"]);
    // Two admin queries, one a second; the second is `stop`, which ends the run.
    let dispatched = |at: &str, lane: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("admin @{at}: {lane} dispatched=")))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {lane} counter at {at}: {text}"))
    };
    for lane in ["control", "feed"] {
        let (first, second) = (dispatched("1s", lane), dispatched("2s", lane));
        assert!(
            first > 0 && second > first,
            "{lane}: {first} then {second}: live, not final"
        );
    }
    assert!(
        text.contains("control  dispatched=") && text.contains("kernel: fifo 90"),
        "{text}"
    );
}
