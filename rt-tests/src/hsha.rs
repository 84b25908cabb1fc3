//! A Half-Sync/Half-Reactive thread pool: the baseline lfrt is measured against.
//!
//! This is the design of the *Example* section of Schmidt et al.'s Leader/Followers pattern and
//! of the thread-pool column (Schmidt & Vinoski, C++ Report, April 1996), written the way people
//! usually write it:
//!
//! * one **I/O thread** (the reactive half) waits on an epoll instance over every handle,
//!   reads each request into a **dynamically allocated** request (`Box<Job>` holding a
//!   `Box<[u8]>` copy of the datagram) and appends it to a queue;
//! * a **bounded FIFO queue** (`std::sync::Mutex` + two `std::sync::Condvar`s: *not empty* and
//!   *not full*; no priority inheritance, no priority order);
//! * **N worker threads** (the synchronous half) take requests from the head of the queue and
//!   run the [`Service`], the same one lfrt handlers run.
//!
//! # Flow control
//! When the queue is full the I/O thread **blocks** on *not full* (as in the column: "the main
//! thread blocks, which will back-propagate to the clients"). While it is blocked it reads no
//! handle, so datagrams accumulate in the kernel socket buffers and, once those are full, the
//! kernel drops them (visible to a sender only as loss). Nothing is dropped in user space except
//! requests read after shutdown began ([`HshaMetrics::dropped_at_shutdown`]).
//!
//! # Reading
//! Handles are registered level-triggered. For each ready handle the I/O thread reads at most
//! `read_batch` datagrams (one `recv_from` each) before it looks at the next ready handle, so one
//! busy socket cannot monopolise it; what is left is reported again by the next `epoll_wait`.
//! A timer handle yields one request per read: its expiration count and the instant the first
//! expiry was due.
//!
//! # Priorities
//! The I/O thread and the workers run at one `SCHED_FIFO` priority (or `SCHED_OTHER`), pinned to
//! the configured CPUs: priority first, then affinity, as lfrt's pool threads do. The queue does
//! not know priorities: a request waits behind every request read before it.
//!
//! # Shutdown
//! [`HshaPool::shutdown`] closes the queue and wakes the I/O thread (an eventfd in its epoll
//! set). The I/O thread stops reading; the workers serve what is already queued (at most
//! `queue_capacity` requests) and exit. Every thread is joined, waiting at most
//! [`lfrt::SHUTDOWN_TIMEOUT`].

use crate::service::{Request, RequestKind, Service};
use lfrt::os::{self, Sched};
use lfrt::Error;
use lfrt::RtMode;
use lfrt::{Notifier, Timer};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::UdpSocket;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// epoll data word of the shutdown eventfd (source indices are smaller).
const SHUTDOWN: u64 = u64::MAX;
/// Events one `epoll_wait` returns at most.
const MAX_EVENTS: usize = 64;

/// A handle the I/O thread waits on.
#[derive(Debug)]
pub enum Source {
    /// A bound UDP socket: each datagram is a request; replies go back on it (from workers).
    Udp(UdpSocket),
    /// An armed periodic timer: each read is a request.
    Timer(Timer),
}

/// How the pool is built.
#[derive(Debug, Clone, PartialEq)]
pub struct HshaConfig {
    /// Worker threads (1..=64).
    pub workers: usize,
    /// `SCHED_FIFO` priority of the I/O thread and every worker; `None` = `SCHED_OTHER`.
    pub priority: Option<u8>,
    /// What to do if the priority cannot be had: fail (`Required`) or run at normal priority.
    pub rt: RtMode,
    /// CPUs every thread of the pool may run on; `None` = all CPUs of the process.
    pub cpus: Option<Vec<usize>>,
    /// Requests the queue holds at most; when full the I/O thread blocks.
    pub queue_capacity: usize,
    /// Datagrams read from one ready socket before the I/O thread moves to the next (≥ 1).
    pub read_batch: usize,
    /// Size of the I/O thread's receive buffer: the largest datagram read whole.
    pub max_datagram: usize,
}

