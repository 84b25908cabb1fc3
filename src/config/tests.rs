use super::check::{addresses_collide, DeadlineKernel, Machine};
use super::*;
use crate::engine::follower_queue::Promotion;
use crate::observe::telemetry;
use crate::sys::sched;

fn cfg(lanes: Vec<LaneConfig>) -> RuntimeConfig {
    RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes,
        bands: Vec::new(),
    }
}

fn field_of(c: &RuntimeConfig) -> String {
    c.validate_with_cpus(&[0, 1]).unwrap_err().path()
}

fn udp(bind: &str) -> HandlerConfig {
    HandlerConfig::UdpEcho {
        bind: bind.parse().unwrap(),
    }
}

/// A machine with plenty of memory and no lock limit, unless a test says otherwise.
fn machine() -> Machine {
    Machine {
        cpus: vec![0, 1],
        mem_total: Some(1 << 40),
        memlock_limit: None,
    }
}

/// Every size of a lane is refused one past either end of its range, naming the field and the
/// range, and taken at both ends (settings only: the memory plan is another check).
#[test]
fn sizes_are_taken_at_the_ends_of_their_ranges_and_refused_past_them() {
    type Set = fn(&mut LaneConfig, usize);
    let sizes: [(&str, Set, usize, usize); 5] = [
        ("buffer_bytes", |g, v| g.buffer_bytes = v, 64, 64 << 20),
        ("max_handles", |g, v| g.max_handles = v, 1, 1 << 20),
        ("max_tasks", |g, v| g.max_tasks = v, 0, 1 << 16),
        ("task_bytes", |g, v| g.task_bytes = v, 64, 1 << 20),
        ("stack_bytes", |g, v| g.stack_bytes = v, 64 * 1024, 64 << 20),
    ];
    for (field, set, lo, hi) in sizes {
        let with = |v: usize| {
            let mut c = cfg(vec![LaneConfig::new("a", Policy::Fifo, 80)]);
            set(&mut c.lanes[0], v);
            c.check_settings(&[0, 1])
        };
        with(lo).unwrap();
        with(hi).unwrap();
        let past = [lo.checked_sub(1), Some(hi + 1)];
        for v in past.into_iter().flatten() {
            let e = with(v).unwrap_err();
            assert_eq!(e.path(), format!("lane[0].{field}"));
            assert_eq!(e.message, format!("{v}: must be {lo}..={hi}"));
        }
    }
}

#[test]
fn each_invalid_setting_names_its_field() {
    let ok = cfg(vec![
        LaneConfig::new("a", Policy::Fifo, 80),
        LaneConfig::new("b", Policy::Fifo, 40),
    ]);
    ok.validate_with_cpus(&[0, 1]).unwrap();
    let mut c = ok.clone();
    c.lanes[1].priority = 100;
    assert_eq!(field_of(&c), "lane[1].priority");
    let mut c = ok.clone();
    c.lanes[1].priority = 80;
    assert_eq!(field_of(&c), "lane[1].priority");
    let mut c = ok.clone();
    c.lanes[0].cpus = Some(vec![0, 7]);
    assert_eq!(field_of(&c), "lane[0].cpus");
    let mut c = ok.clone();
    c.lanes[0].threads = 0;
    assert_eq!(field_of(&c), "lane[0].threads");
    let mut c = ok.clone();
    c.lanes[0].thread_priorities = Some(vec![80, 30]);
    assert_eq!(field_of(&c), "lane[0].thread_priorities");
    let mut c = ok.clone();
    c.lanes[0].on_overrun = OnOverrun::Demote;
    assert_eq!(field_of(&c), "lane[0].on_overrun");
    assert_eq!(field_of(&cfg(vec![])), "lane");
}

