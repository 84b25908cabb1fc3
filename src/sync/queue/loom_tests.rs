//! Models of the queue: loom explores every interleaving (and checks every access to a cell's
//! value for a race, through `loom::cell::UnsafeCell`). `scripts/loom.sh` runs them.

use super::*;
use loom::sync::Arc;

/// Two pushers against a popper that looks twice: whatever it finds, it never waits (a
/// spin would not terminate in the model), and after everyone is done the values it did
/// not find are still there, each exactly once.
#[test]
fn a_popper_never_waits_and_nothing_is_lost() {
    loom::model(|| {
        let q = Arc::new(Queue::new(2));
        let pushers: Vec<_> = (0..2u32)
            .map(|i| {
                let q = q.clone();
                loom::thread::spawn(move || q.push(i).unwrap())
            })
            .collect();
        let mut got = Vec::new();
        for _ in 0..2 {
            if let Some(v) = q.pop() {
                got.push(v);
            }
        }
        for p in pushers {
            p.join().unwrap();
        }
        while let Some(v) = q.pop() {
            got.push(v);
        }
        got.sort_unstable();
        assert_eq!(got, [0, 1]);
    });
}

/// Two poppers race for the values of one pusher that wraps the queue (capacity 1): each
/// value goes to exactly one popper, and a push refused as full is retried by the model
/// only after a pop.
#[test]
fn two_poppers_take_each_value_once() {
    loom::model(|| {
        let q = Arc::new(Queue::new(1));
        q.push(7u32).unwrap();
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                loom::thread::spawn(move || q.pop())
            })
            .collect();
        let second = q.push(8);
        let got: Vec<u32> = poppers
            .into_iter()
            .filter_map(|p| p.join().unwrap())
            .collect();
        let mut all = got.clone();
        if second.is_ok() {
            all.extend(q.pop());
        }
        assert!(got.len() <= 2);
        assert!(all.contains(&7), "7 was lost");
        assert_eq!(all.iter().filter(|&&v| v == 7).count(), 1, "7 popped twice");
    });
}
