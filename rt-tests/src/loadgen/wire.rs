//! The datagram format (see the module docs): the header, the padding pattern derived from it,
//! and the check that an echo came back intact; and `CLOCK_MONOTONIC`, the clock of the send
//! timestamps.

use nix::time::{clock_gettime, ClockId};

/// Length of the datagram header (sequence, timestamp, port index).
pub const HEADER_LEN: usize = 20;
pub(crate) const NS_PER_S: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` in nanoseconds (the clock used for datagram timestamps).
pub(crate) fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * NS_PER_S + ts.tv_nsec() as u64
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn padding_seed(seq: u64, ts_ns: u64, port_index: u32) -> u64 {
    // A chain of bijections: changing any one field changes the seed.
    let mut s = seq;
    let mut s = ts_ns ^ splitmix64(&mut s);
    let mut s = u64::from(port_index) ^ splitmix64(&mut s);
    splitmix64(&mut s)
}

/// Writes the header and the padding pattern into `buf` (its whole length).
pub(crate) fn encode(buf: &mut [u8], seq: u64, ts_ns: u64, port_index: u32) {
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&ts_ns.to_le_bytes());
    buf[16..20].copy_from_slice(&port_index.to_le_bytes());
    let mut state = padding_seed(seq, ts_ns, port_index);
    for chunk in buf[HEADER_LEN..].chunks_mut(8) {
        let word = splitmix64(&mut state).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// The header fields of a datagram of at least `HEADER_LEN` bytes.
pub(crate) fn header(buf: &[u8]) -> (u64, u64, u32) {
    let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    let idx = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    (u64_at(0), u64_at(8), idx)
}

/// Whether the padding of `buf` is the pattern `encode` writes for its header.
pub(crate) fn padding_ok(buf: &[u8]) -> bool {
    let (seq, ts, idx) = header(buf);
    let mut state = padding_seed(seq, ts, idx);
    buf[HEADER_LEN..]
        .chunks(8)
        .all(|chunk| splitmix64(&mut state).to_le_bytes()[..chunk.len()] == *chunk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::config::MIN_SIZE;

    #[test]
    fn payload_roundtrip_and_every_byte_flip_detected() {
        for size in [MIN_SIZE + 1, 21, 27, 64, 1500] {
            let mut buf = vec![0u8; size];
            encode(&mut buf, 12345, 987_654_321, 3);
            assert_eq!(header(&buf), (12345, 987_654_321, 3));
            assert!(padding_ok(&buf));
            for i in 0..size {
                let mut b = buf.clone();
                b[i] ^= 0x01;
                assert!(!padding_ok(&b), "flip at byte {i} of {size} undetected");
            }
        }
    }
}
