//! The bridge's TOML: the session, Zenoh's own threads, which priorities feed which lane,
//! subscriptions and publications. Errors name the file, the line and the field.

use crate::{Error, PRIORITIES};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;
use zenoh::qos::Priority;

/// Most bytes one route's (or the outbox's) slots may preallocate.
const MAX_SLOT_BYTES: u64 = 1 << 30;

/// How a session finds its peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Talks to peers directly (`listen`/`connect`); no router needed.
    Peer,
    /// Connects to a router (`connect`); opening fails if none answers.
    Client,
}

/// `[session]`: how this process joins Zenoh. Multicast scouting and gossip are always off: a
/// session reaches exactly the endpoints written here.
///
/// An endpoint with `?prio=A-B` metadata is a link of its own for priorities `A` to `B`
/// (1 = `real-time` … 7 = `background`): listen on one endpoint per priority range and connect to
/// each, and a flood of bulk samples never shares a TCP connection with `real-time` ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// `mode = "peer"` (default) or `"client"`.
    pub mode: Mode,
    /// Endpoints to listen on (`listen = ["tcp/127.0.0.1:7447?prio=1-3"]`), as written.
    pub listen: Vec<String>,
    /// Endpoints to connect to (`connect = ["tcp/127.0.0.1:7448?prio=1-3"]`), as written.
    pub connect: Vec<String>,
    /// Links one peer may open to this session (Zenoh's `transport/unicast/max_links`): by
    /// default the larger number of `prio=` endpoints in `listen` or `connect`, at least 1.
    pub max_links: usize,
    /// `SO_SNDBUF` and `SO_RCVBUF`, in bytes, of every link that does not carry `real-time`
    /// (`bulk_socket_buffer`, default 65536; 0 leaves the kernel's own sizing): bounds what a
    /// flood keeps queued in the kernel. An endpoint that sets `#so_sndbuf=`/`#so_rcvbuf=`
    /// itself keeps its own.
    pub bulk_socket_buffer: usize,
}

/// `[threads]`: worker threads of Zenoh's runtimes. They run at `SCHED_OTHER` unless
/// `rx_priority` puts the receive workers at `SCHED_FIFO`. `max_blocking` bounds each runtime's
/// blocking-task threads (Zenoh's default is 50).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    /// Receive (`rx`, Zenoh's default 2): these threads run the subscriber callbacks.
    pub rx: usize,
    /// Transmit (`tx`, default 1).
    pub tx: usize,
    /// Application tasks (`app`, default 1).
    pub app: usize,
    /// Accepting links (`acc`, default 1).
    pub acc: usize,
    /// Network tasks (`net`, default 1).
    pub net: usize,
    /// Blocking-task threads per runtime (`max_blocking`, default 4 here).
    pub max_blocking: usize,
    /// `rx_priority = N` (opt-in): the receive workers, which run the subscriber callbacks, at
    /// `SCHED_FIFO` N, below every lane ([`Bridge::route`](crate::Bridge::route) refuses a lane
    /// at or below it). Needs `CAP_SYS_NICE` or `RLIMIT_RTPRIO` ≥ N.
    pub rx_priority: Option<u8>,
}

impl Default for Threads {
    fn default() -> Self {
        Threads {
            rx: 2,
            tx: 1,
            app: 1,
            acc: 1,
            net: 1,
            max_blocking: 4,
            rx_priority: None,
        }
    }
}

impl Threads {
    /// The value of Zenoh's `ZENOH_RUNTIME` variable these counts amount to.
    ///
    /// # Examples
    /// ```
    /// let t = lfrt_zenoh::Threads::default();
    /// assert!(t.zenoh_runtime().starts_with("(rx: (worker_threads: 2, max_blocking_threads: 4)"));
    /// ```
    pub fn zenoh_runtime(&self) -> String {
        let one = |n: usize| {
            format!(
                "(worker_threads: {n}, max_blocking_threads: {})",
                self.max_blocking
            )
        };
        format!(
            "(rx: {}, tx: {}, app: {}, acc: {}, net: {})",
            one(self.rx),
            one(self.tx),
            one(self.app),
            one(self.acc),
            one(self.net)
        )
    }

    /// Worker threads in all (not counting blocking-task threads, started on demand).
    pub fn workers(&self) -> usize {
        self.rx + self.tx + self.app + self.acc + self.net
    }
}

