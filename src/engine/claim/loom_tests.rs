//! Models of the claim word against a model of an edge-triggered kernel: a handle's pending
//! input (a count), and the reports the kernel queued for it, which waiting threads take.
//! `scripts/loom.sh` runs them.

use super::*;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};

/// The kernel's side of one edge-triggered handle.
#[derive(Default)]
struct Kernel {
    /// Input not yet read by a handler.
    pending: usize,
    /// Reports queued for the waiters (each arrival queues one: edge-triggered).
    reports: usize,
}

struct World {
    claim: Claim,
    kernel: Mutex<Kernel>,
    /// A handler run is in progress (checks "one at a time").
    running: AtomicBool,
    read: AtomicUsize,
}

/// Input arrives: the kernel queues a report.
fn arrive(w: &World) {
    let mut k = w.kernel.lock().unwrap();
    k.pending += 1;
    k.reports += 1;
}

/// One handler run: reads everything pending (it drains its source).
fn run(w: &World) {
    assert!(
        !w.running.swap(true, SeqCst),
        "two runs of one handle at once"
    );
    let n = std::mem::take(&mut w.kernel.lock().unwrap().pending);
    w.read.fetch_add(n, SeqCst);
    w.running.store(false, SeqCst);
}

/// A waiter: takes one queued report, claims, and dispatches as `HandleSet::dispatch` does
/// (`begin` before each run; at most `reruns` runs more for reports that came while it ran;
/// past them, the caller's re-check queues a report if input is pending, as
/// `epoll_ctl(MOD)` does).
fn take_one(w: &World, reruns: usize) -> bool {
    {
        let mut k = w.kernel.lock().unwrap();
        if k.reports == 0 {
            return false;
        }
        k.reports -= 1;
    }
    if w.claim.claim(0) != Claimed::Owned {
        return true;
    }
    let mut left = reruns;
    loop {
        w.claim.begin();
        run(w);
        match w.claim.finish(0, left > 0) {
            Finished::Again => left -= 1,
            Finished::Released { notified } => {
                if notified {
                    let mut k = w.kernel.lock().unwrap();
                    if k.pending > 0 {
                        k.reports += 1;
                    }
                }
                return true;
            }
        }
    }
}

fn world() -> Arc<World> {
    Arc::new(World {
        claim: Claim::new(),
        kernel: Mutex::new(Kernel::default()),
        running: AtomicBool::new(false),
        read: AtomicUsize::new(0),
    })
}

/// Two arrivals against two waiting threads: runs never overlap, and once the threads have
/// taken every report (including those a re-check queued), all input was read: no report
/// was lost in a claim race.
fn no_lost_report(reruns: usize) {
    loom::model(move || {
        let w = world();
        let producer = {
            let w = w.clone();
            loom::thread::spawn(move || {
                arrive(&w);
                arrive(&w);
            })
        };
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let w = w.clone();
                loom::thread::spawn(move || while take_one(&w, reruns) {})
            })
            .collect();
        producer.join().unwrap();
        for t in waiters {
            t.join().unwrap();
        }
        // Reports still queued (a waiter gave up before they came): taken now.
        while take_one(&w, reruns) {}
        assert_eq!(
            w.read.load(SeqCst),
            2,
            "input left unread: a report was lost"
        );
        assert_eq!(w.kernel.lock().unwrap().pending, 0);
    });
}

#[test]
fn no_lost_report_with_a_run_again() {
    no_lost_report(1);
}

#[test]
fn no_lost_report_with_a_recheck() {
    no_lost_report(0);
}

/// A report of the old generation races the handle's removal: it never claims the new
/// generation, and a claim taken before the removal is void after it.
#[test]
fn a_vacate_races_a_report() {
    loom::model(|| {
        let c = Arc::new(Claim::new());
        let c2 = c.clone();
        let reporter = loom::thread::spawn(move || c2.claim(0));
        let gen = c.vacate();
        let got = reporter.join().unwrap();
        assert_eq!(gen, 1);
        assert_ne!(got, Claimed::Busy);
        assert_eq!(
            c.claim(1),
            Claimed::Owned,
            "the old report left the new one owned"
        );
    });
}
