//! A lane's handle set: one epoll instance plus the demultiplexing table.
//!
//! Every handle is registered **edge-triggered** (`EPOLLET`) once and stays armed: the kernel
//! reports it again whenever new readiness arrives, to whichever thread waits on the set. Which
//! thread dispatches a reported handle is decided by the slot's claim word (`claim.rs`): the
//! wait that reports a handle claims it, a report of a handle already claimed is folded into
//! its owner's next run, and the owner lets go after the handler returned. So no system call
//! re-arms a handle after its handler in the common case (`EPOLLONESHOT` needed an
//! `epoll_ctl(MOD)` per event).
//!
//! Edge-triggered input must be read until it would block, or it is reported only when more
//! arrives. A handler that did so says it through its context ([`Next::Rearm`]'s `drained`,
//! `Context::set_drained`; the runtime's datagram batches and timers say it themselves); a
//! handle whose handler did not (or that changed its interest, or was reported while its last
//! run was left) is re-checked with one `epoll_ctl(MOD)`, which reports it again at once if it
//! is still ready: the level-triggered behaviour of before, at the old price.
//!
//! The demultiplexing table is a slab preallocated at `max_handles` slots. A [`Token`] carries
//! the slot index and the slot's generation; the generation (kept in the claim word) is bumped
//! whenever a slot is emptied, so an event that was already reported for a removed handle
//! (stale) never reaches the handler that reused the slot.
//!
//! Invariants:
//! * a slot's handler runs only under the slot lock, only by the thread that claimed the
//!   handle's report, and only after its generation matched the event's token; so no handler
//!   ever runs on two threads at once, and each report leads to exactly one claim or is folded
//!   into the owner's next run (`claim.rs`);
//! * **no lost wake-up on release**: the owner lets go in one compare-and-swap that sees
//!   whether the handle was reported meanwhile; if so it keeps the handle and dispatches it
//!   once more as the next event (a handler that drained; at most once in a row), or
//!   re-checks readiness with `epoll_ctl` after letting go, under the slot lock (a report that
//!   the re-check causes finds the handle unclaimed, and its dispatch waits for the slot lock);
//! * a handle is never reported for dispatch while suspended (a suspended handle is out of
//!   epoll; an event claimed before the suspension is given up unrun by `dispatch`, and its
//!   readiness stays in the fd for `resume`, which re-adds it and so reports it if ready);
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

use crate::engine::claim::{Claim, Claimed, Finished};
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

/// A slot's recent run time before it has one (the promotion's prediction: unknown work is
/// taken as long).
const NO_COST: u32 = u32::MAX;

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
    /// The slot's generation and who dispatches its handle (`claim.rs`).
    claim: Claim,
    /// The handler's recent run time (ns, a decaying maximum; [`NO_COST`] before its first
    /// run), which a leader reads to decide whether to keep its role (`dispatch.rs`).
    cost_ns: AtomicU32,
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
    /// A registered handle is ready, and the caller owns its dispatch (`claim.rs`).
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
    /// Keep it for these epoll events. `drained`: the handler read its source until it would
    /// block, so no readiness is left that only a re-check would report.
    Rearm { events: u32, drained: bool },
    /// Remove it and drop its handler.
    Close,
}