/// `[[route]]`: the lane that receives samples of some priorities, through an inbox of
/// `capacity` preallocated slots of `max_payload` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// The lane (lfrt lane) name.
    pub lane: String,
    /// The priorities it receives (`"real-time"`, `"interactive-high"`, `"interactive-low"`,
    /// `"data-high"`, `"data"`, `"data-low"`, `"background"`); each priority has at most one
    /// lane.
    pub priorities: Vec<Priority>,
    /// Samples that may wait for the lane (default 256). A sample that finds them all in use is
    /// dropped and counted (`full`), never waited for.
    pub capacity: usize,
    /// Most samples one turn of the lane delivers (default 32).
    pub batch: usize,
    /// Largest payload in bytes (default 1024); a larger sample is dropped and counted
    /// (`oversize`).
    pub max_payload: usize,
    pub(crate) index: usize,
    pub(crate) lane_line: Option<usize>,
    pub(crate) file: Option<PathBuf>,
}

/// `[[publish]]`: a key lanes publish on, at one priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishConfig {
    /// The key expression (no wildcards).
    pub key: String,
    /// Its priority (default `"data"`).
    pub priority: Priority,
    /// `congestion = "drop"` (the default for `data-high` … `background`: when Zenoh's queue
    /// for this priority is full it drops the sample, and the receiving bridge counts the gap,
    /// see [`Totals::gaps`](crate::Totals::gaps)) or `"block"` (the default for `real-time` and
    /// `interactive-*`: this priority's publisher thread waits for Zenoh; lanes never do, other
    /// priorities' threads go on, and a full outbox is counted).
    pub block: bool,
    /// Send without batching (`express`, default true).
    pub express: bool,
}

/// `[outbox]`: the queues from lanes to the publisher threads, one of each per priority that a
/// `[[publish]]` key uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxConfig {
    /// Puts of one priority that may wait for its publisher thread (default 256); a put that
    /// finds its priority's queue full is refused and counted.
    pub capacity: usize,
    /// Largest payload a lane may put, in bytes (default 1024).
    pub max_payload: usize,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        OutboxConfig {
            capacity: 256,
            max_payload: 1024,
        }
    }
}

