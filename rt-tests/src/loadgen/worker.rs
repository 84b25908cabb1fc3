//! One generator thread's engine: an epoll loop over its client sockets and a timerfd that
//! paces open-loop sends against absolute deadlines, keeps the closed-loop window full and
//! times out its slots; every echo is matched to what was sent, and each sequence number's
//! state byte settles the thread's counts once its drain ends.

use super::config::{Clients, LoadConfig, Mode};
use super::report::new_histogram;
use super::sockets::{
    errno_context, send_batch, send_single, with_context, Headers, Target, IO_BATCH,
};
use super::wire::{encode, header, now_ns, padding_ok, NS_PER_S};
use hdrhistogram::Histogram;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{recvmmsg, MsgFlags};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};
use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// An open-loop send counts as late when it misses its deadline by more than
/// `max(LATE_SLACK_NS, one interval)`.
const LATE_SLACK_NS: u64 = 100_000;
/// When the open-loop sender is behind by more than
/// `max(CATCHUP_LAG_NS, two intervals)`, the missed slots are skipped (and
/// counted as late) instead of being sent in one burst.
const CATCHUP_LAG_NS: u64 = 10_000_000;
/// At most this many open-loop sends per loop iteration before receives are
/// serviced again.
const MAX_BURST: usize = 64;
/// At most this many `recv` calls per socket readiness event.
const RECV_BATCH: usize = 64;
/// Safety cap on one `epoll_wait` (the timerfd normally wakes us earlier).
const SAFETY_WAIT_MS: u16 = 100;
/// Upper bound on the number of state bytes preallocated up front.
const MAX_PREALLOC: u64 = 1 << 24;
/// epoll token of the pacing/timeout timer.
const TIMER_TOKEN: u64 = u64::MAX;

const ST_OUTSTANDING: u8 = 0;
const ST_TIMED_OUT: u8 = 1;
const ST_RECEIVED: u8 = 2;
const ST_FAILED: u8 = 3;

fn timespec_of(ns: u64) -> TimeSpec {
    TimeSpec::from_duration(Duration::from_nanos(ns))
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) duplicates: u64,
    pub(crate) corrupt: u64,
    pub(crate) late_sends: u64,
    pub(crate) send_errors: u64,
    pub(crate) send_calls: u64,
    pub(crate) recv_calls: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    local: u64,
    target: usize,
    deadline_ns: u64,
}

pub(crate) struct WorkerResult {
    pub(crate) c: Counters,
    pub(crate) lost: u64,
    pub(crate) hist: Histogram<u64>,
    pub(crate) active_end_ns: u64,
    /// `(index in LoadConfig::ports, received)` of each of the worker's client sockets.
    pub(crate) per_port: Vec<(u32, u64)>,
    /// The thread's CPU time and wall time over its send phase (ns).
    pub(crate) cpu_ns: u64,
    pub(crate) wall_ns: u64,
}

pub(crate) struct Worker {
    targets: Vec<Target>,
    mode: Mode,
    /// Batched sends and receives (`sendmmsg`/`recvmmsg`), else one datagram per call.
    batched: bool,
    /// Closed loop: the window of each target (its share of its port's window; the whole
    /// window when batched, with one socket per port).
    windows: Vec<usize>,
    size: usize,
    timeout_ns: u64,
    drain_ns: u64,
    /// Global sequence number = local index * stride + offset.
    seq_stride: u64,
    seq_offset: u64,
    max_attempts: u64,
    start_ns: u64,
    send_end_ns: u64,
    /// One state byte per local sequence index; its length is the number of
    /// send attempts so far.
    states: Vec<u8>,
    /// Closed loop: window slots in use per target.
    in_window: Vec<usize>,
    /// Closed loop: window slots in send order (deadlines are increasing).
    pending: VecDeque<Pending>,
    /// Open loop: next schedule slot.
    next_slot: u64,
    late_slack_ns: u64,
    catchup_lag_ns: u64,
    /// `IO_BATCH` receive buffers, one byte longer than the datagram size so
    /// oversized echoes are detected.
    rbufs: Vec<Vec<u8>>,
    recv_headers: Headers,
    /// Unbatched: the datagram being sent.
    sbuf: Vec<u8>,
    hist: Histogram<u64>,
    c: Counters,
    last_recv_ns: u64,
}

