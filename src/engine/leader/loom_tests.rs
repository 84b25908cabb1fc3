//! Models of the protocol. Loom explores every interleaving (up to the preemption bound)
//! and reports a deadlock if any thread parks forever (a lost wake-up).
//!
//! Unbound: a fake handle set, an atomic count of pending events. Each worker joins; as
//! leader it takes one event and promotes before "processing" it; when no event is left it
//! shuts the lane down.
//!
//! Bound (`bound_*`): threads wait in `join_with` for their own reply; the leader reads a
//! fake connection (a queue of `(thread, sequence)` replies behind a loom mutex and
//! condvar, its "epoll") and hands each reply to its waiter. The real bound pool
//! (`bound/table.rs`) has its own models on top of these.
use super::*;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Condvar, Mutex as LMutex};
use std::collections::VecDeque;

fn worker(
    p: &Protocol,
    me: u16,
    prio: u8,
    events: &AtomicUsize,
    leaders: &AtomicUsize,
    done: &AtomicUsize,
) {
    while p.join(me, prio) == Joined::Leader {
        assert_eq!(leaders.fetch_add(1, SeqCst), 0, "two leaders at once");
        let took = events
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        leaders.fetch_sub(1, SeqCst);
        if took {
            let _ = p.promote(me);
            done.fetch_add(1, SeqCst); // "processing"
        } else {
            p.shutdown();
            p.resign(me);
        }
    }
}

fn run(threads: u16, n_events: usize, promotion: Promotion) {
    let p = Arc::new(Protocol::new(threads as usize, promotion));
    let events = Arc::new(AtomicUsize::new(n_events));
    let leaders = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (1..threads)
        .map(|me| {
            let (p, e, l, d) = (p.clone(), events.clone(), leaders.clone(), done.clone());
            loom::thread::spawn(move || worker(&p, me, me as u8, &e, &l, &d))
        })
        .collect();
    worker(&p, 0, 0, &events, &leaders, &done);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        done.load(SeqCst),
        n_events,
        "every event processed exactly once"
    );
}

#[test]
fn two_threads_two_events() {
    loom::model(|| run(2, 2, Promotion::Priority));
}

#[test]
fn two_threads_fifo() {
    loom::model(|| run(2, 3, Promotion::Fifo));
}

#[test]
fn three_threads_bounded() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| run(3, 2, Promotion::Priority));
}

#[test]
fn external_shutdown_wakes_everyone() {
    // Shutdown from outside the pool while threads lead/follow: all must return.
    loom::model(|| {
        let p = Arc::new(Protocol::new(2, Promotion::Lifo));
        let p2 = p.clone();
        let t = loom::thread::spawn(move || {
            while p2.join(1, 1) == Joined::Leader {
                p2.resign(1);
                loom::thread::yield_now();
            }
        });
        p.shutdown();
        while p.join(0, 0) == Joined::Leader {
            p.resign(0);
        }
        t.join().unwrap();
    });
}

// ----- batches: a leader takes several events from one wait ------------------------------

/// A leader waits for up to `max` events at once (`lead`), keeps the first and leaves the
/// rest in the batch with the role (`promote_with`); whoever leads next takes from the
/// batch first (`lead` → `Take`). Events are numbered; each must be processed exactly once,
/// at most one thread may wait on the (fake) set at a time, and no thread may park forever.
fn batch_worker(
    p: &Protocol,
    me: u16,
    set: &AtomicUsize,
    waiting: &AtomicUsize,
    seen: &AtomicUsize,
) {
    while p.join(me, me as u8) == Joined::Leader {
        let first = match p.lead(me) {
            Lead::Lost => unreachable!("no deferred promotion here"),
            Lead::Take((_, e), _) => e,
            Lead::Wait { max } => {
                assert_eq!(
                    waiting.fetch_add(1, SeqCst),
                    0,
                    "two threads wait on the set"
                );
                // Take up to `max` of the events left (numbered from the top down).
                let left = set
                    .fetch_update(SeqCst, SeqCst, |n| Some(n - n.min(max)))
                    .unwrap();
                waiting.fetch_sub(1, SeqCst);
                let k = left.min(max);
                if k == 0 {
                    p.shutdown();
                    p.resign(me);
                    continue;
                }
                let got: Vec<Ready> = (0..k).map(|i| (0, (left - 1 - i) as u64)).collect();
                let _ = p.promote_with(me, &got[1..]);
                got[0].1
            }
        };
        // "processing": every event exactly once
        let bit = 1usize << first;
        assert_eq!(seen.fetch_or(bit, SeqCst) & bit, 0, "event {first} twice");
    }
}

