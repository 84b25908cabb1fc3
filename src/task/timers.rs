//! A lane's timer entries: what `lfrt::task::time` futures and retries wait for on the lane's
//! timerfd. Each entry is an instant and the waker to wake then: the waker the future was
//! polled with, which a combinator (`FuturesUnordered`, a `select` over a task set) may have
//! wrapped, so that the combinator sees the wake and polls the future again.
//!
//! An indexed min-heap by instant over a preallocated pool of entries (`max_tasks ×
//! TIMERS_PER_TASK`): [`IndexedHeap`] (`sync/indexed_heap.rs`) with one id per entry, keyed
//! by `Reverse(instant)`; its ids that are not queued are the free entries. Arming,
//! re-arming, cancelling and taking the earliest due entry cost O(log n) in the entries
//! armed, never a scan of the pool, and allocate nothing.
//!
//! A future keeps its entry's [`TimerId`] (index and generation) while it waits: polled again,
//! it re-arms the same entry (and replaces its waker only if the new one would not wake the
//! same task); dropped, it cancels it. An entry is freed when it comes due (its waker is taken
//! out and woken) or is cancelled, and its generation moves on, so an id of a freed entry
//! never touches the entry's next owner.
//!
//! Not thread-safe by itself: the executor keeps it under its timer lock.

use std::cmp::Reverse;
use std::task::Waker;

use crate::sync::indexed_heap::IndexedHeap;

/// Timer entries a lane has per task slot: the `lfrt::task::time` futures and retries its tasks can
/// wait on at once (a `select` of four sleeps in every task at once fits).
pub const TIMERS_PER_TASK: usize = 4;

/// An armed entry, as the future that armed it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerId {
    index: u32,
    gen: u32,
}

/// The timer entries of one lane (module docs).
#[derive(Debug)]
pub(crate) struct Timers {
    /// The armed entries by instant, earliest on top; the others are free.
    heap: IndexedHeap<Reverse<u64>>,
    gen: Box<[u32]>,
    wakers: Box<[Option<Waker>]>,
}

impl Timers {
    /// A pool of `entries` entries (all free), allocated now.
    pub(crate) fn new(entries: usize) -> Timers {
        Timers {
            heap: IndexedHeap::new(entries),
            gen: vec![0; entries].into_boxed_slice(),
            wakers: (0..entries).map(|_| None).collect(),
        }
    }

    /// Bytes [`new`](Self::new) allocates per entry.
    pub(crate) const BYTES_PER_ENTRY: usize =
        IndexedHeap::<Reverse<u64>>::BYTES_PER_ID + size_of::<u32>() + size_of::<Option<Waker>>();

    /// Arms `id`'s entry (`None`: a new one) for `at_ns`, to wake `waker`. Returns the entry's
    /// id, or `None` if the pool is full (and `id` was not armed). A waker that would wake the
    /// same task as the stored one is not cloned again.
    pub(crate) fn arm(
        &mut self,
        id: Option<TimerId>,
        at_ns: u64,
        waker: &Waker,
    ) -> Option<TimerId> {
        let id = match id.filter(|&i| self.is_armed(i)) {
            Some(i) => {
                let e = i.index as usize;
                if !self.wakers[e].as_ref().is_some_and(|w| w.will_wake(waker)) {
                    self.wakers[e] = Some(waker.clone());
                }
                self.heap.update(i.index, Reverse(at_ns));
                i
            }
            None => {
                let index = self.heap.vacant()?;
                self.wakers[index as usize] = Some(waker.clone());
                self.heap.push(index, Reverse(at_ns));
                TimerId {
                    index,
                    gen: self.gen[index as usize],
                }
            }
        };
        Some(id)
    }

    /// Frees `id`'s entry if it is still armed; returns its waker (for the caller to drop
    /// outside its lock: a waker's drop may run foreign code).
    pub(crate) fn cancel(&mut self, id: TimerId) -> Option<Waker> {
        if !self.is_armed(id) {
            return None;
        }
        self.heap.remove(id.index);
        Some(self.free(id.index))
    }

