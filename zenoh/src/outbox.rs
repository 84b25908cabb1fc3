//! Lanes publish through the outbox: a preallocated slot, a lock-free queue and a wake of the
//! publisher thread, which makes Zenoh's (allocating, possibly blocking) `put`.

use crate::bridge::Stats;
use crate::slots::Slots;
use crossbeam_queue::ArrayQueue;
use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// A `[[publish]]` key, by its place in the configuration ([`Outbox::key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishKey(pub(crate) u16);

/// Why [`Outbox::put`] refused a payload (each refusal is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Every slot holds a put the publisher thread has not sent yet.
    Full,
    /// The payload is larger than `[outbox] max_payload`.
    TooLarge,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refused::Full => "the outbox is full",
            Refused::TooLarge => "the payload is larger than the outbox's max_payload",
        })
    }
}

impl std::error::Error for Refused {}

/// One put waiting for the publisher thread.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outgoing {
    pub(crate) slot: u32,
    pub(crate) len: u32,
    pub(crate) key: u16,
}

pub(crate) struct Shared {
    pub(crate) slots: Slots,
    pub(crate) queue: ArrayQueue<Outgoing>,
    pub(crate) keys: Vec<String>,
    pub(crate) stats: Arc<Stats>,
    /// The publisher thread, set once it runs.
    pub(crate) publisher: OnceLock<Thread>,
}

/// Where lanes put samples for Zenoh: cheap to clone, usable from any thread.
///
/// # Real-time safety
/// [`put`](Self::put) copies the payload into a preallocated slot, pushes its index on a
/// lock-free queue and wakes the publisher thread (at most one futex wake): no allocation, no
/// lock, never a wait. A full queue refuses the put and counts it.
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
            .field("queued", &self.shared.queue.len())
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

    /// Hands `payload` to the publisher thread, which puts it on `key` at the key's priority.
    ///
    /// # Errors
    /// [`Refused::Full`] if the queue is full, [`Refused::TooLarge`] if the payload exceeds
    /// `[outbox] max_payload`; both are counted ([`Totals`](crate::Totals)).
    pub fn put(&self, key: PublishKey, payload: &[u8]) -> Result<(), Refused> {
        let s = &*self.shared;
        if payload.len() > s.slots.bytes() {
            s.stats.outbox_too_large.fetch_add(1, Relaxed);
            return Err(Refused::TooLarge);
        }
        let Some(slot) = s.slots.take() else {
            s.stats.outbox_full.fetch_add(1, Relaxed);
            return Err(Refused::Full);
        };
        // SAFETY: `slot` was just taken from the free list, so this thread owns it.
        unsafe { s.slots.write(slot)[..payload.len()].copy_from_slice(payload) };
        let out = Outgoing {
            slot,
            len: payload.len() as u32,
            key: key.0,
        };
        if s.queue.push(out).is_err() {
            // Cannot happen (the queue has room for every slot); never lose the slot.
            s.slots.give(slot);
            s.stats.outbox_full.fetch_add(1, Relaxed);
            return Err(Refused::Full);
        }
        if let Some(t) = s.publisher.get() {
            t.unpark();
        }
        Ok(())
    }
}