/// Lane borrowing: only from existing lower real-time lanes, never by or from a deadline
/// lane, not by a concurrent or time-shared lane, within the lenders' threads.
#[test]
fn borrowing_is_validated() {
    let lanes = |borrow: &[&str], max: Option<usize>| {
        let mut hi = LaneConfig::new("hi", Policy::Fifo, 80);
        hi.borrow_from = borrow.iter().map(|s| s.to_string()).collect();
        hi.max_borrowed = max;
        let mut lo = LaneConfig::new("lo", Policy::Fifo, 20);
        lo.threads = 3;
        let mut mid = LaneConfig::new("mid", Policy::Rr, 50);
        mid.threads = 1;
        cfg(vec![hi, mid, lo])
    };
    let ok = lanes(&["lo", "mid"], Some(4));
    ok.check_borrowing().unwrap();
    lanes(&["lo"], None).check_borrowing().unwrap();
    let field = |c: RuntimeConfig| {
        let e = c.check_borrowing().unwrap_err();
        (e.path(), e.message)
    };
    for (c, path, says) in [
        (
            lanes(&["lo", "mid"], Some(5)),
            "lane[0].max_borrowed",
            "1..=4",
        ),
        (lanes(&["lo"], Some(0)), "lane[0].max_borrowed", "1..=3"),
        (lanes(&[], Some(1)), "lane[0].max_borrowed", "without"),
        (lanes(&["lo", "lo"], None), "lane[0].borrow_from", "twice"),
        (lanes(&["hi"], None), "lane[0].borrow_from", "itself"),
        (lanes(&["x"], None), "lane[0].borrow_from", "not the name"),
    ] {
        let (p, m) = field(c);
        assert_eq!(p, path, "{m}");
        assert!(m.contains(says), "{m}");
    }
    // A lender with a smaller buffer or stack than the borrower's; a bound lender.
    let mut c = lanes(&["lo"], None);
    c.lanes[2].buffer_bytes = c.lanes[0].buffer_bytes / 2;
    assert!(field(c).1.contains("buffer_bytes"));
    let mut c = lanes(&["lo"], None);
    c.lanes[2].stack_bytes = c.lanes[0].stack_bytes / 2;
    assert!(field(c).1.contains("stack_bytes"));
    let mut c = lanes(&["lo"], None);
    c.lanes[2].bound = Some(BoundLane::new("127.0.0.1:7100".parse().unwrap()));
    assert!(field(c).1.contains("bound lane"));
    // Borrowing upwards.
    let mut c = lanes(&[], None);
    c.lanes[2].borrow_from = vec!["hi".into()];
    assert!(field(c).1.contains("not below"));
    // Deadline, time-shared and concurrent borrowers; a deadline lender.
    let mut c = ok.clone();
    c.lanes[0].policy = Policy::Deadline;
    assert!(field(c).1.contains("deadline lane cannot borrow"));
    let mut c = lanes(&["lo"], None);
    c.lanes[0].policy = Policy::Other;
    c.lanes[0].priority = 0;
    assert_eq!(field(c).0, "lane[0].borrow_from");
    let mut c = ok.clone();
    c.lanes[0].promotion = Promotion::Concurrent;
    assert!(field(c).1.contains("concurrent"));
    let mut c = ok.clone();
    c.lanes[1].policy = Policy::Deadline;
    assert!(field(c).1.contains("only fifo and rr lanes lend"));
    // The whole validation runs it.
    assert_eq!(field_of(&lanes(&["x"], None)), "lane[0].borrow_from");
}

/// Issue #20 defect 7: a borrowing chain deeper than the kernel's epoll nesting passed
/// validation and failed at start (epoll_ctl ELOOP); refused, naming the limit. 4 lanes pass:
/// with a listener's gate on the top lane they nest 5 epoll sets
/// (`rt-tests/tests/borrow.rs` starts that chain).
#[test]
fn borrowing_chains_deeper_than_epoll_nesting_are_refused() {
    let chain = |n: usize| {
        cfg((0..n)
            .map(|i| {
                let mut g = LaneConfig::new(format!("l{i}"), Policy::Fifo, 90 - i as u8);
                g.threads = 1;
                if i + 1 < n {
                    g.borrow_from = vec![format!("l{}", i + 1)];
                }
                g
            })
            .collect())
    };
    chain(4).check_borrowing().unwrap();
    let e = chain(5).check_borrowing().unwrap_err();
    assert_eq!(e.path(), "lane[0].borrow_from");
    assert!(
        e.message.contains("5 lanes deep") && e.message.contains("at most 4 lanes"),
        "{}",
        e.message
    );
}