fn batches(threads: u16, n_events: usize) {
    let p = Arc::new(Protocol::new(threads as usize, Promotion::Priority));
    let set = Arc::new(AtomicUsize::new(n_events));
    let waiting = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (1..threads)
        .map(|me| {
            let (p, s, w, x) = (p.clone(), set.clone(), waiting.clone(), seen.clone());
            loom::thread::spawn(move || batch_worker(&p, me, &s, &w, &x))
        })
        .collect();
    batch_worker(&p, 0, &set, &waiting, &seen);
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(
        seen.load(SeqCst),
        (1 << n_events) - 1,
        "every event processed exactly once"
    );
}

#[test]
fn batch_events_are_taken_exactly_once() {
    loom::model(|| batches(2, 3));
}

#[test]
fn batch_three_threads_bounded() {
    bounded(2, || batches(3, 3));
}

// ----- deferred promotion: a leader keeps its role through its events --------------------

/// A borrowing link's event in the models' sets (a lent thread's turn, `borrow.rs`).
const LINK: u8 = 0;

/// The model watchdog (`watchdog.rs`): relieves a leader that keeps its role, at points
/// loom chooses (its `promote_after` has always passed). `looks: None`: until the model
/// stops it (a model whose progress needs a relief; the spin yields, so loom runs the
/// others); `Some(n)`: `n` looks, racing the workers (a model that must not break however
/// a relief interleaves, at a fraction of the spin's cost).
fn watchdog(
    p: &Arc<Protocol>,
    stop: &Arc<AtomicUsize>,
    looks: Option<usize>,
) -> loom::thread::JoinHandle<()> {
    let (p, stop) = (p.clone(), stop.clone());
    loom::thread::spawn(move || match looks {
        None => {
            while stop.load(SeqCst) == 0 {
                let _ = p.relieve(u64::MAX, 0);
                loom::thread::yield_now();
            }
        }
        Some(n) => {
            for _ in 0..n {
                let _ = p.relieve(u64::MAX, 0);
            }
        }
    })
}

/// One pool thread as `dispatch.rs` runs it with deferred promotion: a wait takes all that
/// is ready; it keeps the role (handlers predicted quick) if the wait drained the set and
/// holds no link, else promotes with the rest of the batch. `handle` processes one event.
/// Checked here: at most one thread waits on the set, and a thread that lends (a link) no
/// longer leads its lane.
fn deferring_worker(p: &Protocol, set: &Set, me: u16, waiting: &AtomicUsize, handle: impl Fn(u8)) {
    while p.join(me, 1) == Joined::Leader {
        let e = match p.lead(me) {
            Lead::Lost => continue,
            Lead::Take((_, e), _) => e as u8,
            Lead::Wait { .. } => {
                assert_eq!(
                    waiting.fetch_add(1, SeqCst),
                    0,
                    "two threads wait on the set"
                );
                let got = set.wait_all();
                waiting.fetch_sub(1, SeqCst);
                let Some((got, drained)) = got else {
                    p.resign(me);
                    continue;
                };
                let rest: Vec<Ready> = got[1..].iter().map(|&e| (0, u64::from(e))).collect();
                if drained && !got.contains(&LINK) {
                    let _ = p.keep(me, &rest, 1);
                } else {
                    let _ = p.promote_with(me, &rest);
                }
                got[0]
            }
        };
        if e == LINK {
            assert_ne!(p.lock().leader(), Some(me), "lent while it leads its lane");
        }
        handle(e);
    }
}

