//! `lfrt doctor`: findings, fixes and exit status with and without real-time privilege, with
//! too little lockable memory, with CPUs the process cannot use, and with bad input.

mod util;

use std::process::{Command, Output};

/// The `lfrt` command, run from the repository root as the README runs it.
fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

fn tmp(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// Whether the effective capability set holds `bit` (CAP_SYS_NICE 23, CAP_IPC_LOCK 14).
fn has_cap(bit: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// `lfrt doctor ARGS` under `prlimit` (the given limits) and, if this process holds the
/// capability, `setpriv` dropping it (as runtime.rs
/// `required_rt_without_privilege_names_what_is_missing` does); `None` after [`util::skip`]
/// if util-linux is missing.
fn doctor_without(test: &str, cap: &str, limits: &[&str], args: &[&str]) -> Option<Output> {
    if !have("prlimit") || !have("setpriv") {
        util::skip(test, "prlimit/setpriv (util-linux) not installed");
        return None;
    }
    let mut c = Command::new("prlimit");
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(limits);
    let bit = match cap {
        "sys_nice" => 23,
        "ipc_lock" => 14,
        other => panic!("unknown capability {other}"),
    };
    if has_cap(bit) {
        c.args([
            "setpriv",
            &format!("--inh-caps=-{cap}"),
            &format!("--bounding-set=-{cap}"),
            "--",
        ]);
    } else {
        c.arg("--");
    }
    c.arg(env!("CARGO_BIN_EXE_lfrt")).arg("doctor").args(args);
    Some(c.output().unwrap())
}

/// Checks the shape of a report and returns its stdout: every line is a finding
/// (`ok`/`warn`/`fail`, topic, text) or the `fix:` of the finding above it; every `warn` and
/// `fail` finding but the verdict has a fix; the last line is the verdict, and its status
/// agrees with the exit status.
fn report(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}\nstderr: {err}");
    for (i, l) in lines.iter().enumerate() {
        let status = &l[..5.min(l.len())];
        assert!(
            ["ok   ", "warn ", "fail ", "     "].contains(&status),
            "line {i}: {l}\n{text}"
        );
        if status == "     " {
            assert!(l.starts_with("     fix: "), "line {i}: {l}\n{text}");
            assert!(!lines[i - 1].starts_with("ok"), "a fix under an ok: {text}");
        } else if status != "ok   " && !l.contains(" verdict ") {
            assert!(
                lines
                    .get(i + 1)
                    .is_some_and(|n| n.starts_with("     fix: ")),
                "no fix under line {i}: {l}\n{text}"
            );
        }
    }
    let verdict = lines.last().unwrap();
    let code = out.status.code();
    match code {
        Some(0) => assert!(verdict.starts_with("ok   verdict "), "{text}"),
        Some(1) => assert!(verdict.starts_with("fail verdict "), "{text}"),
        Some(3) => assert!(
            verdict.starts_with("warn verdict ") && verdict.contains("not as intended"),
            "{text}"
        ),
        other => panic!("exit status {other:?}\n{text}\nstderr: {err}"),
    }
    text
}

/// The finding on `topic`, with its fix line if any.
fn finding<'a>(text: &'a str, topic: &str) -> (&'a str, Option<&'a str>) {
    let lines: Vec<&str> = text.lines().collect();
    let i = lines
        .iter()
        .position(|l| {
            l.get(5..)
                .is_some_and(|r| r.starts_with(&format!("{topic:<11} ")))
        })
        .unwrap_or_else(|| panic!("no `{topic}` finding:\n{text}"));
    let fix = lines.get(i + 1).and_then(|l| l.strip_prefix("     fix: "));
    (lines[i], fix)
}

