use super::*;
use loom::sync::atomic::AtomicUsize;
use loom::sync::{Arc, Mutex};
use std::collections::VecDeque;

/// The ready queue of the model: checks "in the ready set at most once" at every push.
#[derive(Default)]
struct Ready(Mutex<VecDeque<u32>>);
impl Ready {
    fn push(&self) {
        let mut q = self.0.lock().unwrap();
        assert!(q.is_empty(), "the slot was queued twice");
        q.push_back(0);
    }
    fn pop(&self) -> bool {
        self.0.lock().unwrap().pop_front().is_some()
    }
}

/// One poll as the executor makes it: `start`, read what the wakers produced, `pending`.
/// `polling` catches two overlapping polls.
fn poll(st: &TaskState, ready: &Ready, polling: &AtomicUsize, produced: &AtomicUsize) -> usize {
    assert!(matches!(st.start(), Start::Poll(0)));
    assert_eq!(polling.fetch_add(1, SeqCst), 0, "two threads poll the task");
    let seen = produced.load(SeqCst);
    polling.fetch_sub(1, SeqCst);
    if st.pending() {
        ready.push();
    }
    seen
}

/// Two wakers on other threads against the polling thread: every wake is followed by a
/// poll that sees the waker's write (none is lost), a poll never overlaps another, and the
/// task is never queued twice.
///
/// Preemption bound 3: three threads (two wakers and the poller) each make two or three
/// steps that matter; unbounded the model runs for many minutes.
#[test]
fn every_wake_is_followed_by_a_poll_and_polls_never_overlap() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let st = Arc::new(TaskState::new());
        let ready = Arc::new(Ready::default());
        let polling = Arc::new(AtomicUsize::new(0));
        let produced = Arc::new(AtomicUsize::new(0));
        assert_eq!(st.spawn(false), 0);
        ready.push();
        let wakers: Vec<_> = (0..2)
            .map(|_| {
                let (st, ready, produced) = (st.clone(), ready.clone(), produced.clone());
                loom::thread::spawn(move || {
                    produced.fetch_add(1, SeqCst);
                    if st.wake(0) {
                        ready.push();
                    }
                })
            })
            .collect();
        let mut last = 0;
        // The executor runs concurrently with the wakers, then drains what they left.
        if ready.pop() {
            last = poll(&st, &ready, &polling, &produced);
        }
        for w in wakers {
            w.join().unwrap();
        }
        while ready.pop() {
            last = poll(&st, &ready, &polling, &produced);
        }
        assert_eq!(
            last, 2,
            "a wake was lost: the last poll missed a waker's write"
        );
    });
}

/// Completion against the handle letting go: exactly one of them frees the slot.
#[test]
fn a_finished_task_is_freed_exactly_once() {
    loom::model(|| {
        let st = Arc::new(TaskState::new());
        let _ = st.spawn(true);
        assert!(matches!(st.start(), Start::Poll(0)));
        let frees = Arc::new(AtomicUsize::new(0));
        let (st2, frees2) = (st.clone(), frees.clone());
        let handle = loom::thread::spawn(move || {
            if st2.release_handle() {
                frees2.fetch_add(1, SeqCst);
            }
        });
        if st.complete(OUTPUT) {
            frees.fetch_add(1, SeqCst);
        }
        handle.join().unwrap();
        assert_eq!(frees.load(SeqCst), 1);
    });
}

/// A handle registering its waker against the completing poller (the protocol of
/// `JoinHandle::poll` and `Shared::finish`): the handle either sees the task complete or
/// its waker is taken and woken.
#[test]
fn an_awaiting_handle_is_not_forgotten() {
    loom::model(|| {
        let st = Arc::new(TaskState::new());
        let _ = st.spawn(true);
        assert!(matches!(st.start(), Start::Poll(0)));
        let joiner = Arc::new(Mutex::new(false)); // "a waker is registered"
        let (st2, joiner2) = (st.clone(), joiner.clone());
        let handle = loom::thread::spawn(move || {
            if st2.load() & COMPLETE != 0 {
                return true;
            }
            *joiner2.lock().unwrap() = true;
            st2.load() & COMPLETE != 0
        });
        assert!(!st.complete(OUTPUT), "the handle is still there");
        let woken = std::mem::replace(&mut *joiner.lock().unwrap(), false);
        let saw_complete = handle.join().unwrap();
        assert!(
            saw_complete || woken,
            "the awaiting handle would sleep forever"
        );
    });
}

/// Shutdown cancelling from another thread (`take_unpolled`, retried while the task runs,
/// as `Shared::close` does) against the poller taking the task from the ready set
/// (`start`, then `Pending`): the future is never polled after it was dropped, never
/// dropped while it is polled, dropped exactly once, and complete only after the drop.
#[test]
fn a_cancel_at_shutdown_never_overlaps_a_poll() {
    loom::model(|| {
        let st = Arc::new(TaskState::new());
        let _ = st.spawn(false);
        let polling = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (st2, polling2, dropped2) = (st.clone(), polling.clone(), dropped.clone());
        let closer = loom::thread::spawn(move || loop {
            if st2.load() & COMPLETE != 0 {
                return;
            }
            if st2.take_unpolled(0) {
                assert_eq!(polling2.load(SeqCst), 0, "dropped while it is polled");
                assert_eq!(st2.load() & COMPLETE, 0, "complete before the drop");
                dropped2.fetch_add(1, SeqCst);
                st2.complete(0);
                return;
            }
            loom::thread::yield_now();
        });
        match st.start() {
            Start::Poll(0) => {
                polling.fetch_add(1, SeqCst);
                assert_eq!(dropped.load(SeqCst), 0, "polled after it was dropped");
                polling.fetch_sub(1, SeqCst);
                assert!(!st.pending(), "nobody woke it");
            }
            Start::Gone => {}
            other => panic!("{other:?}"),
        }
        closer.join().unwrap();
        assert_eq!(dropped.load(SeqCst), 1);
    });
}

/// A waker of the slot's previous task, racing with its completion, the slot's release
/// and the next spawn, never schedules the slot (which would queue the new task twice).
#[test]
fn a_stale_waker_never_schedules_a_reused_slot() {
    loom::model(|| {
        let st = Arc::new(TaskState::new());
        let ready = Arc::new(Ready::default());
        let _ = st.spawn(false);
        assert!(ready.pop() || true);
        assert!(matches!(st.start(), Start::Poll(0)));
        let (st2, ready2) = (st.clone(), ready.clone());
        let stale = loom::thread::spawn(move || {
            let scheduled = st2.wake(0);
            if scheduled {
                ready2.push();
            }
            scheduled
        });
        // Generation 0 finishes with no handle: free, then generation 1 is spawned.
        if st.complete(OUTPUT) {
            st.free();
        }
        assert_eq!(st.spawn(false), 1);
        ready.push();
        assert!(!stale.join().unwrap(), "a stale wake scheduled the slot");
    });
}
