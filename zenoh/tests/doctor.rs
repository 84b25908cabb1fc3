//! `lfrt-zenoh doctor CONFIG` reports Zenoh's threads and the link each priority takes for a
//! configuration, refuses a `ZENOH_RUNTIME` that disagrees with it, and with `--pid` reports a
//! running bridge's threads and connections.

use std::process::Command;
use std::time::Duration;

fn run(args: &[&str], env: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lfrt-zenoh"));
    cmd.args(args).env_remove("ZENOH_RUNTIME");
    if let Some(e) = env {
        cmd.env("ZENOH_RUNTIME", e);
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn doctor(env: Option<&str>) -> (i32, String) {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/configs/robot.toml");
    run(&["doctor", file], env)
}

#[test]
fn doctor_reports_zenoh_threads_and_refuses_a_disagreeing_environment() {
    let (code, text) = doctor(None);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("ok   zenoh-threads rx 2, tx 1, app 1, acc 1, net 1 worker threads (6 in all), at most 2 blocking-task threads per runtime"),
        "{text}"
    );
    assert!(
        text.contains(
            "ok   zenoh-links   max_links 2 per peer; real-time → tcp/127.0.0.1:17447?prio=1-3;"
        ) && text.contains(
            "background → tcp/127.0.0.1:17448?prio=4-7; bulk links' socket buffers 65536 bytes"
        ),
        "{text}"
    );
    assert!(
        text.contains("warn zenoh-policy") && text.contains("SCHED_OTHER"),
        "{text}"
    );
    assert!(
        text.contains("ok   zenoh-session peer, listen [\"tcp/127.0.0.1:17447?prio=1-3\", \"tcp/127.0.0.1:17448?prio=4-7\"]"),
        "{text}"
    );
    let (code, text) = doctor(Some("(rx: (worker_threads: 8))"));
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("fail zenoh-env"), "{text}");
}

/// One link for every priority is a named warning; `--pid` lists the live Zenoh threads of a
/// process with their policy and the connections on each endpoint; a bad pid is refused.
#[test]
fn doctor_names_a_shared_link_and_reads_a_running_bridge() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = std::env::temp_dir().join(format!("lfrt-zenoh-doctor-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        format!(
            "[threads]\nrx = 1\nmax_blocking = 2\n[session]\nlisten = [\"tcp/127.0.0.1:{port}\"]\n"
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (code, text) = run(&["doctor", path], None);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("warn zenoh-links   real-time and background share one link"),
        "{text}"
    );
    let cfg = lfrt_zenoh::Config::load(&file).unwrap();
    let bridge = lfrt_zenoh::Bridge::open(&cfg).unwrap();
    let peer = lfrt_zenoh::Bridge::open(
        &lfrt_zenoh::Config::parse(&format!(
            "[threads]\nrx = 1\nmax_blocking = 2\n[session]\nconnect = [\"tcp/127.0.0.1:{port}\"]\n"
        ))
        .unwrap(),
    )
    .unwrap();
    peer.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    bridge.wait_for_peers(1, Duration::from_secs(10)).unwrap();
    let pid = std::process::id().to_string();
    let (code, text) = run(&["doctor", path, "--pid", &pid], None);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("ok   zenoh-live    rx-0 (tid "), "{text}");
    assert!(text.contains("): other 0"), "{text}");
    assert!(
        text.contains(&format!(
            "ok   zenoh-live    listen tcp/127.0.0.1:{port} (any priority): 1 connection(s)"
        )),
        "{text}"
    );
    let (code, text) = run(&["doctor", path, "--pid", "0"], None);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("--pid: `0` is not a running process"),
        "{text}"
    );
    peer.close().unwrap();
    bridge.close().unwrap();
    let _ = std::fs::remove_file(&file);
}
