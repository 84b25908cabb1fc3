//! The bridge: a Zenoh session, routes from priorities to lane inboxes, and the publisher
//! thread behind the outbox.

use crate::config::{priority_name, Config, Mode};
use crate::outbox::{self, Outbox};
use crate::slots::Slots;
use crate::{zenoh_error, Error, MAX_KEY_BYTES, PRIORITIES};
use crossbeam_queue::ArrayQueue;
use lfrt::inbox::{Inbox, Order, Poster};
use lfrt::{Context, Runtime};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zenoh::qos::{CongestionControl, Priority};
use zenoh::sample::Sample;
use zenoh::{Session, Wait};

/// How often the publisher thread looks at the connected peers when it has nothing to send.
const PEER_POLL: Duration = Duration::from_millis(100);

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

/// The counters of a bridge (they only grow, except `peers`).
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) forwarded: [AtomicU64; 7],
    pub(crate) delivered: [AtomicU64; 7],
    pub(crate) full: [AtomicU64; 7],
    pub(crate) oversize: [AtomicU64; 7],
    pub(crate) unrouted: [AtomicU64; 7],
    pub(crate) outbox_sent: AtomicU64,
    pub(crate) outbox_full: AtomicU64,
    pub(crate) outbox_too_large: AtomicU64,
    pub(crate) put_errors: AtomicU64,
    pub(crate) put_without_peer: AtomicU64,
    pub(crate) peers: AtomicU64,
    pub(crate) peers_joined: AtomicU64,
    pub(crate) peers_lost: AtomicU64,
}

/// A snapshot of a bridge's counters ([`Bridge::totals`]). Arrays are indexed by priority,
/// highest first (`p as usize - 1`, see [`PRIORITIES`](crate::PRIORITIES)).
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
    /// Outbox puts sent to Zenoh by the publisher thread.
    pub outbox_sent: u64,
    /// Outbox puts refused because the outbox was full.
    pub outbox_full: u64,
    /// Outbox puts refused because the payload exceeded `[outbox] max_payload`.
    pub outbox_too_large: u64,
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
}

impl Totals {
    /// Samples dropped on the receive side, of any cause and priority.
    pub fn dropped(&self) -> u64 {
        (0..7)
            .map(|i| self.full[i] + self.oversize[i] + self.unrouted[i])
            .sum()
    }
}

impl fmt::Display for Totals {
    /// One line per priority that saw traffic or has a route, then the outbox and peers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in PRIORITIES.into_iter().enumerate() {
            let seen = self.forwarded[i] + self.full[i] + self.oversize[i] + self.unrouted[i];
            if seen == 0 && self.lanes[i].is_none() {
                continue;
            }
            writeln!(
                f,
                "zenoh {:<16} lane={:<10} forwarded={} delivered={} full={} oversize={} unrouted={}",
                priority_name(p),
                self.lanes[i].as_deref().unwrap_or("-"),
                self.forwarded[i],
                self.delivered[i],
                self.full[i],
                self.oversize[i],
                self.unrouted[i]
            )?;
        }
        write!(
            f,
            "zenoh outbox sent={} full={} too_large={} put_errors={} without_peer={}; peers={} joined={} lost={}",
            self.outbox_sent,
            self.outbox_full,
            self.outbox_too_large,
            self.put_errors,
            self.put_without_peer,
            self.peers,
            self.peers_joined,
            self.peers_lost
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

/// What Zenoh's callbacks share: the routes by priority, and the counters.
struct Forwarder {
    by_priority: [Option<usize>; 7],
    routes: Vec<Route>,
    stats: Arc<Stats>,
}

impl Forwarder {
    /// Runs on a Zenoh receive thread: copies the sample into a free slot of its route and
    /// posts it to the lane. Never waits: no slot or a full inbox is a counted drop.
    fn forward(&self, sample: &Sample) {
        let p = sample.priority() as usize - 1;
        let s = &*self.stats;
        let Some(route) = self.by_priority[p].map(|r| &self.routes[r]) else {
            s.unrouted[p].fetch_add(1, Relaxed);
            return;
        };
        let key = sample.key_expr().as_str().as_bytes();
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
        match route.poster.post(d) {
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

/// `CLOCK_MONOTONIC` now, in ns (a vDSO call: no system call, no allocation).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Gives a delivered slot back even if the handler panics.
struct GiveBack<'a>(&'a Slots, u32);

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        self.0.give(self.1);
    }
}

/// A Zenoh session serving lfrt lanes: routes from priorities to lanes, subscriptions, and an
/// [`Outbox`] with its publisher thread.
///
/// # Examples
/// ```no_run
/// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// let cfg = lfrt_zenoh::Config::parse(r#"
/// [session]
/// listen = ["tcp/127.0.0.1:7447"]
/// [[route]]
/// lane = "control"
/// priorities = ["real-time"]
/// [[subscribe]]
/// key = "robot/cmd/**"
/// "#)?;
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
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
    publisher: Option<JoinHandle<()>>,
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
            // Zenoh reads it once, when its first runtime starts (inside `zenoh::open`). Setting
            // the environment races with threads that read it at the same moment: open the
            // first bridge during set-up, before other threads of the process read it.
            std::env::set_var("ZENOH_RUNTIME", &want);
            Ok(())
        }
    }
}

