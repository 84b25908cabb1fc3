//! Overrides without editing TOML: `--set` over `LFRT_SET` over the file, `LFRT_CONFIG`, errors
//! that name the override, and the plan's provenance lines.

mod util;

use std::process::{Command, Output};

fn lfrt(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lfrt"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c.env_remove("LFRT_SET").env_remove("LFRT_CONFIG");
    c.args(args).envs(env.iter().copied()).output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The plan line of a lane.
fn lane_line(plan: &str, name: &str) -> String {
    plan.lines()
        .find(|l| l.starts_with(&format!("lane {name} ")))
        .unwrap_or_else(|| panic!("no lane {name}: {plan}"))
        .to_string()
}

const FILE: &str = "configs/default.toml";

#[test]
fn flag_beats_environment_beats_file() {
    let plan = stdout(&lfrt(&["check", FILE], &[]));
    assert!(
        lane_line(&plan, "control").contains("priority=80 "),
        "{plan}"
    );
    let env = [("LFRT_SET", "lane.control.priority=85;\nlane.bulk.cpus=[1]")];
    let plan = stdout(&lfrt(&["check", FILE], &env));
    assert!(
        lane_line(&plan, "control").contains("priority=85 "),
        "{plan}"
    );
    assert!(lane_line(&plan, "bulk").contains("cpus=[1] "), "{plan}");
    let plan = stdout(&lfrt(
        &["check", FILE, "--set", "lane.control.priority=90"],
        &env,
    ));
    assert!(
        lane_line(&plan, "control").contains("priority=90 "),
        "{plan}"
    );
    assert!(
        lane_line(&plan, "bulk").contains("cpus=[1] "),
        "env still applies: {plan}"
    );
    // LFRT_CONFIG names the file when no CONFIG is given.
    let plan = stdout(&lfrt(
        &["check", "--set", "lane.bulk.threads=1"],
        &[("LFRT_CONFIG", FILE)],
    ));
    assert!(lane_line(&plan, "bulk").contains("threads=1 "), "{plan}");
}

#[test]
fn plan_says_where_each_overridden_value_came_from() {
    let plan = stdout(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "lane.control.priority=90",
            "--set",
            "lane.bulk.cpus=[1]",
        ],
        &[("LFRT_SET", "lane.bulk.threads=1")],
    ));
    let line = |path: &str| {
        plan.lines()
            .find(|l| l.starts_with(&format!("override {path} ")))
            .unwrap_or_else(|| panic!("no override line for {path}: {plan}"))
            .to_string()
    };
    assert_eq!(
        line("lane[0].priority"),
        "override lane[0].priority from --set lane.control.priority=90 (replaces configs/default.toml:12)"
    );
    assert_eq!(
        line("lane[1].threads"),
        "override lane[1].threads from LFRT_SET lane.bulk.threads=1 (replaces configs/default.toml:29)"
    );
    assert!(
        line("lane[1].cpus").ends_with("(not in the file)"),
        "{plan}"
    );
    assert_eq!(plan.matches("override ").count(), 3, "{plan}");
}

