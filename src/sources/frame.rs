//! Length-prefixed frames off a byte stream: the one frame reader of the runtime, used by
//! [`stream::Framed`](crate::sources::stream::Framed) (a 4-byte big-endian length) and by the
//! bound pool's connection (`bound/frame.rs`: a request id and a little-endian length). Each
//! wire format is a [`Format`]: how long its header is and how to decode it; the buffering,
//! the bound on a body and the compaction are written once, here.
//!
//! Invariant: once every complete frame was consumed, the buffer holds less than one frame,
//! i.e. fewer than `F::HEADER + max_body` bytes, and its capacity is at least that, so after
//! compaction ([`Reader::space`]) there is always room to read more.

use std::marker::PhantomData;
use std::ops::Range;

/// A wire format of length-prefixed frames: a fixed-size header that carries the body's
/// length, and perhaps a tag (the bound pool's request id).
pub(crate) trait Format {
    /// Bytes of a header.
    const HEADER: usize;
    /// What a header carries besides the length (`()` if nothing).
    type Tag: Copy + std::fmt::Debug + PartialEq;
    /// The tag and the body length of `header` (`HEADER` bytes).
    fn decode(header: &[u8]) -> (Self::Tag, u32);
}

/// What the buffer holds next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next<T> {
    /// A whole frame: its tag and where its body lies in the buffer ([`Reader::slice`]).
    Frame { tag: T, body: Range<usize> },
    /// Less than a whole frame (possibly nothing).
    Incomplete,
    /// The next header announces a body longer than `max_body`: its length.
    Oversized(u32),
}

/// A receive buffer of one connection: bytes read and not yet consumed as frames.
pub(crate) struct Reader<F> {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    max_body: usize,
    format: PhantomData<F>,
}

impl<F: Format> Reader<F> {
    /// A reader of frames whose bodies hold at most `max_body` bytes, buffering `capacity`
    /// bytes, at least one largest frame (`F::HEADER + max_body`; more lets one read take many
    /// small frames). Allocates and pre-faults the buffer.
    pub(crate) fn new(max_body: usize, capacity: usize) -> Reader<F> {
        let mut buf = vec![0u8; capacity.max(F::HEADER + max_body)].into_boxed_slice();
        crate::sys::mem::prefault(&mut buf);
        Reader {
            buf,
            start: 0,
            end: 0,
            max_body,
            format: PhantomData,
        }
    }

    /// Bytes buffered and not yet consumed.
    pub(crate) fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Parses the next frame without consuming it.
    pub(crate) fn next(&self) -> Next<F::Tag> {
        if self.buffered() < F::HEADER {
            return Next::Incomplete;
        }
        let (tag, len) = F::decode(&self.buf[self.start..self.start + F::HEADER]);
        // u32 -> usize is lossless on the 64-bit targets lfrt supports; compare in u64 anyway.
        if u64::from(len) > self.max_body as u64 {
            return Next::Oversized(len);
        }
        let body_start = self.start + F::HEADER;
        let body_end = body_start + len as usize;
        if body_end > self.end {
            return Next::Incomplete;
        }
        Next::Frame {
            tag,
            body: body_start..body_end,
        }
    }

    /// The bytes of a body range returned by [`next`](Self::next).
    pub(crate) fn slice(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// Consumes everything up to `end` (a frame's `body.end`).
    pub(crate) fn consume(&mut self, end: usize) {
        debug_assert!(self.start <= end && end <= self.end);
        self.start = end;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Free space to read into, after moving the unconsumed bytes to the front. Not empty
    /// while the buffer holds less than a whole frame (module invariant).
    pub(crate) fn space(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        debug_assert!(
            self.end < self.buf.len(),
            "receive buffer full without a whole frame"
        );
        &mut self.buf[self.end..]
    }

    /// Records `n` bytes read into [`space`](Self::space).
    pub(crate) fn commit(&mut self, n: usize) {
        debug_assert!(self.end + n <= self.buf.len());
        self.end += n;
    }

    /// Drops everything buffered.
    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

impl<F> std::fmt::Debug for Reader<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("buffered", &(self.end - self.start))
            .field("capacity", &self.buf.len())
            .field("max_body", &self.max_body)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-byte big-endian length and no tag.
    struct Short;
    impl Format for Short {
        const HEADER: usize = 2;
        type Tag = ();
        fn decode(h: &[u8]) -> ((), u32) {
            ((), u32::from(u16::from_be_bytes([h[0], h[1]])))
        }
    }

    fn feed(r: &mut Reader<Short>, bytes: &[u8]) {
        let s = r.space();
        s[..bytes.len()].copy_from_slice(bytes);
        r.commit(bytes.len());
    }

    #[test]
    fn frames_of_any_format_arrive_in_pieces_and_oversized_headers_stop() {
        let mut r = Reader::<Short>::new(4, 0);
        let wire = [0, 3, b'a', b'b', b'c', 0, 0, 0, 4, 1, 2, 3, 4, 0, 5];
        let mut got = Vec::new();
        for b in &wire {
            feed(&mut r, &[*b]);
            while let Next::Frame { body, .. } = r.next() {
                got.push(r.slice(body.clone()).to_vec());
                r.consume(body.end);
            }
        }
        assert_eq!(got, vec![b"abc".to_vec(), vec![], vec![1, 2, 3, 4]]);
        assert_eq!(r.next(), Next::Oversized(5));
        assert_eq!(r.buffered(), 2);
        r.clear();
        assert_eq!(r.next(), Next::Incomplete);
        assert_eq!(r.space().len(), 2 + 4, "the capacity is one largest frame");
    }
}
