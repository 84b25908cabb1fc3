//! The epoll data word: the 64 bits every event of a handle set carries, and what they can be.
//!
//! One module owns the encoding, so that the argument that no two kinds of word collide lives in
//! one place. Everything registered in a lane's epoll set is one of:
//!
//! ```text
//!   63            32 31                 20 19                   0
//!  ┌────────────────┬──────────────────────────────────────────────┐
//!  │   generation   │        slot index  (< MAX_HANDLES = 2²⁰)     │  Word::Handle(Token)
//!  ├────────────────┼──────────────────────────────────────────────┤
//!  │       0        │ 0xFFFF │          borrower lane index        │  Word::Link { borrower }
//!  ├────────────────┴──────────────────────────────────────────────┤
//!  │ 0xFFFF_FFFF_FFFF_FFFE                                         │  Word::BoundConnection
//!  │ 0xFFFF_FFFF_FFFF_FFFF                                         │  Word::Shutdown
//!  └───────────────────────────────────────────────────────────────┘
//! ```
//!
//! Why they cannot collide: a handle's low 32 bits are its slot index, below [`MAX_HANDLES`]
//! (validated for every lane and asserted by `HandleSet::new`); every reserved word has low 32
//! bits of at least `0xFFFF_0000`, far above it. Among the reserved words a link has its high
//! 32 bits zero, the bound connection and shutdown words have them all ones, and those two
//! differ in bit 0. A lane index is 16 bits, so a link word carries any borrower.
//!
//! Who registers what: the handle set registers handles (slot tokens) and its shutdown eventfd;
//! a borrowing lane's link sits in each lender's set (`borrow.rs`); a bound pool watches its
//! connection in its own set (`bound/`). [`Word::decode`] runs once per event, in
//! `HandleSet::wait_timeout`, so no caller looks inside a token.

/// Identifies one registered handle within its lane: slot index and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

impl Token {
    pub(crate) fn new(index: u32, generation: u32) -> Token {
        Token(u64::from(generation) << 32 | u64::from(index))
    }
    /// The slot index in the lane's handle table.
    pub fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    /// The raw 64-bit value (`generation << 32 | index`), as carried in telemetry samples.
    pub fn raw(self) -> u64 {
        self.0
    }
    /// A token from its raw value (as [`raw`](Self::raw) returned it).
    pub(crate) fn from_raw(raw: u64) -> Token {
        Token(raw)
    }
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// The most handles one handle set may hold: slot indices stay below the reserved words.
pub(crate) const MAX_HANDLES: usize = 1 << 20;

/// Low 32 bits of every link word; the borrower's lane index is added to it.
const LINK_BASE: u64 = 0xFFFF_0000;
/// The bound pool's connection to its back-end.
const BOUND_CONNECTION: u64 = u64::MAX - 1;
/// The handle set's shutdown eventfd.
const SHUTDOWN: u64 = u64::MAX;

/// What one epoll data word stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Word {
    /// A registered handle: its slot and the slot's generation.
    Handle(Token),
    /// A borrowing lane's epoll fd in a lender's set: an event on lane `borrower` wants a thread.
    Link {
        /// The borrowing lane's lane index.
        borrower: u16,
    },
    /// A bound pool's connection, watched level-triggered in the pool's own set.
    BoundConnection,
    /// The shutdown eventfd: level-triggered and never read, so every later wait reports it.
    Shutdown,
}

impl Word {
    /// The word as registered with `epoll_ctl`.
    pub(crate) fn encode(self) -> u64 {
        match self {
            Word::Handle(token) => {
                debug_assert!(token.index() < MAX_HANDLES, "slot index above MAX_HANDLES");
                token.raw()
            }
            Word::Link { borrower } => LINK_BASE | u64::from(borrower),
            Word::BoundConnection => BOUND_CONNECTION,
            Word::Shutdown => SHUTDOWN,
        }
    }

    /// What an event's data word stands for.
    pub(crate) fn decode(data: u64) -> Word {
        match data {
            SHUTDOWN => Word::Shutdown,
            BOUND_CONNECTION => Word::BoundConnection,
            d if d & !0xFFFF == LINK_BASE => Word::Link {
                borrower: (d & 0xFFFF) as u16,
            },
            d => Word::Handle(Token::from_raw(d)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let words = [
            Word::Handle(Token::from_raw(0)),
            Word::Handle(Token::from_raw((MAX_HANDLES - 1) as u64)),
            Word::Handle(Token::from_raw(
                u64::from(u32::MAX) << 32 | (MAX_HANDLES - 1) as u64,
            )),
            Word::Link { borrower: 0 },
            Word::Link { borrower: 7 },
            Word::Link { borrower: u16::MAX },
            Word::BoundConnection,
            Word::Shutdown,
        ];
        for w in words {
            assert_eq!(Word::decode(w.encode()), w, "{w:?}");
        }
    }

    #[test]
    fn no_handle_word_is_a_reserved_word() {
        // The extremes of every field of a handle word: highest index, any generation.
        for generation in [0u64, 1, 0xFFFF, 0xFFFF_0000, u64::from(u32::MAX)] {
            for index in [0u64, 1, (MAX_HANDLES - 1) as u64] {
                let raw = generation << 32 | index;
                assert_eq!(
                    Word::decode(raw),
                    Word::Handle(Token::from_raw(raw)),
                    "generation {generation:#x}, index {index}"
                );
            }
        }
    }

    #[test]
    fn reserved_words_are_distinct() {
        let reserved = [
            Word::Link { borrower: 0 }.encode(),
            Word::Link { borrower: u16::MAX }.encode(),
            Word::BoundConnection.encode(),
            Word::Shutdown.encode(),
        ];
        for (i, a) in reserved.iter().enumerate() {
            assert!(a & 0xFFFF_FFFF >= MAX_HANDLES as u64);
            for b in &reserved[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