/// Two pool threads, deferred promotion, and the model watchdog. Event 1's handler makes
/// event 2 ready and blocks until it was processed: the leader keeps its role through
/// event 1 (its wait drained the set), so event 2 is taken only if the watchdog relieves it
/// and the other, idle thread leads. Checked: nothing deadlocks however the watchdog races
/// with the keep and the leader's next wait, at most one thread waits on the set, each
/// event is processed once, and event 2 by the thread not blocked in event 1.
fn deferred(promotion: Promotion) {
    let p = Arc::new(Protocol::new(2, promotion));
    let set = Set::new(&[1]);
    let (waiting, taken, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let worker = |me: u16| {
        let (p, set, waiting, taken) = (p.clone(), set.clone(), waiting.clone(), taken.clone());
        loom::thread::spawn(move || {
            deferring_worker(&p, &set, me, &waiting, |e| {
                if e == 1 {
                    set.post(2);
                    set.await_done(2);
                    set.done(1);
                    p.shutdown();
                    set.shut();
                } else {
                    assert_eq!(taken.swap(usize::from(me) + 1, SeqCst), 0, "event 2 twice");
                    set.done(2);
                }
            })
        })
    };
    let dog = watchdog(&p, &stop, None);
    for h in [worker(0), worker(1)] {
        h.join().unwrap();
    }
    stop.store(1, SeqCst);
    dog.join().unwrap();
    assert_eq!(set.lane.lock().unwrap().processed, [2, 1]);
    assert_ne!(taken.load(SeqCst), 0);
    assert_eq!(p.overflow(), 0);
}

/// Deferred promotion when the leader finishes first: events 1 and then 2 (posted once 1
/// was processed) are quick; the watchdog may relieve at any point. Checked: at most one
/// thread ever waits on the set (the deferral ends before the leader waits, so a late look
/// of the watchdog cannot make a follower a second leader), each event once, no deadlock.
fn deferred_quick(promotion: Promotion) {
    let p = Arc::new(Protocol::new(2, promotion));
    let set = Set::new(&[1]);
    let (waiting, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let worker = |me: u16| {
        let (p, set, waiting) = (p.clone(), set.clone(), waiting.clone());
        loom::thread::spawn(move || deferring_worker(&p, &set, me, &waiting, |e| set.done(e)))
    };
    let dog = watchdog(&p, &stop, Some(2));
    let w = [worker(0), worker(1)];
    set.await_done(1);
    set.post(2);
    set.await_done(2);
    p.shutdown();
    set.shut();
    for h in w {
        h.join().unwrap();
    }
    stop.store(1, SeqCst);
    dog.join().unwrap();
    assert_eq!(set.lane.lock().unwrap().processed, [1, 2]);
}

/// Three pool threads, a link in a wait's batch, and the model watchdog (issue 27's first
/// defect: a leader that kept its role with a link in its batch, lost it to its successor,
/// and then handed it on a second time). Events 1 and a link are ready at once: the wait
/// holds a link, so its leader promotes with the link in the batch, and whoever takes the
/// link (through `lead`, which hands the role on in the same lock) lends without leading.
/// The lent turn makes the lane's own event 3 ready and blocks until it was processed:
/// only the third thread, idle, can take it, and it keeps its role for it while the
/// watchdog looks. Checked: at most one waiter, never lent while leading, each event once,
/// no deadlock.
fn deferred_with_a_link(promotion: Promotion) {
    let p = Arc::new(Protocol::new(3, promotion));
    let set = Set::new(&[1, LINK]);
    let (waiting, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let worker = |me: u16| {
        let (p, set, waiting) = (p.clone(), set.clone(), waiting.clone());
        loom::thread::spawn(move || {
            deferring_worker(&p, &set, me, &waiting, |e| {
                if e == LINK {
                    set.post(3);
                    set.await_done(3);
                    set.await_done(1);
                    set.done(LINK);
                    p.shutdown();
                    set.shut();
                } else {
                    set.done(e);
                }
            })
        })
    };
    let dog = watchdog(&p, &stop, Some(1));
    let w = [worker(0), worker(1), worker(2)];
    for h in w {
        h.join().unwrap();
    }
    dog.join().unwrap();
    let mut done = set.lane.lock().unwrap().processed.clone();
    done.sort_unstable();
    assert_eq!(done, [LINK, 1, 3], "each event once");
    assert_eq!(p.overflow(), 0);
}

#[test]
fn deferred_promotion_ends_before_the_leader_waits() {
    bounded(2, || deferred_quick(Promotion::Priority));
}

#[test]
fn deferred_promotion_relieved_by_the_watchdog() {
    bounded(2, || deferred(Promotion::Priority));
}

#[test]
fn deferred_promotion_relieved_by_the_watchdog_fifo() {
    bounded(2, || deferred(Promotion::Fifo));
}

#[test]
fn deferred_promotion_with_a_link_in_the_batch() {
    bounded(2, || deferred_with_a_link(Promotion::Lifo));
}

// ----- no starvation while a thread is idle ----------------------------------------------

/// A fake handle set of one lane: the events ready now (each taken by exactly one wait),
/// the lane's shutdown event, and which events were processed.
#[derive(Default)]
struct Lane {
    ready: VecDeque<u8>,
    shutdown: bool,
    processed: Vec<u8>,
}

struct Set {
    lane: LMutex<Lane>,
    cv: Condvar,
}

impl Set {
    fn new(ready: &[u8]) -> Arc<Set> {
        Arc::new(Set {
            lane: LMutex::new(Lane {
                ready: ready.iter().copied().collect(),
                ..Lane::default()
            }),
            cv: Condvar::new(),
        })
    }

    /// `epoll_wait` for one event; `None` at shutdown.
    fn wait(&self) -> Option<u8> {
        let mut g = self.lane.lock().unwrap();
        loop {
            if let Some(e) = g.ready.pop_front() {
                return Some(e);
            }
            if g.shutdown {
                return None;
            }
            g = self.cv.wait(g).unwrap();
        }
    }

    /// `epoll_wait` for every ready event (at least one); with whether it took all that
    /// was ready (always: a model set holds fewer than `MAX_BATCH`). `None` at shutdown.
    fn wait_all(&self) -> Option<(Vec<u8>, bool)> {
        let mut g = self.lane.lock().unwrap();
        loop {
            if !g.ready.is_empty() {
                return Some((g.ready.drain(..).collect(), true));
            }
            if g.shutdown {
                return None;
            }
            g = self.cv.wait(g).unwrap();
        }
    }

    /// `epoll_wait` with a zero timeout (a lent thread's look at the borrower's set).
    fn poll(&self) -> Option<u8> {
        self.lane.lock().unwrap().ready.pop_front()
    }

    fn post(&self, e: u8) {
        self.lane.lock().unwrap().ready.push_back(e);
        self.cv.notify_all();
    }

    fn done(&self, e: u8) {
        self.lane.lock().unwrap().processed.push(e);
        self.cv.notify_all();
    }

    /// Blocks until `e` was processed (the handler that starves without an idle taker).
    fn await_done(&self, e: u8) {
        let mut g = self.lane.lock().unwrap();
        while !g.processed.contains(&e) {
            g = self.cv.wait(g).unwrap();
        }
    }

    fn shut(&self) {
        self.lane.lock().unwrap().shutdown = true;
        self.cv.notify_all();
    }
}

/// Event 1's handler makes event 2 ready and blocks until it was processed, then shuts
/// the lane down; event 2's handler only records itself. With 2 threads one stays idle
/// while event 1 is processed, so event 2 is its next dispatch; if it were not taken, loom
/// would report the deadlock. `p` is `None` for the concurrent mode (no leader).
fn starve_worker(p: Option<&Protocol>, set: &Set, me: u16, taken: &AtomicUsize) {
    let process = |e: u8| {
        if e == 1 {
            set.post(2);
            set.await_done(2);
            set.done(1);
            if let Some(p) = p {
                p.shutdown();
            }
            set.shut();
        } else {
            // Taken by the thread that was idle: not the one blocked in event 1.
            assert_eq!(taken.swap(usize::from(me) + 1, SeqCst), 0, "event 2 twice");
            set.done(2);
        }
    };
    match p {
        Some(p) => {
            while p.join(me, me as u8) == Joined::Leader {
                match set.wait() {
                    Some(e) => {
                        let _ = p.promote(me);
                        process(e);
                    }
                    None => p.resign(me),
                }
            }
        }
        None => {
            while let Some(e) = set.wait() {
                process(e);
            }
        }
    }
}

fn no_starvation(promotion: Option<Promotion>) {
    let p = promotion.map(|m| Arc::new(Protocol::new(2, m)));
    let set = Set::new(&[1]);
    let taken = Arc::new(AtomicUsize::new(0));
    let (p1, s1, t1) = (p.clone(), set.clone(), taken.clone());
    let h = loom::thread::spawn(move || starve_worker(p1.as_deref(), &s1, 1, &t1));
    starve_worker(p.as_deref(), &set, 0, &taken);
    h.join().unwrap();
    assert_eq!(set.lane.lock().unwrap().processed, [2, 1]);
    assert_ne!(taken.load(SeqCst), 0);
}

#[test]
fn no_starvation_priority() {
    loom::model(|| no_starvation(Some(Promotion::Priority)));
}

#[test]
fn no_starvation_lifo() {
    loom::model(|| no_starvation(Some(Promotion::Lifo)));
}

#[test]
fn no_starvation_fifo() {
    loom::model(|| no_starvation(Some(Promotion::Fifo)));
}

/// Concurrent mode: no protocol, every idle thread waits on the set itself.
#[test]
fn no_starvation_concurrent() {
    loom::model(|| no_starvation(None));
}

/// With borrowing: lane B (1 thread) processes `b1`, which makes `b2` ready and blocks
/// until it is done; B has no idle thread, so its link fires in lender lane L (2 threads).
/// L's leader takes the link, promotes its own follower (the L/F rule), and, lent,
/// dispatches `b2` from B's set; `b2`'s handler makes L's own event `l1` ready and blocks
/// until it is done. `l1` must be taken by L's other, idle thread: if the lent thread had
/// kept L's leader role, nobody would, and loom would report the deadlock.
fn no_starvation_borrowing(promotion: Promotion) {
    let (pb, pl) = (
        Arc::new(Protocol::new(1, Promotion::Fifo)),
        Arc::new(Protocol::new(2, promotion)),
    );
    let (b, l) = (Set::new(&[1]), Set::new(&[]));
    let lender = |me: u16| {
        let (pl, b, l) = (pl.clone(), b.clone(), l.clone());
        loom::thread::spawn(move || {
            while pl.join(me, me as u8) == Joined::Leader {
                match l.wait() {
                    Some(LINK) => {
                        let _ = pl.promote(me);
                        // Lent: one event of the borrower's set, if it is still there.
                        if let Some(e) = b.poll() {
                            assert_eq!(e, 2);
                            l.post(1);
                            l.await_done(1);
                            b.done(2);
                        }
                    }
                    Some(e) => {
                        let _ = pl.promote(me);
                        l.done(e);
                    }
                    None => pl.resign(me),
                }
            }
        })
    };
    let hs = [lender(0), lender(1)];
    // The borrower's only thread.
    while pb.join(0, 50) == Joined::Leader {
        match b.wait() {
            Some(e) => {
                assert_eq!(e, 1);
                assert_eq!(pb.promote(0), Promoted::Vacant, "B has one thread");
                // B busy with b2 ready: the armed link turns readable in L's set.
                b.post(2);
                l.post(LINK);
                b.await_done(2);
                b.done(1);
                pb.shutdown();
                b.shut();
                pl.shutdown();
                l.shut();
            }
            None => pb.resign(0),
        }
    }
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(b.lane.lock().unwrap().processed, [2, 1]);
    assert_eq!(l.lane.lock().unwrap().processed, [1]);
}

#[test]
fn no_starvation_borrowing_priority() {
    bounded(2, || no_starvation_borrowing(Promotion::Priority));
}

#[test]
fn no_starvation_borrowing_fifo() {
    bounded(2, || no_starvation_borrowing(Promotion::Fifo));
}

#[test]
fn no_starvation_borrowing_lifo() {
    bounded(2, || no_starvation_borrowing(Promotion::Lifo));
}

// ----- bound: hand-off of replies to named followers -----------------------------------

const N: usize = 3;

/// The variant's state of the bound models.
#[derive(Debug, Default)]
struct Mail {
    /// `want[t]`: the reply sequence thread `t` waits for (registered before it is sent).
    want: [Option<u8>; N],
    /// `got[t]`: a reply delivered to `t` and not yet collected.
    got: [Option<u8>; N],
    /// The connection failed (or the pool shut down): waits without a reply end.
    failed: bool,
    /// `expired[t]`: `t`'s deadline passed (set by the model's timer).
    expired: [bool; N],
    delivered: usize,
    late: usize,
}

impl Variant for Mail {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Replied(u8),
    Failed,
    TimedOut,
    Shutdown,
}

#[derive(Default)]
struct Wire {
    replies: VecDeque<(u16, u8)>,
    closed: bool,
}

struct World {
    p: Protocol<Mail>,
    wire: LMutex<Wire>,
    cv: Condvar,
    leaders: AtomicUsize,
}

/// Threads `0..n` each wait for reply 1; `replies` are on the wire already.
fn world(n: usize, replies: &[(u16, u8)]) -> Arc<World> {
    let mut mail = Mail::default();
    for w in &mut mail.want[..n] {
        *w = Some(1);
    }
    Arc::new(World {
        p: Protocol::with(N, Promotion::Fifo, mail),
        wire: LMutex::new(Wire {
            replies: replies.iter().copied().collect(),
            closed: false,
        }),
        cv: Condvar::new(),
        leaders: AtomicUsize::new(0),
    })
}

/// A reply wait's check (`timed`: with a deadline the model's timer ends).
fn reply_check(st: &mut State<Mail>, me: u16, timed: bool) -> Check<Ended> {
    let m = &mut st.ext;
    let i = me as usize;
    if let Some(seq) = m.got[i].take() {
        return Check::Done(Ended::Replied(seq));
    }
    if m.failed {
        return Check::Done(Ended::Failed);
    }
    if timed && m.expired[i] {
        m.want[i] = None; // a reply that still comes is late
        return Check::Done(Ended::TimedOut);
    }
    Check::Wait {
        until: timed.then_some(0),
    }
}

/// A wait for shutdown only (a bound pool's `serve`).
fn serve_check(st: &mut State<Mail>) -> Check<Ended> {
    if st.is_shutdown() {
        Check::Done(Ended::Shutdown)
    } else {
        Check::Wait { until: None }
    }
}

/// The thread's loop: wait, or lead one turn and rejoin (a leader whose wait is over
/// leaves in `join_with`, promoting a follower).
fn wait(w: &World, me: u16, mut check: impl FnMut(&mut State<Mail>) -> Check<Ended>) -> Ended {
    loop {
        match w.p.join_with(me, 0, &mut check) {
            Outcome::Done(o) => return o,
            Outcome::Lead => lead(w),
        }
    }
}

/// One leader turn: wait for the connection, then deliver one reply (or fail on close).
fn lead(w: &World) {
    assert_eq!(w.leaders.fetch_add(1, SeqCst), 0, "two leaders at once");
    let item = {
        let mut g = w.wire.lock().unwrap();
        while g.replies.is_empty() && !g.closed {
            g = w.cv.wait(g).unwrap();
        }
        g.replies.pop_front()
    };
    match item {
        Some((t, seq)) => deliver(&w.p, t, seq),
        None => fail(&w.p),
    }
    w.leaders.fetch_sub(1, SeqCst);
}

/// Hand-off: the reply is written under the lock, then exactly its waiter is woken.
fn deliver(p: &Protocol<Mail>, t: u16, seq: u8) {
    let mut st = p.lock();
    let m = &mut st.ext;
    if m.want[t as usize] != Some(seq) {
        m.late += 1;
        return;
    }
    m.want[t as usize] = None;
    m.got[t as usize] = Some(seq);
    m.delivered += 1;
    let parked = st.dequeue(t);
    drop(st);
    if parked {
        p.wake(Some(t));
    }
}

/// The connection failed: every pending wait ends, its parked thread is woken.
fn fail(p: &Protocol<Mail>) {
    let mut st = p.lock();
    st.ext.failed = true;
    for t in 0..N as u16 {
        if st.ext.want[t as usize].take().is_some() && st.dequeue(t) {
            p.wake(Some(t));
        }
    }
}

fn close(w: &World) {
    w.wire.lock().unwrap().closed = true;
    w.cv.notify_all();
}

fn spawn_waiter(w: &Arc<World>, me: u16) -> loom::thread::JoinHandle<Ended> {
    let w = w.clone();
    loom::thread::spawn(move || wait(&w, me, |st| reply_check(st, me, false)))
}

fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// Each reply reaches exactly its waiter, once, whoever reads it (replies on the wire in
/// reverse order of the threads).
#[test]
fn bound_handoff_two_waiters() {
    loom::model(|| {
        let w = world(2, &[(1, 1), (0, 1)]);
        let t1 = spawn_waiter(&w, 1);
        assert_eq!(
            wait(&w, 0, |st| reply_check(st, 0, false)),
            Ended::Replied(1)
        );
        assert_eq!(t1.join().unwrap(), Ended::Replied(1));
        let st = w.p.lock();
        assert_eq!((st.ext.delivered, st.ext.late), (2, 0));
        assert_eq!((st.leader(), st.followers()), (None, 0));
    });
}

#[test]
fn bound_handoff_three_waiters() {
    bounded(2, || {
        let w = world(3, &[(2, 1), (0, 1), (1, 1)]);
        let hs = [spawn_waiter(&w, 1), spawn_waiter(&w, 2)];
        assert_eq!(
            wait(&w, 0, |st| reply_check(st, 0, false)),
            Ended::Replied(1)
        );
        for h in hs {
            assert_eq!(h.join().unwrap(), Ended::Replied(1));
        }
        assert_eq!(w.p.lock().ext.delivered, 3);
    });
}

/// The connection fails at any point, from outside (a failed send) while one reply is
/// on the wire: every waiter returns, the one whose reply was delivered with it.
#[test]
fn bound_failure_wakes_every_waiter() {
    loom::model(|| {
        let w = world(2, &[(1, 1)]);
        let hs = [spawn_waiter(&w, 0), spawn_waiter(&w, 1)];
        fail(&w.p);
        close(&w);
        let [a, b] = hs.map(|h| h.join().unwrap());
        assert_eq!(a, Ended::Failed, "thread 0's reply never came");
        assert!(matches!(b, Ended::Replied(1) | Ended::Failed), "{b:?}");
        let st = w.p.lock();
        assert_eq!(st.ext.delivered, usize::from(b == Ended::Replied(1)));
    });
}

/// Shutdown at any point wakes a reply waiter (failed) and a serving thread (shutdown),
/// whether each is leading, following or running.
#[test]
fn bound_shutdown_wakes_waiters_and_servers() {
    loom::model(|| {
        let w = world(1, &[]);
        let t0 = spawn_waiter(&w, 0);
        let w1 = w.clone();
        let t1 = loom::thread::spawn(move || wait(&w1, 1, serve_check));
        w.p.shutdown_with(|st| {
            st.ext.failed = true;
            st.ext.want = [None; N];
        });
        close(&w);
        assert_eq!(t0.join().unwrap(), Ended::Failed);
        assert_eq!(t1.join().unwrap(), Ended::Shutdown);
    });
}

/// A timed waiter's deadline passes (the model's timer) at any point, racing the hand-off
/// of its reply and its promotion. It returns its reply, or times out (and its reply is
/// then read late). When the token of the hand-off or promotion arrives after the timeout,
/// it is left in the parker and ends the thread's next park early (its next wait, for a
/// second request, behind a leader that serves on): that wake-up is spurious, not lost, and
/// every later wait still ends exactly once.
#[test]
fn bound_timeout_races_handoff_and_promotion() {
    bounded(3, || {
        let w = world(2, &[(0, 1), (1, 1)]);
        let w0 = w.clone();
        let a = loom::thread::spawn(move || {
            let first = wait(&w0, 0, |st| reply_check(st, 0, true));
            // The second request: registered, then sent (its reply follows at once).
            w0.p.lock().ext.want[0] = Some(2);
            w0.wire.lock().unwrap().replies.push_back((0, 2));
            w0.cv.notify_all();
            (first, wait(&w0, 0, |st| reply_check(st, 0, false)))
        });
        let w1 = w.clone();
        let b = loom::thread::spawn(move || {
            let first = wait(&w1, 1, |st| reply_check(st, 1, false));
            (first, wait(&w1, 1, serve_check))
        });
        // the timer of thread 0
        w.p.lock().ext.expired[0] = true;
        w.p.time_out(0);
        let (a1, a2) = a.join().unwrap();
        // The queue holds only waiting threads, each once: thread 0 is gone, and thread 1
        // cannot be queued behind nobody (thread 0 promoted it if it was queued).
        assert_eq!(
            w.p.lock().followers(),
            0,
            "a stale entry in the follower queue"
        );
        w.p.shutdown_with(|_| {});
        close(&w);
        assert_eq!(b.join().unwrap(), (Ended::Replied(1), Ended::Shutdown));
        assert_eq!(a2, Ended::Replied(2));
        let st = w.p.lock();
        match a1 {
            Ended::Replied(1) => assert_eq!((st.ext.delivered, st.ext.late), (3, 0)),
            Ended::TimedOut => assert_eq!((st.ext.delivered, st.ext.late), (2, 1)),
            other => panic!("unexpected {other:?}"),
        }
    });
}