    /// The earliest armed instant.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.heap.peek().map(|(_, &Reverse(at))| at)
    }

    /// Takes the earliest entry if it is due at `now_ns`: its waker (the entry is freed).
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<Waker> {
        let (top, &Reverse(at)) = self.heap.peek()?;
        if at > now_ns {
            return None;
        }
        self.heap.pop();
        Some(self.free(top))
    }

    /// Entries armed (tests).
    #[cfg(all(test, not(loom)))]
    fn len(&self) -> usize {
        self.heap.len()
    }

    fn is_armed(&self, id: TimerId) -> bool {
        self.heap.contains(id.index) && self.gen[id.index as usize] == id.gen
    }

    /// Frees entry `index`, just taken out of the heap: its generation moves on (so its old id
    /// touches nothing of its next owner), and its waker is returned.
    fn free(&mut self, index: u32) -> Waker {
        let i = index as usize;
        self.gen[i] = self.gen[i].wrapping_add(1);
        self.wakers[i].take().expect("an armed entry has a waker")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    /// A waker that counts its wakes under a name (its `n`th bit).
    struct Named(usize, Arc<AtomicUsize>);
    impl std::task::Wake for Named {
        fn wake(self: Arc<Self>) {
            self.1.fetch_or(1 << self.0, SeqCst);
        }
    }
    fn named(n: usize, woke: &Arc<AtomicUsize>) -> Waker {
        Waker::from(Arc::new(Named(n, woke.clone())))
    }

    /// Against a plain list: random arms, re-arms, cancels and pops at random instants give
    /// the same due entries in time order, and never more entries than the pool.
    #[test]
    fn pops_what_a_plain_list_would_in_time_order() {
        const ENTRIES: usize = 32;
        let woke = Arc::new(AtomicUsize::new(0));
        let mut t = Timers::new(ENTRIES);
        // Per holder: its id and instant, as the pool should hold them.
        let mut model: Vec<Option<(TimerId, u64)>> = vec![None; 48];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 0u64;
        for _ in 0..20_000 {
            let h = (next() % model.len() as u64) as usize;
            match next() % 4 {
                0 => {
                    now += next() % 50;
                    let mut due: Vec<u64> = model
                        .iter()
                        .filter_map(|e| e.filter(|&(_, at)| at <= now).map(|(_, at)| at))
                        .collect();
                    due.sort_unstable();
                    let mut got = 0;
                    while t.pop_due(now).is_some() {
                        got += 1;
                    }
                    assert_eq!(got, due.len());
                    for e in model.iter_mut() {
                        if e.is_some_and(|(_, at)| at <= now) {
                            *e = None;
                        }
                    }
                    assert!(t.earliest().is_none_or(|e| e > now));
                }
                1 => {
                    if let Some((id, _)) = model[h].take() {
                        assert!(t.cancel(id).is_some());
                        assert!(t.cancel(id).is_none(), "cancelled twice");
                    }
                }
                _ => {
                    let at = now + next() % 200;
                    match t.arm(model[h].map(|(id, _)| id), at, &named(h % 60, &woke)) {
                        Some(id) => model[h] = Some((id, at)),
                        None => assert_eq!(t.len(), ENTRIES, "refused below the pool's size"),
                    }
                }
            }
            assert_eq!(t.len(), model.iter().flatten().count());
        }
    }

    /// The waker stored is the one the future was polled with last (a wrapped one too), and a
    /// freed entry's old id touches nothing of its next owner.
    #[test]
    fn an_entry_wakes_its_latest_waker_and_old_ids_are_inert() {
        let woke = Arc::new(AtomicUsize::new(0));
        let mut t = Timers::new(1);
        let a = t.arm(None, 100, &named(0, &woke)).unwrap();
        assert_eq!(t.arm(None, 50, &named(1, &woke)), None, "the pool is full");
        let a2 = t.arm(Some(a), 80, &named(2, &woke)).unwrap();
        assert_eq!(a2, a, "re-armed in place");
        t.pop_due(80).unwrap().wake();
        assert_eq!(woke.load(SeqCst), 1 << 2, "the latest waker is woken");
        let b = t.arm(None, 10, &named(3, &woke)).unwrap();
        assert_ne!(b, a, "a new generation");
        assert!(t.cancel(a).is_none(), "an old id cancels nothing");
        assert_eq!(
            t.arm(Some(a), 5, &named(4, &woke)),
            None,
            "nor re-arms (pool full)"
        );
        assert_eq!(t.earliest(), Some(10));
    }
}
