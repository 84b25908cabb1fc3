//! The `lfrt` binary: check, run, clean stops, clear errors.

mod util;

use std::process::Command;

/// The `lfrt` command, run from the repository root as the README runs it.
fn lfrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

fn tmp(name: &str, body: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn check_prints_the_plan_for_shipped_configs() {
    for cfg in ["configs/default.toml", "configs/udp-echo.toml"] {
        let out = lfrt().args(["check", cfg]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{cfg}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("lane") && text.contains("priority=") && text.contains("handler"),
            "{text}"
        );
    }
}

#[test]
fn bad_config_names_file_line_and_field_and_exits_2() {
    let p = tmp(
        "bad.toml",
        "[[lane]]\nname = \"a\"\npriority = 150\nthreads = 1\n",
    );
    let out = lfrt().arg("check").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains(&format!("{}:3:", p.display())), "{err}");
    assert!(err.contains("lane[0].priority"), "{err}");
    let p = tmp(
        "typo.toml",
        "[[lane]]\nname = \"a\"\npriority = 50\nwokers = 1\n",
    );
    let out = lfrt().arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains(":4:") && err.contains("wokers"), "{err}");
}

/// `lfrt check FILE`: (exit code, stdout, stderr).
fn check(file: &std::path::Path) -> (Option<i32>, String, String) {
    let out = lfrt().arg("check").arg(file).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn wrong_type_names_file_line_and_field() {
    let p = tmp(
        "type.toml",
        "[[lane]]\nname = \"a\"\npriority = 50\n\nthreads = \"two\"\n",
    );
    let (code, _, err) = check(&p);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("{}:5: invalid `lane[0].threads`: ", p.display())),
        "{err}"
    );
}

/// Hardening item 3: a wildcard and a specific address on one port (same protocol) passed
/// `check`, then `run` failed with a bare "Address already in use".
#[test]
fn check_refuses_a_wildcard_and_a_specific_address_on_one_port() {
    let port = free_port();
    let p = tmp(
        "wildcard.toml",
        &format!(
            "[[lane]]\nname = \"a\"\npriority = 50\n[[lane.handler]]\nkind = \"udp-echo\"\nbind = \"0.0.0.0:{port}\"\n\n\
             [[lane]]\nname = \"b\"\npriority = 40\n[[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:{port}\"\n"
        ),
    );
    let (code, _, err) = check(&p);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:13: invalid `lane[1].handler[0].bind`: ",
            p.display()
        )),
        "{err}"
    );
}

/// Hardening item 4: two handlers on port 0 (ephemeral) were refused as "bound by another
/// handler".
#[test]
fn check_accepts_several_ephemeral_ports() {
    let p = tmp(
        "ephemeral.toml",
        "[[lane]]\nname = \"a\"\npriority = 50\n\
         [[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:0\"\n\
         [[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:0\"\n",
    );
    let (code, out, err) = check(&p);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.matches("handler udp-echo").count(), 2, "{out}");
}

/// Hardening item 5: the plan shows what each lane preallocates and the total.
#[test]
fn plan_shows_preallocated_memory() {
    let (code, out, err) = check(std::path::Path::new("configs/default.toml"));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.matches("  memory ").count(),
        2,
        "one line per lane: {out}"
    );
    assert!(out.contains("preallocated in total"), "{out}");
    assert!(out.contains("MemTotal"), "{out}");
}

/// Hardening item 5: a plan larger than the machine's memory passed `check`.
#[test]
fn check_refuses_a_plan_larger_than_memory() {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // Each lane: 64 threads × 18 buffers of 64 MiB ≈ 72 GiB.
    let per_lane = 64 * 18 * (64u64 << 20);
    let lanes = (kib * 1024 / per_lane + 1) as usize;
    assert!(
        lanes < 99,
        "a machine with {kib} kB: the test cannot outgrow it"
    );
    let mut body = String::from("[runtime]\nrt = \"best-effort\"\n");
    for g in 0..lanes {
        body += &format!(
            "\n[[lane]]\nname = \"g{g}\"\npriority = {}\nthreads = 64\nbuffer_bytes = 67108864\n",
            99 - g
        );
    }
    let p = tmp("huge.toml", &body);
    let (code, _, err) = check(&p);
    assert_eq!(code, Some(2), "{err}");
    // The first lane is the largest (all are equal); its buffers are its largest share.
    assert!(
        err.contains(&format!(
            "{}:8: invalid `lane[0].buffer_bytes`: ",
            p.display()
        )),
        "{err}"
    );
    assert!(err.contains("MemTotal"), "{err}");
}

