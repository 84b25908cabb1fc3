//! A running runtime's handles: live metrics from inside a handler, `wait` until a `Stopper`
//! stops it, graceful shutdown with `on_close` and a deadline.
//! Run one at a time: `cargo test --test lifecycle -- --test-threads=1`.

mod util;

use lfrt::*;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use util::lane;

/// A notifier-driven handler running `f` on each notification; counts its `on_close` calls.
struct OnBell<F> {
    bell: Arc<Notifier>,
    f: F,
    closed: Arc<AtomicU64>,
}

impl<F: FnMut() -> Disposition + Send + 'static> EventHandler for OnBell<F> {
    fn source(&self) -> BorrowedFd<'_> {
        self.bell.as_fd()
    }
    fn handle(&mut self, _ev: &Event, _ctx: &mut Context) -> Disposition {
        let _ = self.bell.take();
        (self.f)()
    }
    fn on_close(&mut self) {
        self.closed.fetch_add(1, SeqCst);
    }
}

fn on_bell<F: FnMut() -> Disposition + Send + 'static>(
    f: F,
    closed: &Arc<AtomicU64>,
) -> (Box<OnBell<F>>, Arc<Notifier>) {
    let bell = Arc::new(Notifier::new().unwrap());
    let h = OnBell {
        bell: bell.clone(),
        f,
        closed: closed.clone(),
    };
    (Box::new(h), bell)
}

/// A handler reads the live metrics through a `MetricsHandle`: the first event sees 0 events
/// dispatched, the second sees 1 (the counter counts finished dispatches), and the snapshot
/// equals `Runtime::metrics` in what does not move.
#[test]
fn metrics_are_read_from_inside_a_handler() {
    let _l = util::rt_lock();
    let mut rt = lane(1);
    let metrics = rt.metrics_handle();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let closed = Arc::new(AtomicU64::new(0));
    let (h, bell) = on_bell(
        move || {
            s.lock().unwrap().push(metrics.get()[0].dispatched);
            Disposition::Rearm
        },
        &closed,
    );
    rt.lane("lane").unwrap().registry().register(h).unwrap();
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || seen.lock().unwrap().len() == 1));
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || seen.lock().unwrap().len() == 2));
    assert_eq!(*seen.lock().unwrap(), vec![0, 1]);
    let other = rt.metrics_handle().get();
    let m = rt.metrics();
    assert_eq!(
        (other[0].name.as_str(), other[0].handles),
        (m[0].name.as_str(), m[0].handles)
    );
    rt.shutdown().unwrap();
}

/// `wait` returns once a `Stopper` stopped the runtime from another thread, and once a handler
/// stopped it; shutdown then succeeds.
#[test]
fn wait_returns_after_stop() {
    let _l = util::rt_lock();
    let mut rt = lane(2);
    let stopper = rt.stopper();
    rt.start().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        stopper.stop();
    });
    rt.wait();
    t.join().unwrap();
    rt.shutdown().unwrap();

    let mut rt = lane(2);
    let stopper = rt.stopper();
    let closed = Arc::new(AtomicU64::new(0));
    let (h, bell) = on_bell(
        move || {
            stopper.stop();
            Disposition::Rearm
        },
        &closed,
    );
    rt.lane("lane").unwrap().registry().register(h).unwrap();
    rt.start().unwrap();
    bell.notify(1).unwrap();
    rt.wait();
    rt.shutdown().unwrap();
    assert_eq!(closed.load(SeqCst), 1);
}

/// At shutdown `on_close` runs exactly once for each handle still registered, and not for one
/// its handler closed or one deregistered earlier; a second shutdown calls nothing again.
#[test]
fn on_close_runs_once_per_registered_handler() {
    let _l = util::rt_lock();
    let mut rt = lane(2);
    let reg = rt.lane("lane").unwrap().registry();
    let closed = Arc::new(AtomicU64::new(0));
    let mut bells = Vec::new();
    for _ in 0..3 {
        let (h, bell) = on_bell(|| Disposition::Rearm, &closed);
        reg.register(h).unwrap();
        bells.push(bell);
    }
    let (h, closer) = on_bell(|| Disposition::Close, &closed);
    reg.register(h).unwrap();
    let (h, _gone) = on_bell(|| Disposition::Rearm, &closed);
    let gone = reg.register(h).unwrap();
    rt.start().unwrap();
    assert!(reg.deregister(gone));
    closer.notify(1).unwrap();
    assert!(util::wait_until(10, || reg.len() == 3));
    for b in &bells {
        b.notify(1).unwrap();
    }
    assert!(util::wait_until(10, || rt.metrics()[0].dispatched == 4));
    rt.shutdown().unwrap();
    assert_eq!(closed.load(SeqCst), 3, "once per handle still registered");
    rt.shutdown().unwrap();
    assert_eq!(
        closed.load(SeqCst),
        3,
        "a second shutdown closes nothing again"
    );
}

/// A handler still running at the deadline is named in `Error::Unfinished` (it returns by
/// itself 1 s later, so its detached thread ends).
#[test]
fn shutdown_within_names_an_unfinished_handler() {
    let _l = util::rt_lock();
    let mut rt = lane(1);
    let running = Arc::new(AtomicBool::new(false));
    let r = running.clone();
    let closed = Arc::new(AtomicU64::new(0));
    let (h, bell) = on_bell(
        move || {
            r.store(true, SeqCst);
            std::thread::sleep(Duration::from_secs(1));
            Disposition::Rearm
        },
        &closed,
    );
    let token = rt.lane("lane").unwrap().registry().register(h).unwrap();
    rt.start().unwrap();
    bell.notify(1).unwrap();
    assert!(util::wait_until(10, || running.load(SeqCst)));
    match rt.shutdown_within(Duration::from_millis(50)) {
        Err(Error::Unfinished { handlers, .. }) => {
            assert_eq!(handlers.len(), 1, "{handlers:?}");
            let want = format!("thread lf-lane-0 handle {}", token.index());
            assert!(handlers[0].contains(&want), "{handlers:?}");
        }
        other => panic!("expected Unfinished, got {other:?}"),
    }
    assert_eq!(
        closed.load(SeqCst),
        0,
        "nothing is closed under a running handler"
    );
    std::thread::sleep(Duration::from_millis(1100));
}

/// Registering a blocking fd is an error naming the fd; the same socket set nonblocking
/// registers.
#[test]
fn a_blocking_fd_is_refused() {
    struct Sock(std::net::UdpSocket);
    impl EventHandler for Sock {
        fn source(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
        fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
            Disposition::Rearm
        }
    }
    let rt = lane(1);
    let reg = rt.lane("lane").unwrap().registry();
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    match reg.register(Box::new(Sock(s.try_clone().unwrap()))) {
        Err(e @ Error::Blocking { .. }) => {
            let text = e.to_string();
            assert!(text.contains("blocking") && text.contains("fd "), "{text}");
        }
        other => panic!("expected Blocking, got {other:?}"),
    }
    s.set_nonblocking(true).unwrap(); // O_NONBLOCK is per open file: the clone shares it
    assert!(reg.register(Box::new(Sock(s))).is_ok());
    assert_eq!(reg.len(), 1);
}
