//! The bound pool's frame reader (`src/bound/frame.rs`) against a reference model: any byte
//! stream, split into reads at any points, with any `max_body`. Properties: no panic (debug
//! assertions on, among them "receive buffer full without a whole frame"); the frames
//! delivered, the oversized header that stops the reading and the bytes left buffered are
//! exactly the model's.
//!
//! Input: byte 0 picks `max_body`, byte 1 the number of cuts `k` (0..=15), the next `2k` bytes
//! the cut positions (u16 LE, modulo the stream length), the rest is the stream.
#![no_main]

use lfrt::bound::fuzzing::{read, Outcome};
use lfrt::bound::HEADER_LEN;
use libfuzzer_sys::fuzz_target;

/// The wire format, read in one piece: `id u64 LE, len u32 LE, body`.
fn model(max_body: usize, stream: &[u8]) -> Outcome {
    let mut frames = Vec::new();
    let mut rest = stream;
    loop {
        if rest.len() < HEADER_LEN {
            return Outcome {
                frames,
                oversized: None,
                buffered: rest.len(),
            };
        }
        let id = u64::from_le_bytes(rest[..8].try_into().unwrap());
        let len = u32::from_le_bytes(rest[8..12].try_into().unwrap());
        if len as usize > max_body {
            // What is buffered when the header is seen depends on the reads: not compared.
            return Outcome {
                frames,
                oversized: Some(len),
                buffered: usize::MAX,
            };
        }
        let end = HEADER_LEN + len as usize;
        if rest.len() < end {
            return Outcome {
                frames,
                oversized: None,
                buffered: rest.len(),
            };
        }
        frames.push((id, rest[HEADER_LEN..end].to_vec()));
        rest = &rest[end..];
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max_body = match data[0] % 5 {
        0 => 0,
        1 => usize::from(data[0] >> 3),
        2 => 64,
        3 => 4096,
        // Above the 64 KiB read chunk: the buffer is sized by max_body.
        _ => 70_000,
    };
    let k = usize::from(data[1] % 16);
    let Some(cuts) = data.get(2..2 + 2 * k) else {
        return;
    };
    let stream = &data[2 + 2 * k..];
    let mut at: Vec<usize> = cuts
        .chunks(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    at.extend([0, stream.len()]);
    at.sort_unstable();
    at.dedup();
    let chunks: Vec<&[u8]> = at.windows(2).map(|w| &stream[w[0]..w[1]]).collect();

    let got = read(max_body, &chunks);
    let want = model(max_body, stream);
    assert_eq!(
        got.frames, want.frames,
        "frames (max_body {max_body}, cuts {at:?})"
    );
    assert_eq!(got.oversized, want.oversized, "oversized header");
    if want.oversized.is_none() {
        assert_eq!(got.buffered, want.buffered, "bytes left buffered");
    }
});
