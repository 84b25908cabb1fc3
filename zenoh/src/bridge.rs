//! The bridge: a Zenoh session, routes from priorities to lane inboxes, the publisher threads
//! behind the outbox, and the watcher that counts peers and links.
//!
//! ```text
//!  Zenoh rx-N (SCHED_OTHER, or FIFO rx_priority)      lane (SCHED_FIFO, above rx_priority)
//!  callback(sample)                                   ─────────────────────────────────────
//!    sequence attachment? count a gap per source
//!    priority → route → free slot → post(slot, 8 - p) ─▶ inbox (priority order if the route
//!                                                        carries several) ─▶ handler
//!
//!  "lfrt-zenoh-watch" (SCHED_OTHER), every 100 ms: peers joined/lost, links established,
//!    rx-N threads not at rx_priority yet
//! ```

use crate::config::{priority_name, Config, Mode};
use crate::outbox::{self, Outbox, SEQUENCE_BYTES};
use crate::slots::Slots;
use crate::{links, threads, zenoh_error, Error, MAX_KEY_BYTES, PRIORITIES};
use crossbeam_queue::ArrayQueue;
use lfrt::inbox::{Inbox, Order, Poster};
use lfrt::task::time::now_ns;
use lfrt::{Context, PiMutex, Policy, Runtime};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zenoh::qos::{CongestionControl, Priority};
use zenoh::sample::Sample;
use zenoh::{Session, Wait};

/// How often the watcher looks at peers, links and receive threads, and how long an idle
/// publisher thread parks before it looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// Sources (outbox × key) whose sequence numbers a bridge follows at once; samples from more
/// are delivered but their gaps are not counted (`untracked`).
const SOURCES: usize = 64;

/// One received sample, as a lane handler sees it: borrowed from the route's slot.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The sample's key.
    pub key: &'a str,
    /// Its priority.
    pub priority: Priority,
    /// Its payload.
    pub payload: &'a [u8],
    /// When Zenoh's callback handed it to the lane (`CLOCK_MONOTONIC` ns): the time before is
    /// Zenoh's own path, the time after is the hand-off to the lane.
    pub received_ns: u64,
}

/// The counters of a bridge (they only grow, except the gauges `peers`, `links`, `rx_fifo`).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) forwarded: [AtomicU64; 7],
    pub(crate) delivered: [AtomicU64; 7],
    pub(crate) full: [AtomicU64; 7],
    pub(crate) oversize: [AtomicU64; 7],
    pub(crate) unrouted: [AtomicU64; 7],
    pub(crate) gaps: [AtomicU64; 7],
    pub(crate) untracked: AtomicU64,
    pub(crate) outbox_sent: [AtomicU64; 7],
    pub(crate) outbox_full: [AtomicU64; 7],
    pub(crate) outbox_too_large: [AtomicU64; 7],
    pub(crate) put_errors: AtomicU64,
    pub(crate) put_without_peer: AtomicU64,
    pub(crate) peers: AtomicU64,
    pub(crate) peers_joined: AtomicU64,
    pub(crate) peers_lost: AtomicU64,
    pub(crate) links: AtomicU64,
    pub(crate) rx_fifo: AtomicU64,
    pub(crate) rx_errors: AtomicU64,
}

