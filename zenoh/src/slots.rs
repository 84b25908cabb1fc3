//! Preallocated, fixed-size byte slots handed between threads by index.
//!
//! # Ownership protocol
//! A slot index is owned by exactly one party at a time: the free list, or whoever popped it.
//! The owner may write and read that slot's bytes; it gives the slot away by pushing its index
//! into a queue (the free list, a lane inbox, the outbox queue). Those queues are
//! `crossbeam_queue::ArrayQueue`s, whose push releases and pop acquires, so the bytes written
//! before a push are visible to whoever pops the index. No two parties ever hold the same index,
//! so no slot is accessed from two threads at once.

use crossbeam_queue::ArrayQueue;
use std::cell::UnsafeCell;
use std::fmt;

/// `count` slots of `bytes` bytes each, and the free list of their indices.
pub(crate) struct Slots {
    storage: Box<[UnsafeCell<u8>]>,
    bytes: usize,
    free: ArrayQueue<u32>,
}

// SAFETY: the bytes are only reached through `write`/`read`, whose callers own the slot's index
// (module docs): no slot is shared between threads without a release/acquire hand-off.
unsafe impl Sync for Slots {}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slots")
            .field("count", &self.free.capacity())
            .field("bytes", &self.bytes)
            .field("free", &self.free.len())
            .finish()
    }
}

impl Slots {
    /// Allocates `count` slots of `bytes` bytes (both at least 1), all free, every page
    /// written once so that none faults on first use.
    pub(crate) fn new(count: usize, bytes: usize) -> Slots {
        let count = count.max(1);
        let bytes = bytes.max(1);
        let storage: Box<[UnsafeCell<u8>]> =
            (0..count * bytes).map(|_| UnsafeCell::new(0)).collect();
        let free = ArrayQueue::new(count);
        for i in 0..count {
            let _ = free.push(i as u32);
        }
        Slots {
            storage,
            bytes,
            free,
        }
    }

    /// Bytes per slot.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes a free slot; `None` if all are in use. Lock-free, no allocation.
    pub(crate) fn take(&self) -> Option<u32> {
        self.free.pop()
    }

    /// Returns a slot to the free list.
    pub(crate) fn give(&self, slot: u32) {
        // Cannot fail: the free list holds every index at most once and has room for all.
        let _ = self.free.push(slot);
    }

    /// The bytes of `slot`, writable.
    ///
    /// # Safety
    /// The caller owns `slot` (took it and has not given it away), and holds no other reference
    /// into it.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn write(&self, slot: u32) -> &mut [u8] {
        let start = slot as usize * self.bytes;
        let cells = &self.storage[start..start + self.bytes];
        // SAFETY: `UnsafeCell<u8>` has the layout of `u8`; the caller owns the slot, so no
        // other reference into these bytes exists while this one lives.
        unsafe { std::slice::from_raw_parts_mut(UnsafeCell::raw_get(cells.as_ptr()), self.bytes) }
    }

    /// The bytes of `slot`.
    ///
    /// # Safety
    /// The caller owns `slot`, and no writable reference into it is alive.
    pub(crate) unsafe fn read(&self, slot: u32) -> &[u8] {
        let start = slot as usize * self.bytes;
        let cells = &self.storage[start..start + self.bytes];
        // SAFETY: as in `write`; only shared references exist while this one lives.
        unsafe { std::slice::from_raw_parts(UnsafeCell::raw_get(cells.as_ptr()), self.bytes) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_is_taken_once_until_given_back() {
        let s = Slots::new(3, 8);
        let taken: Vec<u32> = (0..3).map(|_| s.take().unwrap()).collect();
        assert_eq!(s.take(), None, "all three are in use");
        let mut sorted = taken.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2]);
        // SAFETY: slot taken[0] is owned here.
        unsafe { s.write(taken[0]).copy_from_slice(b"abcdefgh") };
        // SAFETY: as above; the writable borrow ended.
        assert_eq!(unsafe { s.read(taken[0]) }, b"abcdefgh");
        s.give(taken[1]);
        assert_eq!(s.take(), Some(taken[1]));
    }
}
