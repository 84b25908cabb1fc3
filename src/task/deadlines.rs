//! The `lfrt::time` deadlines a lane's tasks wait for: an indexed binary min-heap keyed by
//! instant, with at most one entry per task slot, preallocated to `max_tasks`.
//!
//! Arming, re-arming and taking the earliest due deadline cost O(log n) in the deadlines
//! armed, not in the table's size: a timer expiry on the lane's dispatch path touches the
//! deadlines that are due, never every slot.
//!
//! An entry names the task by slot and generation. A task that finishes (or is cancelled)
//! leaves its entry behind; when it comes due its wake is of a stale generation and does
//! nothing, and a new task of the slot that arms a deadline takes the entry over. So the heap
//! never holds more than `max_tasks` entries and never allocates after construction.
//!
//! Not thread-safe by itself: the executor keeps it under its timer lock.

/// No heap position: the slot has no entry.
const ABSENT: u32 = u32::MAX;

/// The armed deadlines of one lane (module docs).
#[derive(Debug)]
pub(crate) struct Deadlines {
    /// Slot indices in heap order: `at` of a parent ≤ `at` of its children.
    heap: Vec<u32>,
    /// Per slot: its position in `heap`, [`ABSENT`] if it has no entry.
    pos: Vec<u32>,
    /// Per slot with an entry: its instant (`CLOCK_MONOTONIC` ns) and its task's generation.
    at: Vec<u64>,
    gen: Vec<u16>,
}

impl Deadlines {
    /// Room for one entry per slot of `max_tasks`.
    pub(crate) fn new(max_tasks: usize) -> Deadlines {
        Deadlines {
            heap: Vec::with_capacity(max_tasks),
            pos: vec![ABSENT; max_tasks],
            at: vec![0; max_tasks],
            gen: vec![0; max_tasks],
        }
    }

    /// Bytes [`new`](Self::new) allocates per slot.
    pub(crate) const BYTES_PER_SLOT: usize =
        2 * size_of::<u32>() + size_of::<u64>() + size_of::<u16>();

    /// Arms `at_ns` for the task of generation `gen` in `slot`. A task keeps the earliest of
    /// its deadlines (it is woken then, and registers the others again when polled); an
    /// entry of an earlier task of the slot is taken over.
    pub(crate) fn arm(&mut self, slot: u32, gen: u16, at_ns: u64) {
        let s = slot as usize;
        match self.pos[s] {
            ABSENT => {
                self.at[s] = at_ns;
                self.gen[s] = gen;
                self.pos[s] = self.heap.len() as u32;
                // Within capacity: one entry per slot at most.
                self.heap.push(slot);
                self.sift_up(self.heap.len() - 1);
            }
            p if self.gen[s] == gen => {
                if at_ns < self.at[s] {
                    self.at[s] = at_ns;
                    self.sift_up(p as usize);
                }
            }
            p => {
                // A stale entry (an earlier task of the slot): the new task's deadline, later
                // or earlier.
                self.at[s] = at_ns;
                self.gen[s] = gen;
                let p = self.sift_up(p as usize);
                self.sift_down(p);
            }
        }
    }

    /// The earliest armed instant.
    pub(crate) fn earliest(&self) -> Option<u64> {
        self.heap.first().map(|&s| self.at[s as usize])
    }

    /// Takes the earliest entry if it is due at `now_ns`: its slot and generation.
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<(u32, u16)> {
        let &top = self.heap.first()?;
        if self.at[top as usize] > now_ns {
            return None;
        }
        let last = self.heap.pop().expect("not empty");
        self.pos[top as usize] = ABSENT;
        if last != top {
            self.heap[0] = last;
            self.pos[last as usize] = 0;
            self.sift_down(0);
        }
        Some((top, self.gen[top as usize]))
    }

    /// Entries armed (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain list: random arms (new, earlier, later, and stale-generation
    /// take-overs) and pops at random instants give the same due entries in time order,
    /// and the heap never grows past one entry per slot.
    #[test]
    fn pops_what_a_plain_list_would_in_time_order() {
        const SLOTS: usize = 64;
        let mut d = Deadlines::new(SLOTS);
        // Per slot: (generation, instant) of its entry, as the heap should hold it.
        let mut model: Vec<Option<(u16, u64)>> = vec![None; SLOTS];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut now = 0u64;
        for _ in 0..20_000 {
            if next() % 3 == 0 {
                now += next() % 50;
                let mut due: Vec<(u64, u32, u16)> = model
                    .iter()
                    .enumerate()
                    .filter_map(|(s, e)| {
                        e.filter(|&(_, at)| at <= now)
                            .map(|(g, at)| (at, s as u32, g))
                    })
                    .collect();
                due.sort();
                let mut got = Vec::new();
                while let Some((s, g)) = d.pop_due(now) {
                    got.push((model[s as usize].unwrap().1, s, g));
                    model[s as usize] = None;
                }
                // Equal instants may come in any order among themselves.
                got.sort();
                assert_eq!(got, due);
                assert!(d.earliest().is_none_or(|e| e > now));
            } else {
                let s = (next() % SLOTS as u64) as u32;
                let g = (next() % 3) as u16;
                let at = now + next() % 200;
                d.arm(s, g, at);
                let m = &mut model[s as usize];
                *m = match *m {
                    Some((mg, mat)) if mg == g => Some((g, mat.min(at))),
                    _ => Some((g, at)),
                };
            }
            assert_eq!(d.len(), model.iter().flatten().count());
            assert!(d.len() <= SLOTS);
        }
    }

    #[test]
    fn a_task_keeps_its_earliest_deadline_and_a_new_task_takes_a_stale_entry_over() {
        let mut d = Deadlines::new(4);
        d.arm(2, 0, 100);
        d.arm(2, 0, 300); // later: the earlier one stays
        assert_eq!(d.earliest(), Some(100));
        d.arm(2, 1, 500); // the slot's next task: its own deadline, though later
        d.arm(3, 0, 200);
        assert_eq!(d.earliest(), Some(200));
        assert_eq!(d.pop_due(1000), Some((3, 0)));
        assert_eq!(d.pop_due(1000), Some((2, 1)));
        assert_eq!(d.pop_due(1000), None);
    }
}