/// The limit is the running kernel's: a chain of `MAX_EPOLL_CHAIN` lanes' epoll sets and a gate
/// nests, one set more is refused with ELOOP.
#[test]
fn epoll_nesting_is_the_kernels() {
    use crate::config::check::MAX_EPOLL_CHAIN;
    use crate::sys::epoll::{self, Epoll};
    use std::os::fd::{AsFd, AsRawFd};
    let nest = |n: usize| -> std::io::Result<Vec<Epoll>> {
        let sets = (0..n)
            .map(|_| Epoll::new())
            .collect::<std::io::Result<Vec<_>>>()?;
        for w in sets.windows(2) {
            w[0].add(w[1].as_fd().as_raw_fd(), epoll::IN, 0)?;
        }
        Ok(sets)
    };
    nest(MAX_EPOLL_CHAIN + 1).expect("the lanes and a gate nest");
    let Err(e) = nest(MAX_EPOLL_CHAIN + 2) else {
        panic!("one more set nested");
    };
    assert!(epoll::is_too_deep(&e), "{e}");
}

/// Issue #20 defect 5: with RLIMIT_RTPRIO 40 and no CAP_SYS_NICE, a lender at 30 runs at
/// real-time priority but cannot be raised to its borrower's 50: refused, naming the
/// priority and the limit. Allowed when the raise is (a limit of 50, or the capability), or
/// when the lender gets no real time either (it lends time-shared, without a raise).
#[test]
fn borrowing_needs_the_privilege_to_raise_the_lender() {
    let mut hi = LaneConfig::new("hi", Policy::Fifo, 50);
    hi.borrow_from = vec!["lo".into()];
    let c = cfg(vec![hi, LaneConfig::new("lo", Policy::Fifo, 30)]);
    let limit = |rlimit_rtprio| sched::RtPrivilege {
        cap_sys_nice: false,
        rlimit_rtprio,
    };
    let e = c.check_lender_privilege(limit(40)).unwrap_err();
    assert_eq!(e.path(), "lane[0].borrow_from", "{}", e.message);
    assert!(
        e.message.contains("priority 50") && e.message.contains("RLIMIT_RTPRIO 40"),
        "{}",
        e.message
    );
    c.check_lender_privilege(limit(50)).unwrap();
    c.check_lender_privilege(limit(0)).unwrap();
    c.check_lender_privilege(sched::RtPrivilege {
        cap_sys_nice: true,
        rlimit_rtprio: 0,
    })
    .unwrap();
}

#[test]
fn port_in_use_is_found_at_validation() {
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut g = LaneConfig::new("a", Policy::Fifo, 10);
    g.handlers.push(HandlerConfig::UdpEcho {
        bind: held.local_addr().unwrap(),
    });
    let e = cfg(vec![g]).validate_with_cpus(&[0]).unwrap_err();
    assert_eq!(e.path(), "lane[0].handler[0].bind");
    assert!(e.message.contains("in use"), "{}", e.message);
}

