//! A group's handle set: one epoll instance plus the demultiplexing table.
//!
//! Every handle is registered `EPOLLONESHOT`: the wait that reports an event also deactivates
//! the handle (the pattern's activity 2), so a newly promoted leader can never detect the same
//! event again while it is being processed. After its handler returns the handle is re-armed
//! with `EPOLL_CTL_MOD`.
//!
//! The demultiplexing table is a slab preallocated at `max_handles` slots. A [`Token`] carries
//! the slot index and the slot's generation; the generation is bumped whenever a slot is
//! emptied, so an event that was already dequeued for a removed handle (stale) never reaches
//! the handler that reused the slot.
//!
//! Invariants:
//! * a slot's handler runs only under the slot lock, and only after its generation matched the
//!   event's token; with ONESHOT this means each event is dispatched at most once and no handler
//!   ever runs on two threads at once;
//! * a handle is re-armed only after its handler returned, and never while suspended (a
//!   suspended handle is out of epoll; an event detected before the suspension is dropped
//!   unrun by `dispatch`, and its readiness stays in the fd for `resume`);
//! * the only code that runs while a thread holds a slot lock and can call back into the
//!   handle set is that slot's handler (`handle`, `after_panic`, `interest` in
//!   [`HandleSet::dispatch`]). So a deregistration that finds its slot lock held by the calling
//!   thread (the error-checking [`PiMutex`] reports the relock) comes from the handler of that
//!   very slot, and is deferred to the end of its dispatch instead of deadlocking;
//! * a handler's `Drop` runs outside every slot lock, and a panic in it is caught and counted
//!   (`drop_panics`), so dropping a handler can neither deadlock nor kill a pool thread.
//!
//! The set is generic over what it stores (`H`, in practice `engine::handler::Held`, an owned
//! handler): it knows handles, tokens and epoll, not what a handler is, how it runs, or how it
//! is freed (dropping `H` when a handle is removed is all it does). [`crate::engine::handler`] builds
//! the handler API (the `Registry`, the dispatch of one event) on top of it, so the two modules
//! depend one way only.

pub(crate) use crate::engine::word::Token;
use crate::engine::word::{Word, MAX_HANDLES};
use crate::error::Error;
use crate::observe::metrics::IncidentCounters;
use crate::sync::pi_mutex::PiMutex;
use crate::sys::{epoll, fd::EventFd};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::*};

struct Entry<H> {
    handler: H,
    fd: RawFd,
    /// The epoll events it was last armed for (what `resume` arms it for).
    events: u32,
    /// Suspended: removed from epoll (`EPOLL_CTL_DEL`) until resumed; an event already
    /// detected is dropped unrun, its readiness stays in the fd for `resume`.
    suspended: bool,
}

struct Slot<H> {
    generation: AtomicU32,
    entry: PiMutex<Option<Entry<H>>>,
    /// Set by the slot's own handler deregistering its handle while it is dispatched; read and
    /// cleared by the same thread before the dispatch unlocks the slot (so `Relaxed`).
    deregister_pending: AtomicBool,
    /// Set by the slot's own handler suspending (2) or resuming (1) its handle while it is
    /// dispatched; applied and cleared by the same dispatch (so `Relaxed`).
    suspend_pending: AtomicU8,
}

/// What the leader's wait produced.
#[derive(Debug)]
pub(crate) enum Wait {
    /// A registered handle is ready (and disarmed: ONESHOT).
    Event {
        token: Token,
        readiness: u32,
    },
    /// A borrowing lane's link fired in this (a lender's) set (`borrow.rs`).
    Link {
        borrower: u16,
    },
    /// The bound pool's connection is readable (`bound/`).
    BoundConnection,
    Shutdown,
    Interrupted,
}

/// What to do with a handle after its handler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Re-arm it for these epoll events (`ONESHOT` is added).
    Rearm(u32),
    /// Remove it and drop its handler.
    Close,
}