/// What [`HandleSet::dispatch`] did with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran<R> {
    /// The token's slot was emptied (and maybe reused) since the event was detected.
    Stale,
    /// The handler ran and returned `value` (its last run's); the handle was kept or
    /// removed.
    Ran {
        value: R,
        rearmed: bool,
        /// The handler deregistered its own handle while it ran.
        deregistered: bool,
        /// The handle was reported while the handler ran: the caller still owns it and
        /// dispatches it again.
        again: bool,
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
    /// Reports of a handle whose dispatch another thread owned: folded into its next run.
    pub(crate) coalesced: AtomicU64,
    /// Handles kept after their handler with an `epoll_ctl(MOD)` re-check of readiness (the
    /// handler did not drain its source, changed its interest, or a report was left).
    pub(crate) rechecks: AtomicU64,
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
                claim: Claim::new(),
                cost_ns: AtomicU32::new(NO_COST),
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
            coalesced: AtomicU64::new(0),
            rechecks: AtomicU64::new(0),
            drop_panics: AtomicU64::new(0),
            incidents: IncidentCounters::default(),
        })
    }

    /// Stores `handler` in a free slot and adds `fd` for `events`, edge-triggered (a ready fd
    /// is reported at once).
    pub(crate) fn register(&self, handler: H, fd: RawFd, events: u32) -> Result<Token, Error> {
        let index = self.free.lock().pop().ok_or(Error::TooManyHandles {
            max: self.slots.len(),
        })?;
        let slot = &self.slots[index as usize];
        let token = Token::new(index, slot.claim.generation());
        slot.cost_ns.store(NO_COST, Relaxed);
        *slot.entry.lock() = Some(Entry {
            handler,
            fd,
            events,
            suspended: false,
        });
        if let Err(e) = self
            .epoll
            .add(fd, events | epoll::ET, Word::Handle(token).encode())
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
            return slot.claim.generation() == token.generation()
                && !slot.deregister_pending.swap(true, Relaxed);
        };
        if slot.claim.generation() != token.generation() || g.is_none() {
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

    /// Empties a slot (caller holds its lock): stop waiting on the fd, bump the generation
    /// (which voids any claim of the old one), free the index. The handler is returned so the
    /// caller drops it after unlocking.
    fn vacate(&self, slot: &Slot<H>, g: &mut Option<Entry<H>>, token: Token) -> Option<Entry<H>> {
        let entry = g.take();
        if let Some(e) = &entry {
            let _ = self.epoll.delete(e.fd);
        }
        slot.claim.vacate();
        self.free.lock().push(token.index() as u32);
        self.closed.fetch_add(1, Relaxed);
        entry
    }

    /// The leader's wait for one event (blocks).
    pub(crate) fn wait(&self) -> io::Result<Wait> {
        self.wait_timeout(-1)
    }

    /// Like [`wait`](Self::wait), giving up after `timeout_ms` (-1: never) with
    /// `Wait::Interrupted`. A handle it returns is claimed by the caller; a report of a handle
    /// another thread owns (or of a removed one) also returns `Wait::Interrupted`.
    pub(crate) fn wait_timeout(&self, timeout_ms: i32) -> io::Result<Wait> {
        match self.epoll.wait_one(timeout_ms) {
            Ok(Some(ready)) if self.claim(ready) => Ok(Self::decode(ready)),
            Ok(_) => Ok(Wait::Interrupted),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Wait::Interrupted),
            Err(e) => Err(e),
        }
    }

    /// The leader's wait for up to `out.len()` events at once (blocks until there is one),
    /// each `(readiness, data word)`, to be [`decode`](Self::decode)d when taken. Every handle
    /// it leaves in `out` is claimed by the caller (`claim.rs`), so events a leader leaves in
    /// its batch (`leader.rs`) are dispatched by nobody else meanwhile; reports of handles
    /// another thread owns, or of removed ones, are left out. Returns how many it left, and
    /// whether the kernel filled `out` (so more may be ready); `(0, false)` after `EINTR`.
    pub(crate) fn wait_many(&self, out: &mut [(u32, u64)]) -> io::Result<(usize, bool)> {
        match self.epoll.wait_many(-1, out) {
            Ok(n) => Ok((self.claim_all(&mut out[..n]), n == out.len())),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok((0, false)),
            Err(e) => Err(e),
        }
    }

    /// Claims the handles of `got` in place, keeping the order; returns how many are left.
    fn claim_all(&self, got: &mut [(u32, u64)]) -> usize {
        let mut kept = 0;
        for i in 0..got.len() {
            if self.claim(got[i]) {
                got[kept] = got[i];
                kept += 1;
            }
        }
        kept
    }

    /// One report: a handle's is claimed (false if another thread owns it or it is stale,
    /// counted); every other word passes.
    fn claim(&self, (_, data): (u32, u64)) -> bool {
        let Word::Handle(token) = Word::decode(data) else {
            return true;
        };
        let Some(slot) = self.slots.get(token.index()) else {
            self.stale.fetch_add(1, Relaxed);
            return false;
        };
        match slot.claim.claim(token.generation()) {
            Claimed::Owned => true,
            Claimed::Busy => {
                self.coalesced.fetch_add(1, Relaxed);
                false
            }
            Claimed::Stale => {
                self.stale.fetch_add(1, Relaxed);
                false
            }
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

    /// Runs `run` on the handler of `token`, whose report the caller claimed, under its slot
    /// lock; then keeps the handle or removes it as `run` decided (or as the handler's own
    /// deregistration asked), and lets go of its claim. If the handle was reported while the
    /// handler ran and `may_run_again`, the caller keeps it instead (`Ran::Ran { again: true,
    /// .. }`) and dispatches it once more, as one more event; otherwise such a report gets a
    /// readiness re-check (module docs).
    pub(crate) fn dispatch<R>(
        &self,
        token: Token,
        may_run_again: bool,
        run: impl FnOnce(&mut H) -> (R, Next),
    ) -> Ran<R> {
        let Some(slot) = self.slots.get(token.index()) else {
            self.stale.fetch_add(1, Relaxed);
            return Ran::Stale;
        };
        let generation = token.generation();
        let mut g = slot.entry.lock();
        let entry = match g.as_mut() {
            Some(e) if slot.claim.generation() == generation => e,
            _ => {
                // Removed since the report was claimed: the vacate voided the claim.
                self.stale.fetch_add(1, Relaxed);
                return Ran::Stale;
            }
        };
        if entry.suspended {
            // Claimed before a suspension took it out of epoll: not run (and not counted as
            // stale); `resume` re-adds it and the fd reports its readiness again.
            let _ = slot.claim.finish(generation, false);
            return Ran::Stale;
        }
        slot.claim.begin();
        let (value, next) = run(&mut entry.handler);
        // The handler deregistered its own handle: remove it now, whatever it returned.
        let deregistered = slot.deregister_pending.swap(false, Relaxed);
        match slot.suspend_pending.swap(0, Relaxed) {
            2 => entry.suspended = true,
            1 => entry.suspended = false,
            _ => {}
        }
        let mut again = false;
        let rearmed = match next {
            // The handler suspended its own handle: keep it, out of epoll, until resumed.
            Next::Rearm { events, .. } if !deregistered && entry.suspended => {
                entry.events = events;
                let _ = slot.claim.finish(generation, false);
                self.epoll.delete(entry.fd).is_ok()
            }
            Next::Rearm { events, drained } if !deregistered => {
                let changed = events != entry.events;
                entry.events = events;
                match slot
                    .claim
                    .finish(generation, may_run_again && drained && !changed)
                {
                    Finished::Again => {
                        again = true;
                        true
                    }
                    Finished::Released { notified } if notified || !drained || changed => {
                        // Let go first, then ask the kernel: a report the re-check causes
                        // finds the handle unclaimed (its dispatch waits for this lock).
                        self.rechecks.fetch_add(1, Relaxed);
                        self.epoll
                            .modify(entry.fd, events | epoll::ET, Word::Handle(token).encode())
                            .is_ok()
                    }
                    Finished::Released { .. } => true,
                }
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
            again,
        }
    }

    /// Records how long one dispatch of `token`'s handler took: a decaying maximum (a long run
    /// is remembered for a few short ones), read by [`cost_ns`](Self::cost_ns).
    pub(crate) fn note_cost(&self, token: Token, ns: u64) {
        if let Some(slot) = self.slots.get(token.index()) {
            let ns = ns.min(u64::from(NO_COST - 1)) as u32;
            let old = slot.cost_ns.load(Relaxed);
            let new = if old == NO_COST { ns } else { ns.max(old / 2) };
            slot.cost_ns.store(new, Relaxed);
        }
    }

    /// How long `token`'s handler ran recently (ns); `u64::MAX` if it has not run yet (unknown
    /// work counts as long) or the token is stale.
    pub(crate) fn cost_ns(&self, token: Token) -> u64 {
        match self
            .slots
            .get(token.index())
            .map(|s| s.cost_ns.load(Relaxed))
        {
            Some(c) if c != NO_COST => u64::from(c),
            _ => u64::MAX,
        }
    }

    /// How many of the events of one wait (`(readiness, data word)`, as [`wait_many`] left
    /// them), from the first, are quick enough for one thread to process in turn (deferred
    /// promotion, `dispatch.rs`): handles (no borrowing link: a lent thread leaves its lane)
    /// whose handlers' recent runs add up to less than `budget_ns`. A handle that has not run
    /// yet counts as long, so a new handle's first event ends the prefix.
    ///
    /// [`wait_many`]: Self::wait_many
    pub(crate) fn quick_prefix(&self, got: &[(u32, u64)], budget_ns: u64) -> usize {
        let mut total = 0u64;
        for (i, &r) in got.iter().enumerate() {
            let Wait::Event { token, .. } = Self::decode(r) else {
                return i;
            };
            total = total.saturating_add(self.cost_ns(token));
            if total >= budget_ns {
                return i;
            }
        }
        got.len()
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
            return slot.claim.generation() == token.generation()
                && slot.suspend_pending.swap(u8::from(suspend) + 1, Relaxed)
                    != u8::from(suspend) + 1;
        };
        match g.as_mut() {
            Some(e) if slot.claim.generation() == token.generation() && e.suspended != suspend => {
                let done = if suspend {
                    self.epoll.delete(e.fd)
                } else {
                    // Edge-triggered, as registered: a fd that became ready while suspended is
                    // reported at once.
                    self.epoll
                        .add(e.fd, e.events | epoll::ET, Word::Handle(token).encode())
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
                let token = Token::new(i as u32, slot.claim.generation());
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

    /// The prediction a leader keeps its role and events by: the handles of a wait, from the
    /// first, whose recent runs add up to less than the budget are quick; a handle that never
    /// ran, a long recent run (remembered, as a decaying maximum, for a few short ones), or a
    /// borrowing link ends the quick prefix.
    #[test]
    fn quick_work_is_predicted_from_recent_runs_and_a_link_never_is() {
        let set: HandleSet<&'static str> = HandleSet::new(4).unwrap();
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        let ta = set.register("a", a.as_fd().as_raw_fd(), epoll::IN).unwrap();
        let tb = set.register("b", b.as_fd().as_raw_fd(), epoll::IN).unwrap();
        let ev = |t: Token| (epoll::IN, Word::Handle(t).encode());
        assert!(
            set.quick_prefix(&[ev(ta)], 50_000) == 0,
            "a handle that never ran counts as long"
        );
        set.note_cost(ta, 10_000);
        set.note_cost(tb, 30_000);
        assert!(set.quick_prefix(&[ev(ta)], 50_000) == 1);
        assert_eq!(
            set.quick_prefix(&[ev(ta), ev(tb)], 50_000),
            2,
            "10 + 30 µs < 50 µs"
        );
        assert_eq!(
            set.quick_prefix(&[ev(ta), ev(tb), ev(tb), ev(ta)], 50_000),
            2,
            "the third makes 70 µs: the prefix ends before it"
        );
        let link = (epoll::IN, Word::Link { borrower: 3 }.encode());
        assert_eq!(
            set.quick_prefix(&[ev(ta), link, ev(ta)], 50_000),
            1,
            "a link ends the prefix"
        );
        set.note_cost(ta, 400_000);
        assert!(set.quick_prefix(&[ev(ta)], 50_000) == 0);
        for _ in 0..3 {
            set.note_cost(ta, 1_000);
        }
        assert!(
            set.quick_prefix(&[ev(ta)], 50_000) == 0,
            "a long run is remembered for a few"
        );
        for _ in 0..3 {
            set.note_cost(ta, 1_000);
        }
        assert!(
            set.quick_prefix(&[ev(ta)], 50_000) == 1,
            "and then forgotten"
        );
    }

    /// Edge-triggered handles and the claim: a report of a handle whose dispatch another
    /// thread owns is folded into that owner's next run (the handler runs once more, no
    /// system call); a handler that does not say it drained is re-checked with one
    /// `epoll_ctl`, which reports it again while input is left.
    #[test]
    fn a_report_while_owned_runs_again_and_an_undrained_handle_is_rechecked() {
        let set: HandleSet<&'static str> = HandleSet::new(2).unwrap();
        let a = EventFd::new().unwrap();
        let ta = set.register("a", a.as_fd().as_raw_fd(), epoll::IN).unwrap();
        let mut out = [(0, 0); 2];
        ready(&a);
        assert_eq!(
            set.wait_many(&mut out).unwrap(),
            (1, false),
            "claimed by this wait"
        );
        let (set_ref, a_ref) = (&set, &a);
        let run = |first: bool| {
            move |_: &mut &'static str| {
                a_ref.read().unwrap();
                if first {
                    // Input arrives while the handler runs, and another wait reports it.
                    ready(a_ref);
                    let mut other = [(0, 0); 2];
                    assert_eq!(set_ref.wait_many(&mut other).unwrap(), (0, false), "folded");
                }
                let next = Next::Rearm {
                    events: epoll::IN,
                    drained: true,
                };
                ((), next)
            }
        };
        let ran = set.dispatch(ta, true, run(true));
        assert!(
            matches!(ran, Ran::Ran { again: true, .. }),
            "the report came while it ran: the caller dispatches it again"
        );
        let ran = set.dispatch(ta, true, run(false));
        assert!(matches!(
            ran,
            Ran::Ran {
                again: false,
                rearmed: true,
                ..
            }
        ));
        assert_eq!(set.coalesced.load(Relaxed), 1);
        assert_eq!(
            set.rechecks.load(Relaxed),
            0,
            "a drained handle costs no epoll_ctl"
        );
        assert!(
            matches!(set.wait_timeout(0).unwrap(), Wait::Interrupted),
            "nothing left to report"
        );

        // Two writes, one read each: the handler leaves input and does not say it drained.
        ready(&a);
        ready(&a);
        let (n, _) = set.wait_many(&mut out).unwrap();
        assert_eq!(n, 1, "edge-triggered: one report for both writes");
        let ran = set.dispatch(ta, true, |_| {
            let next = Next::Rearm {
                events: epoll::IN,
                drained: false,
            };
            ((), next)
        });
        assert!(matches!(ran, Ran::Ran { rearmed: true, .. }));
        assert_eq!(set.rechecks.load(Relaxed), 1, "re-checked");
        match set.wait_timeout(0).unwrap() {
            Wait::Event { token, .. } => assert_eq!(token, ta, "reported again: input left"),
            w => panic!("the re-check did not report the handle: {w:?}"),
        }
    }

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
        let (n, full) = set.wait_many(&mut batch).unwrap();
        assert_eq!((n, full), (2, false), "both handles reported by one wait");
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
        let ran = set.dispatch(ta, false, |h| {
            assert_eq!(*h, "a");
            a.read().unwrap();
            assert!(set.deregister(tb));
            tc = Some(set.register("c", c.as_fd().as_raw_fd(), epoll::IN).unwrap());
            (
                (),
                Next::Rearm {
                    events: epoll::IN,
                    drained: true,
                },
            )
        });
        assert!(matches!(ran, Ran::Ran { rearmed: true, .. }));
        let tc = tc.unwrap();
        assert_eq!(tc.index(), tb.index(), "c reuses b's slot");
        assert_ne!(tc, tb, "with a new generation");

        // b's event, still in the batch, is stale: c's handler does not run.
        let stale_before = set.stale.load(Relaxed);
        let ran: Ran<()> = set.dispatch(tb, false, |h| panic!("{h}'s handler ran for b's event"));
        assert_eq!(ran, Ran::Stale);
        assert_eq!(
            set.stale.load(Relaxed),
            stale_before + 1,
            "counted as stale"
        );

        // c's own readiness is reported and dispatched normally.
        ready(&c);
        let (n, _) = set.wait_many(&mut batch).unwrap();
        assert_eq!(n, 1);
        assert!(matches!(
            HandleSet::<&'static str>::decode(batch[0]),
            Wait::Event { token, .. } if token == tc
        ));
        let ran = set.dispatch(tc, false, |h| {
            assert_eq!(*h, "c");
            ((), Next::Close)
        });
        assert!(matches!(ran, Ran::Ran { rearmed: false, .. }));
    }
}