#[test]
fn colliding_addresses_follow_the_kernel_rule() {
    let c = |a: &str, b: &str| {
        let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
        let ab = addresses_collide(a, b);
        assert_eq!(ab, addresses_collide(b, a), "{a} {b}: symmetric");
        ab
    };
    assert!(c("127.0.0.1:7000", "127.0.0.1:7000"));
    assert!(c("0.0.0.0:7000", "127.0.0.1:7000"));
    assert!(c("0.0.0.0:7000", "0.0.0.0:7000"));
    assert!(c("[::]:7000", "[::1]:7000"));
    assert!(
        c("[::]:7000", "127.0.0.1:7000"),
        "dual-stack [::] takes IPv4"
    );
    assert!(c("[::]:7000", "0.0.0.0:7000"));
    assert!(c("[::ffff:127.0.0.1]:7000", "127.0.0.1:7000"), "v4-mapped");
    assert!(!c("0.0.0.0:7000", "[::1]:7000"), "0.0.0.0 is IPv4 only");
    assert!(!c("127.0.0.1:7000", "127.0.0.2:7000"));
    assert!(!c("127.0.0.1:7000", "127.0.0.1:7001"));
    assert!(
        !c("127.0.0.1:0", "127.0.0.1:0"),
        "ephemeral ports never collide"
    );
    assert!(!c("0.0.0.0:0", "127.0.0.1:0"));
}

/// Hardening item 3: `0.0.0.0:P` and `127.0.0.1:P` in two lanes passed validation, then the
/// second bind failed at run time with a bare "Address already in use".
#[test]
fn wildcard_and_specific_address_on_one_port_are_refused() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut a = LaneConfig::new("a", Policy::Fifo, 80);
    a.handlers.push(udp(&format!("0.0.0.0:{port}")));
    let mut b = LaneConfig::new("b", Policy::Fifo, 40);
    b.handlers.push(udp(&format!("127.0.0.1:{port}")));
    let e = cfg(vec![a.clone(), b]).validate_on(&machine()).unwrap_err();
    assert_eq!(e.path(), "lane[1].handler[0].bind");
    assert!(
        e.message.contains("lane[0].handler[0].bind"),
        "{}",
        e.message
    );
    // The same port over TCP is another socket space: no collision.
    let mut b = LaneConfig::new("b", Policy::Fifo, 40);
    b.handlers.push(HandlerConfig::TcpEcho {
        bind: format!("127.0.0.1:{port}").parse().unwrap(),
        max_connections: 64,
    });
    cfg(vec![a, b]).check_settings(&[0, 1]).unwrap();
}

/// Hardening item 4: two handlers on port 0 were refused as "bound by another handler".
#[test]
fn ephemeral_ports_never_conflict() {
    let mut a = LaneConfig::new("a", Policy::Fifo, 80);
    a.handlers.push(udp("127.0.0.1:0"));
    a.handlers.push(udp("127.0.0.1:0"));
    let mut b = LaneConfig::new("b", Policy::Fifo, 40);
    b.handlers.push(HandlerConfig::TcpEcho {
        bind: "127.0.0.1:0".parse().unwrap(),
        max_connections: 64,
    });
    b.handlers.push(HandlerConfig::TcpEcho {
        bind: "127.0.0.1:0".parse().unwrap(),
        max_connections: 64,
    });
    cfg(vec![a, b]).validate_on(&machine()).unwrap();
}

#[test]
fn memory_is_counted_from_what_the_runtime_allocates() {
    let mut g = LaneConfig::new("a", Policy::Fifo, 80);
    g.threads = 3;
    g.buffer_bytes = 4096;
    let m = g.memory();
    assert_eq!(m.threads, 3);
    assert_eq!(m.stack, DEFAULT_STACK_BYTES as u64);
    // Buffer, scratch and 16 datagram slots of buffer_bytes, plus per-slot headers whose
    // size does not depend on buffer_bytes.
    let overhead = m.buffers - 18 * 4096;
    g.buffer_bytes = 65536;
    assert_eq!(g.memory().buffers - 18 * 65536, overhead);
    assert!(overhead > 0 && overhead < 16 * 512, "{overhead}");
    assert_eq!(
        m.telemetry,
        (telemetry::RING_CAPACITY * std::mem::size_of::<telemetry::Sample>()) as u64
    );
    assert!(m.handle_table >= DEFAULT_MAX_HANDLES as u64 * 4);
    assert_eq!(
        m.total(),
        3 * (m.stack + m.buffers + m.telemetry) + m.handle_table
    );
    assert_eq!(m.tasks, 0, "no task table without max_tasks");
    let two = cfg(vec![g.clone(), LaneConfig::new("b", Policy::Fifo, 40)]);
    // Plus the flight recorder's two rings per lane.
    assert_eq!(two.recorder_bytes(), 2 * two.trace.bytes_per_lane());
    assert_eq!(
        two.preallocated_bytes(),
        g.memory().total()
            + LaneConfig::new("b", Policy::Fifo, 40).memory().total()
            + two.recorder_bytes()
    );
}

