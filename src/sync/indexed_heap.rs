//! An indexed binary heap over a fixed set of item ids: the one ordering mechanism behind the
//! follower queue (`engine/follower_queue.rs`, a thread per id) and a lane's timer entries
//! (`task/timers.rs`, a timer entry per id).
//!
//! The ids are `0..capacity`, fixed by [`IndexedHeap::new`], which allocates the three arrays
//! below once; nothing allocates afterwards. Every id is queued or not, and a queued id has a
//! key; the greatest key is on top (`Reverse` turns it into a min-heap, as the timers do).
//!
//! ```text
//!   heap: [u32] × capacity   a permutation of the ids: heap[..len] the queued ones, in heap
//!                            order; heap[len..] the others (heap[len]: the last removed, as
//!                            long as pushes take vacant())
//!   pos:  [u32] × capacity   pos[id]: where id is in heap (its inverse)
//!   keys: [K]   × capacity   keys[id]: id's key while it is queued
//!
//!   push(id, k)   id swaps into heap[len], len += 1, it sifts up          O(log n)
//!   remove(id)    the last queued fills id's place and sifts up or down;  O(log n)
//!                 id lands in heap[len] (len -= 1)
//!   pop           remove(heap[0])                                          O(log n)
//!   update(id, k) keys[id] = k, it sifts up or down                       O(log n)
//!   peek, contains, vacant (heap[len]: an id that is not queued)           O(1)
//! ```
//!
//! Invariants (the model test below checks them after every step, against a sorted list):
//! * **the index is exact**: `heap` is a permutation of `0..capacity` and `pos[heap[i]] == i`
//!   for every `i` (so for every queued id), kept by every move;
//! * **each id is queued at most once**: an id is queued exactly when `pos[id] < len`, so a
//!   push of a queued id finds it there and changes nothing;
//! * **heap order**: for every queued position `i > 0`, `keys[heap[(i - 1) / 2]] >=
//!   keys[heap[i]]`, so `heap[0]` has a greatest key (among equal keys, any one of them);
//! * **no allocation after `new`**: the arrays are boxed slices of `capacity` entries, and an
//!   operation only moves ids within them.
//!
//! Hand-written (real-time constraint). The follower queue takes a *named* thread out (the
//! bound pool's hand-off, a failed connection, a deadline) and a timer entry is cancelled or
//! re-armed by its owner, both while a priority-inheritance lock is held, so removal by id must
//! be O(log n) with no allocation and no hashing. `std`'s and `heapless`' `BinaryHeap` cannot
//! remove an arbitrary entry, and the indexed priority queues on crates.io find entries
//! through hash maps. The capacity is known only at run time (threads of a pool, a lane's
//! `max_tasks × TIMERS_PER_TASK`), so it is set once in `new`, not a const generic.
//!
//! Not thread-safe by itself: each user keeps it under its own lock.

/// An indexed binary heap of the ids `0..capacity`, greatest key on top (module docs).
#[derive(Debug)]
pub(crate) struct IndexedHeap<K> {
    /// A permutation of the ids: `heap[..len]` queued, in heap order.
    heap: Box<[u32]>,
    /// `pos[id]`: `id`'s index in `heap`.
    pos: Box<[u32]>,
    /// `keys[id]`: `id`'s key while it is queued (a stale one otherwise).
    keys: Box<[K]>,
    /// How many ids are queued.
    len: usize,
}

impl<K: Ord + Default> IndexedHeap<K> {
    /// A heap of the ids `0..capacity`, none queued; allocates its arrays now, never later.
    ///
    /// # Panics
    /// If `capacity` does not fit a `u32`.
    pub(crate) fn new(capacity: usize) -> IndexedHeap<K> {
        let n = u32::try_from(capacity).expect("ids are 32 bits");
        IndexedHeap {
            heap: (0..n).collect(),
            pos: (0..n).collect(),
            keys: (0..n).map(|_| K::default()).collect(),
            len: 0,
        }
    }
}

impl<K: Ord> IndexedHeap<K> {
    /// Bytes [`new`](IndexedHeap::new) allocates per id.
    pub(crate) const BYTES_PER_ID: usize = 2 * size_of::<u32>() + size_of::<K>();

