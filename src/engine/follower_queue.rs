//! The follower queue: which waiting thread is promoted next.
//!
//! A max-heap of the queued threads by key, allocated once for all the threads of a pool (no
//! allocation afterwards). One ordering mechanism serves all three
//! protocols of the pattern's implementation activity 5.2; only the key differs:
//!
//! | [`Promotion`] | key                        | effect                                      |
//! |---------------|----------------------------|---------------------------------------------|
//! | `Priority`    | `(priority, arrival)`      | highest thread priority first, ties LIFO    |
//! | `Lifo`        | `(0, arrival)`             | the most recently arrived (cache-warm) first |
//! | `Fifo`        | `(0, u64::MAX - arrival)`  | the longest waiting first                   |
//!
//! `arrival` is a per-queue counter that grows with every push, so keys are unique and the
//! order among equal priorities is deterministic.
//!
//! Besides "pop the best", the bound variant (`bound/table.rs`) takes a *named* thread out of
//! the queue (its reply arrived, its connection failed, its deadline passed) and, rarely, the
//! best thread that satisfies a condition. So the queue is an indexed heap with one id per
//! thread ([`IndexedHeap`], `sync/indexed_heap.rs`: removal by id in O(log n), no allocation
//! after [`FollowerQueue::new`], no hashing, which is why it is hand-written), and a thread is
//! queued at most once (pushing it again keeps its place).

use crate::sync::indexed_heap::IndexedHeap;

/// The most threads one lane may have (validated by the configuration).
pub const MAX_LANE_THREADS: usize = 64;

/// Which follower a leader promotes (`promotion = "priority" | "lifo" | "fifo" | "concurrent"`
/// in a configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Promotion {
    /// Highest thread priority first; among equal priorities the last to arrive (LIFO).
    #[default]
    Priority,
    /// Last in, first out: the thread that waited the shortest time (warmest cache).
    Lifo,
    /// First in, first out: the thread that waited the longest.
    Fifo,
    /// No leader and no promotion: every idle thread of the lane waits in `epoll_wait` on
    /// the lane's ONESHOT epoll set at once, and the kernel hands each ready event to one of
    /// them (the POSA2 variant *Relaxing Serialization Constraints*; see `dispatch.rs`). Removes
    /// the hand-off (a futex wake and a futex wait) from every event. Gives up the follower
    /// queue's order: which idle thread takes an event is the kernel's choice (the most
    /// recent waiter in current kernels), not thread priority. Unbound lanes only.
    Concurrent,
}

/// Followers waiting to lead, ordered by the pool's [`Promotion`] protocol.
#[derive(Debug)]
pub(crate) struct FollowerQueue {
    /// Thread ids by `(priority, order)`: the largest is promoted first. Unique (`order` never
    /// repeats).
    heap: IndexedHeap<(u8, u64)>,
    promotion: Promotion,
    arrivals: u64,
}

impl FollowerQueue {
    /// A queue for threads `0..threads` (allocates its heap now, never later).
    pub(crate) fn new(threads: usize, promotion: Promotion) -> FollowerQueue {
        assert!(threads <= 1 << 16, "thread ids are 16 bits");
        FollowerQueue {
            heap: IndexedHeap::new(threads),
            promotion,
            arrivals: 0,
        }
    }

    /// Queues `thread` (of scheduling `priority`). Returns `false`, and keeps the thread's
    /// original place, if it is already queued.
    ///
    /// # Panics
    /// If `thread` is not below the `threads` given to `new`.
    pub(crate) fn push(&mut self, thread: u16, priority: u8) -> bool {
        let arrival = self.arrivals + 1;
        let key = match self.promotion {
            // A concurrent lane never queues a thread; the bound pool does not offer it.
            Promotion::Priority | Promotion::Concurrent => (priority, arrival),
            Promotion::Lifo => (0, arrival),
            Promotion::Fifo => (0, u64::MAX - arrival),
        };
        let pushed = self.heap.push(u32::from(thread), key);
        if pushed {
            self.arrivals = arrival;
        }
        pushed
    }

    /// Removes and returns the follower to promote next.
    pub(crate) fn pop(&mut self) -> Option<u16> {
        self.heap.pop().map(|t| t as u16)
    }

    /// Takes `thread` out of the queue. Returns whether it was queued. O(log n).
    pub(crate) fn remove(&mut self, thread: u16) -> bool {
        self.heap.remove(u32::from(thread))
    }

    /// Removes and returns the best follower for which `pred` holds. O(n): a scan of the
    /// queued entries (the bound variant's deferral of an unbound event, a rare path).
    pub(crate) fn pop_where(&mut self, mut pred: impl FnMut(u16) -> bool) -> Option<u16> {
        let (best, _) = self
            .heap
            .iter()
            .filter(|&(t, _)| pred(t as u16))
            .max_by_key(|&(_, key)| key)?;
        self.heap.remove(best);
        Some(best as u16)
    }

