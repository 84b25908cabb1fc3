//! Config fuzzer: generated TOML configurations against what `lfrt check` and `lfrt run` do
//! with them. Both load a file with `lfrt::load_config` (whose text half is
//! `lfrt::parse_config`); `run` then builds the runtime (`Runtime::new`: epoll sets, telemetry
//! rings, sockets bound) and starts it.
//!
//! Properties:
//! * (a) `parse_config` never panics, and every error is an `Error::Config` whose field is a
//!   path as docs/configuration.md's errors name them (`toml` for syntax errors, `runtime.rt`,
//!   `lane[1].priority`, `lane[0].handler[2].bind`, …) with lane and handler indices that
//!   exist in the document, and a line inside the text. A single value of the wrong type or
//!   range, or an unknown key, is reported at its own path.
//! * (b) Whatever `parse_config` accepts, `Runtime::new` builds (then it is dropped), and a few
//!   accepted configurations whose lanes are all `policy = "other"` are started and shut down.
//!
//! # The generator
//! Documents follow the real grammar (src/config, configs/*.toml, docs/configuration.md):
//! `[runtime]` with `rt` and `lock_memory`; 1 to 3 `[[lane]]`s with distinct names
//! and priorities, every optional key sometimes left out, `thread_priorities` inside the
//! lane's lane; 0 to 3 `[[lane.handler]]`s each: `udp-echo` / `tcp-echo` bound to
//! loopback and wildcard addresses (port 0, two free ports shared between handlers so that
//! duplicates and wildcard collisions occur, IPv6 and v4-mapped forms, a port this test holds
//! so it is in use, an address that is not local, unparseable ones) and `timer`s with interval,
//! count and distance; sometimes a `[lane.bound]` table (`connect` to a back-end this test
//! runs, or to a wildcard, port-0 or unparseable address; `max_waiters`, `max_body`,
//! `max_nesting`, inline or as its own table); 0 to 2 `[[band]]`s (the same addresses,
//! `classify` by `dscp` or `payload_byte` with values in and out of range, lanes that are the
//! document's lanes or not, with or without `default`; `handler`). Then mutations: a key set
//! to a value of another type, out of range, a boundary value or a huge one (`Set`, on known
//! and unknown keys of every section, among the unknown ones `work_us`, the `lfrt` command's
//! key, which lfrt's loader refuses), a key removed, a lane given another lane's name, a table
//! turned into another shape; and for (a) text mutations as well (truncation, a line
//! duplicated or dropped, a junk line).
//!
//! # Bounds
//! Values inside the valid ranges are capped by the generator: at most 4 threads per lane,
//! `buffer_bytes` ≤ 64 KiB, `max_handles` ≤ 4096, `stack_bytes` ≤ 1 MiB, ≤ 4 timers per
//! handler. Mutations may write the range boundaries (64 threads, `max_handles` = 2^20,
//! `buffer_bytes` = 64 MiB, …), which validation accepts but which are not built unless the
//! handle tables `Runtime::new` writes total ≤ [`BUILD_CAP_TABLE_BYTES`] (the stacks and
//! buffers are only allocated by `start`); starts are limited to [`MAX_STARTS`] configurations
//! preallocating ≤ [`START_CAP_BYTES`], without `lock_memory` (it would pin this whole test
//! process) and with timers delivering ≤ [`START_CAP_TIMER_RATE`] events/s, each run for
//! 20 ms. Case counts: [`PARSE_CASES`] for (a), [`BUILD_CASES`] for (b); both finish in a few
//! seconds.
//!
//! # Reproducing
//! The seed is fixed ([`DEFAULT_SEED`]), so CI runs the same cases every time. Set
//! `PROPTEST_RNG_SEED=<u64>` for other cases and `PROPTEST_CASES=<n>` for more, e.g.
//! `PROPTEST_RNG_SEED=7 PROPTEST_CASES=5000 cargo test --release -p lfrt-tools
//! --test config_fuzz -- --nocapture`. A failure prints the shrunk input, the document text and
//! both results.

use lfrt::{Error, HandlerConfig, Policy, Runtime, RuntimeConfig};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use toml::{Table, Value};

/// Cases of property (a).
const PARSE_CASES: u32 = 1024;
/// Cases of property (b).
const BUILD_CASES: u32 = 256;
/// The seed unless `PROPTEST_RNG_SEED` is set.
const DEFAULT_SEED: u64 = 0x1f_2026;
/// Accepted configurations are built only if their handle tables total at most this.
const BUILD_CAP_TABLE_BYTES: u64 = 128 << 20;
/// At most this many accepted configurations are started (property (b)).
const MAX_STARTS: usize = 6;
/// Only configurations preallocating at most this are started.
const START_CAP_BYTES: u64 = 64 << 20;
/// Only configurations whose timers deliver at most this many events/s are started.
const START_CAP_TIMER_RATE: f64 = 20_000.0;

// ---------------------------------------------------------------------------------------------
// The environment: CPUs, and the addresses handlers bind.

/// Held by each property test for its whole run: both bind the same free ports, and one's
/// bind probe must not take a port the other is about to bind (when run in parallel).
static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ports() -> std::sync::MutexGuard<'static, ()> {
    PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the generator draws addresses and CPUs from; holds the "in use" port for the run.
struct Env {
    cpus: Vec<usize>,
    /// Addresses that never collide with anything (port 0).
    ephemeral: Vec<String>,
    /// Every address, valid or not.
    all: Vec<String>,
    /// A back-end a bound lane's `connect` reaches: a thread accepts (and drops) every
    /// connection, so `Runtime::new` connects whatever the case count.
    backend: String,
    _held: (UdpSocket, TcpListener),
}

/// Listens on 127.0.0.1 and accepts every connection for the rest of the process.
fn backend() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
    addr
}

/// A port in 20000..32000 (below Linux's default ephemeral range, so nothing else is handed it
/// by the kernel while the test runs) free for UDP and TCP on every address of both families.
fn free_port(after: u16) -> u16 {
    let start = 20_000 + (std::process::id() % 6000) as u16;
    (start.max(after + 1)..32_000)
        .find(|&p| {
            ["0.0.0.0", "[::]"].iter().all(|ip| {
                let a: SocketAddr = format!("{ip}:{p}").parse().unwrap();
                UdpSocket::bind(a).is_ok() && TcpListener::bind(a).is_ok()
            })
        })
        .expect("a free port in 20000..32000")
}

