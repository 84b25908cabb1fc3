//! Models of the hand-off with a fake connection: a queue of reply ids (and unbound-event
//! markers) behind a loom mutex and condvar. The leader's loop below has the shape of the
//! real one in `mod.rs` (deliver what is buffered → `lead_settle` → wait for the
//! connection). Loom explores every interleaving up to the preemption bound and reports a
//! deadlock if a thread parks forever (a lost wake-up).
use super::*;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Condvar, Mutex as LMutex};
use std::collections::VecDeque;

/// Marker for "an unbound event is ready" on the fake connection.
const EVENT: u64 = u64::MAX;

#[derive(Default)]
struct Wire {
    requests: Vec<u64>,
    replies: VecDeque<u64>,
    closed: bool,
    shutdown: bool,
}

struct Link {
    m: LMutex<Wire>,
    cv: Condvar,
}

impl Link {
    fn new() -> Link {
        Link {
            m: LMutex::new(Wire::default()),
            cv: Condvar::new(),
        }
    }
    fn request(&self, id: u64) {
        self.m.lock().unwrap().requests.push(id);
        self.cv.notify_all();
    }
}

struct World {
    table: Table,
    link: Link,
    leaders: AtomicUsize,
    processed: AtomicUsize,
}

/// Mirrors `BoundPool::lead`: deliver, settle, wait for the connection.
fn lead(w: &World, t: &Turn) -> Step {
    let mut reader = ();
    loop {
        assert_eq!(w.leaders.fetch_add(1, SeqCst), 0, "two leaders at once");
        w.leaders.fetch_sub(1, SeqCst);
        let failed;
        (reader, failed) = match w.table.lead_settle(t, reader) {
            Ok(step) => return step,
            Err(x) => x,
        };
        // Wait for the connection (not watched any more once it failed) or shutdown.
        let mut g = w.link.m.lock().unwrap();
        while !g.shutdown && (failed || (g.replies.is_empty() && !g.closed)) {
            g = w.link.cv.wait(g).unwrap();
        }
        if g.shutdown {
            drop(g);
            w.table.shutdown();
            continue;
        }
        match g.replies.pop_front() {
            Some(EVENT) => {
                drop(g);
                let ev = Ready {
                    token: 1,
                    readiness: 1,
                    woke_ns: 0,
                };
                if t.eligible {
                    return w.table.lead_process(t, ev, reader);
                }
                w.table.defer(ev);
            }
            Some(id) => {
                drop(g);
                if let Target::Slot(s) = w.table.deliver_begin(id) {
                    w.table.deliver_end(s, (id >> SLOT_BITS) as usize, t.slot);
                }
            }
            None => {
                drop(g);
                w.table.fail(BoundError::Closed);
            }
        }
    }
}

/// Mirrors `BoundPool::run`.
fn run(w: &World, t: &Turn) -> Step {
    loop {
        let step = match w.table.next_step(t) {
            Step::Lead => lead(w, t),
            s => s,
        };
        match step {
            Step::Process(_) => {
                w.processed.fetch_add(1, SeqCst);
            }
            s => return s,
        }
    }
}

fn world(slots: usize) -> Arc<World> {
    Arc::new(World {
        table: Table::new(slots, 2, Promotion::Fifo),
        link: Link::new(),
        leaders: AtomicUsize::new(0),
        processed: AtomicUsize::new(0),
    })
}

/// Preemption bound of the models with three threads: 3 explores every interleaving with
/// up to three forced switches in seconds; unbounded runs take many minutes.
const PREEMPTIONS: usize = 3;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(PREEMPTIONS);
    b.check(f);
}

/// A client thread: one request, then wait for its reply. Registering fails at once if the
/// connection already failed.
fn client(w: &World, slot: u16) -> Step {
    let id = match w.table.expect(slot) {
        Ok(id) => id,
        Err(e) => return Step::Failed(e),
    };
    w.link.request(id);
    run(
        w,
        &Turn {
            slot,
            priority: 0,
            bound: true,
            eligible: true,
            deadline: None,
        },
    )
}

/// The back-end: waits for `n` requests, answers them in reverse order, then (optionally)
/// closes the connection.
fn backend(w: &World, n: usize, close: bool) {
    let mut g = w.link.m.lock().unwrap();
    while g.requests.len() < n {
        g = w.link.cv.wait(g).unwrap();
    }
    let mut reqs = std::mem::take(&mut g.requests);
    reqs.reverse();
    g.replies.extend(reqs);
    g.closed = close;
    drop(g);
    w.link.cv.notify_all();
}

