//! Model of the arming protocol against a fake kernel: the link's ONESHOT registration, the
//! borrower's ready list, and the borrower's leader slot. `scripts/loom.sh` runs it.

use super::Gate;
use loom::sync::{Arc, Mutex};

/// What the kernel and the borrower's protocol hold.
#[derive(Default)]
struct World {
    /// The link is armed in the kernel (ONESHOT).
    armed: bool,
    /// The link fired and its report waits for the lender's leader.
    reported: bool,
    /// Events on the borrower's ready list.
    ready: u32,
    /// The borrower has a leader.
    leader: bool,
    dispatched: u32,
}

impl World {
    /// The kernel's part of MOD and of a new event: an armed link over a non-empty ready
    /// list reports once and disarms.
    fn poll(&mut self) {
        if self.armed && self.ready > 0 {
            self.armed = false;
            self.reported = true;
        }
    }
}

fn rearm(w: &Mutex<World>) {
    let mut w = w.lock().unwrap();
    w.armed = true;
    w.poll();
}

/// One lender turn on a report, as `lend.rs` runs it. Returns whether it dispatched.
fn lend(gate: &Gate, w: &Mutex<World>) -> bool {
    {
        let mut g = w.lock().unwrap();
        if !g.reported {
            return false;
        }
        g.reported = false;
    }
    gate.fired(0);
    if w.lock().unwrap().leader {
        return false;
    }
    if !gate.try_take() {
        return false;
    }
    assert!(gate.borrowed() <= 1, "more borrowed than max_borrowed");
    let took = {
        let mut g = w.lock().unwrap();
        let took = g.ready > 0;
        if took {
            g.ready -= 1;
            g.dispatched += 1;
        }
        took
    };
    gate.give_back();
    if !w.lock().unwrap().leader {
        gate.arm(|_| rearm(w));
    }
    took
}

/// The borrower's only thread takes an event (vacancy, arm) while two more events arrive,
/// and two lender threads (max_borrowed = 1) compete for the reports. When everything has
/// settled with the borrower still busy, no event is stranded: each was dispatched, or the
/// link is armed or reported (a lender will come).
#[test]
fn no_event_is_stranded_while_the_lane_is_busy() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let gate = Arc::new(Gate::new(1, 1));
        let w = Arc::new(Mutex::new(World {
            leader: true,
            ready: 1,
            ..World::default()
        }));
        // The borrower's leader takes its event; no follower: vacant, arm.
        {
            let mut g = w.lock().unwrap();
            g.ready -= 1;
            g.leader = false;
        }
        let lenders: Vec<_> = (0..2)
            .map(|_| {
                let (gate, w) = (gate.clone(), w.clone());
                loom::thread::spawn(move || {
                    let mut n = 0;
                    // Each lender's leader looks twice (the model's bound).
                    for _ in 0..2 {
                        n += u32::from(lend(&gate, &w));
                    }
                    n
                })
            })
            .collect();
        let w2 = w.clone();
        let arrivals = loom::thread::spawn(move || {
            for _ in 0..2 {
                let mut g = w2.lock().unwrap();
                g.ready += 1;
                g.poll();
            }
        });
        gate.arm(|_| rearm(&w));
        arrivals.join().unwrap();
        let lent: u32 = lenders.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(gate.borrowed(), 0);
        let g = w.lock().unwrap();
        assert_eq!(g.dispatched, lent);
        assert!(
            g.ready == 0 || g.armed || g.reported,
            "{} events stranded: link disarmed and nobody coming",
            g.ready
        );
    });
}

/// The borrower gets a leader back while a report is on its way: the lender leaves the
/// event to it, and a later vacancy arms the link again (the flag was cleared first).
#[test]
fn a_vacancy_after_the_lenders_look_arms_again() {
    loom::model(|| {
        let gate = Arc::new(Gate::new(1, 1));
        let w = Arc::new(Mutex::new(World {
            armed: true,
            ready: 1,
            leader: true,
            ..World::default()
        }));
        w.lock().unwrap().poll();
        gate.arm(|_| {}); // the flag of the link armed above
        let (g2, w2) = (gate.clone(), w.clone());
        let lender = loom::thread::spawn(move || lend(&g2, &w2));
        // The borrower's leader takes the event, finds no follower: vacant, arm; one more
        // event arrives while it is busy.
        {
            let mut g = w.lock().unwrap();
            if g.ready > 0 {
                g.ready -= 1;
            }
            g.leader = false;
        }
        gate.arm(|_| rearm(&w));
        {
            let mut g = w.lock().unwrap();
            g.ready += 1;
            g.poll();
        }
        let lent = lender.join().unwrap();
        let g = w.lock().unwrap();
        assert!(
            g.ready == 0 || g.armed || g.reported,
            "an event is stranded behind a disarmed link: {} ready, lent: {lent}",
            g.ready
        );
    });
}
