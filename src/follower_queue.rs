//! The follower queue: which waiting thread is promoted next.
//!
//! A fixed-capacity max-heap (`heapless::BinaryHeap`, storage inline, no allocation) of
//! `(key, thread)` entries. One ordering mechanism serves all three protocols of the pattern's
//! implementation activity 5.2; only the key differs:
//!
//! | [`Promotion`] | key                        | effect                                      |
//! |---------------|----------------------------|---------------------------------------------|
//! | `Priority`    | `(priority, arrival)`      | highest thread priority first, ties LIFO    |
//! | `Lifo`        | `(0, arrival)`             | the most recently arrived (cache-warm) first |
//! | `Fifo`        | `(0, u64::MAX - arrival)`  | the longest waiting first                   |
//!
//! `arrival` is a per-queue counter that grows with every push, so keys are unique and the
//! order among equal priorities is deterministic.

use heapless::binary_heap::{BinaryHeap, Max};

/// The most threads one group may have (the follower heap's fixed capacity).
pub const MAX_GROUP_THREADS: usize = 64;

/// Which follower a leader promotes (`promotion = "priority" | "lifo" | "fifo"` in a
/// configuration file).
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    priority: u8,
    order: u64,
    thread: u16,
}

/// Followers waiting to lead, ordered by the group's [`Promotion`] protocol.
#[derive(Debug)]
pub(crate) struct FollowerQueue {
    heap: BinaryHeap<Entry, Max, MAX_GROUP_THREADS>,
    promotion: Promotion,
    arrivals: u64,
}

impl FollowerQueue {
    pub(crate) fn new(promotion: Promotion) -> FollowerQueue {
        FollowerQueue {
            heap: BinaryHeap::new(),
            promotion,
            arrivals: 0,
        }
    }

    /// Queues `thread` (of scheduling `priority`).
    ///
    /// # Panics
    /// If more than [`MAX_GROUP_THREADS`] threads wait: groups are validated to be no larger,
    /// so this is an internal invariant violation.
    pub(crate) fn push(&mut self, thread: u16, priority: u8) {
        self.arrivals += 1;
        let (priority, order) = match self.promotion {
            Promotion::Priority => (priority, self.arrivals),
            Promotion::Lifo => (0, self.arrivals),
            Promotion::Fifo => (0, u64::MAX - self.arrivals),
        };
        if self
            .heap
            .push(Entry {
                priority,
                order,
                thread,
            })
            .is_err()
        {
            panic!("follower queue overflow: more than {MAX_GROUP_THREADS} followers");
        }
    }

    /// Removes and returns the follower to promote next.
    pub(crate) fn pop(&mut self) -> Option<u16> {
        self.heap.pop().map(|e| e.thread)
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(p: Promotion, pushes: &[(u16, u8)]) -> Vec<u16> {
        let mut q = FollowerQueue::new(p);
        for &(t, prio) in pushes {
            q.push(t, prio);
        }
        std::iter::from_fn(|| q.pop()).collect()
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
        let mut q = FollowerQueue::new(Promotion::Fifo);
        q.push(1, 0);
        q.push(2, 0);
        assert_eq!(q.pop(), Some(1));
        q.push(1, 0);
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), None);
        assert_eq!(q.len(), 0);
    }
}
