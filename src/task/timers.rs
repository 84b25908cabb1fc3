//! A lane's timer entries: what `lfrt::task::time` futures and retries wait for on the lane's
//! timerfd. Each entry is an instant and the waker to wake then: the waker the future was
//! polled with, which a combinator (`FuturesUnordered`, a `select` over a task set) may have
//! wrapped, so that the combinator sees the wake and polls the future again.
//!
//! An indexed binary min-heap by instant over a preallocated pool of entries (`max_tasks ×
//! TIMERS_PER_TASK`). Arming, re-arming, cancelling and taking the earliest due entry cost
//! O(log n) in the entries armed, never a scan of the pool.
//!
//! A future keeps its entry's [`TimerId`] (index and generation) while it waits: polled again,
//! it re-arms the same entry (and replaces its waker only if the new one would not wake the
//! same task); dropped, it cancels it. An entry is freed when it comes due (its waker is taken
//! out and woken) or is cancelled, and its generation moves on, so an id of a freed entry
//! never touches the entry's next owner.
//!
//! Not thread-safe by itself: the executor keeps it under its timer lock.

use std::task::Waker;

/// Timer entries a lane has per task slot: the `lfrt::task::time` futures and retries its tasks can
/// wait on at once (a `select` of four sleeps in every task at once fits).
pub const TIMERS_PER_TASK: usize = 4;

/// No heap position: the entry is free.
const FREE: u32 = u32::MAX;

/// An armed entry, as the future that armed it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerId {
    index: u32,
    gen: u32,
}

/// The timer entries of one lane (module docs).
#[derive(Debug)]
pub(crate) struct Timers {
    /// Entry indices in heap order: `at` of a parent ≤ `at` of its children.
    heap: Vec<u32>,
    /// Per entry: its position in `heap`, [`FREE`] if it is free.
    pos: Box<[u32]>,
    at: Box<[u64]>,
    gen: Box<[u32]>,
    wakers: Box<[Option<Waker>]>,
    /// Free entry indices.
    free: Vec<u32>,
}

impl Timers {
    /// A pool of `entries` entries (all free), allocated now.
    pub(crate) fn new(entries: usize) -> Timers {
        Timers {
            heap: Vec::with_capacity(entries),
            pos: vec![FREE; entries].into_boxed_slice(),
            at: vec![0; entries].into_boxed_slice(),
            gen: vec![0; entries].into_boxed_slice(),
            wakers: (0..entries).map(|_| None).collect(),
            free: (0..entries as u32).rev().collect(),
        }
    }

    /// Bytes [`new`](Self::new) allocates per entry.
    pub(crate) const BYTES_PER_ENTRY: usize =
        3 * size_of::<u32>() + size_of::<u64>() + size_of::<u32>() + size_of::<Option<Waker>>();

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
                self.at[e] = at_ns;
                let p = self.sift_up(self.pos[e] as usize);
                self.sift_down(p);
                i
            }
            None => {
                let index = self.free.pop()?;
                let e = index as usize;
                self.at[e] = at_ns;
                self.wakers[e] = Some(waker.clone());
                self.pos[e] = self.heap.len() as u32;
                // Within capacity: one heap entry per pool entry at most.
                self.heap.push(index);
                self.sift_up(self.heap.len() - 1);
                TimerId {
                    index,
                    gen: self.gen[e],
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
        let p = self.pos[id.index as usize] as usize;
        Some(self.remove_at(p))
    }

    /// The earliest armed instant.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.heap.first().map(|&e| self.at[e as usize])
    }

    /// Takes the earliest entry if it is due at `now_ns`: its waker (the entry is freed).
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<Waker> {
        let &top = self.heap.first()?;
        if self.at[top as usize] > now_ns {
            return None;
        }
        Some(self.remove_at(0))
    }

    /// Entries armed (tests).
    #[cfg(all(test, not(loom)))]
    fn len(&self) -> usize {
        self.heap.len()
    }

    fn is_armed(&self, id: TimerId) -> bool {
        let e = id.index as usize;
        e < self.pos.len() && self.pos[e] != FREE && self.gen[e] == id.gen
    }

    /// Takes the entry at heap position `p` out, frees it (its generation moves on) and returns
    /// its waker.
    fn remove_at(&mut self, p: usize) -> Waker {
        let e = self.heap[p];
        let last = self.heap.pop().expect("not empty");
        if last != e {
            self.heap[p] = last;
            self.pos[last as usize] = p as u32;
            let p = self.sift_up(p);
            self.sift_down(p);
        }
        let i = e as usize;
        self.pos[i] = FREE;
        self.gen[i] = self.gen[i].wrapping_add(1);
        self.free.push(e);
        self.wakers[i].take().expect("an armed entry has a waker")
    }

    fn key(&self, p: usize) -> u64 {
        self.at[self.heap[p] as usize]
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a] as usize] = a as u32;
        self.pos[self.heap[b] as usize] = b as u32;
    }

    /// Moves the entry at `p` up to its place; returns where it ended.
    fn sift_up(&mut self, mut p: usize) -> usize {
        while p > 0 {
            let parent = (p - 1) / 2;
            if self.key(parent) <= self.key(p) {
                break;
            }
            self.swap(p, parent);
            p = parent;
        }
        p
    }

    /// Moves the entry at `p` down to its place.
    fn sift_down(&mut self, mut p: usize) {
        loop {
            let (l, r) = (2 * p + 1, 2 * p + 2);
            let mut least = p;
            if l < self.heap.len() && self.key(l) < self.key(least) {
                least = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(least) {
                least = r;
            }
            if least == p {
                return;
            }
            self.swap(p, least);
            p = least;
        }
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