#[test]
fn two_waiters_reverse_order() {
    model(|| {
        let w = world(2);
        let a = w.table.acquire().unwrap();
        let b = w.table.acquire().unwrap();
        let w2 = w.clone();
        let tb = loom::thread::spawn(move || client(&w2, b));
        let w3 = w.clone();
        let be = loom::thread::spawn(move || backend(&w3, 2, false));
        assert_eq!(client(&w, a), Step::Replied(1));
        assert_eq!(tb.join().unwrap(), Step::Replied(1));
        be.join().unwrap();
        let s = w.table.stats();
        assert_eq!(s.replies, 2);
        assert_eq!(s.own + s.handoffs, 2);
    });
}

#[test]
fn closed_connection_fails_every_waiter() {
    model(|| {
        let w = world(2);
        let a = w.table.acquire().unwrap();
        let b = w.table.acquire().unwrap();
        let w2 = w.clone();
        let tb = loom::thread::spawn(move || client(&w2, b));
        // the back-end closes without answering
        let w3 = w.clone();
        let be = loom::thread::spawn(move || {
            w3.link.m.lock().unwrap().closed = true;
            w3.link.cv.notify_all();
        });
        assert_eq!(client(&w, a), Step::Failed(BoundError::Closed));
        assert_eq!(tb.join().unwrap(), Step::Failed(BoundError::Closed));
        be.join().unwrap();
    });
}

#[test]
fn timed_out_waiter_leaves_late_reply_behind() {
    model(|| {
        let w = world(2);
        let a = w.table.acquire().unwrap();
        let b = w.table.acquire().unwrap();
        let w2 = w.clone();
        let tb = loom::thread::spawn(move || client(&w2, b));
        let w3 = w.clone();
        let be = loom::thread::spawn(move || backend(&w3, 2, false));
        // `a` registers and sends, but its deadline has already passed when it joins
        let id = w.table.expect(a).unwrap();
        w.link.request(id);
        let st = run(
            &w,
            &Turn {
                slot: a,
                priority: 0,
                bound: true,
                eligible: true,
                deadline: Some(0),
            },
        );
        assert_eq!(tb.join().unwrap(), Step::Replied(1));
        be.join().unwrap();
        let s = w.table.stats();
        match st {
            // `a`'s reply was read before `a` looked: a reply beats an expired deadline
            Step::Replied(1) => assert_eq!((s.replies, s.late), (2, 0), "{s:?}"),
            // otherwise it is still on the wire (b left first) or was dropped as late
            Step::TimedOut => {
                assert!(s.replies == 1 && s.late <= 1 && s.timeouts == 1, "{s:?}")
            }
            other => panic!("unexpected {other:?}"),
        }
    });
}

/// Hybrid: a bound waiter that may not process unbound events (max nesting) leads; an
/// unbound event arrives before its reply. A serving thread must process the event, and the
/// waiter must get its reply. Then the pool shuts down and the serving thread returns.
#[test]
fn deferred_event_is_processed_by_a_serving_thread() {
    model(|| {
        let w = world(2);
        let waiter = w.table.acquire().unwrap();
        let server = w.table.acquire().unwrap();
        let w2 = w.clone();
        let ts = loom::thread::spawn(move || {
            run(
                &w2,
                &Turn {
                    slot: server,
                    priority: 0,
                    bound: false,
                    eligible: true,
                    deadline: None,
                },
            )
        });
        let id = w.table.expect(waiter).unwrap();
        {
            let mut g = w.link.m.lock().unwrap();
            g.replies.push_back(EVENT);
            g.replies.push_back(id);
        }
        w.link.cv.notify_all();
        let st = run(
            &w,
            &Turn {
                slot: waiter,
                priority: 0,
                bound: true,
                eligible: false,
                deadline: None,
            },
        );
        assert_eq!(st, Step::Replied(1));
        // wait until the event was processed, then shut down
        while w.processed.load(SeqCst) == 0 {
            loom::thread::yield_now();
        }
        w.table.shutdown();
        w.link.m.lock().unwrap().shutdown = true;
        w.link.cv.notify_all();
        assert_eq!(ts.join().unwrap(), Step::Shutdown);
        assert_eq!(w.processed.load(SeqCst), 1);
    });
}

#[test]
fn three_waiters_bounded() {
    // four threads (three clients and the back-end): bound 2
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = world(3);
        let slots: Vec<u16> = (0..3).map(|_| w.table.acquire().unwrap()).collect();
        let hs: Vec<_> = slots[1..]
            .iter()
            .map(|&s| {
                let w2 = w.clone();
                loom::thread::spawn(move || client(&w2, s))
            })
            .collect();
        let w3 = w.clone();
        let be = loom::thread::spawn(move || backend(&w3, 3, false));
        assert_eq!(client(&w, slots[0]), Step::Replied(1));
        for h in hs {
            assert_eq!(h.join().unwrap(), Step::Replied(1));
        }
        be.join().unwrap();
        assert_eq!(w.table.stats().replies, 3);
    });
}
