//! examples/async_service.rs runs from one command: its async control loop runs at SCHED_FIFO
//! 90, the tokio admin endpoint answers with live counters and sets a set-point through a
//! lane reply slot, and the lanes' pool threads allocated nothing after warm-up (read from
//! the process's output: the allocation proof from outside the process).

mod util;

#[test]
fn the_async_service_example_runs_its_control_loop_on_a_lane_and_allocates_nothing() {
    let test = "the_async_service_example_runs_its_control_loop_on_a_lane_and_allocates_nothing";
    if !util::rt_allowed(test, 90) {
        return;
    }
    let _l = util::rt_lock();
    let text = util::run_example("async_service", &["2"]);
    let field = |line_start: &str, key: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key)))
            .and_then(|n| n.trim_end_matches(';').parse().ok())
            .unwrap_or_else(|| panic!("no `{key}` in the line `{line_start}`: {text}"))
    };
    let (t1, t2) = (
        field("admin @1s: control", "ticks="),
        field("admin @2s: control", "ticks="),
    );
    assert!(
        t1 > 0 && t2 > t1,
        "control ticks {t1} then {t2}: live, not final"
    );
    assert!(field("admin @2s: control", "feed_updates=") > 0, "{text}");
    assert!(text.contains("admin @1s: ok setpoint=7 was="), "{text}");
    assert!(text.contains("admin: bye"), "{text}");
    for lane in ["control", "feed"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(lane) && l.contains("kernel:"))
            .unwrap_or_else(|| panic!("no final line for {lane}: {text}"));
        assert!(
            line.ends_with("allocations after warm-up: 0"),
            "{lane} pool threads allocated after warm-up: {line}"
        );
    }
    assert!(text.contains("kernel: fifo 90"), "{text}");
}