    /// Whether `thread` is queued.
    pub(crate) fn contains(&self, thread: u16) -> bool {
        self.heap.contains(u32::from(thread))
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(p: Promotion, pushes: &[(u16, u8)]) -> Vec<u16> {
        let mut q = FollowerQueue::new(8, p);
        for &(t, prio) in pushes {
            q.push(t, prio);
        }
        std::iter::from_fn(|| q.pop()).collect()
    }

    /// The heap order and the index agree (every test below checks it after each step).
    fn check(q: &FollowerQueue) {
        q.heap.check();
    }

    #[test]
    fn priority_order_highest_first() {
        // followers of priorities 10, 30, 20 are promoted 30, 20, 10
        assert_eq!(
            order(Promotion::Priority, &[(1, 10), (2, 30), (3, 20)]),
            vec![2, 3, 1]
        );
    }

    #[test]
    fn priority_ties_are_lifo() {
        assert_eq!(
            order(Promotion::Priority, &[(1, 20), (2, 20), (3, 30), (4, 20)]),
            vec![3, 4, 2, 1]
        );
    }

    #[test]
    fn lifo_and_fifo_ignore_priority() {
        let p = [(1, 10), (2, 30), (3, 20)];
        assert_eq!(order(Promotion::Lifo, &p), vec![3, 2, 1]);
        assert_eq!(order(Promotion::Fifo, &p), vec![1, 2, 3]);
    }

    #[test]
    fn interleaved_push_pop_fifo() {
        let mut q = FollowerQueue::new(3, Promotion::Fifo);
        q.push(1, 0);
        q.push(2, 0);
        assert_eq!(q.pop(), Some(1));
        q.push(1, 0);
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), None);
        assert_eq!(q.len(), 0);
    }

    /// A thread that is pushed again (a spurious wake-up) keeps its place in line.
    #[test]
    fn push_of_a_queued_thread_keeps_its_place() {
        let mut q = FollowerQueue::new(4, Promotion::Fifo);
        assert!(q.push(1, 0));
        assert!(q.push(2, 0));
        assert!(!q.push(1, 99));
        check(&q);
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), Some(2));
    }

    /// A named thread leaves from anywhere in the heap; the others keep their order.
    #[test]
    fn remove_named_thread() {
        let mut q = FollowerQueue::new(8, Promotion::Priority);
        for (t, prio) in [(1, 10), (2, 30), (3, 20), (4, 40), (5, 5), (6, 25)] {
            q.push(t, prio);
        }
        assert!(q.remove(3));
        assert!(!q.remove(3), "removed twice");
        assert!(!q.remove(7), "never queued");
        check(&q);
        assert!(!q.contains(3) && q.contains(6));
        assert_eq!(
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>(),
            [4, 2, 6, 1, 5]
        );
    }

    #[test]
    fn pop_where_takes_the_best_match() {
        let mut q = FollowerQueue::new(8, Promotion::Priority);
        for (t, prio) in [(1, 10), (2, 30), (3, 20), (4, 40)] {
            q.push(t, prio);
        }
        assert_eq!(q.pop_where(|t| t % 2 == 1), Some(3));
        assert_eq!(q.pop_where(|t| t > 10), None);
        check(&q);
        assert_eq!(
            std::iter::from_fn(|| q.pop()).collect::<Vec<_>>(),
            [4, 2, 1]
        );
    }

    /// Random pushes, pops, removals and conditional pops against a plain list that picks
    /// the maximum key by scanning: the same threads come out, and the index stays exact.
    #[test]
    fn matches_a_reference_model() {
        const THREADS: u16 = 16;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for promotion in [Promotion::Priority, Promotion::Lifo, Promotion::Fifo] {
            let mut q = FollowerQueue::new(THREADS as usize, promotion);
            // reference: (key, thread) of queued threads
            let mut model: Vec<((u8, u64), u16)> = Vec::new();
            let mut arrivals = 0u64;
            for _ in 0..20_000 {
                let r = rnd();
                let t = (r % u64::from(THREADS)) as u16;
                match (r >> 8) % 4 {
                    0 | 1 => {
                        let prio = ((r >> 16) % 4) as u8;
                        let queued = model.iter().any(|m| m.1 == t);
                        assert_eq!(q.push(t, prio), !queued);
                        if !queued {
                            arrivals += 1;
                            let key = match promotion {
                                Promotion::Priority | Promotion::Concurrent => (prio, arrivals),
                                Promotion::Lifo => (0, arrivals),
                                Promotion::Fifo => (0, u64::MAX - arrivals),
                            };
                            model.push((key, t));
                        }
                    }
                    2 => {
                        let best = model.iter().enumerate().max_by_key(|m| m.1 .0);
                        let want = best.map(|(i, m)| (i, m.1));
                        assert_eq!(q.pop(), want.map(|w| w.1));
                        if let Some((i, _)) = want {
                            model.swap_remove(i);
                        }
                    }
                    _ if r >> 20 & 1 == 0 => {
                        let i = model.iter().position(|m| m.1 == t);
                        assert_eq!(q.remove(t), i.is_some());
                        if let Some(i) = i {
                            model.swap_remove(i);
                        }
                    }
                    _ => {
                        let odd = |t: u16| t % 2 == 1;
                        let best = model
                            .iter()
                            .enumerate()
                            .filter(|m| odd(m.1 .1))
                            .max_by_key(|m| m.1 .0);
                        let want = best.map(|(i, m)| (i, m.1));
                        assert_eq!(q.pop_where(odd), want.map(|w| w.1));
                        if let Some((i, _)) = want {
                            model.swap_remove(i);
                        }
                    }
                }
                check(&q);
                assert_eq!(q.len(), model.len());
            }
        }
    }
}
