use super::*;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;

/// The sender (replying, or dropped without a reply) against the receiver (looking once,
/// then dropped): the slot is released exactly once, and a sent value is dropped exactly
/// once (taken by the receiver, or dropped by whoever releases).
#[test]
fn a_reply_slot_is_released_once_and_its_value_dropped_once() {
    for replies in [true, false] {
        loom::model(move || {
            let st = Arc::new(ReplyState::new());
            st.store(WAITING);
            let releases = Arc::new(AtomicUsize::new(0));
            let drops = Arc::new(AtomicUsize::new(0));
            let release = |st: &ReplyState, releases: &AtomicUsize, drops: &AtomicUsize| {
                if st.load() == SENT {
                    drops.fetch_add(1, SeqCst); // the unclaimed value
                }
                releases.fetch_add(1, SeqCst);
            };
            let (s2, r2, d2) = (st.clone(), releases.clone(), drops.clone());
            let sender = loom::thread::spawn(move || {
                if replies {
                    if !s2.sent() {
                        d2.fetch_add(1, SeqCst); // receiver gone: drop it ourselves
                        r2.fetch_add(1, SeqCst);
                    }
                } else if s2.sender_dropped() {
                    release(&s2, &r2, &d2);
                }
            });
            // The receiver looks once (a poll), then is dropped.
            if st.load() == SENT {
                drops.fetch_add(1, SeqCst); // taken
                st.store(SENDER_GONE);
            }
            if st.receiver_dropped() {
                release(&st, &releases, &drops);
            }
            sender.join().unwrap();
            assert_eq!(
                releases.load(SeqCst),
                1,
                "released {} times",
                releases.load(SeqCst)
            );
            assert_eq!(drops.load(SeqCst), usize::from(replies));
        });
    }
}
