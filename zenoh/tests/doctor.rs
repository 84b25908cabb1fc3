//! `lfrt-zenoh doctor CONFIG` reports Zenoh's threads for a configuration, and refuses a
//! `ZENOH_RUNTIME` that disagrees with it.

use std::process::Command;

fn doctor(env: Option<&str>) -> (i32, String) {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/robot.toml");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lfrt-zenoh"));
    cmd.args(["doctor", file]).env_remove("ZENOH_RUNTIME");
    if let Some(e) = env {
        cmd.env("ZENOH_RUNTIME", e);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn doctor_reports_zenoh_threads_and_refuses_a_disagreeing_environment() {
    let (code, text) = doctor(None);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("ok   zenoh-threads rx 1, tx 1, app 1, acc 1, net 1 worker threads (5 in all), at most 2 blocking-task threads per runtime"),
        "{text}"
    );
    assert!(
        text.contains("warn zenoh-policy") && text.contains("SCHED_OTHER"),
        "{text}"
    );
    assert!(
        text.contains("ok   zenoh-session peer, listen [\"tcp/127.0.0.1:17447\"]"),
        "{text}"
    );
    let (code, text) = doctor(Some("(rx: (worker_threads: 8))"));
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("fail zenoh-env"), "{text}");
}