/// What [`HandleSet::dispatch`] did with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran<R> {
    /// The token's slot was emptied (and maybe reused) since the event was detected.
    Stale,
    /// The handler ran and returned `value`; the handle was re-armed or removed.
    Ran {
        value: R,
        rearmed: bool,
        /// The handler deregistered its own handle while it ran.
        deregistered: bool,
    },
}

pub(crate) struct HandleSet<H> {
    epoll: epoll::Epoll,
    slots: Box<[Slot<H>]>,
    /// Free slot indices. Capacity is reserved for every slot, so pushes never reallocate.
    free: PiMutex<Vec<u32>>,
    shutdown: EventFd,
    pub(crate) stale: AtomicU64,
    pub(crate) closed: AtomicU64,
    /// Handlers whose `Drop` panicked (caught; the slot was freed all the same).
    pub(crate) drop_panics: AtomicU64,
    /// What this set's handlers counted through `Context::count`.
    pub(crate) incidents: IncidentCounters,
}

impl<H> fmt::Debug for HandleSet<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("HandleSet { .. }")
    }
}

impl<H> HandleSet<H> {
    /// Bytes [`new`](Self::new) allocates for the table: the slots and the free list.
    pub(crate) fn table_bytes(max_handles: usize) -> u64 {
        let per_slot = std::mem::size_of::<Slot<H>>() + std::mem::size_of::<u32>();
        (max_handles as u64).saturating_mul(per_slot as u64)
    }

    /// A set of `max_handles` slots (at most [`MAX_HANDLES`], which validation enforces).
    pub(crate) fn new(max_handles: usize) -> io::Result<HandleSet<H>> {
        assert!(
            max_handles <= MAX_HANDLES,
            "slot indices must stay below the reserved words"
        );
        let epoll = epoll::Epoll::new()?;
        let shutdown = EventFd::new()?;
        // Level-triggered and never read: once written, every later leader sees it at once.
        epoll.add(
            shutdown.as_fd().as_raw_fd(),
            epoll::IN,
            Word::Shutdown.encode(),
        )?;
        let slots = (0..max_handles)
            .map(|_| Slot {
                generation: AtomicU32::new(0),
                entry: PiMutex::new(None),
                deregister_pending: AtomicBool::new(false),
                suspend_pending: AtomicU8::new(0),
            })
            .collect();
        let free = (0..max_handles as u32).rev().collect::<Vec<_>>();
        Ok(HandleSet {
            epoll,
            slots,
            free: PiMutex::new(free),
            shutdown,
            stale: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            drop_panics: AtomicU64::new(0),
            incidents: IncidentCounters::default(),
        })
    }

    /// Stores `handler` in a free slot and arms `fd` for `events` (`ONESHOT` is added).
    pub(crate) fn register(&self, handler: H, fd: RawFd, events: u32) -> Result<Token, Error> {
        let index = self.free.lock().pop().ok_or(Error::TooManyHandles {
            max: self.slots.len(),
        })?;
        let slot = &self.slots[index as usize];
        let token = Token::new(index, slot.generation.load(Acquire));
        *slot.entry.lock() = Some(Entry {
            handler,
            fd,
            events,
            suspended: false,
        });
        if let Err(e) = self
            .epoll
            .add(fd, events | epoll::ONESHOT, Word::Handle(token).encode())
        {
            let entry = slot.entry.lock().take();
            self.free.lock().push(index);
            self.discard(entry);
            return Err(Error::Io {
                context: "epoll_ctl(ADD) of a new handle",
                source: e,
            });
        }
        Ok(token)
    }

    /// Removes a handle and drops its handler. Waits for the handler if it is running on
    /// another thread; called by the handler itself, defers the removal to the end of its
    /// dispatch. Returns false if the token was already gone (or its removal already deferred).
    pub(crate) fn deregister(&self, token: Token) -> bool {
        let slot = match self.slots.get(token.index()) {
            Some(s) => s,
            None => return false,
        };
        let Some(mut g) = slot.entry.lock_unless_held() else {
            // This thread holds the slot lock further up its stack: it is dispatching this
            // slot's handler, which called us (module invariants). The generation cannot
            // change while the lock is held; `dispatch` removes the handle when the handler
            // returns.
            return slot.generation.load(Acquire) == token.generation()
                && !slot.deregister_pending.swap(true, Relaxed);
        };
        if slot.generation.load(Acquire) != token.generation() || g.is_none() {
            return false;
        }
        let entry = self.vacate(slot, &mut g, token);
        drop(g);
        self.discard(entry);
        true
    }