/// A snapshot of a bridge's counters ([`Bridge::totals`]). Arrays are indexed by priority,
/// highest first (`p as usize - 1`, see [`PRIORITIES`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// The lane each priority is routed to (`None`: no route).
    pub lanes: [Option<String>; 7],
    /// Samples posted to their lane's inbox.
    pub forwarded: [u64; 7],
    /// Samples handed to a lane handler.
    pub delivered: [u64; 7],
    /// Samples dropped because their route had no free slot (the lane was behind).
    pub full: [u64; 7],
    /// Samples dropped because their payload or key was larger than the route allows.
    pub oversize: [u64; 7],
    /// Samples dropped because no route takes their priority.
    pub unrouted: [u64; 7],
    /// Samples another lfrt-zenoh outbox sent that never arrived here: the holes in each
    /// source's sequence numbers (Zenoh dropped them on the way: congestion `drop` in the
    /// sender, a link that went down). A source that restarts begins a new sequence.
    pub gaps: [u64; 7],
    /// Samples with a sequence number whose source could not be followed (more than 64
    /// sources at once): delivered, but their gaps are not counted.
    pub untracked: u64,
    /// Outbox puts sent to Zenoh by the publisher threads, per priority.
    pub outbox_sent: [u64; 7],
    /// Outbox puts refused because their priority's queue was full.
    pub outbox_full: [u64; 7],
    /// Outbox puts refused because the payload exceeded `[outbox] max_payload`.
    pub outbox_too_large: [u64; 7],
    /// Zenoh `put`s that returned an error.
    pub put_errors: u64,
    /// Puts sent while no peer or router was connected (they reach nobody).
    pub put_without_peer: u64,
    /// Peers (or routers) connected now.
    pub peers: u64,
    /// Times the number of connected peers went up.
    pub peers_joined: u64,
    /// Times it went down (a peer or router went away).
    pub peers_lost: u64,
    /// Established TCP connections on the configured endpoints, at the watcher's last look.
    pub links: u64,
    /// Zenoh receive threads at `[threads] rx_priority`, at the watcher's last look.
    pub rx_fifo: u64,
    /// Times the watcher failed to set a receive thread's policy (the kernel refused).
    pub rx_errors: u64,
}

impl Totals {
    /// Samples dropped on the receive side, of any cause and priority, gaps included.
    pub fn dropped(&self) -> u64 {
        (0..7)
            .map(|i| self.full[i] + self.oversize[i] + self.unrouted[i] + self.gaps[i])
            .sum()
    }
}

impl fmt::Display for Totals {
    /// One line per priority that saw traffic or has a route, then the outbox and peers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in PRIORITIES.into_iter().enumerate() {
            let seen = self.forwarded[i]
                + self.full[i]
                + self.oversize[i]
                + self.unrouted[i]
                + self.gaps[i]
                + self.outbox_sent[i]
                + self.outbox_full[i]
                + self.outbox_too_large[i];
            if seen == 0 && self.lanes[i].is_none() {
                continue;
            }
            writeln!(
                f,
                "zenoh {:<16} lane={:<10} forwarded={} delivered={} full={} oversize={} unrouted={} gaps={} outbox_sent={} outbox_full={} outbox_too_large={}",
                priority_name(p),
                self.lanes[i].as_deref().unwrap_or("-"),
                self.forwarded[i],
                self.delivered[i],
                self.full[i],
                self.oversize[i],
                self.unrouted[i],
                self.gaps[i],
                self.outbox_sent[i],
                self.outbox_full[i],
                self.outbox_too_large[i]
            )?;
        }
        write!(
            f,
            "zenoh put_errors={} without_peer={} untracked={}; peers={} joined={} lost={}; links={} rx_fifo={} rx_errors={}",
            self.put_errors,
            self.put_without_peer,
            self.untracked,
            self.peers,
            self.peers_joined,
            self.peers_lost,
            self.links,
            self.rx_fifo,
            self.rx_errors
        )
    }
}

/// One sample waiting in a lane inbox: where its bytes are.
#[derive(Debug, Clone, Copy)]
struct Delivery {
    received_ns: u64,
    slot: u32,
    key_len: u16,
    len: u32,
    priority: u8,
}

/// What the receive callback needs of one route.
struct Route {
    slots: Arc<Slots>,
    poster: Poster<Delivery>,
    max_payload: usize,
}

/// The last sequence number seen from each source (an outbox × key), in a fixed table.
///
/// Zenoh may run callbacks on several receive threads at once, so the table sits behind a
/// priority-inheritance mutex (the receive threads may run at `SCHED_FIFO`); it is held for
/// one probe of at most [`SOURCES`] entries and never across a call out.
struct Sequences {
    /// `(source hash, last sequence)`; hash 0 marks a free entry.
    table: PiMutex<[(u64, u64); SOURCES]>,
}