#[test]
fn with_rt_privilege_default_config_is_ready_and_cap_sys_nice_ok() {
    if !lfrt::os::RtPrivilege::probe().cap_sys_nice {
        util::skip(
            "with_rt_privilege_default_config_is_ready_and_cap_sys_nice_ok",
            "CAP_SYS_NICE missing; runs for real in CI as root",
        );
        return;
    }
    // configs/default.toml binds 127.0.0.1:7100 at validation: keep clear of `lfrt run` tests.
    let _l = util::rt_lock();
    let out = lfrt()
        .args(["doctor", "configs/default.toml"])
        .output()
        .unwrap();
    let text = report(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let (line, _) = finding(&text, "sys_nice");
    assert!(
        line.starts_with("ok ") && line.contains("CAP_SYS_NICE"),
        "{text}"
    );
    let (line, _) = finding(&text, "rt");
    assert!(
        line.starts_with("ok ") && line.contains("control") && line.contains("SCHED_FIFO 80"),
        "{text}"
    );
    // Without a configuration, the need is SCHED_FIFO at some priority.
    let out = lfrt().arg("doctor").output().unwrap();
    let text = report(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(finding(&text, "rt").0.starts_with("ok "), "{text}");
}

/// Issue #20 defect 7: a flattened plan is not "as intended": the verdict says so and the exit
/// status is 3 (neither 0, as intended, nor 1, cannot run).
#[test]
fn without_rt_privilege_best_effort_warns_that_lanes_flatten_and_exits_3() {
    let _l = util::rt_lock();
    let Some(out) = doctor_without(
        "without_rt_privilege_best_effort_warns_that_lanes_flatten_and_exits_3",
        "sys_nice",
        &["--rtprio=0:0"],
        &["configs/default.toml"],
    ) else {
        return;
    };
    let text = report(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let (verdict, _) = finding(&text, "verdict");
    assert!(
        verdict.starts_with("warn ")
            && verdict.contains("runs here, but not as intended")
            && verdict.contains("flattened")
            && !verdict.contains("can run as intended"),
        "{text}"
    );
    let (line, fix) = finding(&text, "rt");
    assert!(
        line.starts_with("warn ") && line.contains("flattened"),
        "{text}"
    );
    let fix = fix.unwrap();
    assert!(
        fix.contains("CAP_SYS_NICE") && fix.contains("RLIMIT_RTPRIO to at least 80"),
        "{text}"
    );
    assert!(finding(&text, "sys_nice").0.starts_with("warn "), "{text}");
    assert!(finding(&text, "rtprio").0.starts_with("warn "), "{text}");
}

#[test]
fn without_rt_privilege_required_rt_fails_and_exits_1() {
    let conf = tmp(
        "required.toml",
        "[runtime]\nrt = \"required\"\n[[lane]]\nname = \"g\"\npriority = 50\nthreads = 1\n",
    );
    let test = "without_rt_privilege_required_rt_fails_and_exits_1";
    let Some(out) = doctor_without(
        test,
        "sys_nice",
        &["--rtprio=0:0"],
        &[conf.to_str().unwrap()],
    ) else {
        return;
    };
    let text = report(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let (line, fix) = finding(&text, "rt");
    assert!(
        line.starts_with("fail ") && line.contains("g (SCHED_FIFO 50") && line.contains("required"),
        "{text}"
    );
    let fix = fix.unwrap();
    assert!(
        fix.contains("CAP_SYS_NICE") && fix.contains("RLIMIT_RTPRIO to at least 50"),
        "{text}"
    );
    assert!(finding(&text, "verdict").0.contains(": rt"), "{text}");
    // Without a configuration the default need, SCHED_FIFO at some priority, fails the same way.
    let Some(out) = doctor_without(test, "sys_nice", &["--rtprio=0:0"], &[]) else {
        return;
    };
    let text = report(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let (line, fix) = finding(&text, "rt");
    assert!(
        line.starts_with("fail ") && line.contains("SCHED_FIFO refused"),
        "{text}"
    );
    assert!(fix.unwrap().contains("RLIMIT_RTPRIO"), "{text}");
}

#[test]
fn memlock_below_the_pool_to_lock_is_refused_or_warned() {
    // 4 threads × 18 × 4 MiB buffers: far above a 64 KiB RLIMIT_MEMLOCK. rt = "required", since
    // with "best-effort" lfrt runs with unlocked memory instead (a warning).
    let body = "[runtime]\nrt = \"required\"\nlock_memory = true\n[[lane]]\nname = \"big\"\npriority = 30\nthreads = 4\nbuffer_bytes = 4194304\n";
    let conf = tmp("big.toml", body);
    let test = "memlock_below_the_pool_to_lock_is_refused_or_warned";
    let Some(out) = doctor_without(
        test,
        "ipc_lock",
        &["--memlock=65536:65536"],
        &[conf.to_str().unwrap()],
    ) else {
        return;
    };
    // With rt = "required" the plan cannot run as configured, and configuration validation
    // (shared with `check` and `run`) already refuses it: exit 2 with file:line:field and the
    // fix, before any finding is printed.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid `lane[0].buffer_bytes`")
            && err.contains("RLIMIT_MEMLOCK")
            && err.contains("CAP_IPC_LOCK"),
        "{err}"
    );
    // Best effort: mlockall fails and the runtime runs unlocked, which is a warning.
    let conf = tmp("big-be.toml", &body.replace("required", "best-effort"));
    let Some(out) = doctor_without(
        test,
        "ipc_lock",
        &["--memlock=65536:65536"],
        &[conf.to_str().unwrap()],
    ) else {
        return;
    };
    let text = report(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let (line, _) = finding(&text, "lock_memory");
    assert!(
        line.starts_with("warn ") && line.contains("unlocked"),
        "{text}"
    );
}

#[test]
fn a_cpu_that_does_not_exist_is_refused_naming_it_with_exit_2() {
    // The loader already checks `cpus` against the online CPUs, so this is a bad configuration
    // (exit 2 with file:line: field), as for `lfrt check` and `lfrt run`.
    let conf = tmp(
        "cpu999.toml",
        "[[lane]]\nname = \"g\"\npriority = 50\nthreads = 1\ncpus = [999]\n",
    );
    let out = lfrt().arg("doctor").arg(&conf).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("{}:5:", conf.display())), "{err}");
    assert!(
        err.contains("lane[0].cpus") && err.contains("CPU 999"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_cpu_outside_the_affinity_is_named() {
    let test = "a_cpu_outside_the_affinity_is_named";
    if !util::two_cpus(test) {
        return;
    }
    if !have("taskset") {
        util::skip(test, "taskset (util-linux) not installed");
        return;
    }
    let cpus = lfrt::os::available_cpus();
    let (home, other) = (cpus[0], cpus[1]);
    let conf = tmp(
        "pinned.toml",
        &format!("[[lane]]\nname = \"g\"\npriority = 50\nthreads = 1\ncpus = [{other}]\n"),
    );
    let out = Command::new("taskset")
        .args([
            "-c",
            &home.to_string(),
            env!("CARGO_BIN_EXE_lfrt"),
            "doctor",
        ])
        .arg(&conf)
        .output()
        .unwrap();
    let text = report(&out);
    let (line, fix) = finding(&text, "cpus");
    assert!(
        line.starts_with("warn ") && line.contains(&format!("CPU {other} is outside")),
        "{text}"
    );
    assert!(fix.unwrap().contains("taskset"), "{text}");
}

#[test]
fn bad_config_path_and_bad_arguments_exit_2() {
    let out = lfrt()
        .args(["doctor", "configs/no-such-file.toml"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("configs/no-such-file.toml") && err.contains("cannot read"),
        "{err}"
    );
    let out = lfrt()
        .args(["doctor", "configs/default.toml", "extra"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