    /// How many ids are queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no id is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `id` is queued (`false` for an id beyond the capacity).
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.pos
            .get(id as usize)
            .is_some_and(|&p| (p as usize) < self.len)
    }

    /// The id on top (the greatest key) and its key.
    pub(crate) fn peek(&self) -> Option<(u32, &K)> {
        (self.len > 0).then(|| (self.heap[0], &self.keys[self.heap[0] as usize]))
    }

    /// An id that is not queued, if any (`heap[len]`): the one removed last, if every push
    /// since took the id this returned (the timers' use); before any push, the lowest.
    pub(crate) fn vacant(&self) -> Option<u32> {
        self.heap.get(self.len).copied()
    }

    /// The queued ids and their keys, in heap order (the first is the top; the rest in no
    /// useful order).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &K)> {
        self.heap[..self.len]
            .iter()
            .map(|&id| (id, &self.keys[id as usize]))
    }

    /// Queues `id` with `key`. Returns `false`, and changes nothing, if `id` is queued
    /// already. O(log n).
    ///
    /// # Panics
    /// If `id` is not below the capacity.
    pub(crate) fn push(&mut self, id: u32, key: K) -> bool {
        let p = self.pos[id as usize] as usize;
        if p < self.len {
            return false;
        }
        self.keys[id as usize] = key;
        // Move `id` to the first free place (`heap[len]`) and the id there to `id`'s.
        let other = self.heap[self.len];
        self.place(p, other);
        self.place(self.len, id);
        self.len += 1;
        self.sift_up(self.len - 1);
        true
    }

    /// Takes the id on top (the greatest key) out of the queue and returns it. O(log n).
    pub(crate) fn pop(&mut self) -> Option<u32> {
        let top = *self.heap[..self.len].first()?;
        self.remove_at(0);
        Some(top)
    }

    /// Takes `id` out of the queue. Returns whether it was queued. O(log n).
    pub(crate) fn remove(&mut self, id: u32) -> bool {
        if !self.contains(id) {
            return false;
        }
        self.remove_at(self.pos[id as usize] as usize);
        true
    }

    /// Gives the queued `id` a new key and moves it to its place. Returns whether it was
    /// queued (`false`: nothing changed). O(log n).
    pub(crate) fn update(&mut self, id: u32, key: K) -> bool {
        if !self.contains(id) {
            return false;
        }
        self.keys[id as usize] = key;
        let p = self.sift_up(self.pos[id as usize] as usize);
        self.sift_down(p);
        true
    }

    /// Removes the queued entry at index `p`: the last queued entry fills its place and moves
    /// up or down to where it belongs, and the removed id takes the last one's old place, the
    /// first that is not queued.
    fn remove_at(&mut self, p: usize) {
        let last = self.len - 1;
        let (gone, moved) = (self.heap[p], self.heap[last]);
        self.place(last, gone);
        self.len = last;
        if p < last {
            self.place(p, moved);
            let p = self.sift_up(p);
            self.sift_down(p);
        }
    }

    /// Moves the id at `i` up while its key is greater than its parent's; returns its final
    /// index.
    fn sift_up(&mut self, mut i: usize) -> usize {
        let id = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if &self.keys[id as usize] <= self.key_at(parent) {
                break;
            }
            self.place(i, self.heap[parent]);
            i = parent;
        }
        self.place(i, id);
        i
    }

    /// Moves the id at `i` down while a child's key is greater than its own.
    fn sift_down(&mut self, mut i: usize) {
        let id = self.heap[i];
        loop {
            let left = 2 * i + 1;
            if left >= self.len {
                break;
            }
            let right = left + 1;
            let child = if right < self.len && self.key_at(right) > self.key_at(left) {
                right
            } else {
                left
            };
            if self.key_at(child) <= &self.keys[id as usize] {
                break;
            }
            self.place(i, self.heap[child]);
            i = child;
        }
        self.place(i, id);
    }

    /// The key of the id at index `i`.
    fn key_at(&self, i: usize) -> &K {
        &self.keys[self.heap[i] as usize]
    }

    /// Puts `id` at index `i` and records it in the index.
    fn place(&mut self, i: usize, id: u32) {
        self.heap[i] = id;
        self.pos[id as usize] = i as u32;
    }

    /// Asserts every invariant of the module docs (the users' tests call it too).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut seen = vec![false; self.heap.len()];
        for (i, &id) in self.heap.iter().enumerate() {
            assert!(
                !std::mem::replace(&mut seen[id as usize], true),
                "{id} twice"
            );
            assert_eq!(self.pos[id as usize] as usize, i, "stale index of {id}");
            if i > 0 && i < self.len {
                assert!(
                    self.key_at((i - 1) / 2) >= self.key_at(i),
                    "heap order broken at {i}"
                );
            }
        }
        assert!(self.len <= self.heap.len());
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A fixed-seed xorshift: every run makes the same steps.
    fn rng(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    fn drain(h: &mut IndexedHeap<u32>) -> Vec<u32> {
        std::iter::from_fn(|| h.pop()).collect()
    }

    #[test]
    fn pops_greatest_first() {
        let mut h = IndexedHeap::new(8);
        for (id, key) in [(3, 10), (0, 40), (5, 20), (7, 30), (1, 5)] {
            assert!(h.push(id, key));
            h.check();
        }
        assert_eq!(h.len(), 5);
        assert_eq!(h.peek(), Some((0, &40)));
        assert_eq!(drain(&mut h), [0, 7, 5, 3, 1]);
        assert!(h.is_empty() && h.peek().is_none() && h.pop().is_none());
    }

    #[test]
    fn push_of_a_queued_id_changes_nothing() {
        let mut h = IndexedHeap::new(4);
        assert!(h.push(2, 10));
        assert!(!h.push(2, 99));
        h.check();
        assert_eq!((h.len(), h.peek()), (1, Some((2, &10))));
    }

    #[test]
    fn remove_and_update_by_id() {
        let mut h = IndexedHeap::new(8);
        for id in 0..8 {
            h.push(id, id * 10);
        }
        assert!(h.remove(3));
        assert!(!h.remove(3), "removed twice");
        assert!(!h.contains(3) && h.contains(4));
        assert!(h.update(0, 100), "to the top");
        assert!(h.update(7, 1), "to the bottom");
        assert!(!h.update(3, 50), "not queued");
        h.check();
        assert_eq!(drain(&mut h), [0, 6, 5, 4, 2, 1, 7]);
    }

    /// The removed ids come back from `vacant` last removed first; ids beyond the capacity
    /// are never queued.
    #[test]
    fn vacant_ids_last_removed_first() {
        let mut h = IndexedHeap::new(3);
        assert_eq!(h.vacant(), Some(0));
        for id in 0..3 {
            h.push(id, 0);
        }
        assert_eq!(h.vacant(), None, "full");
        h.remove(1);
        assert_eq!(h.vacant(), Some(1));
        h.remove(0);
        assert_eq!(h.vacant(), Some(0));
        assert!(!h.contains(3) && !h.remove(3) && !h.update(3, 1));
        let mut none = IndexedHeap::<u8>::new(0);
        assert_eq!((none.vacant(), none.pop(), none.peek()), (None, None, None));
    }

    /// Random pushes, pops, removals and key updates against a list kept sorted by key: the
    /// top has the reference's greatest key (keys repeat, so any id of that key may be on
    /// top), the same ids are queued, and every invariant holds after each step.
    #[test]
    fn matches_a_sorted_list() {
        const IDS: u32 = 24;
        let mut next = rng(0x9E37_79B9_7F4A_7C15);
        let mut h = IndexedHeap::<u8>::new(IDS as usize);
        // (key, id) of the queued ids, sorted: the greatest key last.
        let mut model: Vec<(u8, u32)> = Vec::new();
        let insert = |model: &mut Vec<(u8, u32)>, e: (u8, u32)| {
            let at = model.partition_point(|&m| m < e);
            model.insert(at, e);
        };
        let take = |model: &mut Vec<(u8, u32)>, id: u32| {
            let at = model.iter().position(|m| m.1 == id)?;
            Some(model.remove(at))
        };
        for _ in 0..50_000 {
            let r = next();
            let id = (r % u64::from(IDS)) as u32;
            let key = ((r >> 16) % 8) as u8;
            match (r >> 8) % 5 {
                0 | 1 => {
                    let queued = model.iter().any(|m| m.1 == id);
                    assert_eq!(h.push(id, key), !queued);
                    if !queued {
                        insert(&mut model, (key, id));
                    }
                }
                2 => match h.pop() {
                    Some(top) => {
                        let (k, _) = take(&mut model, top).expect("popped a queued id");
                        let best = model.last().map_or(k, |m| m.0.max(k));
                        assert_eq!(k, best, "popped {top} of key {k}, not the greatest");
                    }
                    None => assert!(model.is_empty()),
                },
                3 => assert_eq!(h.remove(id), take(&mut model, id).is_some()),
                _ => {
                    let queued = take(&mut model, id).is_some();
                    assert_eq!(h.update(id, key), queued);
                    if queued {
                        insert(&mut model, (key, id));
                    }
                }
            }
            h.check();
            assert_eq!(h.len(), model.len());
            assert_eq!(h.peek().map(|(_, &k)| k), model.last().map(|m| m.0));
            for id in 0..IDS {
                assert_eq!(h.contains(id), model.iter().any(|m| m.1 == id));
            }
            assert_eq!(h.vacant().is_some(), model.len() < IDS as usize);
            assert!(h.vacant().is_none_or(|v| !h.contains(v)));
        }
    }
}
