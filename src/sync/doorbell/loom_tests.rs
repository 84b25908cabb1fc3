use super::*;
use crate::sync::queue::Queue;
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
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

/// Two pushers into the real queue and a consumer that runs once if the bell rang (as the
/// pool runs a handler when its eventfd is readable): after everyone is done, every value
/// was delivered or a ring is pending, so the handle fires again and delivers the rest. A
/// pusher preempted between its claim and its write is among the interleavings: the
/// consumer's pop then says "empty for now", and the pusher's ring comes after its write.
#[test]
fn every_push_is_delivered_or_rung() {
    loom::model(|| {
        let bell = Arc::new(Counter::default());
        let door = Arc::new(Doorbell::new(bell.clone()));
        let q = Arc::new(Queue::new(2));
        let pushers: Vec<_> = (0..2u32)
            .map(|i| {
                let (door, q) = (door.clone(), q.clone());
                loom::thread::spawn(move || {
                    q.push(i).unwrap();
                    door.ring();
                })
            })
            .collect();
        let mut delivered = 0;
        if bell.0.load(SeqCst) > 0 {
            door.answer();
            while q.pop().is_some() {
                delivered += 1;
            }
        }
        for p in pushers {
            p.join().unwrap();
        }
        let mut left = 0;
        while q.pop().is_some() {
            left += 1;
        }
        assert_eq!(delivered + left, 2);
        assert!(
            left == 0 || bell.0.load(SeqCst) > 0,
            "{left} value(s) left with no ring pending"
        );
    });
}