/// Hardening item 5: with `lock_memory = true`, a plan larger than RLIMIT_MEMLOCK passed
/// `check`. The child runs with a 1 MiB limit and without CAP_IPC_LOCK (which lifts it).
#[test]
fn check_refuses_lock_memory_beyond_rlimit_memlock() {
    let p = tmp(
        "memlock.toml",
        "[runtime]\nrt = \"required\"\nlock_memory = true\n[[lane]]\nname = \"a\"\npriority = 50\nthreads = 1\n",
    );
    let test = "check_refuses_lock_memory_beyond_rlimit_memlock";
    if !util::tools_installed(test, &["prlimit", "setpriv"]) {
        return;
    }
    let limited = |conf: &std::path::Path| {
        Command::new("prlimit")
            .args([
                "--memlock=1048576:1048576",
                "setpriv",
                "--inh-caps=-ipc_lock",
                "--bounding-set=-ipc_lock",
                "--",
            ])
            .arg(env!("CARGO_BIN_EXE_lfrt"))
            .arg("check")
            .arg(conf)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .unwrap()
    };
    let out = limited(&p);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}:4: invalid `lane[0].buffer_bytes`: ",
            p.display()
        )) && err.contains("RLIMIT_MEMLOCK"),
        "{err}"
    );
    // Without lock_memory the limit does not matter.
    let p = tmp(
        "no-memlock.toml",
        "[runtime]\nlock_memory = false\n[[lane]]\nname = \"a\"\npriority = 50\nthreads = 1\n",
    );
    let out = limited(&p);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("RLIMIT_MEMLOCK 1.0 MiB"));
}

/// Hardening item 5: 256 timers at 50 µs on one thread (5.12 M events/s) passed `check`
/// without a word.
#[test]
fn plan_warns_about_timer_rates_a_thread_cannot_serve() {
    let p = tmp(
        "rate.toml",
        "[[lane]]\nname = \"a\"\npriority = 50\nthreads = 1\n\
         [[lane.handler]]\nkind = \"timer\"\ninterval_us = 50\ncount = 256\n",
    );
    let (code, out, err) = check(&p);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("warning: the timers deliver 5120000 events/s"),
        "{out}"
    );
    let (_, out, _) = check(std::path::Path::new("configs/default.toml"));
    assert!(!out.contains("warning"), "{out}");
}

