//! Overrides without editing TOML: `--set` over `LFRT_SET` over the file, `LFRT_CONFIG`, errors
//! that name the override, and the plan's provenance lines.

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

/// The plan line of a group.
fn group_line(plan: &str, name: &str) -> String {
    plan.lines()
        .find(|l| l.starts_with(&format!("group {name} ")))
        .unwrap_or_else(|| panic!("no group {name}: {plan}"))
        .to_string()
}

const FILE: &str = "configs/default.toml";

#[test]
fn flag_beats_environment_beats_file() {
    let plan = stdout(&lfrt(&["check", FILE], &[]));
    assert!(
        group_line(&plan, "control").contains("priority=80 "),
        "{plan}"
    );
    let env = [(
        "LFRT_SET",
        "group.control.priority=85;\ngroup.bulk.cpus=[1]",
    )];
    let plan = stdout(&lfrt(&["check", FILE], &env));
    assert!(
        group_line(&plan, "control").contains("priority=85 "),
        "{plan}"
    );
    assert!(group_line(&plan, "bulk").contains("cpus=[1] "), "{plan}");
    let plan = stdout(&lfrt(
        &["check", FILE, "--set", "group.control.priority=90"],
        &env,
    ));
    assert!(
        group_line(&plan, "control").contains("priority=90 "),
        "{plan}"
    );
    assert!(
        group_line(&plan, "bulk").contains("cpus=[1] "),
        "env still applies: {plan}"
    );
    // LFRT_CONFIG names the file when no CONFIG is given.
    let plan = stdout(&lfrt(
        &["check", "--set", "group.bulk.threads=1"],
        &[("LFRT_CONFIG", FILE)],
    ));
    assert!(group_line(&plan, "bulk").contains("threads=1 "), "{plan}");
}

#[test]
fn plan_says_where_each_overridden_value_came_from() {
    let plan = stdout(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "group.control.priority=90",
            "--set",
            "group.bulk.cpus=[1]",
        ],
        &[("LFRT_SET", "group.bulk.threads=1")],
    ));
    let line = |path: &str| {
        plan.lines()
            .find(|l| l.starts_with(&format!("override {path} ")))
            .unwrap_or_else(|| panic!("no override line for {path}: {plan}"))
            .to_string()
    };
    assert_eq!(
        line("group[0].priority"),
        "override group[0].priority from --set group.control.priority=90 (replaces configs/default.toml:12)"
    );
    assert_eq!(
        line("group[1].threads"),
        "override group[1].threads from LFRT_SET group.bulk.threads=1 (replaces configs/default.toml:29)"
    );
    assert!(
        line("group[1].cpus").ends_with("(not in the file)"),
        "{plan}"
    );
    assert_eq!(plan.matches("override ").count(), 3, "{plan}");
}

#[test]
fn errors_name_the_override() {
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "group.control.priority=900"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set group.control.priority=900`: "),
        "{e}"
    );
    // A value serde accepts but validation refuses.
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "group.control.cpus=[4096]"],
        &[],
    ));
    assert!(
        e.starts_with("lfrt: invalid `--set group.control.cpus=[4096]`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", FILE],
        &[("LFRT_SET", "group.control.threads=0")],
    ));
    assert!(
        e.starts_with("lfrt: invalid `LFRT_SET group.control.threads=0`: "),
        "{e}"
    );
    let e = stderr(&lfrt(
        &["check", FILE],
        &[("LFRT_SET", "group.nope.priority=1")],
    ));
    assert!(e.contains("no [[group]] named `nope`"), "{e}");
    let e = stderr(&lfrt(&["check", FILE, "--set", "group.bulk.wokers=1"], &[]));
    assert!(
        e.starts_with("lfrt: invalid `--set group.bulk.wokers=1`: unknown field"),
        "{e}"
    );
    let e = stderr(&lfrt(&["check", FILE, "--set", "priority"], &[]));
    assert!(e.contains("PATH=VALUE"), "{e}");
    // An error the override did not cause still names the file and line.
    let e = stderr(&lfrt(
        &["check", FILE, "--set", "group.control.priority=20"],
        &[],
    ));
    assert!(e.contains("configs/default.toml:"), "{e}");
    // A flag overridden by a later flag is not blamed: the last one wins.
    let plan = stdout(&lfrt(
        &[
            "check",
            FILE,
            "--set",
            "group.control.priority=900",
            "--set",
            "group.control.priority=70",
        ],
        &[],
    ));
    assert!(
        group_line(&plan, "control").contains("priority=70 "),
        "{plan}"
    );
}