/// Holds one port on 127.0.0.1 for both UDP and TCP.
fn hold_port() -> (UdpSocket, TcpListener) {
    for _ in 0..100 {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        if let Ok(u) = UdpSocket::bind(t.local_addr().unwrap()) {
            return (u, t);
        }
    }
    panic!("no port free for both UDP and TCP");
}

impl Env {
    fn new() -> Env {
        let (p1, held) = (free_port(0), hold_port());
        let p2 = free_port(p1);
        let h = held.0.local_addr().unwrap().port();
        let ephemeral: Vec<String> = [
            "127.0.0.1:0",
            "127.0.0.2:0",
            "[::1]:0",
            "0.0.0.0:0",
            "[::]:0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut all = ephemeral.clone();
        all.extend([
            format!("127.0.0.1:{p1}"),
            format!("0.0.0.0:{p1}"),
            format!("[::]:{p1}"),
            format!("[::1]:{p1}"),
            format!("[::ffff:127.0.0.1]:{p1}"),
            format!("127.0.0.1:{p2}"),
            format!("127.0.0.3:{p2}"),
            format!("[::ffff:0.0.0.0]:{p2}"),
            format!("127.0.0.1:{h}"),
            format!("127.0.0.2:{h}"),
            "192.0.2.1:0".to_string(), // TEST-NET-1: not an address of this machine
            "127.0.0.1:99999".to_string(),
            "localhost:0".to_string(),
            "127.0.0.1".to_string(),
        ]);
        Env {
            cpus: lfrt::os::online_cpus(),
            ephemeral,
            all,
            backend: backend(),
            _held: held,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The model: a document close to the real grammar.

#[derive(Debug, Clone)]
enum HandlerModel {
    Echo {
        tcp: bool,
        bind: String,
    },
    Timer {
        interval_us: i64,
        count: Option<i64>,
        distance_us: Option<i64>,
    },
}

/// A `[lane.bound]` table.
#[derive(Debug, Clone)]
struct BoundModel {
    /// Index into the back-end and bad addresses (see `render`).
    connect: u8,
    max_waiters: Option<i64>,
    max_body: Option<i64>,
    max_nesting: Option<i64>,
}

/// A `[[band]]` table. Lanes are indices into the document's lanes (`None`: a name that is
/// not a lane's).
#[derive(Debug, Clone)]
struct BandModel {
    bind: String,
    /// `Some(offset)`: `payload_byte`, else `dscp`.
    payload_byte: Option<i64>,
    /// `(value, lane)`.
    map: Vec<(i64, Option<Index>)>,
    default: Option<Option<Index>>,
    handler: Option<&'static str>,
}

#[derive(Debug, Clone)]
struct LaneModel {
    policy: Option<&'static str>,
    /// Leave `priority` out (a FIFO/RR lane then has priority 0: invalid).
    omit_priority: bool,
    threads: Option<i64>,
    /// Raw draws mapped into the lane's lane when rendered (only for RT lanes).
    thread_priorities: Option<Vec<u8>>,
    cpus: Option<Vec<Index>>,
    promotion: Option<&'static str>,
    buffer_bytes: Option<i64>,
    max_handles: Option<i64>,
    stack_bytes: Option<i64>,
    budget_us: Option<i64>,
    on_overrun: Option<&'static str>,
    handlers: Vec<HandlerModel>,
    bound: Option<BoundModel>,
}

#[derive(Debug, Clone)]
struct DocModel {
    /// Write a `[runtime]` table at all.
    runtime: bool,
    rt: Option<&'static str>,
    lock_memory: Option<bool>,
    /// Offset into [`NAMES`]: lane `i` is named `NAMES[(name_base + i) % len]` (distinct).
    name_base: usize,
    /// Distinct RT priorities, one per lane (used by FIFO/RR lanes).
    priorities: Vec<u8>,
    lanes: Vec<LaneModel>,
    bands: Vec<BandModel>,
}

const NAMES: [&str; 5] = ["control", "bulk", "io", "lane-2", "x_y"];

fn handler_model(env: &Env) -> impl Strategy<Value = HandlerModel> {
    let bind = prop_oneof![
        7 => prop::sample::select(env.ephemeral.clone()),
        3 => prop::sample::select(env.all.clone()),
    ];
    prop_oneof![
        (any::<bool>(), bind).prop_map(|(tcp, bind)| HandlerModel::Echo { tcp, bind }),
        (
            prop_oneof![
                prop::sample::select(vec![50i64, 1000, 2000, 10_000, 10_000_000]),
                1000..=100_000i64
            ],
            prop::option::of(1..=4i64),
            prop::option::of(prop::sample::select(vec![0i64, 250, 1000])),
        )
            .prop_map(|(interval_us, count, distance_us)| HandlerModel::Timer {
                interval_us,
                count,
                distance_us
            }),
    ]
}

fn bound_model() -> impl Strategy<Value = BoundModel> {
    (
        prop_oneof![12 => Just(0u8), 1 => 1u8..=4],
        prop::option::of(prop_oneof![12 => 4..=16i64, 1 => Just(0i64), 1 => Just(4097i64)]),
        prop::option::of(prop_oneof![
            12 => prop::sample::select(vec![1i64, 64, 512, 4096]),
            1 => prop::sample::select(vec![0i64, 1 << 30]),
        ]),
        prop::option::weighted(0.3, prop_oneof![6 => 1..=4i64, 1 => Just(0i64)]),
    )
        .prop_map(|(connect, max_waiters, max_body, max_nesting)| BoundModel {
            connect,
            max_waiters,
            max_body,
            max_nesting,
        })
}

fn band_model(env: &Env) -> impl Strategy<Value = BandModel> {
    let bind = prop_oneof![
        7 => prop::sample::select(env.ephemeral.clone()),
        3 => prop::sample::select(env.all.clone()),
    ];
    let lane = prop::option::weighted(0.97, any::<Index>());
    (
        bind,
        prop::option::weighted(0.4, prop_oneof![0..=8i64, Just(65_535i64), Just(65_536i64)]),
        prop::collection::vec(
            (
                prop_oneof![30 => 0..=63i64, 1 => 64..=300i64, 1 => Just(-1i64)],
                lane.clone(),
            ),
            0..=3,
        ),
        prop::option::weighted(0.95, lane),
        prop::option::weighted(
            0.3,
            prop_oneof![9 => Just("udp-echo"), 1 => Just("tcp-echo")],
        ),
    )
        .prop_map(|(bind, payload_byte, map, default, handler)| BandModel {
            bind,
            payload_byte,
            map,
            default,
            handler,
        })
}

fn lane_model(env: &Env) -> impl Strategy<Value = LaneModel> {
    let policy = prop::option::weighted(
        0.8,
        prop::sample::select(vec!["fifo", "fifo", "rr", "other", "other"]),
    );
    let enums = (
        prop::option::of(prop::sample::select(vec!["priority", "lifo", "fifo"])),
        prop::option::weighted(0.3, 1..=20_000i64),
        prop::option::weighted(0.3, prop::sample::select(vec!["report", "demote"])),
    );
    let sizes = (
        prop::option::of(1..=4i64),
        prop::option::weighted(0.2, prop::collection::vec(any::<u8>(), 1..=4)),
        prop::option::weighted(0.3, prop::collection::vec(any::<Index>(), 1..=3)),
        prop::option::of(prop::sample::select(vec![64i64, 100, 2048, 4096, 65536])),
        prop::option::of(prop::sample::select(vec![1i64, 2, 8, 16, 1024, 4096])),
        prop::option::weighted(0.2, prop::sample::select(vec![65_536i64, 131_072, 1 << 20])),
    );
    (
        policy,
        prop::bool::weighted(0.05),
        enums,
        sizes,
        prop::collection::vec(handler_model(env), 0..=3),
        prop::option::weighted(0.15, bound_model()),
    )
        .prop_map(
            |(
                policy,
                omit_priority,
                (promotion, budget_us, on_overrun),
                (threads, thread_priorities, cpus, buffer_bytes, max_handles, stack_bytes),
                handlers,
                bound,
            )| LaneModel {
                policy,
                omit_priority,
                threads,
                thread_priorities,
                cpus,
                promotion,
                buffer_bytes,
                max_handles,
                stack_bytes,
                budget_us,
                on_overrun,
                handlers,
                bound,
            },
        )
}

fn doc_model(env: &Env) -> impl Strategy<Value = DocModel> {
    (
        prop::bool::weighted(0.8),
        prop::option::of(prop::sample::select(vec!["best-effort", "required"])),
        prop::option::weighted(0.5, prop::bool::weighted(0.2)),
        0..NAMES.len(),
        prop::sample::subsequence(vec![1u8, 10, 20, 30, 40, 50, 60, 70, 80, 90, 99], 3)
            .prop_shuffle(),
        prop::collection::vec(lane_model(env), 1..=3),
        prop_oneof![
            3 => Just(Vec::new()),
            1 => prop::collection::vec(band_model(env), 1..=2),
        ],
    )
        .prop_map(
            |(runtime, rt, lock_memory, name_base, priorities, lanes, bands)| DocModel {
                runtime,
                rt,
                lock_memory,
                name_base,
                priorities,
                lanes,
                bands,
            },
        )
}

impl DocModel {
    fn is_rt(g: &LaneModel) -> bool {
        g.policy != Some("other")
    }

    fn render(&self, env: &Env) -> Table {
        let mut doc = Table::new();
        if self.runtime {
            let mut rt = Table::new();
            if let Some(m) = self.rt {
                rt.insert("rt".into(), m.into());
            }
            if let Some(l) = self.lock_memory {
                rt.insert("lock_memory".into(), l.into());
            }
            doc.insert("runtime".into(), Value::Table(rt));
        }
        let rt_prios: Vec<u8> = self
            .lanes
            .iter()
            .zip(&self.priorities)
            .filter(|(g, _)| Self::is_rt(g))
            .map(|(_, &p)| p)
            .collect();
        let mut lanes = Vec::new();
        for (i, g) in self.lanes.iter().enumerate() {
            let mut t = Table::new();
            let int = |v: i64| Value::Integer(v);
            t.insert(
                "name".into(),
                NAMES[(self.name_base + i) % NAMES.len()].into(),
            );
            let priority = if Self::is_rt(g) {
                self.priorities[i]
            } else {
                0
            };
            if !g.omit_priority {
                t.insert("priority".into(), int(priority.into()));
            }
            if let Some(p) = g.policy {
                t.insert("policy".into(), p.into());
            }
            if let Some(n) = g.threads {
                t.insert("threads".into(), int(n));
            }
            if let (Some(raw), true) = (&g.thread_priorities, Self::is_rt(g)) {
                // One per thread, inside the lane (floor, priority].
                let floor = rt_prios
                    .iter()
                    .copied()
                    .filter(|&p| p < priority)
                    .max()
                    .unwrap_or(0);
                let width = (priority - floor).max(1);
                let n = g.threads.unwrap_or(2) as usize;
                let tp: Vec<Value> = (0..n)
                    .map(|k| int((floor + 1 + raw[k % raw.len()] % width).into()))
                    .collect();
                t.insert("thread_priorities".into(), Value::Array(tp));
            }
            if let Some(c) = &g.cpus {
                let c = c.iter().map(|ix| int(*ix.get(&env.cpus) as i64)).collect();
                t.insert("cpus".into(), Value::Array(c));
            }
            if let Some(p) = g.promotion {
                t.insert("promotion".into(), p.into());
            }
            for (key, v) in [
                ("buffer_bytes", g.buffer_bytes),
                ("max_handles", g.max_handles),
                ("stack_bytes", g.stack_bytes),
                ("budget_us", g.budget_us),
            ] {
                if let Some(v) = v {
                    t.insert(key.into(), int(v));
                }
            }
            if let Some(o) = g.on_overrun {
                t.insert("on_overrun".into(), o.into());
            }
            if !g.handlers.is_empty() {
                let hs = g
                    .handlers
                    .iter()
                    .map(|h| Value::Table(h.render()))
                    .collect();
                t.insert("handler".into(), Value::Array(hs));
            }
            if let Some(b) = &g.bound {
                t.insert("bound".into(), Value::Table(b.render(env)));
            }
            lanes.push(Value::Table(t));
        }
        doc.insert("lane".into(), Value::Array(lanes));
        if !self.bands.is_empty() {
            let names: Vec<&str> = (0..self.lanes.len())
                .map(|i| NAMES[(self.name_base + i) % NAMES.len()])
                .collect();
            let bands = self
                .bands
                .iter()
                .map(|b| Value::Table(b.render(&names)))
                .collect();
            doc.insert("band".into(), Value::Array(bands));
        }
        doc
    }

    /// Whether the document has a bound lane (its `connect` then reaches this test's
    /// back-end, not a service: such documents are built, not started).
    fn has_bound(&self) -> bool {
        self.lanes.iter().any(|g| g.bound.is_some())
    }

    /// Whether every value the model writes is one serde reads (the binds all parse; bound
    /// and band tables are left out of the pinned cases: their refusals are checked for a path
    /// only).
    fn serde_clean(&self) -> bool {
        self.bands.is_empty()
            && self.lanes.iter().all(|g| g.bound.is_none())
            && self
                .lanes
                .iter()
                .flat_map(|g| &g.handlers)
                .all(|h| match h {
                    HandlerModel::Echo { bind, .. } => bind.parse::<SocketAddr>().is_ok(),
                    HandlerModel::Timer { .. } => true,
                })
    }
}

impl BoundModel {
    fn render(&self, env: &Env) -> Table {
        let mut t = Table::new();
        let connect = match self.connect {
            0 => env.backend.clone(),
            1 => "0.0.0.0:7100".into(),
            2 => "127.0.0.1:0".into(),
            3 => "localhost:7100".into(),
            _ => "[::]:7100".into(),
        };
        t.insert("connect".into(), connect.into());
        for (k, v) in [
            ("max_waiters", self.max_waiters),
            ("max_body", self.max_body),
            ("max_nesting", self.max_nesting),
        ] {
            if let Some(v) = v {
                t.insert(k.into(), Value::Integer(v));
            }
        }
        t
    }
}

impl BandModel {
    /// `names`: the document's lane names.
    fn render(&self, names: &[&str]) -> Table {
        let lane = |l: &Option<Index>| -> Value {
            match l {
                Some(i) => (*i.get(names)).into(),
                None => "nope".into(),
            }
        };
        let mut map = Table::new();
        for (v, l) in &self.map {
            map.insert(v.to_string(), lane(l));
        }
        let default = self.default.as_ref().map(lane);
        let mut classify = Table::new();
        match self.payload_byte {
            Some(offset) => {
                let mut p = Table::new();
                p.insert("offset".into(), Value::Integer(offset));
                p.insert("map".into(), Value::Table(map));
                if let Some(d) = default {
                    p.insert("default".into(), d);
                }
                classify.insert("payload_byte".into(), Value::Table(p));
            }
            None => {
                if let Some(d) = default {
                    map.insert("default".into(), d);
                }
                classify.insert("dscp".into(), Value::Table(map));
            }
        }
        let mut t = Table::new();
        t.insert("bind".into(), self.bind.as_str().into());
        t.insert("classify".into(), Value::Table(classify));
        if let Some(h) = self.handler {
            t.insert("handler".into(), h.into());
        }
        t
    }
}

impl HandlerModel {
    fn render(&self) -> Table {
        let mut t = Table::new();
        let mut opt = |k: &str, v: Option<i64>| {
            if let Some(v) = v {
                t.insert(k.into(), Value::Integer(v));
            }
        };
        if let HandlerModel::Timer {
            interval_us,
            count,
            distance_us,
        } = self
        {
            opt("interval_us", Some(*interval_us));
            opt("count", *count);
            opt("distance_us", *distance_us);
        }
        match self {
            HandlerModel::Echo { tcp, bind, .. } => {
                t.insert(
                    "kind".into(),
                    (if *tcp { "tcp-echo" } else { "udp-echo" }).into(),
                );
                t.insert("bind".into(), bind.as_str().into());
            }
            HandlerModel::Timer { .. } => {
                t.insert("kind".into(), "timer".into());
            }
        }
        t
    }
}

// ---------------------------------------------------------------------------------------------
// Mutations.

/// Which table a mutation edits; indices are taken modulo what the document has.
#[derive(Debug, Clone)]
enum Where {
    Root,
    Runtime,
    Lane(Index),
    Handler(Index, Index),
    /// A lane's `[lane.bound]`.
    Bound(Index),
    Band(Index),
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Sets a key (known or not in that table) to a value (of any type).
    Set(Where, &'static str, Value),
    /// Removes a key.
    Remove(Where, &'static str),
    /// Gives lane `to` the name of lane `from`.
    DupName(Index, Index),
    /// `lane = { … }` (one table instead of an array of tables).
    LaneAsTable,
    /// `handler = { … }` in a lane.
    HandlerAsTable(Index),
}

/// Every key of the grammar, and a few that are not.
const KEYS: [&str; 42] = [
    "runtime",
    "lane",
    "rt",
    "lock_memory",
    "name",
    "priority",
    "policy",
    "threads",
    "cpus",
    "promotion",
    "thread_priorities",
    "buffer_bytes",
    "max_handles",
    "stack_bytes",
    "budget_us",
    "on_overrun",
    "handler",
    "kind",
    "bind",
    "interval_us",
    "count",
    "distance_us",
    "bound",
    "connect",
    "max_waiters",
    "max_body",
    "max_nesting",
    "band",
    "classify",
    "dscp",
    "payload_byte",
    "offset",
    "map",
    "default",
    // Not keys of any table: lfrt's loader refuses each. `work_us` is the `lfrt` command's
    // (its loader takes it out of echo handlers and bands before lfrt reads the rest).
    "work_us",
    "wokers",
    "lock_memroy",
    "prio",
    "interval",
    "port",
    "lanes",
    "Threads",
];

/// Integers: boundaries of every range, just past them, and huge ones.
const INTS: [i64; 26] = [
    -1,
    0,
    1,
    2,
    49,
    50,
    63,
    64,
    65,
    99,
    100,
    255,
    256,
    257,
    4096,
    65_535,
    65_536,
    100_001,
    1 << 20,
    (1 << 20) + 1,
    10_000_001,
    64 << 20,
    (64 << 20) + 1,
    1 << 40,
    i64::MAX,
    i64::MIN,
];

const STRS: [&str; 22] = [
    "",
    "fifo",
    "rr",
    "other",
    "FIFO",
    "sporadic",
    "priority",
    "lifo",
    "report",
    "demote",
    "best-effort",
    "required",
    "udp-echo",
    "tcp-echo",
    "timer",
    "udp_echo",
    "127.0.0.1:0",
    "[::1]:0",
    "a b",
    "é",
    "x.y",
    "two",
];

fn value() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        prop::sample::select(INTS.to_vec()).prop_map(Value::Integer),
        prop::sample::select(STRS.to_vec()).prop_map(|s| Value::String(s.into())),
    ];
    prop_oneof![
        4 => prop::sample::select(INTS.to_vec()).prop_map(Value::Integer),
        1 => any::<i64>().prop_map(Value::Integer),
        3 => prop::sample::select(STRS.to_vec()).prop_map(|s| Value::String(s.into())),
        1 => Just(Value::String("x".repeat(300))),
        1 => any::<bool>().prop_map(Value::Boolean),
        1 => prop::sample::select(vec![1.5, -0.0, f64::NAN, f64::INFINITY]).prop_map(Value::Float),
        2 => prop::collection::vec(scalar, 0..4).prop_map(Value::Array),
        1 => Just(Value::Table(Table::new())),
        1 => Just(Value::Datetime("1979-05-27T07:32:00Z".parse().unwrap())),
    ]
}

fn place() -> impl Strategy<Value = Where> {
    prop_oneof![
        1 => Just(Where::Root),
        1 => Just(Where::Runtime),
        4 => any::<Index>().prop_map(Where::Lane),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(g, h)| Where::Handler(g, h)),
        1 => any::<Index>().prop_map(Where::Bound),
        2 => any::<Index>().prop_map(Where::Band),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => (place(), prop::sample::select(KEYS.to_vec()), value())
            .prop_map(|(w, k, v)| Mutation::Set(w, k, v)),
        2 => (place(), prop::sample::select(KEYS.to_vec())).prop_map(|(w, k)| Mutation::Remove(w, k)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::DupName(a, b)),
        1 => Just(Mutation::LaneAsTable),
        1 => any::<Index>().prop_map(Mutation::HandlerAsTable),
    ]
}

/// The table at `w`, if the document has it (`[runtime]` is created on demand).
fn table_at<'a>(doc: &'a mut Table, w: &Where) -> Option<(&'a mut Table, lfrt::Section)> {
    use lfrt::Section;
    fn lanes(doc: &mut Table) -> Option<&mut Vec<Value>> {
        doc.get_mut("lane")?.as_array_mut()
    }
    match w {
        Where::Root => Some((doc, Section::Root)),
        Where::Runtime => {
            let rt = doc
                .entry("runtime")
                .or_insert_with(|| Value::Table(Table::new()));
            rt.as_table_mut().map(|t| (t, Section::Runtime))
        }
        Where::Lane(g) => {
            let gs = lanes(doc).filter(|v| !v.is_empty())?;
            let gi = g.index(gs.len());
            gs[gi].as_table_mut().map(|t| (t, Section::Lane(gi)))
        }
        Where::Handler(g, h) => {
            let gs = lanes(doc).filter(|v| !v.is_empty())?;
            let gi = g.index(gs.len());
            let hs = gs[gi]
                .as_table_mut()?
                .get_mut("handler")?
                .as_array_mut()
                .filter(|v| !v.is_empty())?;
            let hi = h.index(hs.len());
            hs[hi].as_table_mut().map(|t| {
                (
                    t,
                    Section::Handler {
                        lane: gi,
                        handler: hi,
                    },
                )
            })
        }
        Where::Bound(g) => {
            let gs = lanes(doc).filter(|v| !v.is_empty())?;
            let gi = g.index(gs.len());
            gs[gi]
                .as_table_mut()?
                .get_mut("bound")?
                .as_table_mut()
                .map(|t| (t, Section::Bound(gi)))
        }
        Where::Band(b) => {
            let bs = doc
                .get_mut("band")?
                .as_array_mut()
                .filter(|v| !v.is_empty())?;
            let bi = b.index(bs.len());
            bs[bi].as_table_mut().map(|t| (t, Section::Band(bi)))
        }
    }
}

impl Mutation {
    /// Applies the mutation; returns the path a `Set` wrote, if it wrote one.
    fn apply(&self, doc: &mut Table) -> Option<(String, lfrt::Section)> {
        match self {
            Mutation::Set(w, key, v) => {
                let (t, section) = table_at(doc, w)?;
                t.insert(key.to_string(), v.clone());
                Some((section.path(key), section))
            }
            Mutation::Remove(w, key) => {
                let (t, _) = table_at(doc, w)?;
                t.remove(*key);
                None
            }
            Mutation::DupName(from, to) => {
                let gs = doc.get_mut("lane")?.as_array_mut()?;
                if gs.is_empty() {
                    return None;
                }
                let name = gs[from.index(gs.len())].get("name")?.clone();
                let n = gs.len();
                gs[to.index(n)].as_table_mut()?.insert("name".into(), name);
                None
            }
            Mutation::LaneAsTable => {
                let first = doc.get_mut("lane")?.as_array_mut()?.first()?.clone();
                doc.insert("lane".into(), first);
                None
            }
            Mutation::HandlerAsTable(g) => {
                let gs = doc.get_mut("lane")?.as_array_mut()?;
                if gs.is_empty() {
                    return None;
                }
                let n = gs.len();
                let t = gs[g.index(n)].as_table_mut()?;
                let first = t.get("handler")?.as_array()?.first()?.clone();
                t.insert("handler".into(), first);
                None
            }
        }
    }
}

/// Whether serde reads `v` as the value of `key` in `section` (type, integer range, enum
/// variant, address syntax); `None` if that cannot be said of one value (a handler's `kind`
/// set to another kind changes which of its other keys are known). `kind` is the handler's
/// kind, for handler keys.
fn serde_accepts(section: lfrt::Section, key: &str, v: &Value, kind: Option<&str>) -> Option<bool> {
    use lfrt::Section;
    let int_in = |lo: i64, hi: i64| matches!(v, Value::Integer(i) if (lo..=hi).contains(i));
    let u8v = || int_in(0, 255);
    let uint = || int_in(0, i64::MAX);
    let one_of = |names: &[&str]| matches!(v, Value::String(s) if names.contains(&s.as_str()));
    let int_array = |hi: i64| matches!(v, Value::Array(a) if a.iter().all(|x| matches!(x, Value::Integer(i) if (0..=hi).contains(i))));
    Some(match (section, key) {
        (Section::Handler { .. }, "kind") if one_of(&["udp-echo", "tcp-echo", "timer"]) => {
            return None
        }
        // serde also reads a struct from an array of its fields in order (`runtime = []` is
        // every default): whether an array is read depends on its items.
        (Section::Root, "runtime") if v.is_array() => return None,
        (Section::Root, "runtime") => v.is_table(),
        (Section::Root, "lane" | "band") => {
            matches!(v, Value::Array(a) if a.is_empty())
        }
        // A table or array is read field by field (`connect` missing, or in order).
        (Section::Lane(_), "bound") if v.is_table() || v.is_array() => return None,
        (Section::Lane(_), "bound") => false,
        (Section::Runtime, "rt") => one_of(&["best-effort", "required"]),
        (Section::Runtime, "lock_memory") => v.is_bool(),
        (Section::Lane(_), "name") => v.is_str(),
        (Section::Lane(_), "priority") => u8v(),
        (Section::Lane(_), "policy") => one_of(&["fifo", "rr", "other"]),
        (Section::Lane(_), "promotion") => one_of(&["priority", "lifo", "fifo"]),
        (Section::Lane(_), "on_overrun") => one_of(&["report", "demote"]),
        (Section::Lane(_), "threads" | "buffer_bytes" | "max_handles" | "stack_bytes") => uint(),
        (Section::Lane(_), "budget_us") => uint(),
        (Section::Lane(_), "cpus") => int_array(i64::MAX),
        (Section::Lane(_), "thread_priorities") => int_array(255),
        (Section::Lane(_), "handler") => matches!(v, Value::Array(a) if a.is_empty()),
        (Section::Handler { .. }, "kind") => false,
        (Section::Handler { .. }, "bind") if kind != Some("timer") => {
            matches!(v, Value::String(s) if s.parse::<SocketAddr>().is_ok())
        }
        (Section::Handler { .. }, "interval_us" | "count" | "distance_us")
            if kind == Some("timer") =>
        {
            uint()
        }
        _ => false,
    })
}

// ---------------------------------------------------------------------------------------------
// One generated case.

#[derive(Debug, Clone)]
enum TextMutation {
    Truncate(Index),
    DupLine(Index),
    DropLine(Index),
    Insert(Index, &'static str),
}

const JUNK: [&str; 9] = [
    "=",
    "[[lane]]",
    "[lane]",
    "name = ",
    "x = 1",
    "[[lane.handler]]",
    "'''",
    "threads = 1\nthreads = 2",
    "[runtime]",
];

fn text_mutation() -> impl Strategy<Value = TextMutation> {
    prop_oneof![
        any::<Index>().prop_map(TextMutation::Truncate),
        any::<Index>().prop_map(TextMutation::DupLine),
        any::<Index>().prop_map(TextMutation::DropLine),
        (any::<Index>(), prop::sample::select(JUNK.to_vec()))
            .prop_map(|(i, s)| TextMutation::Insert(i, s)),
    ]
}

impl TextMutation {
    fn apply(&self, text: &str) -> String {
        let mut lines: Vec<&str> = text.lines().collect();
        match self {
            TextMutation::Truncate(i) => {
                let mut at = i.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                return text[..at].to_string();
            }
            _ if lines.is_empty() => {}
            TextMutation::DupLine(i) => {
                let k = i.index(lines.len());
                lines.insert(k, lines[k]);
            }
            TextMutation::DropLine(i) => {
                lines.remove(i.index(lines.len()));
            }
            TextMutation::Insert(i, s) => lines.insert(i.index(lines.len() + 1), s),
        }
        lines.join("\n")
    }
}

#[derive(Debug, Clone)]
struct Case {
    model: DocModel,
    mutations: Vec<Mutation>,
    text_mutations: Vec<TextMutation>,
}

/// What a case renders to: the text, and what is known about it.
struct Rendered {
    text: String,
    /// The document's shape, if it still has one (no text mutation, `lane` an array of
    /// tables).
    shape: Option<Shape>,
    /// The one error path that must be reported, if the case is a single `Set` that serde
    /// refuses on a model serde reads.
    expect_field: Option<String>,
}

impl Case {
    fn render(&self, env: &Env) -> Rendered {
        let mut doc = self.model.render(env);
        let mut set = None;
        for m in &self.mutations {
            let before = doc.clone();
            if let (Some((path, section)), Mutation::Set(w, key, v)) = (m.apply(&mut doc), m) {
                let kind = match w {
                    Where::Handler(..) => table_at(&mut before.clone(), w)
                        .and_then(|(t, _)| t.get("kind").and_then(Value::as_str).map(String::from)),
                    _ => None,
                };
                set = Some((path, serde_accepts(section, key, v, kind.as_deref())));
            }
        }
        let mut text = toml::to_string(&doc).expect("a toml::Table renders");
        for t in &self.text_mutations {
            text = t.apply(&text);
        }
        let shape = self
            .text_mutations
            .is_empty()
            .then(|| shape_of(&doc))
            .flatten();
        let expect_field = match (&set, self.mutations.len(), self.text_mutations.is_empty()) {
            (Some((path, Some(false))), 1, true) if self.model.serde_clean() => Some(path.clone()),
            _ => None,
        };
        Rendered {
            text,
            shape,
            expect_field,
        }
    }
}

/// What indices exist: handlers per lane, and bands.
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    handlers: Vec<usize>,
    bands: usize,
}

fn shape_of(doc: &Table) -> Option<Shape> {
    let gs = doc.get("lane")?.as_array()?;
    let handlers = gs
        .iter()
        .map(|g| {
            let t = g.as_table()?;
            Some(match t.get("handler") {
                Some(Value::Array(h)) => h.len(),
                _ => 0,
            })
        })
        .collect::<Option<Vec<usize>>>()?;
    let bands = match doc.get("band") {
        Some(Value::Array(b)) => b.len(),
        _ => 0,
    };
    Some(Shape { handlers, bands })
}

fn case(
    env: &Env,
    mutations: std::ops::RangeInclusive<usize>,
    text: f64,
) -> impl Strategy<Value = Case> {
    (
        doc_model(env),
        prop::collection::vec(mutation(), mutations),
        prop::bool::weighted(text),
        prop::collection::vec(text_mutation(), 1..=2),
    )
        .prop_map(|(model, mutations, t, text_mutations)| Case {
            model,
            mutations,
            text_mutations: if t { text_mutations } else { Vec::new() },
        })
}

// ---------------------------------------------------------------------------------------------
// The properties.

/// Whether `field` is a path as errors name them, with indices that exist (if the shape is
/// known): `toml`, `KEY`, `runtime[.KEY]`, `lane`, `lane[N][.KEY]`, `lane[N].handler`,
/// `lane[N].handler[M][.KEY]`, `lane[N].bound[.KEY]`, `band`, `band[N][.KEY]`.
fn path_ok(field: &str, shape: Option<&Shape>) -> bool {
    fn key(s: &str) -> bool {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }
    fn indexed(s: &str, name: &str) -> Option<usize> {
        s.strip_prefix(name)?
            .strip_prefix('[')?
            .strip_suffix(']')?
            .parse()
            .ok()
    }
    let lane_ok = |g: usize| shape.is_none_or(|s| g < s.handlers.len());
    let handler_ok =
        |g: usize, h: usize| shape.is_none_or(|s| g < s.handlers.len() && h < s.handlers[g]);
    let band_ok = |b: usize| shape.is_none_or(|s| b < s.bands);
    let mut parts = field.split('.');
    let first = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    if let Some(gi) = indexed(first, "lane") {
        return lane_ok(gi)
            && match rest.as_slice() {
                [] => true,
                [k] if key(k) => true,
                ["bound", k] => key(k),
                [h] | [h, _] => indexed(h, "handler")
                    .is_some_and(|hi| handler_ok(gi, hi) && rest.get(1).is_none_or(|k| key(k))),
                _ => false,
            };
    }
    if let Some(bi) = indexed(first, "band") {
        return band_ok(bi)
            && match rest.as_slice() {
                [] => true,
                [k] => key(k),
                _ => false,
            };
    }
    match rest.as_slice() {
        [] => key(first),
        [k] => first == "runtime" && key(k),
        _ => false,
    }
}

/// Property (a) for one input: returns the parse result (or fails the case).
fn parse_checked(r: &Rendered) -> Result<Result<RuntimeConfig, Error>, TestCaseError> {
    let text = &r.text;
    let parsed = catch_unwind(AssertUnwindSafe(|| lfrt::parse_config(text)))
        .map_err(|_| TestCaseError::fail(format!("parse_config panicked on:\n{text}")))?;
    let e = match &parsed {
        Ok(_) => {
            if let Some(f) = &r.expect_field {
                return Err(TestCaseError::fail(format!(
                    "accepted, but `{f}` holds a value serde should refuse:\n{text}"
                )));
            }
            return Ok(parsed);
        }
        Err(e) => e,
    };
    let Error::Config {
        file,
        line,
        field,
        message,
    } = e
    else {
        return Err(TestCaseError::fail(format!(
            "not a configuration error: {e:?}\n{text}"
        )));
    };
    let lines = text.lines().count().max(1);
    let fail = |why: &str| {
        Err(TestCaseError::fail(format!(
            "{why}: field `{field}`, line {line:?}, message {message:?}\n--- text ---\n{text}"
        )))
    };
    if file.is_some() {
        return fail("a file name for text");
    }
    if !path_ok(field, r.shape.as_ref()) {
        return fail("the error's field is not a path of this document");
    }
    if message.trim().is_empty() {
        return fail("an empty message");
    }
    // A document without any `lane` key has no line to point at for "at least one [[lane]]"
    // (`lane = []` has one: `an_empty_lane_array_has_a_line`).
    match line {
        Some(l) if !(1..=lines + 1).contains(l) => return fail("a line outside the text"),
        None if field != "lane" => return fail("no line"),
        _ => {}
    }
    if !e.to_string().contains(&format!("`{field}`")) {
        return fail("the message does not name the field");
    }
    if let Some(f) = &r.expect_field {
        if f != field {
            return fail(&format!("expected the error at `{f}`"));
        }
    }
    Ok(parsed)
}

/// Proptest's configuration: `cases` and [`DEFAULT_SEED`] unless the environment says
/// otherwise; no regression files (the seed reproduces a run).
fn runner(cases: u32) -> TestRunner {
    let mut c = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    if c.rng_seed == RngSeed::Random {
        c.rng_seed = RngSeed::Fixed(DEFAULT_SEED);
    }
    c.failure_persistence = None;
    c.max_shrink_time = 60_000;
    eprintln!("config_fuzz: {} cases, seed {}", c.cases, c.rng_seed);
    TestRunner::new(c)
}

/// Property (a): generated and heavily mutated documents; nothing panics, every error names a
/// field path of the document and a line, a single refused value is reported at its own path.
#[test]
fn check_never_panics_and_every_error_names_a_field() {
    let _ports = ports();
    let env = Env::new();
    let started = Instant::now();
    let (ok, err, pinned) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let mut runner = runner(PARSE_CASES);
    let cases = runner.config().cases;
    let result = runner.run(&case(&env, 0..=3, 0.3), |c| {
        let r = c.render(&env);
        pinned.fetch_add(usize::from(r.expect_field.is_some()), Relaxed);
        match parse_checked(&r)? {
            Ok(_) => ok.fetch_add(1, Relaxed),
            Err(_) => err.fetch_add(1, Relaxed),
        };
        Ok(())
    });
    eprintln!(
        "config_fuzz (a): {cases} cases in {:.2} s: {} accepted, {} refused ({} of them a single \
         refused value checked for its path)",
        started.elapsed().as_secs_f64(),
        ok.load(Relaxed),
        err.load(Relaxed),
        pinned.load(Relaxed),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        err.load(Relaxed) > 0 && ok.load(Relaxed) > 0,
        "one-sided cases"
    );
}

/// Property (b): lightly mutated documents; whatever check accepts, `Runtime::new` builds, and
/// a few all-SCHED_OTHER ones start and shut down.
#[test]
fn what_check_accepts_run_builds() {
    let _ports = ports();
    let env = Env::new();
    let started = Instant::now();
    let (banded, bound) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (accepted, refused, built, capped, starts, fixed_ports) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let mut runner = runner(BUILD_CASES);
    let cases = runner.config().cases;
    let result = runner.run(&case(&env, 0..=1, 0.0), |c| {
        let r = c.render(&env);
        let cfg = match parse_checked(&r)? {
            Ok(cfg) => cfg,
            Err(_) => {
                refused.fetch_add(1, Relaxed);
                return Ok(());
            }
        };
        accepted.fetch_add(1, Relaxed);
        let fixed_port = cfg.lanes.iter().flat_map(|g| &g.handlers).any(|h| {
            matches!(h, HandlerConfig::UdpEcho { bind, .. } | HandlerConfig::TcpEcho { bind, .. } if bind.port() != 0)
        });
        fixed_ports.fetch_add(usize::from(fixed_port), Relaxed);
        let tables: u64 = cfg.lanes.iter().map(|g| g.memory().handle_table).sum();
        if tables > BUILD_CAP_TABLE_BYTES {
            capped.fetch_add(1, Relaxed);
            return Ok(());
        }
        // A bound lane's back-end here accepts and drops: built, not started.
        let startable = !c.model.has_bound()
            && !cfg.lock_memory
            && cfg.lanes.iter().all(|g| g.policy == Policy::Other)
            && cfg.preallocated_bytes() <= START_CAP_BYTES
            && cfg.lanes.iter().map(|g| g.timer_events_per_sec()).sum::<f64>()
                <= START_CAP_TIMER_RATE;
        let mut rt = Runtime::new(cfg).map_err(|e| {
            TestCaseError::fail(format!(
                "check accepted, Runtime::new refused: {e}\n--- text ---\n{}",
                r.text
            ))
        })?;
        built.fetch_add(1, Relaxed);
        banded.fetch_add(usize::from(!c.model.bands.is_empty()), Relaxed);
        bound.fetch_add(usize::from(c.model.has_bound()), Relaxed);
        if startable && starts.load(Relaxed) < MAX_STARTS {
            rt.start().map_err(|e| {
                TestCaseError::fail(format!(
                    "check accepted, Runtime::start refused: {e}\n--- text ---\n{}",
                    r.text
                ))
            })?;
            std::thread::sleep(Duration::from_millis(20));
            rt.shutdown()
                .map_err(|e| TestCaseError::fail(format!("shutdown: {e}\n{}", r.text)))?;
            starts.fetch_add(1, Relaxed);
        }
        drop(rt);
        Ok(())
    });
    eprintln!(
        "config_fuzz (b): {cases} cases in {:.2} s: {} accepted ({} binding a fixed port; {} built \
         by Runtime::new ({} with [[band]]s, {} with a bound lane), {} over the build cap, {} \
         also started and shut down), {} refused",
        started.elapsed().as_secs_f64(),
        accepted.load(Relaxed),
        fixed_ports.load(Relaxed),
        built.load(Relaxed),
        banded.load(Relaxed),
        bound.load(Relaxed),
        capped.load(Relaxed),
        starts.load(Relaxed),
        refused.load(Relaxed),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    // Not vacuous: a fair share of the lightly mutated documents is valid and built.
    assert!(
        built.load(Relaxed) * 4 >= cases as usize,
        "only {} of {cases} cases built",
        built.load(Relaxed)
    );
}

/// The path grammar itself.
#[test]
fn path_grammar() {
    let shape = Shape {
        handlers: vec![1, 0],
        bands: 1,
    };
    for ok in [
        "toml",
        "threads",
        "runtime",
        "runtime.rt",
        "lane",
        "lane[1]",
        "lane[0].priority",
        "lane[0].handler",
        "lane[0].handler[0]",
        "lane[0].handler[0].bind",
        "lane[1].bound",
        "lane[1].bound.connect",
        "band",
        "band[0]",
        "band[0].classify",
    ] {
        assert!(path_ok(ok, Some(&shape)), "{ok}");
    }
    for bad in [
        "",
        "lane[2]",
        "lane[1].handler[0]",
        "lane[0].handler[1].bind",
        "lane[x]",
        "runtime.",
        "lane[0].a.b",
        "a b",
        "band[1]",
        "band[0].classify.dscp",
        "lane[0].bound.a.b",
        "lane[0].bound[0]",
    ] {
        assert!(!path_ok(bad, Some(&shape)), "{bad}");
    }
}

/// An error in the fields of a lane's second `[[lane.handler]]` names that handler and its
/// line. serde reads an internally tagged enum (`kind = …`) through a buffer without positions,
/// so toml gives such an error the span of the whole `handler` array; before the fix
/// (`later_handler` in src/config/file.rs) it was placed at the first handler, here line 7,
/// which holds a valid `interval_us = 1000`. Found by the fuzzer above.
#[test]
fn an_error_in_a_later_handler_names_that_handler() {
    let src = "[[lane]]\nname = \"a\"\npriority = 20\n\n[[lane.handler]]\nkind = \"timer\"\n\
               interval_us = 1000\n\n[[lane.handler]]\nkind = \"timer\"\ninterval_us = \"x\"\n";
    for (text, line, field) in [
        (src.to_string(), 11, "lane[0].handler[1].interval_us"),
        // Unknown and missing keys alike.
        (
            src.replace(
                "interval_us = \"x\"",
                "interval_us = 5\nbind = \"127.0.0.1:0\"",
            ),
            12,
            "lane[0].handler[1].bind",
        ),
        (
            src.replace("interval_us = \"x\"\n", ""),
            9,
            "lane[0].handler[1].interval_us",
        ),
    ] {
        match lfrt::parse_config(&text) {
            Err(Error::Config {
                line: l, field: f, ..
            }) => assert_eq!((l, f.as_str()), (Some(line), field), "{text}"),
            other => panic!("{other:?}"),
        }
    }
}

/// `lane = []` is refused ("at least one [[lane]] is required") with the line of its key.
/// Before the fix `Places::walk` (src/config/file.rs) took an empty array for an array of
/// tables and recorded no key, so the error had no line. Found by the fuzzer above.
#[test]
fn an_empty_lane_array_has_a_line() {
    match lfrt::parse_config("lane = []\n\n[runtime]\nrt = \"best-effort\"\n") {
        Err(Error::Config { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (Some(1), "lane"))
        }
        other => panic!("{other:?}"),
    }
}