impl Worker {
    pub(crate) fn new(
        cfg: &LoadConfig,
        mode: Mode,
        targets: Vec<Target>,
        thread_index: u64,
        threads: u64,
        max_attempts: u64,
        start_ns: u64,
    ) -> io::Result<Self> {
        let nanos = |d: Duration| d.as_nanos() as u64;
        let (late_slack_ns, catchup_lag_ns, estimate) = match mode {
            Mode::Open { rate_per_s } if rate_per_s > 0 => {
                let interval = NS_PER_S / rate_per_s;
                let est = (cfg.duration.as_secs_f64() * rate_per_s as f64) as u64 + 1;
                (
                    LATE_SLACK_NS.max(interval),
                    CATCHUP_LAG_NS.max(interval.saturating_mul(2)),
                    est,
                )
            }
            Mode::Open { .. } => (LATE_SLACK_NS, CATCHUP_LAG_NS, 0),
            Mode::Closed { window } => (
                LATE_SLACK_NS,
                CATCHUP_LAG_NS,
                (window * targets.len()) as u64 * 1024,
            ),
        };
        let prealloc = estimate.min(max_attempts).min(MAX_PREALLOC) as usize;
        let batched = cfg.clients == Clients::Batched;
        let mut targets = targets;
        if batched {
            for t in &mut targets {
                t.outbox = vec![0; IO_BATCH * cfg.size];
            }
        }
        // A port's window split over its clients: client k gets window / n, plus one while
        // k < window % n, so the shares add up to the window.
        let per_port = cfg.clients.per_port();
        let windows = targets
            .iter()
            .map(|t| match mode {
                Mode::Closed { window } => {
                    window / per_port + usize::from((t.client as usize) < window % per_port)
                }
                Mode::Open { .. } => 0,
            })
            .collect();
        Ok(Worker {
            in_window: vec![0; targets.len()],
            targets,
            mode,
            batched,
            windows,
            size: cfg.size,
            timeout_ns: nanos(cfg.timeout),
            drain_ns: nanos(cfg.drain),
            seq_stride: threads,
            seq_offset: thread_index,
            max_attempts,
            start_ns,
            send_end_ns: start_ns + nanos(cfg.duration),
            states: Vec::with_capacity(prealloc),
            pending: VecDeque::new(),
            next_slot: 0,
            late_slack_ns,
            catchup_lag_ns,
            rbufs: vec![vec![0; cfg.size + 1]; if batched { IO_BATCH } else { 1 }],
            recv_headers: Headers::new(),
            sbuf: if batched {
                Vec::new()
            } else {
                vec![0; cfg.size]
            },
            hist: new_histogram()?,
            c: Counters::default(),
            last_recv_ns: start_ns,
        })
    }

    fn attempts(&self) -> u64 {
        self.states.len() as u64
    }

    /// Open loop: deadline of schedule slot `k`.
    fn slot_deadline(&self, k: u64, rate: u64) -> u64 {
        self.start_ns + (u128::from(k) * u128::from(NS_PER_S) / u128::from(rate)) as u64
    }

    /// Open loop: the first slot whose deadline is at or after `t_ns`.
    fn first_slot_at(&self, t_ns: u64, rate: u64) -> u64 {
        let num = u128::from(t_ns.saturating_sub(self.start_ns)) * u128::from(rate);
        num.div_ceil(u128::from(NS_PER_S)) as u64
    }

    /// Whether more sends may happen (monotonic: once false, stays false).
    fn can_send(&self, now: u64) -> bool {
        if now >= self.send_end_ns || self.attempts() >= self.max_attempts {
            return false;
        }
        match self.mode {
            Mode::Closed { .. } => true,
            Mode::Open { rate_per_s: 0 } => false,
            Mode::Open { rate_per_s } => {
                self.slot_deadline(self.next_slot, rate_per_s) < self.send_end_ns
            }
        }
    }

