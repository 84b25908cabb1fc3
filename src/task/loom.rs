//! Models of a lane's task protocols, beside what they model: the wake path (a task's state
//! word, the ready queue and the doorbell, `executor.rs`) against a turn (`turn.rs`), and a
//! cancel against a wake. The real `TaskState`, `sync::queue::Queue` and `sync::doorbell`
//! run under loom; the turn and the wakers are the model's threads. `scripts/loom.sh` runs
//! them.

use crate::sync::doorbell::{Bell, Doorbell};
use crate::sync::queue::Queue;
use crate::task::state::{Start, TaskState};
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;

/// A model eventfd: its counter.
#[derive(Default)]
struct Counter(AtomicU64);

impl Bell for Arc<Counter> {
    fn write(&self) {
        self.0.fetch_add(1, SeqCst);
    }
    fn read(&self) {
        self.0.store(0, SeqCst);
    }
}

/// One task, its lane's ready set and doorbell.
struct Lane {
    state: TaskState,
    ready: Queue<u32>,
    bell: Arc<Counter>,
    door: Doorbell<Arc<Counter>>,
    /// Writes the wakers made before their wakes (what a poll must see).
    produced: AtomicUsize,
    polls: AtomicUsize,
    /// `produced` as the last poll saw it.
    seen: AtomicUsize,
    dropped: AtomicUsize,
}

impl Lane {
    fn new() -> Arc<Lane> {
        let bell = Arc::new(Counter::default());
        Arc::new(Lane {
            state: TaskState::new(),
            ready: Queue::new(1),
            door: Doorbell::new(bell.clone()),
            bell,
            produced: AtomicUsize::new(0),
            polls: AtomicUsize::new(0),
            seen: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        })
    }

    /// `Spawner::spawn` after the state's spawn (which schedules): push and ring.
    fn spawned(&self) {
        self.ready.push(0).expect("a task is queued at most once");
        self.door.ring();
    }

    /// `Shared::wake`: schedule if the state says so, then push and ring.
    fn wake(&self) {
        if self.state.wake(0) {
            self.ready.push(0).expect("a task is queued at most once");
            self.door.ring();
        }
    }

    /// One turn, as the pool runs the doorbell's handler when it rang: answer, then take every
    /// task the queue gives ("empty for now" ends it) and poll or cancel it.
    fn turn(&self) {
        if self.bell.0.load(SeqCst) == 0 {
            return;
        }
        self.door.answer();
        while let Some(_i) = self.ready.pop() {
            match self.state.start() {
                Start::Gone => {}
                Start::Cancel(_) => {
                    self.dropped.fetch_add(1, SeqCst);
                    let _ = self.state.complete(0);
                }
                Start::Poll(_) => {
                    self.polls.fetch_add(1, SeqCst);
                    self.seen.store(self.produced.load(SeqCst), SeqCst);
                    if self.state.pending() {
                        self.ready.push(0).expect("a task is queued at most once");
                        self.door.ring();
                    }
                }
            }
        }
    }
}

/// Two wakers against a turn: after everyone is done and every rung turn has run, the last
/// poll saw both wakers' writes: no wake was lost between the state word, the queue (whose
/// pop may say "empty for now" for a waker that has claimed its place but not written it)
/// and the doorbell.
#[test]
fn a_wake_is_polled_however_it_races_the_turn() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let lane = Lane::new();
        assert_eq!(lane.state.spawn(false), 0);
        lane.spawned();
        let wakers: Vec<_> = (0..2)
            .map(|_| {
                let lane = lane.clone();
                loom::thread::spawn(move || {
                    lane.produced.fetch_add(1, SeqCst);
                    lane.wake();
                })
            })
            .collect();
        lane.turn();
        for w in wakers {
            w.join().unwrap();
        }
        // The pool runs a turn for every ring still pending.
        while lane.bell.0.load(SeqCst) > 0 {
            lane.turn();
        }
        assert!(lane.polls.load(SeqCst) >= 1);
        assert_eq!(
            lane.seen.load(SeqCst),
            2,
            "a wake was lost: the last poll missed a waker's write"
        );
    });
}

/// A cancel (`JoinHandle::cancel`: the state's cancel, then a wake) against a waker and the
/// turn: the future is dropped exactly once, on the turn, and never polled after the cancel
/// took effect.
#[test]
fn a_cancel_races_a_wake() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let lane = Lane::new();
        assert_eq!(lane.state.spawn(true), 0);
        lane.spawned();
        let canceller = {
            let lane = lane.clone();
            loom::thread::spawn(move || {
                if lane.state.cancel(0) {
                    lane.wake();
                }
            })
        };
        let waker = {
            let lane = lane.clone();
            loom::thread::spawn(move || lane.wake())
        };
        lane.turn();
        canceller.join().unwrap();
        waker.join().unwrap();
        while lane.bell.0.load(SeqCst) > 0 {
            lane.turn();
        }
        assert_eq!(
            lane.dropped.load(SeqCst),
            1,
            "dropped {} times",
            lane.dropped.load(SeqCst)
        );
    });
}