#[test]
fn errors_name_the_override() {
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "lane.control.priority=900"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.control.priority=900`: "),
        "{e}"
    );
    // A value serde accepts but validation refuses.
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "lane.control.cpus=[4096]"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.control.cpus=[4096]`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", FILE],
        &[("LFRT_SET", "lane.control.threads=0")],
    ));
    assert!(
        e.starts_with("lfrt: invalid `LFRT_SET lane.control.threads=0`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", FILE],
        &[("LFRT_SET", "lane.nope.priority=1")],
    ));
    assert!(e.contains("no [[lane]] named `nope`"), "{e}");
    let e = stderr(&lfrt(&["check", FILE, "--set", "lane.bulk.wokers=1"], &[]));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.bulk.wokers=1`: unknown field"),
        "{e}"
    );
    let e = stderr(&lfrt(&["check", FILE, "--set", "priority"], &[]));
    assert!(e.contains("PATH=VALUE"), "{e}");
    // An error the override did not cause still names the file and line.
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "lane.control.priority=20"],
        &[],
    ));
    assert!(e.contains("configs/default.toml:"), "{e}");
    // A flag overridden by a later flag is not blamed: the last one wins.
    let plan = stdout(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "lane.control.priority=900",
            "--set",
            "lane.control.priority=70",
        ],
        &[],
    ));
    assert!(
        lane_line(&plan, "control").contains("priority=70 "),
        "{plan}"
    );
}

/// `lane.NAME.handler[I].KEY` reaches a `[[lane.handler]]`'s fields through the same
/// validation, errors and provenance as a lane's own fields.
#[test]
fn handler_fields_are_overridden_too() {
    let plan = stdout(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "lane.bulk.handler[0].bind=127.0.0.1:0",
            "--set",
            "lane.bulk.handler[0].work_us=7",
        ],
        &[("LFRT_SET", "lane.control.handler[0].interval_us=2000")],
    ));
    assert!(
        plan.contains("  handler udp-echo bind=127.0.0.1:0 work_us=7\n"),
        "{plan}"
    );
    assert!(plan.contains("  handler timer interval_us=2000 "), "{plan}");
    let line = |path: &str| {
        plan.lines()
            .find(|l| l.starts_with(&format!("override {path} ")))
            .unwrap_or_else(|| panic!("no override line for {path}: {plan}"))
            .to_string()
    };
    assert_eq!(
        line("lane[1].handler[0].bind"),
        "override lane[1].handler[0].bind from --set lane.bulk.handler[0].bind=127.0.0.1:0 (replaces configs/default.toml:33)"
    );
    assert_eq!(
        line("lane[0].handler[0].interval_us"),
        "override lane[0].handler[0].interval_us from LFRT_SET lane.control.handler[0].interval_us=2000 (replaces configs/default.toml:23)"
    );
    assert!(
        line("lane[1].handler[0].work_us").contains("(replaces configs/default.toml:34)"),
        "{plan}"
    );

    // Validation refuses it (50..=10000000 µs), naming the override.
    let e = stderr(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "lane.control.handler[0].interval_us=1",
        ],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.control.handler[0].interval_us=1`: 1: must be"),
        "{e}"
    );
    // serde refuses it: not an address; a field of another kind of handler.
    let e = stderr(&lfrt(
        &["check", FILE],
        &[("LFRT_SET", "lane.bulk.handler[0].bind=nowhere")],
    ));
    assert!(
        e.starts_with("lfrt: invalid `LFRT_SET lane.bulk.handler[0].bind=nowhere`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "lane.bulk.handler[0].interval_us=100",
        ],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.bulk.handler[0].interval_us=100`: "),
        "{e}"
    );
    // Only handlers the file has, by a well-formed index.
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "lane.bulk.handler[1].work_us=1"],
        &[],
    ));
    assert!(
        e.contains("lane `bulk` has 1 [[lane.handler]] table(s); handler[1]"),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "lane.bulk.handler[x].work_us=1"],
        &[],
    ));
    assert!(e.contains("expected handler[INDEX]"), "{e}");
}

/// `--metrics ADDR` is the override `runtime.metrics=ADDR`: refused with the flag named, and
/// shown in the plan as coming from the flag.
#[test]
fn metrics_flag_is_an_override() {
    let e = stderr(&lfrt(&["run", FILE, "--metrics", "0.0.0.0:9464"], &[]));
    assert!(
        e.starts_with("lfrt: invalid `--metrics 0.0.0.0:9464`: 0.0.0.0:9464: give an explicit"),
        "{e}"
    );
    // A free port (the kernel's pick, released again), and the bulk lane on an ephemeral port
    // so that nothing else on the machine can be in the way. Starts the runtime for a moment:
    // lanes at SCHED_FIFO where permitted, under the RT test lock.
    let _lock = util::rt_lock();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let out = stdout(&lfrt(
        &[
            "run",
            FILE,
            "-D",
            "300ms",
            "--metrics",
            &addr,
            "--set",
            "lane.bulk.handler[0].bind=127.0.0.1:0",
        ],
        &[],
    ));
    assert!(
        out.contains(&format!(
            "override runtime.metrics from --metrics {addr} (not in the file)\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("# metrics: http://{addr}/metrics")),
        "{out}"
    );
}

/// `[runtime] metrics` in a file: the command's own key, which lfrt's loader does not know. The
/// command takes it out, accepts a good address (check, doctor), and refuses, at the key's line
/// or naming the override, what `run` could not serve.
#[test]
fn the_metrics_key_is_the_commands_and_checked_as_run_would_fail_on_it() {
    let file = tmp_file("metrics.toml", "");
    let f = file.to_str().unwrap();
    let free_tcp = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Line 2 is the key; the lane has a tcp-echo handler (`tcp`, an address) and a udp-echo
    // handler on 127.0.0.1:`udp`.
    let write = |metrics: &str, tcp: &str, udp: u16| {
        let text = format!(
            "[runtime]\nmetrics = {metrics}\n\n[[lane]]\nname = \"a\"\npolicy = \"other\"\n\
             priority = 0\n[[lane.handler]]\nkind = \"tcp-echo\"\nbind = \"{tcp}\"\n\
             [[lane.handler]]\nkind = \"udp-echo\"\nbind = \"127.0.0.1:{udp}\"\n"
        );
        std::fs::write(&file, text).unwrap();
    };
    let tcp = format!("127.0.0.1:{}", free_tcp());

    // A good address; a udp-echo on its port does not collide with a TCP listener.
    let port = free_tcp();
    write(&format!("\"127.0.0.1:{port}\""), &tcp, port);
    stdout(&lfrt(&["check", f], &[]));
    let doctor = lfrt(&["doctor", f], &[]);
    assert_ne!(
        doctor.status.code(),
        Some(2),
        "doctor reads the file: {doctor:?}"
    );

    let refused = |metrics: &str, tcp: &str| {
        write(metrics, tcp, 9);
        stderr(&lfrt(&["check", f], &[]))
    };
    let at = format!("lfrt: {f}:2: invalid `runtime.metrics`: ");
    for (metrics, why) in [
        (
            r#""localhost""#.to_string(),
            r#"`"localhost"` is not an address"#.to_string(),
        ),
        ("9464".to_string(), "`9464` is not an address".to_string()),
        (
            r#""0.0.0.0:9464""#.to_string(),
            "0.0.0.0:9464: give an explicit".to_string(),
        ),
        (
            r#""127.0.0.1:0""#.to_string(),
            "127.0.0.1:0: give an explicit".to_string(),
        ),
        (
            format!("\"{tcp}\""),
            format!("{tcp} collides with {tcp} of `lane[0].handler[0].bind`"),
        ),
    ] {
        let e = refused(&metrics, &tcp);
        assert!(e.starts_with(&format!("{at}{why}")), "{metrics}: {e}");
    }
    // A wildcard tcp-echo on the port collides as well: the kernel decides, not a comparison.
    let port = free_tcp();
    let e = refused(&format!("\"127.0.0.1:{port}\""), &format!("0.0.0.0:{port}"));
    assert!(e.contains(&format!("collides with 0.0.0.0:{port}")), "{e}");
    // In use now.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let e = refused(&format!("\"{taken}\""), &tcp);
    assert!(e.starts_with(&format!("{at}cannot bind {taken}")), "{e}");
    // Overridden: the override is blamed.
    let e = stderr(&lfrt(
        &["check", f, "--set", "runtime.metrics=[::]:9464"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set runtime.metrics=[::]:9464`: [::]:9464: give"),
        "{e}"
    );
    std::fs::remove_file(&file).unwrap();
}