/// A whole bridge configuration file.
///
/// # Examples
/// ```
/// let cfg = lfrt_zenoh::Config::parse(r#"
/// [session]
/// listen = ["tcp/127.0.0.1:7447"]
/// [[route]]
/// lane = "control"
/// priorities = ["real-time"]
/// [[subscribe]]
/// key = "robot/cmd/**"
/// "#)?;
/// assert_eq!(cfg.routes[0].lane, "control");
///
/// let bad = lfrt_zenoh::Config::parse("[[route]]\nlane = \"a\"\npriorities = [\"urgent\"]\n");
/// assert_eq!(
///     bad.unwrap_err().to_string(),
///     "3: route[0].priorities: `urgent` is not a Zenoh priority (real-time, interactive-high, interactive-low, data-high, data, data-low, background)"
/// );
/// # Ok::<(), lfrt_zenoh::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `[session]`.
    pub session: SessionConfig,
    /// `[threads]`.
    pub threads: Threads,
    /// `[[route]]`s.
    pub routes: Vec<RouteConfig>,
    /// `[[subscribe]]` keys.
    pub subscribe: Vec<String>,
    /// `[[publish]]`es.
    pub publish: Vec<PublishConfig>,
    /// `[outbox]`.
    pub outbox: OutboxConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    session: Option<RawSession>,
    threads: Option<RawThreads>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    subscribe: Vec<RawKey>,
    #[serde(default)]
    publish: Vec<RawPublish>,
    outbox: Option<RawOutbox>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSession {
    mode: Option<Spanned<String>>,
    #[serde(default)]
    listen: Vec<Spanned<String>>,
    #[serde(default)]
    connect: Vec<Spanned<String>>,
    max_links: Option<Spanned<i64>>,
    bulk_socket_buffer: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThreads {
    rx: Option<Spanned<i64>>,
    tx: Option<Spanned<i64>>,
    app: Option<Spanned<i64>>,
    acc: Option<Spanned<i64>>,
    net: Option<Spanned<i64>>,
    max_blocking: Option<Spanned<i64>>,
    rx_priority: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    lane: Spanned<String>,
    priorities: Spanned<Vec<Spanned<String>>>,
    capacity: Option<Spanned<i64>>,
    batch: Option<Spanned<i64>>,
    max_payload: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    key: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPublish {
    key: Spanned<String>,
    priority: Option<Spanned<String>>,
    congestion: Option<Spanned<String>>,
    express: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutbox {
    capacity: Option<Spanned<i64>>,
    max_payload: Option<Spanned<i64>>,
}

/// The TOML name of a priority.
pub fn priority_name(p: Priority) -> &'static str {
    match p {
        Priority::RealTime => "real-time",
        Priority::InteractiveHigh => "interactive-high",
        Priority::InteractiveLow => "interactive-low",
        Priority::DataHigh => "data-high",
        Priority::Data => "data",
        Priority::DataLow => "data-low",
        Priority::Background => "background",
    }
}

fn priority_named(name: &str) -> Option<Priority> {
    PRIORITIES.into_iter().find(|p| priority_name(*p) == name)
}

impl Config {
    /// Reads and checks a file.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file, line and field.
    pub fn load(file: &Path) -> Result<Config, Error> {
        let src = std::fs::read_to_string(file).map_err(|e| Error::Config {
            file: Some(file.to_path_buf()),
            line: None,
            field: "file".into(),
            message: format!("cannot read: {e}"),
        })?;
        parse(&src, Some(file))
    }

    /// Parses and checks TOML text, as [`load`](Self::load) does a file.
    ///
    /// # Errors
    /// [`Error::Config`] naming the line and field: syntax, unknown keys, wrong types, an
    /// unknown priority or mode, a priority routed to two lanes, numbers out of range, an
    /// invalid key expression, a `[[publish]]` key listed twice.
    pub fn parse(src: &str) -> Result<Config, Error> {
        parse(src, None)
    }
}

fn line_of(src: &str, at: usize) -> usize {
    src[..at.min(src.len())].matches('\n').count() + 1
}

fn parse(src: &str, file: Option<&Path>) -> Result<Config, Error> {
    let err = |at: usize, field: String, message: String| Error::Config {
        file: file.map(Path::to_path_buf),
        line: Some(line_of(src, at)),
        field,
        message,
    };
    let doc: Document = toml::from_str(src).map_err(|e| Error::Config {
        file: file.map(Path::to_path_buf),
        line: e.span().map(|s| line_of(src, s.start)),
        field: "(document)".into(),
        message: e.message().to_owned(),
    })?;
    let number =
        |v: &Option<Spanned<i64>>, field: String, min: i64, max: i64, default: usize| match v {
            None => Ok(default),
            Some(n) if (min..=max).contains(n.get_ref()) => Ok(*n.get_ref() as usize),
            Some(n) => Err(err(
                n.span().start,
                field,
                format!("must be {min} to {max}, not {}", n.get_ref()),
            )),
        };
    let key_expr =
        |k: &Spanned<String>, field: String, wild: bool| match zenoh::key_expr::KeyExpr::try_from(
            k.get_ref().as_str(),
        ) {
            Err(e) => Err(err(
                k.span().start,
                field,
                format!("`{}` is not a Zenoh key expression ({e})", k.get_ref()),
            )),
            Ok(_) if !wild && k.get_ref().contains('*') => Err(err(
                k.span().start,
                field,
                format!("`{}`: a publication key has no wildcards", k.get_ref()),
            )),
            Ok(_) => Ok(k.get_ref().clone()),
        };

    let mut session = SessionConfig {
        mode: Mode::Peer,
        listen: Vec::new(),
        connect: Vec::new(),
        max_links: 1,
        bulk_socket_buffer: 65_536,
    };
    let mut max_links_at = None;
    if let Some(s) = doc.session {
        session.mode = match &s.mode {
            None => Mode::Peer,
            Some(m) if m.get_ref() == "peer" => Mode::Peer,
            Some(m) if m.get_ref() == "client" => Mode::Client,
            Some(m) => {
                return Err(err(
                    m.span().start,
                    "session.mode".into(),
                    format!("`{}`: must be \"peer\" or \"client\"", m.get_ref()),
                ))
            }
        };
        let mut ranged = [0usize; 2];
        for (side, list, out) in [
            (0, &s.listen, &mut session.listen),
            (1, &s.connect, &mut session.connect),
        ] {
            for (i, e) in list.iter().enumerate() {
                let field = format!("session.{}[{i}]", ["listen", "connect"][side]);
                match crate::links::endpoint_priorities(e.get_ref()) {
                    Ok(Some(_)) => ranged[side] += 1,
                    Ok(None) => {}
                    Err(message) => return Err(err(e.span().start, field, message)),
                }
                out.push(e.get_ref().clone());
            }
        }
        session.max_links = ranged[0].max(ranged[1]).max(1);
        if let Some(n) = &s.max_links {
            session.max_links = number(&Some(n.clone()), "session.max_links".into(), 1, 16, 1)?;
            max_links_at = Some(n.span().start);
        }
        let most = ranged[0].max(ranged[1]);
        if let Some(at) = max_links_at.filter(|_| session.max_links < most) {
            return Err(err(
                at,
                "session.max_links".into(),
                format!(
                    "{} is fewer than the {most} `prio=` endpoints: a peer's links past the limit are refused, and their priorities then share a connection",
                    session.max_links
                ),
            ));
        }
        session.bulk_socket_buffer = number(
            &s.bulk_socket_buffer,
            "session.bulk_socket_buffer".into(),
            0,
            1 << 26,
            session.bulk_socket_buffer,
        )?;
        if (1..4096).contains(&session.bulk_socket_buffer) {
            let at = s.bulk_socket_buffer.as_ref().map_or(0, |v| v.span().start);
            return Err(err(
                at,
                "session.bulk_socket_buffer".into(),
                format!(
                    "{} bytes: 0 (the kernel's sizing) or at least 4096",
                    session.bulk_socket_buffer
                ),
            ));
        }
    }

    let d = Threads::default();
    let rx_line = doc
        .threads
        .as_ref()
        .and_then(|t| t.rx.as_ref())
        .map(|v| line_of(src, v.span().start));
    let threads = match doc.threads {
        None => Threads {
            rx: d.rx.max(session.max_links),
            ..d
        },
        Some(t) => Threads {
            rx: number(
                &t.rx,
                "threads.rx".into(),
                1,
                64,
                d.rx.max(session.max_links),
            )?,
            tx: number(&t.tx, "threads.tx".into(), 1, 64, d.tx)?,
            app: number(&t.app, "threads.app".into(), 1, 64, d.app)?,
            acc: number(&t.acc, "threads.acc".into(), 1, 64, d.acc)?,
            net: number(&t.net, "threads.net".into(), 1, 64, d.net)?,
            max_blocking: number(
                &t.max_blocking,
                "threads.max_blocking".into(),
                1,
                512,
                d.max_blocking,
            )?,
            rx_priority: match &t.rx_priority {
                None => None,
                Some(_) => {
                    Some(number(&t.rx_priority, "threads.rx_priority".into(), 1, 98, 1)? as u8)
                }
            },
        },
    };
    if threads.rx < session.max_links {
        return Err(Error::Config {
            file: file.map(Path::to_path_buf),
            line: rx_line,
            field: "threads.rx".into(),
            message: format!(
                "{} receive worker(s) for {} links per peer: a link's reads would wait behind another link's turn; set rx = {} or more",
                threads.rx, session.max_links, session.max_links
            ),
        });
    }

    let mut routes: Vec<RouteConfig> = Vec::new();
    let mut routed: [Option<usize>; 7] = [None; 7];
    for (i, r) in doc.route.into_iter().enumerate() {
        let field = |k: &str| format!("route[{i}].{k}");
        if r.lane.get_ref().is_empty() {
            return Err(err(
                r.lane.span().start,
                field("lane"),
                "must name a lane".into(),
            ));
        }
        if r.priorities.get_ref().is_empty() {
            return Err(err(
                r.priorities.span().start,
                field("priorities"),
                "must list at least one priority".into(),
            ));
        }
        let mut priorities = Vec::new();
        for name in r.priorities.get_ref() {
            let Some(p) = priority_named(name.get_ref()) else {
                let all: Vec<&str> = PRIORITIES.into_iter().map(priority_name).collect();
                return Err(err(
                    name.span().start,
                    field("priorities"),
                    format!(
                        "`{}` is not a Zenoh priority ({})",
                        name.get_ref(),
                        all.join(", ")
                    ),
                ));
            };
            let slot = &mut routed[p as usize - 1];
            if let Some(other) = *slot {
                return Err(err(
                    name.span().start,
                    field("priorities"),
                    format!("`{}` is already routed by route[{other}]", name.get_ref()),
                ));
            }
            *slot = Some(i);
            priorities.push(p);
        }
        let capacity = number(&r.capacity, field("capacity"), 1, 1 << 20, 256)?;
        let max_payload = number(&r.max_payload, field("max_payload"), 1, 1 << 24, 1024)?;
        let bytes = capacity as u64 * (max_payload + crate::MAX_KEY_BYTES) as u64;
        if bytes > MAX_SLOT_BYTES {
            return Err(err(
                r.lane.span().start,
                field("capacity"),
                format!("capacity × (max_payload + {} key bytes) is {} MiB, above the {} MiB a route may preallocate", crate::MAX_KEY_BYTES, bytes >> 20, MAX_SLOT_BYTES >> 20),
            ));
        }
        routes.push(RouteConfig {
            lane: r.lane.get_ref().clone(),
            priorities,
            capacity,
            batch: number(&r.batch, field("batch"), 1, 65_536, 32)?,
            max_payload,
            index: i,
            lane_line: Some(line_of(src, r.lane.span().start)),
            file: file.map(Path::to_path_buf),
        });
    }

    let mut subscribe: Vec<String> = Vec::new();
    for (i, s) in doc.subscribe.iter().enumerate() {
        let key = key_expr(&s.key, format!("subscribe[{i}].key"), true)?;
        // Each subscription forwards what it matches: a sample two keys match would reach its
        // lane twice.
        let this = zenoh::key_expr::KeyExpr::try_from(key.as_str()).map_err(|e| {
            err(
                s.key.span().start,
                format!("subscribe[{i}].key"),
                e.to_string(),
            )
        })?;
        for (j, other) in subscribe.iter().enumerate() {
            let that = zenoh::key_expr::KeyExpr::try_from(other.as_str()).map_err(|e| {
                err(
                    s.key.span().start,
                    format!("subscribe[{j}].key"),
                    e.to_string(),
                )
            })?;
            if this.intersects(&that) {
                return Err(err(
                    s.key.span().start,
                    format!("subscribe[{i}].key"),
                    format!("`{key}` overlaps subscribe[{j}] (`{other}`): a sample both match would reach its lane twice; subscribe once to a key that covers both"),
                ));
            }
        }
        subscribe.push(key);
    }

    let mut publish: Vec<PublishConfig> = Vec::new();
    for (i, p) in doc.publish.iter().enumerate() {
        let field = |k: &str| format!("publish[{i}].{k}");
        let key = key_expr(&p.key, field("key"), false)?;
        if publish.iter().any(|q| q.key == key) {
            return Err(err(
                p.key.span().start,
                field("key"),
                format!("`{key}` is listed twice"),
            ));
        }
        let priority = match &p.priority {
            None => Priority::Data,
            Some(n) => priority_named(n.get_ref()).ok_or_else(|| {
                err(
                    n.span().start,
                    field("priority"),
                    format!("`{}` is not a Zenoh priority", n.get_ref()),
                )
            })?,
        };
        let block = match &p.congestion {
            // Data priorities drop under congestion (counted as gaps where they arrive); the
            // real-time and interactive ones wait in their own publisher thread, which holds up
            // no other priority.
            None => (priority as u8) < (Priority::DataHigh as u8),
            Some(c) if c.get_ref() == "drop" => false,
            Some(c) if c.get_ref() == "block" => true,
            Some(c) => {
                return Err(err(
                    c.span().start,
                    field("congestion"),
                    format!("`{}`: must be \"drop\" or \"block\"", c.get_ref()),
                ))
            }
        };
        publish.push(PublishConfig {
            key,
            priority,
            block,
            express: p.express.unwrap_or(true),
        });
    }

    let od = OutboxConfig::default();
    let outbox = match doc.outbox {
        None => od,
        Some(o) => {
            let c = OutboxConfig {
                capacity: number(
                    &o.capacity,
                    "outbox.capacity".into(),
                    1,
                    1 << 20,
                    od.capacity,
                )?,
                max_payload: number(
                    &o.max_payload,
                    "outbox.max_payload".into(),
                    1,
                    1 << 24,
                    od.max_payload,
                )?,
            };
            let bytes = c.capacity as u64 * c.max_payload as u64;
            if bytes > MAX_SLOT_BYTES {
                let at = o
                    .capacity
                    .as_ref()
                    .or(o.max_payload.as_ref())
                    .map_or(0, |v| v.span().start);
                return Err(err(
                    at,
                    "outbox.capacity".into(),
                    format!("capacity × max_payload is {} MiB, above the {} MiB the outbox may preallocate", bytes >> 20, MAX_SLOT_BYTES >> 20),
                ));
            }
            c
        }
    };

    Ok(Config {
        session,
        threads,
        routes,
        subscribe,
        publish,
        outbox,
    })
}