impl Sequences {
    /// Records `seq` from `source`; returns the samples missing before it (0 if in order, if
    /// first seen, or if the source restarted), or `None` if the table is full.
    fn observe(&self, source: u64, seq: u64) -> Option<u64> {
        let source = source.max(1);
        let mut t = self.table.lock();
        let start = (source % SOURCES as u64) as usize;
        for i in 0..SOURCES {
            let e = &mut t[(start + i) % SOURCES];
            if e.0 == source {
                let missing = seq.saturating_sub(e.1 + 1);
                // A number at or below the last one: the source restarted its sequence.
                e.1 = seq;
                return Some(missing);
            }
            if e.0 == 0 {
                *e = (source, seq);
                return Some(0);
            }
        }
        None
    }
}

/// FNV-1a of `bytes`, seeded with `seed` (the source id of a key).
fn source_hash(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What Zenoh's callbacks share: the routes by priority, the sequences, the counters.
struct Forwarder {
    by_priority: [Option<usize>; 7],
    routes: Vec<Route>,
    sequences: Sequences,
    stats: Arc<Stats>,
}

impl Forwarder {
    /// Runs on a Zenoh receive thread: counts a gap in the sample's sequence, copies the sample
    /// into a free slot of its route and posts it to the lane. Never waits: no slot or a full
    /// inbox is a counted drop.
    fn forward(&self, sample: &Sample) {
        let p = sample.priority() as usize - 1;
        let s = &*self.stats;
        let key = sample.key_expr().as_str().as_bytes();
        if let Some(a) = sample.attachment().filter(|a| a.len() == SEQUENCE_BYTES) {
            let a = a.to_bytes();
            let id = u64::from_le_bytes(a[..8].try_into().unwrap_or_default());
            let seq = u64::from_le_bytes(a[8..16].try_into().unwrap_or_default());
            match self.sequences.observe(source_hash(id, key), seq) {
                Some(missing) => s.gaps[p].fetch_add(missing, Relaxed),
                None => s.untracked.fetch_add(1, Relaxed),
            };
        }
        let Some(route) = self.by_priority[p].map(|r| &self.routes[r]) else {
            s.unrouted[p].fetch_add(1, Relaxed);
            return;
        };
        let payload = sample.payload();
        if key.len() > MAX_KEY_BYTES || payload.len() > route.max_payload {
            s.oversize[p].fetch_add(1, Relaxed);
            return;
        }
        let Some(slot) = route.slots.take() else {
            s.full[p].fetch_add(1, Relaxed);
            return;
        };
        // SAFETY: `slot` was just taken from the free list, so this thread owns it.
        let bytes = unsafe { route.slots.write(slot) };
        bytes[..key.len()].copy_from_slice(key);
        let mut at = MAX_KEY_BYTES;
        for piece in payload.slices() {
            bytes[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        let d = Delivery {
            received_ns: now_ns(),
            slot,
            key_len: key.len() as u16,
            len: payload.len() as u32,
            priority: p as u8,
        };
        // Inbox priority: higher first, so real-time (index 0) posts as 7.
        match route.poster.post_with_priority(7 - p as u8, d) {
            Ok(()) => {
                s.forwarded[p].fetch_add(1, Relaxed);
            }
            Err(full) => {
                route.slots.give(full.0.slot);
                s.full[p].fetch_add(1, Relaxed);
            }
        }
    }
}

/// Gives a delivered slot back even if the handler panics.
struct GiveBack<'a>(&'a Slots, u32);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.0.give(self.1);
    }
}