    /// Drops a removed handler (after its slot was unlocked), catching a panic in its `Drop`.
    fn discard(&self, entry: Option<Entry<H>>) {
        if entry.is_some() && catch_unwind(AssertUnwindSafe(move || drop(entry))).is_err() {
            self.drop_panics.fetch_add(1, Relaxed);
        }
    }

    /// Empties a slot (caller holds its lock): stop waiting on the fd, bump the generation,
    /// free the index. The handler is returned so the caller drops it after unlocking.
    fn vacate(&self, slot: &Slot<H>, g: &mut Option<Entry<H>>, token: Token) -> Option<Entry<H>> {
        let entry = g.take();
        if let Some(e) = &entry {
            let _ = self.epoll.delete(e.fd);
        }
        slot.generation.fetch_add(1, Release);
        self.free.lock().push(token.index() as u32);
        self.closed.fetch_add(1, Relaxed);
        entry
    }

    /// The leader's wait for one event (blocks).
    pub(crate) fn wait(&self) -> io::Result<Wait> {
        self.wait_timeout(-1)
    }

    /// Like [`wait`](Self::wait), giving up after `timeout_ms` (-1: never) with
    /// `Wait::Interrupted`.
    pub(crate) fn wait_timeout(&self, timeout_ms: i32) -> io::Result<Wait> {
        match self.epoll.wait_one(timeout_ms) {
            Ok(Some(ready)) => Ok(Self::decode(ready)),
            Ok(None) => Ok(Wait::Interrupted),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Wait::Interrupted),
            Err(e) => Err(e),
        }
    }

    /// The leader's wait for up to `out.len()` events at once (blocks until there is one),
    /// each `(readiness, data word)`, to be [`decode`](Self::decode)d when taken. Returns how
    /// many; 0 after `EINTR`. Every handle it reports is disarmed (ONESHOT) until its dispatch
    /// re-arms it, so events a leader leaves in its batch (`leader.rs`) are reported by no
    /// other wait meanwhile.
    pub(crate) fn wait_many(&self, out: &mut [(u32, u64)]) -> io::Result<usize> {
        match self.epoll.wait_many(-1, out) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            r => r,
        }
    }

    /// Like [`wait_many`](Self::wait_many) without blocking: 0 if nothing is ready.
    pub(crate) fn poll_many(&self, out: &mut [(u32, u64)]) -> io::Result<usize> {
        match self.epoll.wait_many(0, out) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            r => r,
        }
    }

    /// What one reported `(readiness, data word)` stands for.
    pub(crate) fn decode((readiness, data): (u32, u64)) -> Wait {
        match Word::decode(data) {
            Word::Handle(token) => Wait::Event { token, readiness },
            Word::Link { borrower } => Wait::Link { borrower },
            Word::BoundConnection => Wait::BoundConnection,
            Word::Shutdown => Wait::Shutdown,
        }
    }

    /// Adds an fd that has no handler under a reserved data `word` (`word.rs`): its readiness
    /// comes back from the waits as that word's [`Wait`]. Used by owners that wait on their own
    /// fd alongside the handles (the bound pool's connection, a borrowing lane's link).
    pub(crate) fn watch(&self, fd: RawFd, events: u32, word: Word) -> io::Result<()> {
        debug_assert!(!matches!(word, Word::Handle(_) | Word::Shutdown));
        self.epoll.add(fd, events, word.encode())
    }

    /// Re-arms (`EPOLL_CTL_MOD`) an fd added with [`watch`](Self::watch) for `events` (a
    /// borrowing lane's link, `borrow.rs`, is `EPOLLONESHOT`).
    pub(crate) fn rewatch(&self, fd: RawFd, events: u32, word: Word) -> io::Result<()> {
        self.epoll.modify(fd, events, word.encode())
    }

    /// The set's epoll fd, which a lender's set watches (`borrow.rs`).
    pub(crate) fn epoll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Stops watching an fd added with [`watch`](Self::watch).
    pub(crate) fn unwatch(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.delete(fd)
    }

    /// Runs `run` on the handler of `token` under its slot lock, then re-arms the handle or
    /// removes it as `run` decided (or as the handler's own deregistration asked).
    pub(crate) fn dispatch<R>(
        &self,
        token: Token,
        run: impl FnOnce(&mut H) -> (R, Next),
    ) -> Ran<R> {
        let Some(slot) = self.slots.get(token.index()) else {
            self.stale.fetch_add(1, Relaxed);
            return Ran::Stale;
        };
        let mut g = slot.entry.lock();
        let entry = match g.as_mut() {
            Some(e) if slot.generation.load(Acquire) == token.generation() => e,
            _ => {
                self.stale.fetch_add(1, Relaxed);
                return Ran::Stale;
            }
        };
        if entry.suspended {
            // Detected before a suspension took it out of epoll: not run (and not counted as
            // stale); `resume` re-arms it and the fd reports its readiness again.
            return Ran::Stale;
        }
        let (value, next) = run(&mut entry.handler);
        // The handler deregistered its own handle: remove it now, whatever it returned.
        let deregistered = slot.deregister_pending.swap(false, Relaxed);
        match slot.suspend_pending.swap(0, Relaxed) {
            2 => entry.suspended = true,
            1 => entry.suspended = false,
            _ => {}
        }
        let rearmed = match next {
            // The handler suspended its own handle: keep it, out of epoll, until resumed.
            Next::Rearm(events) if !deregistered && entry.suspended => {
                entry.events = events;
                self.epoll.delete(entry.fd).is_ok()
            }
            Next::Rearm(events) if !deregistered => {
                entry.events = events;
                self.epoll
                    .modify(
                        entry.fd,
                        events | epoll::ONESHOT,
                        Word::Handle(token).encode(),
                    )
                    .is_ok()
            }
            _ => false,
        };
        if !rearmed {
            let entry = self.vacate(slot, &mut g, token);
            drop(g);
            self.discard(entry);
        }
        Ran::Ran {
            value,
            rearmed,
            deregistered,
        }
    }

    /// Suspends a handle: no event of it is dispatched until [`resume`](Self::resume). Waits
    /// for its handler if it runs on another thread; called by that handler, takes effect when
    /// it returns. False if the token is stale or the handle already suspended.
    pub(crate) fn suspend(&self, token: Token) -> bool {
        self.set_suspended(token, true)
    }

    /// Re-arms a suspended handle. False if the token is stale or the handle not suspended.
    pub(crate) fn resume(&self, token: Token) -> bool {
        self.set_suspended(token, false)
    }

    fn set_suspended(&self, token: Token, suspend: bool) -> bool {
        let Some(slot) = self.slots.get(token.index()) else {
            return false;
        };
        let Some(mut g) = slot.entry.lock_unless_held() else {
            // Called by this slot's own handler (module invariants), whose dispatch holds the
            // lock and applies the flag when it returns. Its entry cannot be reached from here,
            // so the flag travels through `suspend_pending`.
            return slot.generation.load(Acquire) == token.generation()
                && slot.suspend_pending.swap(u8::from(suspend) + 1, Relaxed)
                    != u8::from(suspend) + 1;
        };
        match g.as_mut() {
            Some(e)
                if slot.generation.load(Acquire) == token.generation()
                    && e.suspended != suspend =>
            {
                let done = if suspend {
                    // Armed or disarmed (ONESHOT fired), the fd is in epoll until deleted.
                    self.epoll.delete(e.fd)
                } else {
                    self.epoll.add(
                        e.fd,
                        e.events | epoll::ONESHOT,
                        Word::Handle(token).encode(),
                    )
                };
                if done.is_ok() {
                    e.suspended = suspend;
                }
                done.is_ok()
            }
            _ => false,
        }
    }

    /// Wakes the leader for shutdown (every later wait returns `Wait::Shutdown`).
    pub(crate) fn wake_for_shutdown(&self) {
        let _ = self.shutdown.write(1);
    }

    /// Drops every handler (closing their fds), each after `before_drop` ran on it (outside
    /// every slot lock). Called after all pool threads exited.
    pub(crate) fn close_all(&self, mut before_drop: impl FnMut(&mut H)) {
        for (i, slot) in self.slots.iter().enumerate() {
            let mut g = slot.entry.lock();
            if g.is_some() {
                let token = Token::new(i as u32, slot.generation.load(Acquire));
                let mut e = self.vacate(slot, &mut g, token);
                drop(g);
                if let Some(e) = &mut e {
                    before_drop(&mut e.handler);
                }
                self.discard(e);
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.lock().len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ready(fd: &EventFd) {
        fd.write(1).unwrap();
    }

    /// A leader's batch (`leader.rs`) holds events the wait reported and nobody has dispatched
    /// yet. If the handler of one event closes another handle of the batch and a new handle
    /// reuses its slot, the batch's event for the closed handle must be dropped as stale: it
    /// must neither reach the new handler nor be lost for the new handle's own events.
    #[test]
    fn a_batched_event_of_a_closed_and_reused_handle_is_stale() {
        let set: HandleSet<&'static str> = HandleSet::new(4).unwrap();
        let (a, b, c) = (
            EventFd::new().unwrap(),
            EventFd::new().unwrap(),
            EventFd::new().unwrap(),
        );
        let ta = set.register("a", a.as_fd().as_raw_fd(), epoll::IN).unwrap();
        let tb = set.register("b", b.as_fd().as_raw_fd(), epoll::IN).unwrap();
        ready(&a);
        ready(&b);
        let mut batch = [(0, 0); 4];
        let n = set.wait_many(&mut batch).unwrap();
        assert_eq!(n, 2, "both handles reported by one wait");
        let tokens: Vec<Token> = batch[..n]
            .iter()
            .map(|&r| match HandleSet::<&'static str>::decode(r) {
                Wait::Event { token, .. } => token,
                w => panic!("unexpected {w:?}"),
            })
            .collect();
        assert!(tokens.contains(&ta) && tokens.contains(&tb));

        // a's handler runs first: it closes b, and c takes b's slot.
        let mut tc = None;
        let ran = set.dispatch(ta, |h| {
            assert_eq!(*h, "a");
            a.read().unwrap();
            assert!(set.deregister(tb));
            tc = Some(set.register("c", c.as_fd().as_raw_fd(), epoll::IN).unwrap());
            ((), Next::Rearm(epoll::IN))
        });
        assert!(matches!(ran, Ran::Ran { rearmed: true, .. }));
        let tc = tc.unwrap();
        assert_eq!(tc.index(), tb.index(), "c reuses b's slot");
        assert_ne!(tc, tb, "with a new generation");

        // b's event, still in the batch, is stale: c's handler does not run.
        let stale_before = set.stale.load(Relaxed);
        let ran: Ran<()> = set.dispatch(tb, |h| panic!("{h}'s handler ran for b's event"));
        assert_eq!(ran, Ran::Stale);
        assert_eq!(
            set.stale.load(Relaxed),
            stale_before + 1,
            "counted as stale"
        );

        // c's own readiness is reported and dispatched normally.
        ready(&c);
        let n = set.wait_many(&mut batch).unwrap();
        assert_eq!(n, 1);
        assert!(matches!(
            HandleSet::<&'static str>::decode(batch[0]),
            Wait::Event { token, .. } if token == tc
        ));
        let ran = set.dispatch(tc, |h| {
            assert_eq!(*h, "c");
            ((), Next::Close)
        });
        assert!(matches!(ran, Ran::Ran { rearmed: false, .. }));
    }
}