    pub(crate) fn run(mut self) -> io::Result<WorkerResult> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| errno_context(e, "epoll_create1"))?;
        for (i, t) in self.targets.iter().enumerate() {
            epoll
                .add(&t.sock, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(|e| errno_context(e, &format!("port {}: epoll_ctl", t.port)))?;
        }
        let timer = TimerFd::new(
            TimerClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|e| errno_context(e, "timerfd_create"))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER_TOKEN))
            .map_err(|e| errno_context(e, "epoll_ctl(timerfd)"))?;
        let mut armed: Option<u64> = None;
        let mut events = [EpollEvent::empty(); 64];
        let mut drain_end: Option<u64> = None;
        let mut send_stop_ns = self.start_ns;
        // The thread's CPU share over its send phase (from here until sending stops).
        let (cpu0, wall0) = (lfrt::os::thread_cpu_ns(), now_ns());
        let mut cpu_ns = 0;

        if let Mode::Closed { .. } = self.mode {
            let now = now_ns();
            for t in 0..self.targets.len() {
                self.refill(t, now)?;
            }
        }

        loop {
            // Queued sends leave before anything waits or counts on them.
            self.flush_all()?;
            let now = now_ns();
            if drain_end.is_none() && !self.can_send(now) {
                cpu_ns = lfrt::os::thread_cpu_ns().saturating_sub(cpu0);
                send_stop_ns = now;
                drain_end = Some(now.saturating_add(self.drain_ns));
            }
            let wake = match drain_end {
                Some(end) => {
                    if now >= end || self.c.received == self.c.sent {
                        break;
                    }
                    end
                }
                None => {
                    match self.mode {
                        Mode::Open { rate_per_s } => self.send_due(now, rate_per_s)?,
                        Mode::Closed { .. } => self.expire(now)?,
                    }
                    if !self.can_send(now) {
                        // That ended the send phase: start draining now
                        // rather than sleeping until the next deadline.
                        continue;
                    }
                    match self.mode {
                        Mode::Open { rate_per_s } => self.slot_deadline(self.next_slot, rate_per_s),
                        Mode::Closed { .. } => self
                            .pending
                            .front()
                            .map_or(self.send_end_ns, |p| p.deadline_ns.min(self.send_end_ns)),
                    }
                }
            };

            self.flush_all()?;
            let timeout = if wake <= now_ns() {
                EpollTimeout::ZERO
            } else {
                if armed != Some(wake) {
                    timer
                        .set(
                            Expiration::OneShot(timespec_of(wake)),
                            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                        )
                        .map_err(|e| errno_context(e, "timerfd_settime"))?;
                    armed = Some(wake);
                }
                EpollTimeout::from(SAFETY_WAIT_MS)
            };
            let n = match epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(Errno::EINTR) => 0,
                Err(e) => return Err(errno_context(e, "epoll_wait")),
            };
            for ev in &events[..n] {
                if ev.data() == TIMER_TOKEN {
                    // Consume the expiration; EAGAIN just means it was re-armed.
                    let _ = timer.wait();
                    armed = None;
                } else {
                    self.receive(ev.data() as usize)?;
                }
            }
        }

        self.flush_all()?;
        // Final accounting, re-derived from the per-sequence states.
        let (mut sent, mut received) = (0u64, 0u64);
        for &s in &self.states {
            match s {
                ST_RECEIVED => {
                    sent += 1;
                    received += 1;
                }
                ST_OUTSTANDING | ST_TIMED_OUT => sent += 1,
                _ => {}
            }
        }
        assert_eq!(sent, self.c.sent, "sent counter disagrees with states");
        assert_eq!(
            received, self.c.received,
            "received counter disagrees with states"
        );
        let lost = sent - received;
        assert_eq!(self.c.sent, self.c.received + lost);
        Ok(WorkerResult {
            c: self.c,
            lost,
            active_end_ns: send_stop_ns.max(self.last_recv_ns),
            per_port: self.targets.iter().map(|t| (t.index, t.received)).collect(),
            hist: self.hist,
            cpu_ns,
            wall_ns: send_stop_ns.saturating_sub(wall0),
        })
    }

    /// Sends one datagram to target `t` (consuming a sequence number even if
    /// the kernel refuses it).
    fn send_one(&mut self, t: usize) -> io::Result<()> {
        let local = self.attempts();
        let seq = local * self.seq_stride + self.seq_offset;
        let now = now_ns();
        let size = self.size;
        let target = &mut self.targets[t];
        if self.batched {
            let k = target.queued.len();
            encode(
                &mut target.outbox[k * size..(k + 1) * size],
                seq,
                now,
                target.index,
            );
            target.queued.push(local);
            // Counted as sent (or failed) when the outbox is flushed.
            self.states.push(ST_OUTSTANDING);
        } else {
            let datagram = &mut self.sbuf[..size];
            encode(datagram, seq, now, target.index);
            let ok = send_single(&target.sock, datagram)
                .map_err(|e| with_context(e, format!("port {}: send", target.port)))?;
            // A refused datagram holds its window slot until it times out, as in a batch.
            if ok {
                self.c.sent += 1;
                self.c.send_calls += 1;
                self.states.push(ST_OUTSTANDING);
            } else {
                self.c.send_errors += 1;
                self.states.push(ST_FAILED);
            }
        }
        if let Mode::Closed { .. } = self.mode {
            self.in_window[t] += 1;
            self.pending.push_back(Pending {
                local,
                target: t,
                deadline_ns: now + self.timeout_ns,
            });
        }
        if self.targets[t].queued.len() == IO_BATCH {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Sends target `t`'s queued datagrams; those the kernel refuses are
    /// counted as send errors.
    fn flush(&mut self, t: usize) -> io::Result<()> {
        let target = &mut self.targets[t];
        if target.queued.is_empty() {
            return Ok(());
        }
        let ok = send_batch(target, self.size, &mut self.c.send_calls)
            .map_err(|e| with_context(e, format!("port {}: send", target.port)))?;
        self.c.sent += ok as u64;
        for &local in &target.queued[ok..] {
            self.states[local as usize] = ST_FAILED;
            self.c.send_errors += 1;
        }
        target.queued.clear();
        Ok(())
    }

    fn flush_all(&mut self) -> io::Result<()> {
        for t in 0..self.targets.len() {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Closed loop: fill target `t`'s window.
    fn refill(&mut self, t: usize, now: u64) -> io::Result<()> {
        let Mode::Closed { .. } = self.mode else {
            return Ok(());
        };
        while self.in_window[t] < self.windows[t] && self.can_send(now) {
            self.send_one(t)?;
        }
        Ok(())
    }

    /// Closed loop: time out expired window slots and refill them.
    fn expire(&mut self, now: u64) -> io::Result<()> {
        while let Some(p) = self.pending.front().copied() {
            let state = self.states[p.local as usize];
            if state == ST_RECEIVED {
                // Its slot was freed when the reply arrived.
                self.pending.pop_front();
                continue;
            }
            if p.deadline_ns > now {
                break;
            }
            self.pending.pop_front();
            if state == ST_OUTSTANDING {
                self.states[p.local as usize] = ST_TIMED_OUT;
            }
            self.in_window[p.target] -= 1;
            self.refill(p.target, now)?;
        }
        Ok(())
    }

    /// Open loop: send every slot that is due, at most `MAX_BURST` of them.
    fn send_due(&mut self, now: u64, rate: u64) -> io::Result<()> {
        let n = self.targets.len() as u64;
        let mut burst = 0;
        while burst < MAX_BURST && self.attempts() < self.max_attempts {
            let deadline = self.slot_deadline(self.next_slot, rate);
            if deadline > now || deadline >= self.send_end_ns {
                break;
            }
            let lag = now - deadline;
            if lag > self.catchup_lag_ns {
                // Never count slots beyond the end of the schedule.
                let resume = self
                    .first_slot_at(now - self.catchup_lag_ns, rate)
                    .min(self.first_slot_at(self.send_end_ns, rate));
                debug_assert!(resume > self.next_slot);
                self.c.late_sends += resume - self.next_slot;
                self.next_slot = resume;
                continue;
            }
            if lag > self.late_slack_ns {
                self.c.late_sends += 1;
            }
            let t = (self.next_slot % n) as usize;
            self.next_slot += 1;
            self.send_one(t)?;
            burst += 1;
        }
        Ok(())
    }

    /// Reads up to `RECV_BATCH` datagrams from target `t`, `IO_BATCH` per
    /// `recvmmsg` when batched, else one per `recv`.
    fn receive(&mut self, t: usize) -> io::Result<()> {
        if !self.batched {
            return self.receive_single(t);
        }
        let fd = self.targets[t].sock.as_raw_fd();
        let mut lens = [0usize; IO_BATCH];
        for _ in 0..RECV_BATCH.div_ceil(IO_BATCH) {
            let got = {
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
                    .rbufs
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(b)])
                    .collect();
                match recvmmsg(
                    fd,
                    &mut self.recv_headers.0,
                    &mut iovs,
                    MsgFlags::MSG_DONTWAIT,
                    None,
                ) {
                    Ok(res) => {
                        let mut n = 0;
                        for (len, r) in lens.iter_mut().zip(res) {
                            *len = r.bytes;
                            n += 1;
                        }
                        n
                    }
                    Err(Errno::EAGAIN) => break,
                    // ICMP errors from earlier sends; not a datagram.
                    Err(Errno::ECONNREFUSED | Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(errno_context(
                            e,
                            &format!("port {}: recvmmsg", self.targets[t].port),
                        ))
                    }
                }
            };
            if got > 0 {
                self.c.recv_calls += 1;
            }
            let now = now_ns();
            for (k, &len) in lens[..got].iter().enumerate() {
                self.on_datagram(t, k, len, now)?;
            }
            if got < IO_BATCH {
                break;
            }
        }
        Ok(())
    }

    /// Reads up to `RECV_BATCH` datagrams from target `t`, one per `recv`.
    fn receive_single(&mut self, t: usize) -> io::Result<()> {
        for _ in 0..RECV_BATCH {
            let r = self.targets[t].sock.recv(&mut self.rbufs[0]);
            match r {
                Ok(len) => {
                    self.c.recv_calls += 1;
                    self.on_datagram(t, 0, len, now_ns())?;
                }
                Err(e) => match Errno::from_raw(e.raw_os_error().unwrap_or(0)) {
                    Errno::EAGAIN => break,
                    // ICMP errors from earlier sends; not a datagram.
                    Errno::ECONNREFUSED | Errno::EINTR => {}
                    _ => {
                        let port = self.targets[t].port;
                        return Err(with_context(e, format!("port {port}: recv")));
                    }
                },
            }
        }
        Ok(())
    }

    /// Echo `len` bytes long in receive buffer `k`, from target `t`.
    fn on_datagram(&mut self, t: usize, k: usize, len: usize, now: u64) -> io::Result<()> {
        let Some(local) = self.match_echo(t, k, len, now) else {
            self.c.corrupt += 1;
            return Ok(());
        };
        match self.states[local] {
            ST_RECEIVED => self.c.duplicates += 1,
            state @ (ST_OUTSTANDING | ST_TIMED_OUT) => {
                let was_outstanding = state == ST_OUTSTANDING;
                self.states[local] = ST_RECEIVED;
                self.c.received += 1;
                self.targets[t].received += 1;
                self.last_recv_ns = now;
                let (_, ts, _) = header(&self.rbufs[k][..len]);
                self.hist.saturating_record((now - ts).max(1));
                if was_outstanding {
                    if let Mode::Closed { .. } = self.mode {
                        self.in_window[t] -= 1;
                        self.refill(t, now)?;
                    }
                }
            }
            // ST_FAILED: the kernel refused that send, so no echo can be genuine.
            _ => self.c.corrupt += 1,
        }
        Ok(())
    }

    /// The local sequence index of an intact echo, or `None` if it is corrupt.
    fn match_echo(&self, t: usize, k: usize, len: usize, now: u64) -> Option<usize> {
        if len != self.size {
            return None;
        }
        let buf = &self.rbufs[k][..len];
        let (seq, ts, idx) = header(buf);
        if idx != self.targets[t].index
            || seq % self.seq_stride != self.seq_offset
            || ts < self.start_ns
            || ts > now
        {
            return None;
        }
        let local = seq / self.seq_stride;
        if local >= self.attempts() || !padding_ok(buf) {
            return None;
        }
        Some(local as usize)
    }
}