fn zenoh_config(cfg: &Config) -> Result<zenoh::Config, Error> {
    let mut z = zenoh::Config::default();
    let json = |v: &[String]| serde_json_array(v);
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
    set(&mut z, "listen/endpoints", json(&cfg.session.listen))?;
    set(&mut z, "connect/endpoints", json(&cfg.session.connect))?;
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
    /// Configures Zenoh's threads (`[threads]`) and opens the session (`[session]`). Call it
    /// from a normal (`SCHED_OTHER`) thread: Zenoh's threads inherit the policy of the thread
    /// that starts them.
    ///
    /// # Errors
    /// [`Error::Threads`] if `ZENOH_RUNTIME` says otherwise; [`Error::Zenoh`] if the session
    /// cannot open (in client mode: no router answers; an endpoint cannot be listened on).
    pub fn open(cfg: &Config) -> Result<Bridge, Error> {
        configure_threads(cfg)?;
        let session = zenoh::open(zenoh_config(cfg)?)
            .wait()
            .map_err(|e| zenoh_error("opening the session", e))?;
        Ok(Bridge {
            routes: (0..cfg.routes.len()).map(|_| None).collect(),
            cfg: cfg.clone(),
            session,
            subscribers: Vec::new(),
            stats: Arc::new(Stats::default()),
            outbox: None,
            stop: Arc::new(AtomicBool::new(false)),
            publisher: None,
        })
    }

    /// The Zenoh session (e.g. for queries or liveliness of one's own).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Gives the route of lane `lane` its handler and registers the route's inbox in that lane
    /// of `rt`. Every `[[route]]` needs one before [`start`](Self::start).
    ///
    /// # Errors
    /// [`Error::Route`] if no `[[route]]` names `lane` or it has a handler already;
    /// [`Error::Config`] pointing at the route's `lane` if `rt` has no such lane;
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
        let slots = Arc::new(Slots::new(rc.capacity, MAX_KEY_BYTES + rc.max_payload));
        let stats = self.stats.clone();
        let mine = slots.clone();
        let (inbox, poster) = Inbox::new(
            rc.capacity,
            rc.batch,
            Order::Fifo,
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
    /// publications and starts the publisher thread. Returns the outbox lanes put through.
    ///
    /// # Errors
    /// [`Error::Route`] if a route has no handler; [`Error::Zenoh`] if a declaration fails;
    /// [`Error::Io`] if the publisher thread cannot start.
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
        let oc = self.cfg.outbox;
        let shared = Arc::new(outbox::Shared {
            slots: Slots::new(oc.capacity, oc.max_payload),
            queue: ArrayQueue::new(oc.capacity),
            keys: self.cfg.publish.iter().map(|p| p.key.clone()).collect(),
            stats: self.stats.clone(),
            publisher: OnceLock::new(),
        });
        let (stop, session, work) = (self.stop.clone(), self.session.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("lfrt-zenoh-pub".into())
            .spawn(move || publish_loop(&work, &publishers, &session, &stop))
            .map_err(Error::Io)?;
        let _ = shared.publisher.set(thread.thread().clone());
        self.publisher = Some(thread);
        let outbox = Outbox { shared };
        self.outbox = Some(outbox.clone());
        Ok(outbox)
    }

    /// Waits until at least `n` peers (or routers) are connected, for at most `timeout`.
    ///
    /// # Errors
    /// [`Error::NoPeer`] naming the `connect` endpoints if they do not come.
    pub fn wait_for_peers(&self, n: usize, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            if self.connected() >= n {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(Error::NoPeer {
                    connect: self.cfg.session.connect.clone(),
                    waited_ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Peers and routers connected now (asks Zenoh; allocates).
    pub fn connected(&self) -> usize {
        connected(&self.session)
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
        t.outbox_sent = s.outbox_sent.load(Relaxed);
        t.outbox_full = s.outbox_full.load(Relaxed);
        t.outbox_too_large = s.outbox_too_large.load(Relaxed);
        t.put_errors = s.put_errors.load(Relaxed);
        t.put_without_peer = s.put_without_peer.load(Relaxed);
        t.peers = s.peers.load(Relaxed);
        t.peers_joined = s.peers_joined.load(Relaxed);
        t.peers_lost = s.peers_lost.load(Relaxed);
        t
    }

    /// Undeclares the subscriptions, stops the publisher thread (after it sent what was
    /// queued) and closes the session; returns the final counters. Either order with the
    /// runtime's shutdown is safe: samples that arrive for a lane already stopped fill its
    /// route's slots and are then counted as `full`.
    ///
    /// # Errors
    /// [`Error::Zenoh`] if Zenoh fails to close the session.
    pub fn close(mut self) -> Result<Totals, Error> {
        for s in self.subscribers.drain(..) {
            let _ = s.undeclare().wait();
        }
        self.stop.store(true, Relaxed);
        if let Some(t) = self.publisher.take() {
            t.thread().unpark();
            let _ = t.join();
        }
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
        self.stop.store(true, Relaxed);
        if let Some(t) = self.publisher.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn connected(session: &Session) -> usize {
    let info = session.info();
    info.peers_zid().wait().count() + info.routers_zid().wait().count()
}

/// The publisher thread: sends what lanes put, and watches the connected peers.
fn publish_loop(
    work: &outbox::Shared,
    publishers: &[zenoh::pubsub::Publisher<'static>],
    session: &Session,
    stop: &AtomicBool,
) {
    let s = &*work.stats;
    let mut peers = connected(session);
    s.peers.store(peers as u64, Relaxed);
    let mut polled = Instant::now();
    loop {
        let mut sent_any = false;
        while let Some(out) = work.queue.pop() {
            sent_any = true;
            // SAFETY: the index came through the queue, so this thread owns the slot until it
            // gives it back below.
            let bytes = unsafe { work.slots.read(out.slot) }[..out.len as usize].to_vec();
            work.slots.give(out.slot);
            if peers == 0 {
                s.put_without_peer.fetch_add(1, Relaxed);
            }
            match publishers[out.key as usize].put(bytes).wait() {
                Ok(()) => s.outbox_sent.fetch_add(1, Relaxed),
                Err(_) => s.put_errors.fetch_add(1, Relaxed),
            };
        }
        if polled.elapsed() >= PEER_POLL || !sent_any {
            let now = connected(session);
            if now > peers {
                s.peers_joined.fetch_add(1, Relaxed);
            } else if now < peers {
                s.peers_lost.fetch_add(1, Relaxed);
            }
            peers = now;
            s.peers.store(peers as u64, Relaxed);
            polled = Instant::now();
        }
        if stop.load(Relaxed) && work.queue.is_empty() {
            return;
        }
        if work.queue.is_empty() {
            std::thread::park_timeout(PEER_POLL);
        }
    }
}
