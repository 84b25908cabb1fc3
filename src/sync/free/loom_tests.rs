use super::*;
use loom::sync::Arc;

/// Two slots, two threads: one takes and gives back, the other takes twice. No slot is held
/// by two at once (loom explores every interleaving of the CAS loops).
#[test]
fn a_slot_is_held_by_one_taker() {
    loom::model(|| {
        let f = Arc::new(FreeSlots::new(2));
        let held = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let t = {
            let (f, held) = (f.clone(), held.clone());
            loom::thread::spawn(move || {
                if let Some(i) = f.take() {
                    assert_eq!(held[i as usize].swap(1, SeqCst), 0);
                    held[i as usize].store(0, SeqCst);
                    f.give(i);
                }
            })
        };
        let a = f.take();
        let b = f.take();
        if let (Some(a), Some(b)) = (a, b) {
            assert_ne!(a, b);
        }
        assert!(
            a.is_some(),
            "two slots, at most one held by the other thread"
        );
        t.join().unwrap();
    });
}