/// The task table (`max_tasks` slots of `task_bytes`, pre-faulted at `add_lane`) is in the
/// plan: counted in the lane's total, shown by `lfrt check`, and a table larger than the
/// machine is refused naming `max_tasks`.
#[test]
fn the_task_table_is_in_the_memory_plan() {
    let mut g = LaneConfig::new("a", Policy::Fifo, 80);
    let without = g.memory();
    g.max_tasks = 1000;
    g.task_bytes = 1000; // slots of 1024 bytes (64-byte aligned)
    let m = g.memory();
    assert!(m.tasks >= 1000 * 1024, "{m:?}");
    let per_slot_state = (m.tasks - 1000 * 1024) / 1000;
    assert!(per_slot_state < 512, "{m:?}: per-slot state is small");
    assert_eq!(
        m.total(),
        without.total() + m.tasks + (m.handle_table - without.handle_table)
    );
    assert!(m.to_string().contains("+ task table 1."), "{m}");
    // 65536 slots of 1 MiB: 64 GiB, more than the machine.
    g.max_tasks = 65536;
    g.task_bytes = 1 << 20;
    let c = cfg(vec![g]);
    let small = Machine {
        mem_total: Some(24 << 30),
        ..machine()
    };
    let e = c.validate_on(&small).unwrap_err();
    assert_eq!(e.path(), "lane[0].max_tasks", "{}", e.message);
    assert!(e.message.contains("task table 64.0 GiB"), "{}", e.message);
}

/// A bound lane has no task table: its threads never dispatch the lane's handle set.
#[test]
fn a_bound_lane_refuses_a_task_table() {
    let mut g = LaneConfig::new("b", Policy::Fifo, 80);
    g.bound = Some(BoundLane::new("127.0.0.1:7100".parse().unwrap()));
    let c = cfg(vec![g.clone()]);
    c.check_bound().unwrap();
    g.max_tasks = 4;
    let e = cfg(vec![g]).check_bound().unwrap_err();
    assert_eq!(e.path(), "lane[0].max_tasks");
    assert!(e.message.contains("never run"), "{}", e.message);
}

#[test]
fn a_plan_larger_than_memory_names_the_largest_share() {
    let mut small = LaneConfig::new("small", Policy::Fifo, 80);
    small.buffer_bytes = 4096;
    let big = LaneConfig::new("big", Policy::Fifo, 40); // 64 KiB buffers: buffers are its largest share
    let c = cfg(vec![small, big]);
    let need = c.preallocated_bytes();
    let m = Machine {
        mem_total: Some(need - 1),
        ..machine()
    };
    let e = c.validate_on(&m).unwrap_err();
    assert_eq!(e.path(), "lane[1].buffer_bytes");
    assert!(e.message.contains("MemTotal"), "{}", e.message);
    let mut c2 = c.clone();
    c2.lanes[1].stack_bytes = 8 << 20;
    let e = c2.validate_on(&m).unwrap_err();
    assert_eq!(e.path(), "lane[1].stack_bytes");
    // Exactly enough memory passes.
    let m = Machine {
        mem_total: Some(need),
        ..machine()
    };
    c.validate_on(&m).unwrap();
}