/// A Zenoh session serving lfrt lanes: routes from priorities to lanes, subscriptions, and an
/// [`Outbox`] with a publisher thread per priority.
///
/// # Examples
/// ```no_run
/// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// let cfg = lfrt_zenoh::Config::parse(r#"
/// [session]
/// listen = ["tcp/127.0.0.1:7447?prio=1-3", "tcp/127.0.0.1:7448?prio=4-7"]
/// [[route]]
/// lane = "control"
/// priorities = ["real-time"]
/// [[subscribe]]
/// key = "robot/cmd/**"
/// "#)?;
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// let mut bridge = lfrt_zenoh::Bridge::open(&cfg)?;
/// bridge.route(&rt, "control", |cmd: &lfrt_zenoh::Received, _ctx| {
///     let _ = (cmd.key, cmd.payload);
/// })?;
/// let _outbox = bridge.start()?;
/// rt.start()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Bridge {
    cfg: Config,
    session: Session,
    routes: Vec<Option<Route>>,
    subscribers: Vec<zenoh::pubsub::Subscriber<()>>,
    stats: Arc<Stats>,
    outbox: Option<Outbox>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl fmt::Debug for Bridge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bridge")
            .field("session", &self.cfg.session)
            .field("routes", &self.cfg.routes.len())
            .field("started", &self.outbox.is_some())
            .finish_non_exhaustive()
    }
}

/// Sets Zenoh's runtime thread counts for this process (`ZENOH_RUNTIME`), or checks that they
/// are already what `cfg` asks for.
fn configure_threads(cfg: &Config) -> Result<(), Error> {
    let want = cfg.threads.zenoh_runtime();
    match std::env::var("ZENOH_RUNTIME") {
        Ok(env) if env == want => Ok(()),
        Ok(env) => Err(Error::Threads { env, config: want }),
        Err(_) => {
            // Zenoh reads the variable once, when its first runtime starts: if one runs already,
            // setting it now would change nothing and [threads] would silently not apply.
            let running = crate::zenoh_threads().len();
            if running > 0 {
                return Err(Error::Threads {
                    env: format!("unset, and Zenoh's runtimes already run {running} threads"),
                    config: want,
                });
            }
            // `set_var` is serialised with the standard library's own environment reads, not
            // with `getenv` from C code on other threads: open the first bridge during set-up,
            // or export ZENOH_RUNTIME (`lfrt-zenoh doctor CONFIG` prints the value).
            std::env::set_var("ZENOH_RUNTIME", &want);
            Ok(())
        }
    }
}

fn zenoh_config(cfg: &Config) -> Result<zenoh::Config, Error> {
    let mut z = zenoh::Config::default();
    let endpoints = |v: &[String]| {
        let e: Vec<String> = v
            .iter()
            .map(|e| links::zenoh_endpoint(e, cfg.session.bulk_socket_buffer))
            .collect();
        serde_json_array(&e)
    };
    let set = |z: &mut zenoh::Config, key: &str, value: String| {
        z.insert_json5(key, &value).map_err(|e| Error::Config {
            file: None,
            line: None,
            field: format!("session ({key})"),
            message: e.to_string(),
        })
    };
    let mode = match cfg.session.mode {
        Mode::Peer => "\"peer\"",
        Mode::Client => "\"client\"",
    };
    set(&mut z, "mode", mode.into())?;
    set(&mut z, "listen/endpoints", endpoints(&cfg.session.listen))?;
    set(&mut z, "connect/endpoints", endpoints(&cfg.session.connect))?;
    // A link per priority range: both sides must accept that many from one peer.
    set(
        &mut z,
        "transport/unicast/max_links",
        cfg.session.max_links.to_string(),
    )?;
    // Nothing but the endpoints written in the configuration: no multicast discovery, no
    // gossip about other peers' locators.
    set(&mut z, "scouting/multicast/enabled", "false".into())?;
    set(&mut z, "scouting/gossip/enabled", "false".into())?;
    Ok(z)
}

fn serde_json_array(v: &[String]) -> String {
    let quoted: Vec<String> = v
        .iter()
        .map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("[{}]", quoted.join(","))
}

