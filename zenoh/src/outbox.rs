//! Lanes publish through the outbox: one class per priority that a `[[publish]]` key uses, each
//! with its preallocated slots, its lock-free queue and its publisher thread, which makes
//! Zenoh's (allocating, possibly blocking) `put`.
//!
//! ```text
//!  lane handler ── put(key, bytes) ── key's class ─▶ slots + queue ─▶ "lfrt-zenoh-pub1" ─▶ Zenoh
//!                                                  (real-time)        put + sequence attachment
//!  lane handler ── put(key, bytes) ── key's class ─▶ slots + queue ─▶ "lfrt-zenoh-pub7" ─▶ Zenoh
//!                                                  (background)       (may block on congestion)
//! ```
//!
//! # Invariants
//! * **No priority waits for another.** A class has slots and a thread of its own: a
//!   `background` put that blocks in Zenoh (`congestion = "block"`) or fills its queue stalls
//!   only its own class; a `real-time` put still finds its own free slot and its own thread.
//! * **Nothing is lost uncounted.** A put is either refused and counted (`outbox_full`,
//!   `outbox_too_large`, per priority), or sent (`outbox_sent`), or failed in Zenoh
//!   (`put_errors`). Every sent sample carries its key's sequence number
//!   ([`SEQUENCE_BYTES`]), so a sample Zenoh drops on its way (congestion `drop`, a full
//!   link) is a gap the receiving bridge counts ([`Totals::gaps`](crate::Totals::gaps)).

use crate::bridge::Stats;
use crate::slots::Slots;
use crossbeam_queue::ArrayQueue;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// Bytes of the attachment every outbox put carries: the sending outbox's id and the key's
/// sequence number (both `u64`, little-endian).
pub const SEQUENCE_BYTES: usize = 16;

/// A `[[publish]]` key, by its place in the configuration ([`Outbox::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishKey(pub(crate) u16);

/// Why [`Outbox::put`] refused a payload (each refusal is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot of the key's priority holds a put its publisher thread has not sent yet.
    Full,
    /// The payload is larger than `[outbox] max_payload`.
    TooLarge,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Full => "the outbox of the key's priority is full",
            Refused::TooLarge => "the payload is larger than the outbox's max_payload",
        })
    }
}

impl std::error::Error for Refused {}

/// One put waiting for its class's publisher thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outgoing {
    pub(crate) slot: u32,
    pub(crate) len: u32,
    pub(crate) key: u16,
}

/// The slots, queue and publisher thread of one priority.
pub(crate) struct Class {
    /// Zenoh's priority, as an index (0 = `real-time`).
    pub(crate) priority: usize,
    pub(crate) slots: Slots,
    pub(crate) queue: ArrayQueue<Outgoing>,
    /// The publisher thread, set once it runs.
    pub(crate) thread: OnceLock<Thread>,
}

pub(crate) struct Shared {
    pub(crate) classes: Vec<Class>,
    pub(crate) keys: Vec<String>,
    /// The class of each key.
    pub(crate) class_of: Vec<usize>,
    pub(crate) stats: Arc<Stats>,
}

impl Shared {
    /// Puts waiting in every class.
    pub(crate) fn queued(&self) -> usize {
        self.classes.iter().map(|c| c.queue.len()).sum()
    }
}

/// Where lanes put samples for Zenoh: cheap to clone, usable from any thread.
///
/// # Real-time safety
/// [`put`](Self::put) copies the payload into a preallocated slot of the key's priority, pushes
/// its index on that priority's lock-free queue and wakes its publisher thread (at most one
/// futex wake): no allocation, no lock, never a wait. A full queue refuses the put and counts
/// it. Keys of different priorities never share a slot, a queue or a thread.
///
/// # Examples
/// ```no_run
/// # fn f(outbox: lfrt_zenoh::Outbox) {
/// let telemetry = outbox.key("robot/telemetry").expect("a [[publish]] key");
/// // inside a lane handler:
/// if let Err(refused) = outbox.put(telemetry, b"temp=21.5") {
///     // counted in the bridge's totals; the lane goes on
///     let _ = refused;
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Outbox {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("keys", &self.shared.keys)
            .field("queued", &self.shared.queued())
            .finish()
    }
}

impl Outbox {
    /// The handle of a `[[publish]]` key, if the configuration lists it.
    pub fn key(&self, key: &str) -> Option<PublishKey> {
        self.shared
            .keys
            .iter()
            .position(|k| k == key)
            .map(|i| PublishKey(i as u16))
    }

    /// Hands `payload` to the publisher thread of the key's priority, which puts it on `key`.
    ///
    /// # Errors
    /// [`Refused::Full`] if that priority's queue is full, [`Refused::TooLarge`] if the payload
    /// exceeds `[outbox] max_payload`; both are counted per priority
    /// ([`Totals`](crate::Totals)).
    pub fn put(&self, key: PublishKey, payload: &[u8]) -> Result<(), Refused> {
        let s = &*self.shared;
        let class = &s.classes[s.class_of[key.0 as usize]];
        let p = class.priority;
        if payload.len() > class.slots.bytes() {
            s.stats.outbox_too_large[p].fetch_add(1, Relaxed);
            return Err(Refused::TooLarge);
        }
        let Some(slot) = class.slots.take() else {
            s.stats.outbox_full[p].fetch_add(1, Relaxed);
            return Err(Refused::Full);
        };
        // SAFETY: `slot` was just taken from the free list, so this thread owns it.
        unsafe { class.slots.write(slot)[..payload.len()].copy_from_slice(payload) };
        let out = Outgoing {
            slot,
            len: payload.len() as u32,
            key: key.0,
        };
        if class.queue.push(out).is_err() {
            // Cannot happen (the queue has room for every slot); never lose the slot.
            class.slots.give(slot);
            s.stats.outbox_full[p].fetch_add(1, Relaxed);
            return Err(Refused::Full);
        }
        if let Some(t) = class.thread.get() {
            t.unpark();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(capacity: usize) -> Outbox {
        let class = |priority| Class {
            priority,
            slots: Slots::new(capacity, 8),
            queue: ArrayQueue::new(capacity),
            thread: OnceLock::new(),
        };
        Outbox {
            shared: Arc::new(Shared {
                classes: vec![class(0), class(6)],
                keys: vec!["rt".into(), "bulk".into()],
                class_of: vec![0, 1],
                stats: Arc::new(Stats::default()),
            }),
        }
    }

    #[test]
    fn a_full_background_class_never_refuses_a_real_time_put() {
        let o = outbox(2);
        let (rt, bulk) = (o.key("rt").unwrap(), o.key("bulk").unwrap());
        // No publisher thread drains: the background class fills and stays full.
        assert_eq!(o.put(bulk, b"1"), Ok(()));
        assert_eq!(o.put(bulk, b"2"), Ok(()));
        assert_eq!(o.put(bulk, b"3"), Err(Refused::Full));
        assert_eq!(
            o.put(rt, b"urgent"),
            Ok(()),
            "real-time has slots of its own"
        );
        assert_eq!(o.put(rt, b"too large"), Err(Refused::TooLarge));
        let s = &o.shared.stats;
        assert_eq!(s.outbox_full[6].load(Relaxed), 1);
        assert_eq!(s.outbox_full[0].load(Relaxed), 0);
        assert_eq!(s.outbox_too_large[0].load(Relaxed), 1);
        let waiting: Vec<usize> = o.shared.classes.iter().map(|c| c.queue.len()).collect();
        assert_eq!(waiting, vec![1, 2]);
    }
}
