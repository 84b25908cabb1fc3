//! Suspend and resume a handle from any thread, and the generation guarantee for stale tokens.
//! Run one at a time: `cargo test --test suspend -- --test-threads=1`.

mod util;

use lfrt::*;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Counts notifications (the sum of what was notified); optionally suspends itself on each.
struct Counter {
    bell: Arc<Notifier>,
    got: Arc<AtomicU64>,
    suspend_self: bool,
}

impl EventHandler for Counter {
    fn source(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
    fn handle(&mut self, ev: &Event, ctx: &mut Context) -> Disposition {
        self.got.fetch_add(self.bell.take().unwrap(), SeqCst);
        if self.suspend_self {
            assert!(ctx.registry().suspend(ev.token()));
            assert!(!ctx.registry().suspend(ev.token()), "twice: refused");
        }
        Disposition::Rearm
    }
}

fn counter(reg: &Registry, suspend_self: bool) -> (Token, Arc<Notifier>, Arc<AtomicU64>) {
    let bell = Arc::new(Notifier::new().unwrap());
    let got = Arc::new(AtomicU64::new(0));
    let t = reg
        .register(Box::new(Counter {
            bell: bell.clone(),
            got: got.clone(),
            suspend_self,
        }))
        .unwrap();
    (t, bell, got)
}

/// A handle suspended from another thread is not dispatched while input is pending; resume
/// delivers that input.
#[test]
fn suspended_handles_are_not_dispatched_until_resumed() {
    let _l = util::rt_lock();
    let mut rt = util::lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let (token, bell, got) = counter(&reg, false);
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || got.load(SeqCst) == 1));
    assert!(reg.suspend(token));
    assert!(!reg.suspend(token), "already suspended");
    bell.notify(5).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(got.load(SeqCst), 1, "dispatched while suspended");
    assert_eq!(rt.metrics()[0].dispatched, 1);
    assert!(reg.resume(token));
    assert!(!reg.resume(token), "not suspended any more");
    assert!(
        util::wait_until(10, || got.load(SeqCst) == 6),
        "pending input delivered"
    );
    rt.shutdown().unwrap();
}

/// A handler suspends its own handle: it is not re-armed when it returns, and resume from
/// another thread re-arms it.
#[test]
fn a_handler_suspends_its_own_handle() {
    let _l = util::rt_lock();
    let mut rt = util::lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let (token, bell, got) = counter(&reg, true);
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || got.load(SeqCst) == 1));
    bell.notify(2).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(got.load(SeqCst), 1, "re-armed although it suspended itself");
    assert!(reg.resume(token));
    assert!(util::wait_until(10, || got.load(SeqCst) == 3));
    rt.shutdown().unwrap();
}

/// Suspend called while the handler runs on another thread waits for it, and the handle is
/// not re-armed afterwards.
#[test]
fn suspend_during_a_running_handler_takes_effect_when_it_returns() {
    struct Slow(Arc<Notifier>, Arc<AtomicBool>, Arc<AtomicU64>);
    impl EventHandler for Slow {
        fn source(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
        fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
            let _ = self.0.take();
            self.1.store(true, SeqCst);
            std::thread::sleep(Duration::from_millis(50));
            self.2.fetch_add(1, SeqCst);
            Disposition::Rearm
        }
    }
    let _l = util::rt_lock();
    let mut rt = util::lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let (bell, running, done) = (
        Arc::new(Notifier::new().unwrap()),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let token = reg
        .register(Box::new(Slow(bell.clone(), running.clone(), done.clone())))
        .unwrap();
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || running.load(SeqCst)));
    assert!(reg.suspend(token));
    assert_eq!(done.load(SeqCst), 1, "suspend returned after the handler");
    bell.notify(1).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(done.load(SeqCst), 1, "re-armed after a suspension");
    assert!(reg.resume(token));
    assert!(util::wait_until(10, || done.load(SeqCst) == 2));
    rt.shutdown().unwrap();
}

/// A token whose handle was removed is refused, also after its slot was reused; the new
/// handle in that slot is unaffected.
#[test]
fn a_stale_token_is_refused() {
    let _l = util::rt_lock();
    let mut rt = util::lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let (old, _, _) = counter(&reg, false);
    assert!(reg.deregister(old));
    assert!(!reg.suspend(old) && !reg.resume(old));
    let (new, bell, got) = counter(&reg, false);
    assert_eq!(new.index(), old.index(), "the slot was reused");
    assert!(!reg.suspend(old), "stale token refused on a reused slot");
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(
        util::wait_until(10, || got.load(SeqCst) == 1),
        "the new handle still runs"
    );
    assert!(reg.suspend(new) && reg.resume(new));
    rt.shutdown().unwrap();
}
