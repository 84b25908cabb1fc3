//! examples/robot.rs runs from one command: two processes exchange commands and telemetry
//! through Zenoh on loopback, each priority on its lane, no lane allocating after warm-up.

#[path = "../../rt-tests/tests/util/mod.rs"]
mod util;

#[test]
fn the_robot_example_exchanges_commands_and_telemetry_by_priority() {
    let test = "the_robot_example_exchanges_commands_and_telemetry_by_priority";
    if !util::rt_allowed(test, 80) {
        return;
    }
    let _l = util::rt_lock();
    // cargo builds the examples next to the test binaries: target/<profile>/examples/.
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/robot");
    assert!(example.exists(), "{} not built", example.display());
    let out = std::process::Command::new(&example).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "robot: moves=200 logs=200 control pool_allocations=Some(0) bulk pool_allocations=Some(0)",
        "zenoh real-time        lane=control    forwarded=200 delivered=200 full=0",
        "zenoh background       lane=bulk       forwarded=200 delivered=200 full=0",
        "operator: telemetry=200 ",
        "robot_exit=true",
        "operator: display pool_allocations=Some(0)",
        "zenoh data-high        lane=display    forwarded=200 delivered=200 full=0",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
}