impl Bridge {
    /// Configures Zenoh's threads (`[threads]`: counts, and with `rx_priority` the receive
    /// workers at `SCHED_FIFO`) and opens the session (`[session]`, with `max_links` links per
    /// peer). Call it from a normal (`SCHED_OTHER`) thread: Zenoh's other threads inherit the
    /// policy of the thread that starts them.
    ///
    /// # Errors
    /// [`Error::Threads`] if `ZENOH_RUNTIME` says otherwise or Zenoh's runtimes already run
    /// without it; [`Error::Privilege`] if `rx_priority` is refused; [`Error::Zenoh`] if the
    /// session cannot open (in client mode: no router answers; an endpoint cannot be listened
    /// on).
    pub fn open(cfg: &Config) -> Result<Bridge, Error> {
        configure_threads(cfg)?;
        let stats = Arc::new(Stats::default());
        if let Some(prio) = cfg.threads.rx_priority {
            threads::raise_rx(prio)?;
        }
        let session = zenoh::open(zenoh_config(cfg)?)
            .wait()
            .map_err(|e| zenoh_error("opening the session", e))?;
        let mut bridge = Bridge {
            routes: (0..cfg.routes.len()).map(|_| None).collect(),
            cfg: cfg.clone(),
            session,
            subscribers: Vec::new(),
            stats,
            outbox: None,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        let watch = Watch {
            cfg: bridge.cfg.clone(),
            session: bridge.session.clone(),
            stats: bridge.stats.clone(),
            stop: bridge.stop.clone(),
        };
        let watcher = std::thread::Builder::new()
            .name("lfrt-zenoh-watch".into())
            .spawn(move || watch.run())
            .map_err(Error::Io)?;
        bridge.threads.push(watcher);
        Ok(bridge)
    }

    /// The Zenoh session (e.g. for queries or liveliness of one's own).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Gives the route of lane `lane` its handler and registers the route's inbox in that lane
    /// of `rt`. Every `[[route]]` needs one before [`start`](Self::start). A route that carries
    /// several priorities delivers the highest first within each batch.
    ///
    /// # Errors
    /// [`Error::Route`] if no `[[route]]` names `lane` or it has a handler already;
    /// [`Error::Config`] pointing at the route's `lane` if `rt` has no such lane, or at
    /// `threads.rx_priority` if a real-time lane of `rt` is not above it;
    /// [`Error::Lane`] / [`Error::Io`] if the inbox cannot be built or registered.
    pub fn route<H>(&mut self, rt: &Runtime, lane: &str, mut handler: H) -> Result<(), Error>
    where
        H: FnMut(&Received<'_>, &mut Context) + Send + 'static,
    {
        let Some(i) = self.cfg.routes.iter().position(|r| r.lane == lane) else {
            return Err(Error::Route(format!("no [[route]] has lane = \"{lane}\"")));
        };
        if self.routes[i].is_some() {
            return Err(Error::Route(format!(
                "route[{i}] (lane {lane}) has a handler already"
            )));
        }
        let rc = &self.cfg.routes[i];
        let target = rt.lane(lane).map_err(|e| Error::Config {
            file: rc.file.clone(),
            line: rc.lane_line,
            field: format!("route[{}].lane", rc.index),
            message: e.to_string(),
        })?;
        if let Some(rx) = self.cfg.threads.rx_priority {
            let at_or_below = rt
                .config()
                .lanes
                .iter()
                .find(|g| matches!(g.policy, Policy::Fifo | Policy::Rr) && g.priority <= rx);
            if let Some(g) = at_or_below {
                return Err(Error::Config {
                    file: rc.file.clone(),
                    line: None,
                    field: "threads.rx_priority".into(),
                    message: format!(
                        "{rx} is not below lane `{}` (SCHED_FIFO {}): a flood on Zenoh's receive threads would hold that lane off its CPU; set rx_priority below every lane",
                        g.name, g.priority
                    ),
                });
            }
        }
        let slots = Arc::new(Slots::new(rc.capacity, MAX_KEY_BYTES + rc.max_payload));
        let stats = self.stats.clone();
        let mine = slots.clone();
        let order = if rc.priorities.len() > 1 {
            Order::Priority
        } else {
            Order::Fifo
        };
        let (inbox, poster) = Inbox::new(
            rc.capacity,
            rc.batch,
            order,
            move |d: Delivery, ctx: &mut Context| {
                let _give_back = GiveBack(&mine, d.slot);
                // SAFETY: the slot's index came through the inbox, so this delivery owns it until
                // `_give_back` returns it; the writer's borrow ended before it posted.
                let bytes = unsafe { mine.read(d.slot) };
                let key = std::str::from_utf8(&bytes[..d.key_len as usize]).unwrap_or("");
                let payload = &bytes[MAX_KEY_BYTES..MAX_KEY_BYTES + d.len as usize];
                handler(
                    &Received {
                        key,
                        priority: PRIORITIES[d.priority as usize],
                        payload,
                        received_ns: d.received_ns,
                    },
                    ctx,
                );
                stats.delivered[d.priority as usize].fetch_add(1, Relaxed);
            },
        )
        .map_err(Error::Io)?;
        target.registry().register(Box::new(inbox))?;
        self.routes[i] = Some(Route {
            slots,
            poster,
            max_payload: rc.max_payload,
        });
        Ok(())
    }

    /// Declares the subscriptions (samples flow to the lanes from now on), declares the
    /// publications and starts a publisher thread per priority they use. Returns the outbox
    /// lanes put through.
    ///
    /// # Errors
    /// [`Error::Route`] if a route has no handler; [`Error::Zenoh`] if a declaration fails;
    /// [`Error::Io`] if a publisher thread cannot start.
    pub fn start(&mut self) -> Result<Outbox, Error> {
        if let Some(o) = &self.outbox {
            return Ok(o.clone());
        }
        let mut routes = Vec::new();
        let mut by_priority = [None; 7];
        for (i, r) in self.routes.iter_mut().enumerate() {
            let Some(route) = r.take() else {
                return Err(Error::Route(format!(
                    "route[{i}] (lane {}) has no handler: call Bridge::route first",
                    self.cfg.routes[i].lane
                )));
            };
            for p in &self.cfg.routes[i].priorities {
                by_priority[*p as usize - 1] = Some(routes.len());
            }
            routes.push(route);
        }
        let forwarder = Arc::new(Forwarder {
            by_priority,
            routes,
            sequences: Sequences {
                table: PiMutex::new([(0, 0); SOURCES]),
            },
            stats: self.stats.clone(),
        });
        for key in &self.cfg.subscribe {
            let f = forwarder.clone();
            let sub = self
                .session
                .declare_subscriber(key.clone())
                .callback(move |sample| f.forward(&sample))
                .wait()
                .map_err(|e| zenoh_error("declaring a subscriber", e))?;
            self.subscribers.push(sub);
        }
        let mut publishers = Vec::new();
        for p in &self.cfg.publish {
            let publisher = self
                .session
                .declare_publisher(p.key.clone())
                .priority(p.priority)
                .congestion_control(if p.block {
                    CongestionControl::Block
                } else {
                    CongestionControl::Drop
                })
                .express(p.express)
                .wait()
                .map_err(|e| zenoh_error("declaring a publisher", e))?;
            publishers.push(publisher);
        }
        // One class per priority the keys use, highest first.
        let mut used: Vec<usize> = self
            .cfg
            .publish
            .iter()
            .map(|p| p.priority as usize - 1)
            .collect();
        used.sort_unstable();
        used.dedup();
        let oc = self.cfg.outbox;
        let shared = Arc::new(outbox::Shared {
            classes: used
                .iter()
                .map(|&priority| outbox::Class {
                    priority,
                    slots: Slots::new(oc.capacity, oc.max_payload),
                    queue: ArrayQueue::new(oc.capacity),
                    thread: OnceLock::new(),
                })
                .collect(),
            keys: self.cfg.publish.iter().map(|p| p.key.clone()).collect(),
            class_of: self
                .cfg
                .publish
                .iter()
                .map(|p| used.binary_search(&(p.priority as usize - 1)).unwrap_or(0))
                .collect(),
            stats: self.stats.clone(),
        });
        let publishers = Arc::new(publishers);
        // An id for this outbox's sequence numbers: a restart of the process is a new source.
        let id = now_ns() ^ (u64::from(std::process::id()) << 40) | 1;
        for class in 0..shared.classes.len() {
            let (stop, work, publishers) = (self.stop.clone(), shared.clone(), publishers.clone());
            let name = format!("lfrt-zenoh-pub{}", shared.classes[class].priority + 1);
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || publish_loop(&work, class, &publishers, id, &stop))
                .map_err(Error::Io)?;
            let _ = shared.classes[class].thread.set(thread.thread().clone());
            self.threads.push(thread);
        }
        let outbox = Outbox { shared };
        self.outbox = Some(outbox.clone());
        Ok(outbox)
    }

    /// Waits until at least `n` peers (or routers) are connected and every `prio=` endpoint
    /// has an established connection, for at most `timeout` in all.
    ///
    /// # Errors
    /// [`Error::NoPeer`] naming the `connect` endpoints if no peer comes;
    /// [`Error::MissingLinks`] naming the `prio=` endpoints without a connection (the peer
    /// does not connect to each of them, or allows fewer links: `max_links`).
    pub fn wait_for_peers(&self, n: usize, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            let peers = self.connected() >= n;
            let missing: Vec<String> = self
                .links()
                .into_iter()
                .filter(|l| l.priorities.is_some() && l.established == 0)
                .map(|l| l.endpoint)
                .collect();
            if peers && missing.is_empty() {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                let waited_ms = timeout.as_millis() as u64;
                return Err(if peers {
                    Error::MissingLinks { missing, waited_ms }
                } else {
                    Error::NoPeer {
                        connect: self.cfg.session.connect.clone(),
                        waited_ms,
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Peers and routers connected now (asks Zenoh; allocates).
    pub fn connected(&self) -> usize {
        connected(&self.session)
    }

    /// The configured endpoints and the TCP connections this process has on each now (asks its
    /// own sockets, see [`links()`](crate::links()); allocates).
    pub fn links(&self) -> Vec<crate::Link> {
        links::links(&self.cfg, std::process::id())
    }

    /// The counters now, with the lane of each priority.
    pub fn totals(&self) -> Totals {
        let s = &*self.stats;
        let mut t = Totals::default();
        for r in &self.cfg.routes {
            for p in &r.priorities {
                t.lanes[*p as usize - 1] = Some(r.lane.clone());
            }
        }
        let read = |a: &[AtomicU64; 7]| std::array::from_fn(|i| a[i].load(Relaxed));
        t.forwarded = read(&s.forwarded);
        t.delivered = read(&s.delivered);
        t.full = read(&s.full);
        t.oversize = read(&s.oversize);
        t.unrouted = read(&s.unrouted);
        t.gaps = read(&s.gaps);
        t.untracked = s.untracked.load(Relaxed);
        t.outbox_sent = read(&s.outbox_sent);
        t.outbox_full = read(&s.outbox_full);
        t.outbox_too_large = read(&s.outbox_too_large);
        t.put_errors = s.put_errors.load(Relaxed);
        t.put_without_peer = s.put_without_peer.load(Relaxed);
        t.peers = s.peers.load(Relaxed);
        t.peers_joined = s.peers_joined.load(Relaxed);
        t.peers_lost = s.peers_lost.load(Relaxed);
        t.links = s.links.load(Relaxed);
        t.rx_fifo = s.rx_fifo.load(Relaxed);
        t.rx_errors = s.rx_errors.load(Relaxed);
        t
    }

    /// Stops the watcher and the publisher threads (after they sent what was queued).
    fn stop_threads(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }

    /// Undeclares the subscriptions, stops the publisher threads (after they sent what was
    /// queued) and the watcher, and closes the session; returns the final counters. Either
    /// order with the runtime's shutdown is safe: samples that arrive for a lane already
    /// stopped fill its route's slots and are then counted as `full`.
    ///
    /// # Errors
    /// [`Error::Zenoh`] if Zenoh fails to close the session.
    pub fn close(mut self) -> Result<Totals, Error> {
        for s in self.subscribers.drain(..) {
            let _ = s.undeclare().wait();
        }
        self.stop_threads();
        let totals = self.totals();
        self.session
            .close()
            .wait()
            .map_err(|e| zenoh_error("closing the session", e))?;
        Ok(totals)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn connected(session: &Session) -> usize {
    let info = session.info();
    info.peers_zid().wait().count() + info.routers_zid().wait().count()
}

/// A publisher thread: sends what lanes put on the keys of one priority, each with its key's
/// sequence number, until told to stop and its queue is empty.
fn publish_loop(
    work: &outbox::Shared,
    class: usize,
    publishers: &[zenoh::pubsub::Publisher<'static>],
    id: u64,
    stop: &AtomicBool,
) {
    let s = &*work.stats;
    let c = &work.classes[class];
    let mut seq = vec![0u64; publishers.len()];
    loop {
        while let Some(out) = c.queue.pop() {
            // SAFETY: the index came through the queue, so this thread owns the slot until it
            // gives it back below.
            let bytes = unsafe { c.slots.read(out.slot) }[..out.len as usize].to_vec();
            c.slots.give(out.slot);
            if s.peers.load(Relaxed) == 0 {
                s.put_without_peer.fetch_add(1, Relaxed);
            }
            let key = out.key as usize;
            seq[key] += 1;
            let mut attachment = [0u8; SEQUENCE_BYTES];
            attachment[..8].copy_from_slice(&id.to_le_bytes());
            attachment[8..].copy_from_slice(&seq[key].to_le_bytes());
            match publishers[key]
                .put(bytes)
                .attachment(attachment.to_vec())
                .wait()
            {
                Ok(()) => s.outbox_sent[c.priority].fetch_add(1, Relaxed),
                Err(_) => s.put_errors.fetch_add(1, Relaxed),
            };
        }
        if stop.load(Relaxed) && c.queue.is_empty() {
            return;
        }
        std::thread::park_timeout(POLL);
    }
}

/// What the watcher thread looks after.
struct Watch {
    cfg: Config,
    session: Session,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    /// Every [`POLL`]: counts peers joining and leaving, the links established, and puts
    /// receive threads Zenoh started since at `rx_priority`.
    fn run(&self) {
        let s = &*self.stats;
        let mut peers = 0;
        while !self.stop.load(Relaxed) {
            let now = connected(&self.session);
            if now > peers {
                s.peers_joined.fetch_add(1, Relaxed);
            } else if now < peers {
                s.peers_lost.fetch_add(1, Relaxed);
            }
            peers = now;
            s.peers.store(peers as u64, Relaxed);
            let up: usize = links::links(&self.cfg, std::process::id())
                .iter()
                .map(|l| l.established)
                .sum();
            s.links.store(up as u64, Relaxed);
            if let Some(prio) = self.cfg.threads.rx_priority {
                if threads::rescan_rx(prio).is_err() {
                    s.rx_errors.fetch_add(1, Relaxed);
                }
                let want = format!("fifo {prio}");
                let fifo = crate::zenoh_threads()
                    .iter()
                    .filter(|t| t.name.starts_with("rx-") && t.policy == want)
                    .count();
                s.rx_fifo.store(fifo as u64, Relaxed);
            }
            std::thread::park_timeout(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_gap_is_counted_once_and_a_restart_starts_over() {
        let s = Sequences {
            table: PiMutex::new([(0, 0); SOURCES]),
        };
        assert_eq!(
            s.observe(7, 5),
            Some(0),
            "first seen: nothing missing before it"
        );
        assert_eq!(s.observe(7, 6), Some(0));
        assert_eq!(s.observe(7, 9), Some(2), "7 and 8 never came");
        assert_eq!(s.observe(7, 1), Some(0), "a restart");
        assert_eq!(s.observe(7, 2), Some(0));
        assert_eq!(
            s.observe(8, 3),
            Some(0),
            "another source has its own sequence"
        );
    }

    #[test]
    fn a_full_source_table_is_reported_not_guessed() {
        let s = Sequences {
            table: PiMutex::new([(0, 0); SOURCES]),
        };
        for source in 1..=SOURCES as u64 {
            assert_eq!(s.observe(source, 1), Some(0));
        }
        assert_eq!(s.observe(SOURCES as u64 + 1, 1), None);
        assert_eq!(s.observe(3, 3), Some(1), "known sources are still followed");
    }
}