/// A file `name` of this test process's own directory, holding `text`.
fn tmp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lfrt-overrides-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A file with a `[[band]]` and a bound lane, written for one test.
fn band_file(name: &str) -> std::path::PathBuf {
    tmp_file(
        name,
        "[[lane]]\nname = \"control\"\npriority = 80\n\n\
         [[lane]]\nname = \"bulk\"\npriority = 20\n\n\
         [[lane]]\nname = \"db\"\npriority = 30\nthreads = 2\n\
         [lane.bound]\nconnect = \"127.0.0.1:7100\"\nmax_waiters = 8\n\n\
         [[band]]\nbind = \"127.0.0.1:0\"\n\
         classify = { dscp = { 46 = \"control\", default = \"bulk\" } }\n\
         work_us = 5\n",
    )
}

/// `band[I].KEY` reaches a `[[band]]` (bands have no names: by index, from 0) and
/// `lane.NAME.bound.KEY` a `[lane.bound]`, through the same validation, errors and
/// provenance as every other override.
#[test]
fn bands_and_bound_tables_are_overridden_too() {
    let file = band_file("bands.toml");
    let f = file.to_str().unwrap();
    let plan = stdout(&lfrt(
        &[
            "check",
            f,
            "--set",
            "band[0].work_us=9",
            "--set",
            "band[0].classify={ dscp = { 10 = \"control\", default = \"bulk\" } }",
            "--set",
            "lane.db.bound.max_waiters=16",
        ],
        &[],
    ));
    let band = plan
        .lines()
        .find(|l| l.starts_with("band 127.0.0.1:0 "))
        .unwrap_or_else(|| panic!("no band line: {plan}"));
    assert!(band.contains("dscp 10->control default->bulk"), "{band}");
    assert!(band.ends_with("work_us=9"), "{band}");
    let line = |path: &str| {
        plan.lines()
            .find(|l| l.starts_with(&format!("override {path} ")))
            .unwrap_or_else(|| panic!("no override line for {path}: {plan}"))
            .to_string()
    };
    assert_eq!(
        line("band[0].work_us"),
        format!("override band[0].work_us from --set band[0].work_us=9 (replaces {f}:20)")
    );
    assert!(
        line("band[0].classify").ends_with(&format!("(replaces {f}:19)")),
        "{plan}"
    );
    assert_eq!(
        line("lane[2].bound.max_waiters"),
        format!(
            "override lane[2].bound.max_waiters from --set lane.db.bound.max_waiters=16 \
             (replaces {f}:15)"
        )
    );

    // Refused values name the override: validation (a DSCP above 63), serde (not an address).
    let e = stderr(&lfrt(
        &[
            "check",
            f,
            "--set",
            "band[0].classify={ dscp = { 64 = \"control\", default = \"bulk\" } }",
        ],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set band[0].classify=") && e.contains("`64`"),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", f],
        &[("LFRT_SET", "band[0].bind=nowhere")],
    ));
    assert!(
        e.starts_with("lfrt: invalid `LFRT_SET band[0].bind=nowhere`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", f, "--set", "lane.db.bound.max_waiters=0"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set lane.db.bound.max_waiters=0`: "),
        "{e}"
    );
    // Only bands and bound tables the file has, by a well-formed index.
    let e = stderr(&lfrt(&["check", f, "--set", "band[1].work_us=1"], &[]));
    assert!(
        e.contains("the file has 1 [[band]] table(s); band[1] is not one of them"),
        "{e}"
    );
    let e = stderr(&lfrt(&["check", f, "--set", "band[x].work_us=1"], &[]));
    assert!(e.contains("expected band[INDEX]"), "{e}");
    let e = stderr(&lfrt(
        &["check", f, "--set", "lane.bulk.bound.max_waiters=4"],
        &[],
    ));
    assert!(e.contains("lane `bulk` has no [lane.bound] table"), "{e}");
    // An error the override did not cause names the file and its line there, not the line of
    // the edited document (the band's `work_us` is line 20 of the file).
    let e = stderr(&lfrt(
        &[
            "check",
            f,
            "--set",
            "lane.control.priority=81",
            "--set",
            "band[0].work_us=9",
        ],
        &[("LFRT_SET", "band[0].hanlder=\"udp-echo\"")],
    ));
    assert!(
        e.starts_with("lfrt: invalid `LFRT_SET band[0].hanlder=\"udp-echo\"`: unknown field"),
        "{e}"
    );
    let bad = band_file("bad.toml");
    let src = std::fs::read_to_string(&bad)
        .unwrap()
        .replace("work_us = 5", "work_us = 500000");
    std::fs::write(&bad, src).unwrap();
    let e = stderr(&lfrt(
        &[
            "check",
            bad.to_str().unwrap(),
            "--set",
            "lane.control.priority=81",
        ],
        &[],
    ));
    assert!(
        e.starts_with(&format!(
            "lfrt: {}:20: invalid `band[0].work_us`: ",
            bad.display()
        )),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}

/// A syntax error in a file read with overrides is reported as lfrt's loader reports it without
/// them: the same line, field and message.
#[test]
fn a_syntax_error_reads_the_same_with_and_without_overrides() {
    let file = tmp_file("syntax.toml", "[[lane]]\nname = \"a\"\npriority = = 5\n");
    let f = file.to_str().unwrap();
    let plain = stderr(&lfrt(&["check", f], &[]));
    let overridden = stderr(&lfrt(&["check", f, "--set", "lane.a.threads=2"], &[]));
    assert!(plain.starts_with(&format!("lfrt: {f}:3: ")), "{plain}");
    assert_eq!(plain, overridden);
    std::fs::remove_file(&file).unwrap();
}
