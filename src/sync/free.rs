//! A fixed set of slot indices, each free or taken, in which no thread ever waits for another:
//! one bit per slot.
//!
//! Hand-written (real-time constraint). The free lists of task slots and reply slots are taken
//! from by threads of any priority (a spawn from a tokio task, a reply from a lane) and given
//! back by others. A queue (`sync::queue`) would do, but a pop there returns "empty for now"
//! while an earlier give-back is half done (claimed, not yet written): a take would then refuse
//! a spawn or a reply as if every slot were in use, because a thread that gives one back was
//! preempted. Here a give-back is one atomic `fetch_or`, so there is no half-done state: a take
//! fails only when every slot is taken.
//!
//! ```text
//!   words: [u64] × ⌈n / 64⌉, bit i of word w = slot 64w + i is free
//!   take:  from the word after the last take, for each word: load; while it has a set bit,
//!          CAS it with its lowest set bit cleared (a lost CAS means another thread changed
//!          the word: progress); the bit cleared is the slot taken
//!   give:  fetch_or the slot's bit
//! ```
//!
//! Invariants (the loom model in `free/loom_tests.rs` checks them):
//! * **each slot is taken by one taker at a time**: a bit is cleared by one successful CAS;
//! * **no thread waits for another**: a take retries only when its CAS lost to another thread
//!   that changed the word; a give is one instruction;
//! * **a take fails only if every slot was taken** at some moment of its scan (a slot given
//!   back behind the scan may be missed: the caller's refusal is then counted, as a full
//!   table's is).

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

/// `n` slot indices, each free or taken (module docs).
#[derive(Debug)]
pub(crate) struct FreeSlots {
    words: Box<[AtomicU64]>,
    /// The word the last take found a slot in: where the next one starts looking.
    hint: AtomicUsize,
}

impl FreeSlots {
    /// `n` slots, all free.
    pub(crate) fn new(n: usize) -> FreeSlots {
        let words = n.div_ceil(64).max(1);
        FreeSlots {
            words: (0..words)
                .map(|w| {
                    let bits = n.saturating_sub(w * 64).min(64);
                    AtomicU64::new(if bits == 64 {
                        u64::MAX
                    } else {
                        (1 << bits) - 1
                    })
                })
                .collect(),
            hint: AtomicUsize::new(0),
        }
    }

    /// Takes a free slot; `None` if every slot is taken. Never waits.
    pub(crate) fn take(&self) -> Option<u32> {
        let n = self.words.len();
        let start = self.hint.load(Relaxed) % n;
        for k in 0..n {
            let w = (start + k) % n;
            let word = &self.words[w];
            let mut bits = word.load(Acquire);
            while bits != 0 {
                let bit = bits.trailing_zeros();
                match word.compare_exchange_weak(bits, bits & !(1 << bit), AcqRel, Acquire) {
                    Ok(_) => {
                        self.hint.store(w, Relaxed);
                        return Some((w * 64) as u32 + bit);
                    }
                    Err(now) => bits = now,
                }
            }
        }
        None
    }

    /// How many slots are free (a racy look; tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Relaxed).count_ones() as usize)
            .sum()
    }

    /// Gives slot `i` back (it was taken). One atomic instruction.
    pub(crate) fn give(&self, i: u32) {
        let (w, bit) = (i as usize / 64, i % 64);
        let before = self.words[w].fetch_or(1 << bit, AcqRel);
        debug_assert_eq!(before & (1 << bit), 0, "slot {i} given back twice");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn every_slot_once_then_none_and_back() {
        for n in [1usize, 63, 64, 65, 130] {
            let f = FreeSlots::new(n);
            let got: HashSet<u32> = (0..n).map(|_| f.take().expect("a free slot")).collect();
            assert_eq!(got.len(), n);
            assert!(got.iter().all(|&i| (i as usize) < n));
            assert_eq!(f.take(), None, "{n} slots, all taken");
            f.give(n as u32 - 1);
            assert_eq!(f.take(), Some(n as u32 - 1));
        }
    }

    /// 4 threads take and give 64 slots 10,000 times each: no slot is ever held by two.
    #[test]
    fn stress_no_slot_held_twice() {
        let f = Arc::new(FreeSlots::new(64));
        let held: Arc<Vec<AtomicU64>> = Arc::new((0..64).map(|_| AtomicU64::new(0)).collect());
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let (f, held) = (f.clone(), held.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        if let Some(i) = f.take() {
                            assert_eq!(held[i as usize].swap(1, SeqCst), 0, "slot {i} twice");
                            held[i as usize].store(0, SeqCst);
                            f.give(i);
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!((0..64).filter_map(|_| f.take()).count(), 64);
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