impl Default for HshaConfig {
    /// 2 workers at `SCHED_OTHER`, best effort, all CPUs, 1024 queued requests, batches of 32,
    /// 64 KiB datagrams.
    fn default() -> HshaConfig {
        HshaConfig {
            workers: 2,
            priority: None,
            rt: RtMode::BestEffort,
            cpus: None,
            queue_capacity: 1024,
            read_batch: 32,
            max_datagram: 64 * 1024,
        }
    }
}

/// Counters of one pool. Counters only grow; `queue_depth` is a racy instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HshaMetrics {
    /// Worker threads.
    pub workers: usize,
    /// Every thread got the configured policy and priority.
    pub rt_applied: bool,
    /// Requests the I/O thread put on the queue.
    pub enqueued: u64,
    /// Requests workers finished serving.
    pub served: u64,
    /// Requests read after shutdown began, dropped instead of queued.
    pub dropped_at_shutdown: u64,
    /// Times the I/O thread found the queue full and blocked.
    pub full_waits: u64,
    /// Largest queue length seen.
    pub max_queue_depth: u64,
    /// Requests queued now.
    pub queue_depth: u64,
    /// Service panics caught by workers.
    pub panics: u64,
    /// Allocations made by the I/O thread in its event loop (needs [`lfrt::CountingAlloc`]).
    pub io_allocations: u64,
    /// Allocations made by the workers in their loops (needs [`lfrt::CountingAlloc`]).
    pub worker_allocations: u64,
}

/// One queued request: allocated by the I/O thread, freed by the worker that serves it.
struct Job {
    source: usize,
    kind: RequestKind,
    payload: Box<[u8]>,
}

struct Queue {
    jobs: VecDeque<Box<Job>>,
    closing: bool,
}

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    served: AtomicU64,
    dropped: AtomicU64,
    full_waits: AtomicU64,
    max_depth: AtomicU64,
    panics: AtomicU64,
    io_allocs: AtomicU64,
    worker_allocs: AtomicU64,
}

