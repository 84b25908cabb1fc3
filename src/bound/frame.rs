//! The wire format of the multiplexed connection, and the leader's receive buffer. The frames
//! are read by the runtime's one frame reader (`sources/frame.rs`, shared with
//! [`stream::Framed`](crate::sources::stream::Framed)); this module gives it the header ([`Wire`]).
//!
//! Every message, in both directions, is one frame:
//!
//! ```text
//!  0               8          12                 12 + len
//!  ├── request id ─┼── len ───┼────── body ───────┤
//!    u64 LE          u32 LE     len bytes
//! ```
//!
//! The request id is opaque to the back-end: it copies the request's id into its reply. A reply
//! body longer than the pool's `max_body` is a protocol violation (the pool could not deliver
//! it without allocating); it closes the connection.

pub(crate) use crate::sources::frame::Next;
use crate::sources::frame::{Format, Reader};

/// Bytes of a frame header: request id (u64 LE) and body length (u32 LE).
pub const HEADER_LEN: usize = 12;

/// Bytes the leader asks the kernel for at least, per read: a read drains many small replies.
const READ_CHUNK: usize = 64 * 1024;

/// Encodes a frame header.
///
/// # Examples
/// ```
/// use lfrt::bound::{decode_header, encode_header};
/// let h = encode_header(7, 3);
/// assert_eq!(decode_header(&h), (7, 3));
/// ```
pub fn encode_header(id: u64, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&id.to_le_bytes());
    h[8..].copy_from_slice(&len.to_le_bytes());
    h
}

/// Decodes a frame header into `(request id, body length)`.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> (u64, u32) {
    let mut id = [0u8; 8];
    let mut len = [0u8; 4];
    id.copy_from_slice(&h[..8]);
    len.copy_from_slice(&h[8..]);
    (u64::from_le_bytes(id), u32::from_le_bytes(len))
}

/// The bound connection's wire format, for the runtime's one frame reader
/// ([`crate::sources::frame`]).
#[derive(Debug)]
pub(crate) struct Wire;

impl Format for Wire {
    const HEADER: usize = HEADER_LEN;
    /// The request id.
    type Tag = u64;
    fn decode(header: &[u8]) -> (u64, u32) {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(header);
        decode_header(&h)
    }
}

/// The leader's side of the connection: its receive buffer, and whether the connection is
/// still waited on.
///
/// Only the current leader touches it (it holds the reader lock for as long as it leads), so
/// a frame half-read by one leader is completed by the next.
#[derive(Debug)]
pub(crate) struct Receiver {
    /// Bytes read from the connection and not yet delivered (the reader's invariant: after the
    /// leader drained it, less than one frame, so there is always room to read more).
    pub(crate) frames: Reader<Wire>,
    /// The connection is in the epoll set (false once it failed).
    pub(crate) watched: bool,
}

impl Receiver {
    /// The receive buffer's size for `max_body`: one largest frame, and at least
    /// `READ_CHUNK`.
    pub(crate) fn allocated_bytes(max_body: usize) -> usize {
        (HEADER_LEN + max_body).max(READ_CHUNK)
    }

    /// Allocates and pre-faults the receive buffer.
    pub(crate) fn new(max_body: usize) -> Receiver {
        Receiver {
            frames: Reader::new(max_body, Self::allocated_bytes(max_body)),
            watched: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(r: &mut Reader<Wire>, bytes: &[u8]) {
        let s = r.space();
        s[..bytes.len()].copy_from_slice(bytes);
        r.commit(bytes.len());
    }

    #[test]
    fn header_round_trip() {
        for (id, len) in [
            (0u64, 0u32),
            (1, 1),
            (u64::MAX, u32::MAX),
            (0x0102_0304_0506_0708, 0x0a0b_0c0d),
        ] {
            assert_eq!(decode_header(&encode_header(id, len)), (id, len));
        }
        assert_eq!(encode_header(1, 2), [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn frames_arrive_in_pieces() {
        let mut r = Receiver::new(16).frames;
        let mut wire = Vec::new();
        wire.extend_from_slice(&encode_header(5, 3));
        wire.extend_from_slice(b"abc");
        wire.extend_from_slice(&encode_header(6, 0));
        wire.extend_from_slice(&encode_header(7, 2));
        wire.extend_from_slice(b"xy");
        let mut got = Vec::new();
        // One byte at a time: every prefix must parse as Incomplete or whole frames.
        for b in &wire {
            feed(&mut r, &[*b]);
            while let Next::Frame { tag: id, body } = r.next() {
                got.push((id, r.slice(body.clone()).to_vec()));
                r.consume(body.end);
            }
            assert_ne!(r.next(), Next::Oversized(0));
        }
        assert_eq!(
            got,
            vec![(5, b"abc".to_vec()), (6, vec![]), (7, b"xy".to_vec())]
        );
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn oversized_and_truncated() {
        let mut r = Receiver::new(16).frames;
        feed(&mut r, &encode_header(1, 17));
        assert_eq!(r.next(), Next::Oversized(17));
        r.clear();
        feed(&mut r, &encode_header(1, u32::MAX));
        assert_eq!(r.next(), Next::Oversized(u32::MAX));
        r.clear();
        // exactly max_body is fine
        feed(&mut r, &encode_header(2, 16));
        assert_eq!(r.next(), Next::Incomplete);
        feed(&mut r, &[9u8; 16]);
        assert!(matches!(r.next(), Next::Frame { tag: 2, .. }));
        // a truncated header stays Incomplete (the caller decides at EOF)
        r.clear();
        feed(&mut r, &encode_header(3, 1)[..7]);
        assert_eq!(r.next(), Next::Incomplete);
        assert_eq!(r.buffered(), 7);
    }

    #[test]
    fn compaction_keeps_room_for_a_whole_frame() {
        let max_body = 100_000; // larger than READ_CHUNK
        let mut r = Receiver::new(max_body).frames;
        // Fill almost all, consume most, leave a partial max-size frame at the back.
        let filler = r.space().len() - HEADER_LEN - 10;
        let mut first = encode_header(1, (filler - HEADER_LEN) as u32).to_vec();
        first.resize(filler, 0);
        first.extend_from_slice(&encode_header(2, max_body as u32));
        first.extend_from_slice(&[7u8; 10]);
        feed(&mut r, &first);
        let Next::Frame { tag: 1, body } = r.next() else {
            panic!("first frame")
        };
        r.consume(body.end);
        assert_eq!(r.next(), Next::Incomplete);
        let room = r.space().len();
        assert_eq!(room, (HEADER_LEN + max_body) - HEADER_LEN - 10);
        feed(&mut r, &vec![7u8; max_body - 10]);
        let Next::Frame { tag: 2, body } = r.next() else {
            panic!("second frame")
        };
        assert_eq!(body.len(), max_body);
    }
}