#[test]
fn deadline_lanes_are_checked_against_the_kernels_rules() {
    let dl = |runtime_us, deadline_us, period_us| {
        let mut g = LaneConfig::new("ctl", Policy::Deadline, 90);
        g.threads = 1;
        g.deadline = Some(Deadline {
            runtime_us,
            deadline_us,
            period_us,
        });
        g
    };
    let cpus = [0, 1];
    let kernel = DeadlineKernel {
        period_us: (100, 1 << 22),
        affinity: cpus.to_vec(),
    };
    let check = |lanes: Vec<LaneConfig>, bw| cfg(lanes).check_deadlines(&cpus, bw, &kernel);
    check(vec![dl(200, 1000, 1000)], Some(0.95)).unwrap();
    // The kernel's bounds (issue #20 defect 6): runtime ≥ 1024 ns, period within
    // sched_deadline_period_{min,max}_us; a narrowed process affinity.
    for (g, says) in [
        (dl(1, 1000, 1000), "1024 ns"),
        (dl(2, 99, 99), "sched_deadline_period_min_us 100"),
        (
            dl(200, 1000, (1 << 22) + 1),
            "sched_deadline_period_max_us 4194304",
        ),
    ] {
        let e = check(vec![g], Some(0.95)).unwrap_err();
        assert_eq!(e.field, "deadline");
        assert!(e.message.contains(says), "{}", e.message);
    }
    check(vec![dl(2, 100, 100)], Some(0.95)).unwrap();
    let narrowed = DeadlineKernel {
        affinity: vec![0],
        ..kernel.clone()
    };
    let e = cfg(vec![dl(200, 1000, 1000)])
        .check_deadlines(&cpus, Some(0.95), &narrowed)
        .unwrap_err();
    assert_eq!(e.field, "policy");
    assert!(
        e.message.contains("affinity is narrowed to [0]"),
        "{}",
        e.message
    );
    for (g, field) in [
        (dl(0, 1000, 1000), "deadline"),
        (dl(500, 400, 1000), "deadline"),
        (dl(200, 2000, 1000), "deadline"),
        (
            LaneConfig {
                deadline: None,
                ..dl(1, 1, 1)
            },
            "deadline",
        ),
        (
            LaneConfig {
                cpus: Some(vec![1]),
                ..dl(200, 1000, 1000)
            },
            "cpus",
        ),
        (
            LaneConfig {
                on_overrun: OnOverrun::Demote,
                ..dl(200, 1000, 1000)
            },
            "on_overrun",
        ),
    ] {
        assert_eq!(
            check(vec![g.clone()], Some(0.95)).unwrap_err().field,
            field,
            "{g:?}"
        );
    }
    // Parameters on a FIFO lane are refused too.
    let mut fifo = LaneConfig::new("f", Policy::Fifo, 50);
    fifo.deadline = Some(Deadline {
        runtime_us: 1,
        deadline_us: 1,
        period_us: 1,
    });
    assert_eq!(check(vec![fifo], None).unwrap_err().field, "deadline");
    // Bandwidth: 4 threads × 0.5 = 2 CPUs > 0.95 × 2 CPUs; fine without throttling.
    let mut heavy = dl(500, 1000, 1000);
    heavy.threads = 4;
    let e = check(vec![heavy.clone()], Some(0.95)).unwrap_err();
    assert!(e.message.contains("reserve 2.00 CPUs"), "{}", e.message);
    check(vec![heavy], None).unwrap();
}

#[test]
fn lock_memory_must_fit_rlimit_memlock() {
    let mut c = cfg(vec![LaneConfig::new("a", Policy::Fifo, 80)]);
    let m = Machine {
        memlock_limit: Some(1 << 20),
        ..machine()
    };
    c.validate_on(&m).unwrap();
    c.lock_memory = true;
    c.rt = RtMode::BestEffort;
    c.validate_on(&m).unwrap(); // mlockall may fail: a warning at start
    c.rt = RtMode::Required;
    let e = c.validate_on(&m).unwrap_err();
    assert_eq!(e.path(), "lane[0].buffer_bytes");
    assert!(e.message.contains("RLIMIT_MEMLOCK"), "{}", e.message);
    let unlimited = Machine {
        memlock_limit: None,
        ..machine()
    };
    c.validate_on(&unlimited).unwrap();
}