struct Shared {
    queue: Mutex<Queue>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
    /// Sockets by source index (`None` for timers), for the workers' replies.
    sockets: Vec<Option<Arc<UdpSocket>>>,
    counters: Counters,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a job, blocking while the queue is full. False if the pool is closing (the job
    /// is dropped).
    fn put(&self, job: Box<Job>) -> bool {
        let mut q = self.lock();
        while q.jobs.len() >= self.capacity && !q.closing {
            self.counters.full_waits.fetch_add(1, Relaxed);
            q = self.not_full.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        if q.closing {
            drop(q);
            self.counters.dropped.fetch_add(1, Relaxed);
            return false;
        }
        q.jobs.push_back(job);
        self.counters
            .max_depth
            .fetch_max(q.jobs.len() as u64, Relaxed);
        drop(q);
        self.counters.enqueued.fetch_add(1, Relaxed);
        self.not_empty.notify_one();
        true
    }

    /// Takes the oldest job, blocking while the queue is empty. `None` once the pool is
    /// closing and the queue is drained.
    fn take(&self) -> Option<Box<Job>> {
        let mut q = self.lock();
        loop {
            if let Some(job) = q.jobs.pop_front() {
                let was_full = q.jobs.len() + 1 >= self.capacity;
                drop(q);
                if was_full {
                    self.not_full.notify_one();
                }
                return Some(job);
            }
            if q.closing {
                return None;
            }
            q = self.not_empty.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn close(&self) {
        self.lock().closing = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// A running Half-Sync/Half-Reactive pool. Dropping it shuts it down.
///
/// # Examples
/// ```no_run
/// use lfrt_tools::hsha::{HshaConfig, HshaPool, Source};
/// use lfrt_tools::service::Echo;
/// let socket = std::net::UdpSocket::bind("127.0.0.1:7100").unwrap();
/// let pool = HshaPool::start(HshaConfig::default(), vec![Source::Udp(socket)], |_| Echo { work_us: 5 })?;
/// std::thread::sleep(std::time::Duration::from_millis(100));
/// let metrics = pool.shutdown()?;
/// # Ok::<(), lfrt::Error>(())
/// ```
///
/// # Real-time safety
/// None by design: the I/O thread allocates each request, and the queue's lock and condition
/// variables have no priority inheritance. That is what this baseline shows.
pub struct HshaPool {
    shared: Arc<Shared>,
    stop: Arc<Notifier>,
    threads: Vec<(JoinHandle<()>, Arc<AtomicBool>)>,
    workers: usize,
    rt_applied: bool,
    stopped: bool,
}

impl fmt::Debug for HshaPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("HshaPool { .. }")
    }
}

/// How one thread's set-up went.
enum Ready {
    Ok { rt_applied: bool },
    Failed(Error),
}

impl HshaPool {
    /// Starts the I/O thread and `cfg.workers` workers; worker `i` runs `make_service(i)`.
    /// Sockets are made nonblocking. Returns once every thread has its policy and affinity.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::RtPermission`] /
    /// [`Error::Sched`] when `rt` is `Required` and a thread cannot get its priority or CPUs;
    /// [`Error::Io`] when a kernel object cannot be created. Nothing is left running.
    pub fn start<S, F>(
        cfg: HshaConfig,
        sources: Vec<Source>,
        mut make_service: F,
    ) -> Result<HshaPool, Error>
    where
        S: Service,
        F: FnMut(usize) -> S,
    {
        if !(1..=64).contains(&cfg.workers) {
            return Err(config_error(
                "hsha.workers",
                format!("{} is outside 1..=64", cfg.workers),
            ));
        }
        if cfg.queue_capacity == 0 || cfg.read_batch == 0 || cfg.max_datagram == 0 {
            return Err(config_error(
                "hsha",
                "queue_capacity, read_batch and max_datagram must be at least 1",
            ));
        }
        if let Some(p) = cfg.priority {
            if !(1..=99).contains(&p) {
                return Err(config_error(
                    "hsha.priority",
                    format!("{p} is outside 1..=99"),
                ));
            }
        }
        let io_err = |context: &'static str| move |source: io::Error| Error::Io { context, source };
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| Error::Io {
            context: "epoll_create1",
            source: e.into(),
        })?;
        let stop = Arc::new(Notifier::new().map_err(io_err("creating the shutdown eventfd"))?);
        epoll
            .add(
                stop.as_ref(),
                EpollEvent::new(EpollFlags::EPOLLIN, SHUTDOWN),
            )
            .map_err(|e| Error::Io {
                context: "epoll_ctl(ADD) of the shutdown eventfd",
                source: e.into(),
            })?;
        let mut sockets = Vec::with_capacity(sources.len());
        let mut handles = Vec::with_capacity(sources.len());
        for (i, s) in sources.into_iter().enumerate() {
            let h = match s {
                Source::Udp(sock) => {
                    sock.set_nonblocking(true)
                        .map_err(io_err("making a socket nonblocking"))?;
                    let sock = Arc::new(sock);
                    sockets.push(Some(sock.clone()));
                    IoHandle::Udp(sock)
                }
                Source::Timer(t) => {
                    sockets.push(None);
                    IoHandle::Timer(t)
                }
            };
            let added = match &h {
                IoHandle::Udp(s) => {
                    epoll.add(s.as_ref(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                }
                IoHandle::Timer(t) => epoll.add(t, EpollEvent::new(EpollFlags::EPOLLIN, i as u64)),
            };
            added.map_err(|e| Error::Io {
                context: "epoll_ctl(ADD) of a source",
                source: e.into(),
            })?;
            handles.push(h);
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::with_capacity(cfg.queue_capacity),
                closing: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity: cfg.queue_capacity,
            sockets,
            counters: Counters::default(),
        });
        let sched = match cfg.priority {
            Some(p) => Sched::Fifo(p),
            None => Sched::Other,
        };
        let mut pool = HshaPool {
            shared: shared.clone(),
            stop,
            threads: Vec::new(),
            workers: cfg.workers,
            rt_applied: true,
            stopped: false,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..cfg.workers {
            let (shared, tx, cfg2, exited) = (
                shared.clone(),
                tx.clone(),
                cfg.clone(),
                Arc::new(AtomicBool::new(false)),
            );
            let service = make_service(i);
            let ex = exited.clone();
            let h = std::thread::Builder::new()
                .name(format!("hsha-worker-{i}"))
                .spawn(move || {
                    if setup(&cfg2, sched, &tx) {
                        drop(tx);
                        worker(&shared, service);
                    }
                    ex.store(true, Release);
                });
            match h {
                Ok(h) => pool.threads.push((h, exited)),
                Err(e) => {
                    return Err(pool.fail(Error::Io {
                        context: "spawning an HS/HA worker",
                        source: e,
                    }))
                }
            }
        }
        let (shared2, tx2, cfg2, exited) = (
            shared.clone(),
            tx.clone(),
            cfg.clone(),
            Arc::new(AtomicBool::new(false)),
        );
        let ex = exited.clone();
        let h = std::thread::Builder::new()
            .name("hsha-io".into())
            .spawn(move || {
                if setup(&cfg2, sched, &tx2) {
                    drop(tx2);
                    io_loop(
                        &shared2,
                        &epoll,
                        handles,
                        cfg2.read_batch,
                        cfg2.max_datagram,
                    );
                }
                // Wake workers blocked on an empty queue so they can see `closing`.
                shared2.close();
                ex.store(true, Release);
            });
        match h {
            Ok(h) => pool.threads.push((h, exited)),
            Err(e) => {
                return Err(pool.fail(Error::Io {
                    context: "spawning the HS/HA I/O thread",
                    source: e,
                }))
            }
        }
        drop(tx);
        let mut failure = None;
        for _ in 0..pool.threads.len() {
            match rx.recv() {
                Ok(Ready::Ok { rt_applied }) => pool.rt_applied &= rt_applied,
                Ok(Ready::Failed(e)) => {
                    failure.get_or_insert(e);
                }
                Err(_) => break,
            }
        }
        if let Some(e) = failure {
            return Err(pool.fail(e));
        }
        if !pool.rt_applied && cfg.priority.is_some() {
            tracing::warn!(
                "HS/HA pool: SCHED_FIFO refused; running at normal priority (rt = best-effort)"
            );
        }
        Ok(pool)
    }

    fn fail(mut self, e: Error) -> Error {
        let _ = self.stop_and_join();
        e
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> HshaMetrics {
        let c = &self.shared.counters;
        HshaMetrics {
            workers: self.workers,
            rt_applied: self.rt_applied,
            enqueued: c.enqueued.load(Relaxed),
            served: c.served.load(Relaxed),
            dropped_at_shutdown: c.dropped.load(Relaxed),
            full_waits: c.full_waits.load(Relaxed),
            max_queue_depth: c.max_depth.load(Relaxed),
            queue_depth: self.shared.lock().jobs.len() as u64,
            panics: c.panics.load(Relaxed),
            io_allocations: c.io_allocs.load(Relaxed),
            worker_allocations: c.worker_allocs.load(Relaxed),
        }
    }

    /// Stops reading, lets the workers serve what is queued, joins every thread and returns the
    /// final counters.
    ///
    /// # Errors
    /// [`Error::State`] if a thread did not return within [`lfrt::SHUTDOWN_TIMEOUT`] (a
    /// service that does not return); that thread is left detached.
    pub fn shutdown(mut self) -> Result<HshaMetrics, Error> {
        self.stop_and_join()?;
        Ok(self.metrics())
    }

    fn stop_and_join(&mut self) -> Result<(), Error> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.shared.close();
        let _ = self.stop.notify(1);
        let deadline = Instant::now() + lfrt::SHUTDOWN_TIMEOUT;
        while !self.threads.iter().all(|(_, e)| e.load(Acquire)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !self.threads.iter().all(|(_, e)| e.load(Acquire)) {
            self.threads.clear();
            return Err(Error::State("an HS/HA thread did not return within SHUTDOWN_TIMEOUT (a service is not returning)"));
        }
        for (h, _) in self.threads.drain(..) {
            let _ = h.join();
        }
        Ok(())
    }
}

impl Drop for HshaPool {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Policy first, then affinity; reports to `tx`. False if the thread must not continue.
fn setup(cfg: &HshaConfig, sched: Sched, tx: &std::sync::mpsc::Sender<Ready>) -> bool {
    let mut rt_applied = true;
    if sched != Sched::Other {
        if let Err(e) = os::set_current_sched(sched) {
            if cfg.rt == RtMode::Required {
                let p = os::RtPrivilege::probe();
                let have = format!(
                    "CAP_SYS_NICE {}, RLIMIT_RTPRIO {}",
                    if p.cap_sys_nice { "yes" } else { "no" },
                    p.rlimit_rtprio
                );
                let prio = cfg.priority.unwrap_or(0);
                let err = if e.raw_os_error() == Some(libc_eperm()) {
                    Error::RtPermission {
                        lane: "hsha".into(),
                        priority: prio,
                        source: e,
                        have,
                        deadline: false,
                    }
                } else {
                    Error::Sched {
                        lane: "hsha".into(),
                        what: format!("setting {sched:?}"),
                        source: e,
                    }
                };
                let _ = tx.send(Ready::Failed(err));
                return false;
            }
            rt_applied = false;
        }
    }
    if let Some(cpus) = &cfg.cpus {
        if let Err(e) = os::set_current_affinity(cpus) {
            let _ = tx.send(Ready::Failed(Error::Sched {
                lane: "hsha".into(),
                what: format!("pinning to CPUs {cpus:?}"),
                source: e,
            }));
            return false;
        }
    }
    let _ = tx.send(Ready::Ok { rt_applied });
    true
}

fn libc_eperm() -> i32 {
    nix::errno::Errno::EPERM as i32
}

enum IoHandle {
    Udp(Arc<UdpSocket>),
    Timer(Timer),
}

/// The reactive half: wait, read each request into a new allocation, queue it.
fn io_loop(
    shared: &Shared,
    epoll: &Epoll,
    mut handles: Vec<IoHandle>,
    read_batch: usize,
    max_datagram: usize,
) {
    let mut events = vec![EpollEvent::empty(); MAX_EVENTS];
    let mut buf = vec![0u8; max_datagram];
    let base = lfrt::thread_allocations();
    let c = &shared.counters;
    loop {
        let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        };
        for ev in &events[..n] {
            let index = ev.data();
            if index == SHUTDOWN {
                return;
            }
            let Some(handle) = handles.get_mut(index as usize) else {
                continue;
            };
            match handle {
                IoHandle::Udp(socket) => {
                    for _ in 0..read_batch {
                        match socket.recv_from(&mut buf) {
                            Ok((len, peer)) => {
                                let job = Box::new(Job {
                                    source: index as usize,
                                    kind: RequestKind::Datagram { peer },
                                    payload: Box::from(&buf[..len]),
                                });
                                if !shared.put(job) {
                                    return;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => break, // WouldBlock, or an ICMP error: next handle
                        }
                    }
                }
                IoHandle::Timer(timer) => {
                    if let Ok(Some((expirations, due_ns))) = timer.read() {
                        let job = Box::new(Job {
                            source: index as usize,
                            kind: RequestKind::Timer {
                                expirations,
                                due_ns,
                            },
                            payload: Box::default(),
                        });
                        if !shared.put(job) {
                            return;
                        }
                    }
                }
            }
        }
        c.io_allocs
            .store(lfrt::thread_allocations() - base, Relaxed);
    }
}

/// The synchronous half: take the oldest request, serve it, reply on its socket, free it.
fn worker<S: Service>(shared: &Shared, mut service: S) {
    let base = lfrt::thread_allocations();
    let mut counted = 0;
    let c = &shared.counters;
    while let Some(job) = shared.take() {
        let socket = shared.sockets.get(job.source).and_then(|s| s.as_deref());
        let request = Request {
            source: job.source,
            kind: job.kind,
            payload: &job.payload,
        };
        let served = catch_unwind(AssertUnwindSafe(|| {
            service.serve(&request, &mut |data| {
                if let (Some(s), RequestKind::Datagram { peer }) = (socket, request.kind) {
                    let _ = s.send_to(data, peer);
                }
            })
        }));
        if served.is_err() {
            c.panics.fetch_add(1, Relaxed);
        }
        drop(job);
        c.served.fetch_add(1, Relaxed);
        let now = lfrt::thread_allocations() - base;
        c.worker_allocs.fetch_add(now - counted, Relaxed);
        counted = now;
    }
}

/// A rejected [`HshaConfig`] field, as lfrt reports its own configuration errors.
fn config_error(field: &str, message: impl Into<String>) -> Error {
    Error::Config {
        file: None,
        line: None,
        field: field.into(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::Echo;
    use std::sync::atomic::AtomicUsize;

    fn client(server: &UdpSocket) -> UdpSocket {
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.connect(server.local_addr().unwrap()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c
    }

    #[test]
    fn echoes_every_datagram_verbatim() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = client(&s);
        let pool = HshaPool::start(HshaConfig::default(), vec![Source::Udp(s)], |_| Echo {
            work_us: 0,
        })
        .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..200u32 {
            c.send(&i.to_le_bytes()).unwrap();
            let n = c.recv(&mut buf).unwrap();
            got.push(u32::from_le_bytes(buf[..n].try_into().unwrap()));
        }
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        let m = pool.shutdown().unwrap();
        assert_eq!((m.enqueued, m.served, m.dropped_at_shutdown), (200, 200, 0));
    }

    /// A worker that blocks until released: the queue fills, the I/O thread waits, and still
    /// every request is served exactly once.
    #[test]
    fn full_queue_blocks_the_io_thread_and_loses_nothing() {
        struct Gate(Arc<AtomicBool>, Arc<AtomicUsize>);
        impl Service for Gate {
            fn serve(&mut self, r: &Request<'_>, _reply: &mut dyn FnMut(&[u8])) {
                let deadline = Instant::now() + Duration::from_secs(5);
                while !self.0.load(Acquire) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                assert_eq!(r.payload.len(), 1);
                self.1.fetch_add(1, SeqCst);
            }
        }
        let (open, count) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = client(&s);
        let cfg = HshaConfig {
            workers: 1,
            queue_capacity: 2,
            read_batch: 1,
            ..HshaConfig::default()
        };
        let (o, n) = (open.clone(), count.clone());
        let pool = HshaPool::start(cfg, vec![Source::Udp(s)], move |_| {
            Gate(o.clone(), n.clone())
        })
        .unwrap();
        for _ in 0..10 {
            c.send(&[7]).unwrap();
        }
        // 1 in service + 2 queued: the I/O thread must block on the 4th.
        assert!(wait(|| pool.metrics().full_waits >= 1));
        assert!(pool.metrics().max_queue_depth <= 2);
        open.store(true, Release);
        assert!(wait(|| count.load(SeqCst) == 10));
        let m = pool.shutdown().unwrap();
        assert_eq!((m.enqueued, m.served, m.max_queue_depth), (10, 10, 2));
    }

    #[test]
    fn timer_requests_carry_expiry_and_due_time() {
        struct Rec(Arc<Mutex<Vec<(u64, u64)>>>);
        impl Service for Rec {
            fn serve(&mut self, r: &Request<'_>, _reply: &mut dyn FnMut(&[u8])) {
                if let RequestKind::Timer {
                    expirations,
                    due_ns,
                } = r.kind
                {
                    self.0.lock().unwrap().push((expirations, due_ns));
                }
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut t = Timer::new().unwrap();
        let first = lfrt::os::now_ns() + 1_000_000;
        t.arm(first, 2_000_000).unwrap();
        let s2 = seen.clone();
        let pool = HshaPool::start(HshaConfig::default(), vec![Source::Timer(t)], move |_| {
            Rec(s2.clone())
        })
        .unwrap();
        assert!(wait(|| seen.lock().unwrap().len() >= 3));
        pool.shutdown().unwrap();
        let v = seen.lock().unwrap().clone();
        // Due times advance by whole periods from the first expiry.
        let mut expected = first;
        for (n, due) in v {
            assert_eq!(due, expected);
            expected += n * 2_000_000;
        }
    }

    #[test]
    fn shutdown_serves_what_is_queued_then_returns() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = client(&s);
        let pool = HshaPool::start(
            HshaConfig {
                workers: 1,
                ..HshaConfig::default()
            },
            vec![Source::Udp(s)],
            |_| Echo { work_us: 1000 },
        )
        .unwrap();
        for _ in 0..20 {
            c.send(&[1]).unwrap();
        }
        assert!(wait(|| pool.metrics().enqueued >= 5));
        let m = pool.shutdown().unwrap();
        assert_eq!(m.served, m.enqueued);
    }

    #[test]
    fn invalid_configuration_is_refused() {
        let e = HshaPool::start(
            HshaConfig {
                workers: 0,
                ..HshaConfig::default()
            },
            vec![],
            |_| Echo::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("workers"), "{e}");
    }

    fn wait(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cond()
    }
}