#[test]
fn run_for_a_duration_exits_0_with_metrics() {
    let _l = util::rt_lock();
    let out = lfrt()
        .args(["run", "configs/default.toml", "--duration", "500ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("control") && text.contains("bulk") && text.contains("pool_allocations="),
        "{text}"
    );
}

/// Issue "Hardening" item 2: `--duration=nan`, `inf` and `1e300` panicked (exit 101) after the
/// pool threads had started. Every command takes one duration syntax and refuses anything
/// else while parsing its arguments: exit 2, the flag and the value named, nothing started.
#[test]
fn bad_durations_are_refused_before_anything_starts() {
    for bad in ["nan", "inf", "1e300", "-1", "0.5", "10x", "366d"] {
        let flag = "--duration";
        for argv in [vec!["run", "configs/default.toml"], vec!["cyclic", "-q"]] {
            let out = lfrt()
                .args(&argv)
                .arg(format!("{flag}={bad}"))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{argv:?} {bad}: {err}");
            assert!(
                err.contains(flag) && err.contains(bad),
                "{argv:?} {bad}: {err}"
            );
            assert!(!err.contains("panicked"), "{err}");
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains("# ran"),
                "{argv:?} {bad}: started"
            );
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lfrt-loadgen"))
            .args(["--ports", "9", &format!("--duration={bad}")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "loadgen {bad}: {err}");
        assert!(err.contains(flag) && err.contains(bad), "{err}");
    }
}

#[test]
fn sigterm_and_sigint_stop_cleanly_with_status_0() {
    let _l = util::rt_lock();
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let child = lfrt()
            .args(["run", "configs/default.toml"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: kill with a valid pid and signal.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "signal {sig}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("stopped by signal"));
    }
}

#[test]
fn plot_draws_a_png_and_rejects_bad_input() {
    let json = tmp(
        "ct.json",
        r#"{"file_version": 1, "num_threads": 1, "thread": {"0": {"histogram": {"3": 10, "4": 200, "9": 2}, "cycles": 212, "min": 3, "avg": 4.1, "max": 9, "cpu": 0}}}"#,
    );
    let png = json.with_extension("png");
    let out = lfrt()
        .arg("plot")
        .arg(&json)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let bad = tmp("bad.json", r#"{"something": "else"}"#);
    let out = lfrt()
        .arg("plot")
        .arg(&bad)
        .arg("-o")
        .arg(bad.with_extension("png"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.json"));
}

/// configs/lfrt.service runs lfrt as an unprivileged user holding only CAP_SYS_NICE and
/// CAP_IPC_LOCK. Reproduce those rights with setpriv (no systemd needed) and check they are
/// enough for rt = "required" with lock_memory, and that each capability is needed: without
/// CAP_IPC_LOCK (and a small RLIMIT_MEMLOCK) the same run is refused, naming both.
#[test]
fn the_service_units_rights_are_exactly_enough() {
    let test = "the_service_units_rights_are_exactly_enough";
    if !util::rt_allowed(test, 80) {
        return;
    }
    if !util::tools_installed(test, &["prlimit", "setpriv"]) {
        return;
    }
    let _l = util::rt_lock();
    let conf = tmp(
        "service-rights.toml",
        "[runtime]\nrt = \"required\"\nlock_memory = true\n\n[[lane]]\nname = \"control\"\n\
         priority = 80\nthreads = 2\n\n[[lane.handler]]\nkind = \"timer\"\ninterval_us = 1000\n",
    );
    // World-readable for the unprivileged user.
    let _ = std::fs::set_permissions(&conf, std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let run_as_service = |caps: &str| {
        std::process::Command::new("prlimit")
            .args(["--memlock=65536", "--rtprio=0", "setpriv"])
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(format!("--inh-caps=-all,{caps}"))
            .arg(format!("--ambient-caps=-all,{caps}"))
            .arg(format!("--bounding-set=-all,{caps}"))
            .arg(env!("CARGO_BIN_EXE_lfrt"))
            .args(["run", "--duration", "300ms"])
            .arg(&conf)
            .current_dir("/")
            .output()
            .unwrap()
    };
    let out = run_as_service("+sys_nice,+ipc_lock");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("rt_applied=true") && text.contains("memory_locked=true"),
        "{text}"
    );
    let out = run_as_service("+sys_nice");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Refused before anything starts: validation (shared with `check`) already sees that
    // RLIMIT_MEMLOCK cannot hold the plan without CAP_IPC_LOCK.
    assert!(
        err.contains("RLIMIT_MEMLOCK") && err.contains("CAP_IPC_LOCK"),
        "{err}"
    );
}

/// Issue 15: `check` refuses a `[[band]]` naming a lane that does not exist, or a map that is
/// neither total nor has a default, at the band's line; a valid band appears in the plan.
#[test]
fn check_refuses_a_bad_band_and_prints_a_good_one() {
    let lanes = "[[lane]]\nname = \"control\"\npriority = 80\n\n\
                  [[lane]]\nname = \"bulk\"\npriority = 20\n\n";
    let p = tmp(
        "band-lane.toml",
        &format!(
            "{lanes}[[band]]\nbind = \"127.0.0.1:0\"\n\
             classify = {{ dscp = {{ 46 = \"control\", default = \"bluk\" }} }}\n"
        ),
    );
    let (code, out, err) = check(&p);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        err.contains(&format!("{}:11: invalid `band[0].classify`: ", p.display()))
            && err.contains("`bluk`"),
        "{err}"
    );
    let p = tmp(
        "band-total.toml",
        &format!(
            "{lanes}[[band]]\nbind = \"127.0.0.1:0\"\n\
             classify = {{ payload_byte = {{ offset = 0, map = {{ 1 = \"control\" }} }} }}\n"
        ),
    );
    let (code, _, err) = check(&p);
    assert_eq!(code, Some(2));
    assert!(
        err.contains(&format!("{}:11: invalid `band[0].classify`: ", p.display()))
            && err.contains("no `default`"),
        "{err}"
    );
    let p = tmp(
        "band-ok.toml",
        &format!(
            "{lanes}[[band]]\nbind = \"127.0.0.1:0\"\n\
             classify = {{ dscp = {{ 46 = \"control\", default = \"bulk\" }} }}\n"
        ),
    );
    let (code, out, err) = check(&p);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("band 127.0.0.1:0 dscp 46->control default->bulk (2 sockets"),
        "{out}"
    );
}

/// A deadline lane needs CAP_SYS_NICE, and RLIMIT_RTPRIO does not replace it (the kernel grants
/// SCHED_DEADLINE to no unprivileged thread): without the capability (whatever RLIMIT_RTPRIO
/// is; raising it needs CAP_SYS_RESOURCE, which this test may not have) `run` with
/// rt = "required" is refused, and the error names the capability and says that the rlimit
/// does not help.
#[test]
fn a_deadline_lane_without_cap_sys_nice_is_refused_naming_it() {
    let test = "a_deadline_lane_without_cap_sys_nice_is_refused_naming_it";
    let _l = util::rt_lock();
    if !util::rt_allowed(test, 10) {
        return;
    }
    if !util::tools_installed(test, &["setpriv"]) {
        return;
    }
    let p = tmp(
        "deadline-nocap.toml",
        "[runtime]\nrt = \"required\"\nlock_memory = false\n[[lane]]\nname = \"dl\"\n\
         policy = \"deadline\"\npriority = 10\nthreads = 1\n\
         deadline = { runtime_us = 100, deadline_us = 1000, period_us = 1000 }\n",
    );
    let out = Command::new("setpriv")
        .args(["--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"])
        .arg(env!("CARGO_BIN_EXE_lfrt"))
        .arg("run")
        .arg(&p)
        .args(["--duration", "1"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("SCHED_DEADLINE refused")
            && err.contains("CAP_SYS_NICE")
            && err.contains("RLIMIT_RTPRIO does not replace"),
        "{err}"
    );
}

/// The subcommands `lfrt --help` lists, read from its `Commands:` section.
fn subcommands() -> Vec<String> {
    let out = lfrt().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let list: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    for c in [
        "check",
        "run",
        "cyclic",
        "inversion",
        "plot",
        "explain",
        "doctor",
        "completions",
        "man",
    ] {
        assert!(list.iter().any(|l| l == c), "{c} not in --help: {help}");
    }
    list
}

/// Every long flag the command accepts: those `--help` of the command and of each subcommand
/// print.
fn long_flags(subcommands: &[String]) -> std::collections::BTreeSet<String> {
    let mut flags = std::collections::BTreeSet::new();
    let mut helps = vec![lfrt().arg("--help").output().unwrap()];
    for c in subcommands {
        helps.push(lfrt().args([c.as_str(), "--help"]).output().unwrap());
    }
    for out in helps {
        assert!(out.status.success());
        for word in String::from_utf8_lossy(&out.stdout)
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        {
            if word.len() > 2 && word.starts_with("--") {
                flags.insert(word.to_string());
            }
        }
    }
    flags
}

#[test]
fn man_writes_one_page_per_command_naming_its_own_flags() {
    let dir = std::env::temp_dir().join(format!("lfrt-cli-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = lfrt().args(["man", "--out"]).arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = |name: &str| {
        let p = dir.join(format!("{name}.1"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    // The top page lists every command; each command has its own page, titled by its name.
    let top = page("lfrt");
    assert!(
        top.starts_with(".ie") || top.contains(".TH lfrt 1"),
        "{top}"
    );
    let commands = subcommands();
    for c in &commands {
        assert!(
            top.contains(&format!("lfrt\\-{}", c.replace('-', "\\-"))),
            "{c} not in lfrt.1"
        );
        let text = page(&format!("lfrt-{c}"));
        assert!(
            text.contains(&format!(".TH lfrt-{c} 1")),
            "lfrt-{c}.1: {text}"
        );
        assert!(text.contains(".SH SYNOPSIS") && text.contains(".SH DESCRIPTION"));
    }
    // Each page documents its command's own options (roff escapes '-' as '\-').
    for (c, flag) in [
        ("check", "set"),
        ("run", "metrics"),
        ("run", "duration"),
        ("cyclic", "histogram"),
        ("cyclic", "interval"),
        ("inversion", "quick"),
        ("plot", "output"),
        ("plot", "around"),
        ("man", "out"),
    ] {
        assert!(
            page(&format!("lfrt-{c}")).contains(&format!("\\fB\\-\\-{flag}\\fR")),
            "lfrt-{c}.1 does not document --{flag}"
        );
    }
    assert!(!page("lfrt-check").contains("\\-\\-histogram"));
    // Nothing but the pages: no page for a command that does not exist.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<String> = commands.iter().map(|c| format!("lfrt-{c}.1")).collect();
    expected.push("lfrt.1".into());
    expected.sort();
    assert_eq!(files, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_name_real_commands_and_flags() {
    let commands = subcommands();
    let flags = long_flags(&commands);
    let out = lfrt().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let bash = String::from_utf8_lossy(&out.stdout).into_owned();
    // Syntactically valid bash, registered for `lfrt`.
    let check = Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(bash.contains("complete -F _lfrt"), "{bash}");
    for c in &commands {
        assert!(bash.contains(&format!("lfrt,{c})")), "{c} not completed");
    }
    // It offers the real flags, and only flags the command accepts.
    for f in [
        "--set",
        "--metrics",
        "--duration",
        "--histogram",
        "--quick",
        "--output",
    ] {
        assert!(bash.contains(f), "{f} missing from the bash completion");
    }
    let offered: std::collections::BTreeSet<String> = bash
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.len() > 2 && w.starts_with("--") && w[2..].starts_with(char::is_alphabetic))
        .map(str::to_string)
        .collect();
    let unknown: Vec<&String> = offered.difference(&flags).collect();
    assert!(
        unknown.is_empty(),
        "completion offers unknown flags {unknown:?}"
    );
    // The other shells too; a shell clap does not know is refused, naming the choices.
    for shell in ["zsh", "fish"] {
        let out = lfrt().args(["completions", shell]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("cyclic") && text.contains("histogram"));
    }
    let out = lfrt().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash"));
}

/// Issue #20 defect 6: deadline parameters the kernel refuses (`sched_setattr` EINVAL) passed
/// `check`, and `run` then failed. `check` now refuses each, naming file, line, field and the
/// kernel's bound: a runtime below 1024 ns, a period outside
/// `/proc/sys/kernel/sched_deadline_period_{min,max}_us`.
#[test]
fn check_refuses_deadline_parameters_the_kernel_refuses() {
    let read = |f: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/kernel/sched_deadline_period_{f}_us"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(if f == "min" { 100 } else { 1 << 22 })
    };
    let (min, max) = (read("min"), read("max"));
    let short = min.saturating_sub(1).max(1);
    for (name, params, says) in [
        (
            "dl-runtime.toml",
            "runtime_us = 1, deadline_us = 1000, period_us = 1000".to_string(),
            "1024 ns".to_string(),
        ),
        (
            "dl-short.toml",
            format!("runtime_us = 2, deadline_us = {short}, period_us = {short}"),
            format!("sched_deadline_period_min_us {min}"),
        ),
        (
            "dl-long.toml",
            format!(
                "runtime_us = 100, deadline_us = 1000, period_us = {}",
                max + 1
            ),
            format!("sched_deadline_period_max_us {max}"),
        ),
    ] {
        let p = tmp(
            name,
            &format!(
                "[[lane]]\nname = \"ctl\"\npolicy = \"deadline\"\npriority = 10\nthreads = 1\n\
                 deadline = {{ {params} }}\n"
            ),
        );
        let out = lfrt().arg("check").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("{}:6: invalid `lane[0].deadline`: ", p.display()))
                && err.contains(&says),
            "{name}: wanted {says:?} in: {err}"
        );
    }
}

/// Issue #20 defect 6: under `taskset` (a process affinity narrower than the online CPUs) the
/// kernel refuses SCHED_DEADLINE with EPERM, which was reported as a missing privilege. `check`
/// now says the affinity is narrowed.
#[test]
fn check_says_a_narrowed_affinity_refuses_a_deadline_lane() {
    let test = "check_says_a_narrowed_affinity_refuses_a_deadline_lane";
    if lfrt::os::available_cpus().len() < 2 {
        util::skip(test, "needs 2 CPUs to narrow the affinity to one");
        return;
    }
    if !util::tools_installed(test, &["taskset"]) {
        return;
    }
    let p = tmp(
        "dl-taskset.toml",
        "[[lane]]\nname = \"ctl\"\npolicy = \"deadline\"\npriority = 10\nthreads = 1\n\
         deadline = { runtime_us = 100, deadline_us = 1000, period_us = 1000 }\n",
    );
    let ok = lfrt().arg("check").arg(&p).output().unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let cpu = lfrt::os::available_cpus()[0].to_string();
    let out = Command::new("taskset")
        .args(["-c", &cpu])
        .arg(env!("CARGO_BIN_EXE_lfrt"))
        .arg("check")
        .arg(&p)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("affinity is narrowed") && !err.contains("CAP_SYS_NICE"),
        "{err}"
    );
}