#[test]
fn timer_rate_adds_every_timer() {
    let mut g = LaneConfig::new("a", Policy::Fifo, 80);
    assert_eq!(g.timer_events_per_sec(), 0.0);
    g.handlers.push(HandlerConfig::Timer {
        interval_us: 1000,
        count: 2,
        distance_us: 1000,
    });
    g.handlers.push(udp("127.0.0.1:0"));
    assert_eq!(g.timer_events_per_sec(), 1500.0);
    g.handlers[0] = HandlerConfig::Timer {
        interval_us: 50,
        count: 256,
        distance_us: 0,
    };
    assert_eq!(g.timer_events_per_sec(), 256.0 * 20_000.0);
}

#[test]
fn named_handler_errors_split_back() {
    assert_eq!(
        split_named("`interval_us`: invalid type: string \"x\", expected u64"),
        Some(("interval_us", "invalid type: string \"x\", expected u64"))
    );
    assert_eq!(split_named("unknown field `bind`"), None);
    assert_eq!(split_named("`a b`: x"), None);
}

#[test]
fn the_old_group_key_reads_as_lane_and_both_at_once_are_refused() {
    let old = "[[group]]\nname = \"a\"\npolicy = \"other\"\nthreads = 1\n";
    let cfg = crate::parse_config(old).unwrap();
    assert_eq!(cfg.lanes.len(), 1);
    assert_eq!(cfg.lanes[0].name, "a");
    assert_eq!(crate::config_line(old, "lane[0].threads"), Some(4));
    let both = format!("{old}[[lane]]\nname = \"b\"\npolicy = \"other\"\n");
    match crate::parse_config(&both) {
        Err(crate::Error::Config {
            line,
            field,
            message,
            ..
        }) => {
            assert_eq!((line, field.as_str()), (Some(1), "group"));
            assert!(message.contains("old name of `[[lane]]`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_trace_table_is_read_and_its_errors_name_their_line() {
    let lane = "[[lane]]\nname = \"a\"\npolicy = \"other\"\ntrace_over_us = 300\n";
    let cfg =
        crate::parse_config(&format!("{lane}[trace]\nwindow_ms = 50\nkernel = true\n")).unwrap();
    assert_eq!((cfg.trace.window_ms, cfg.trace.kernel), (50, true));
    assert_eq!(cfg.lanes[0].trace_over_us, Some(300));
    let refused = |src: &str| match crate::parse_config(src) {
        Err(crate::Error::Config { line, field, .. }) => (line, field),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        refused(&format!("{lane}[trace]\nwindow_ms = 20000\n")),
        (Some(6), "trace.window_ms".to_string())
    );
    assert_eq!(
        refused(&format!("{lane}[trace]\nwindow_ms = 0\n")),
        (Some(4), "lane[0].trace_over_us".to_string())
    );
    assert_eq!(
        refused(&format!("{lane}[trace]\nwindows_ms = 10\n")),
        (Some(6), "trace.windows_ms".to_string())
    );
}

#[test]
fn a_kernel_recorder_without_tracefs_access_is_refused_as_start_would() {
    let mut c = cfg(vec![LaneConfig::new("a", Policy::Other, 0)]);
    c.trace.kernel = true;
    assert_eq!(c.check_kernel_trace(Ok(())), Ok(()));
    let denied = std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "permission denied writing /sys/kernel/tracing/instances",
    );
    let e = c.check_kernel_trace(Err(denied)).unwrap_err();
    assert_eq!(e.path(), "trace.kernel");
    assert!(e.message.contains("run as root"), "{}", e.message);
}
