//! `stream::Framed` end to end: one runtime per fuzz process (a lane of policy `other`, never
//! real-time) serves a Framed listener on loopback; each input is a sequence of peer actions on
//! up to 3 connections (frames split at any points, raw bytes, oversized headers, half-closes,
//! resets), checked against the reference model of `rt-tests/tests/peers/mod.rs` (the same
//! driver the proptest state-machine test `peer_fuzz` runs in CI).
#![no_main]

#[path = "../../rt-tests/tests/peers/mod.rs"]
mod peers;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use peers::{StreamOp, Streams, CONNS, MAX_FRAME};
use std::sync::{Mutex, OnceLock};

static STREAMS: OnceLock<Mutex<Streams>> = OnceLock::new();

fn op(u: &mut Unstructured<'_>) -> Result<StreamOp> {
    let conn = usize::from(u.int_in_range(0..=CONNS as u8 - 1)?);
    Ok(match u.int_in_range(0..=10u8)? {
        0..=5 => {
            let len = usize::from(u.int_in_range(0..=MAX_FRAME as u8 + 8)?);
            let body = u.bytes(len.min(u.len()))?.to_vec();
            let n = usize::from(u.int_in_range(0..=3u8)?);
            let splits = (0..n)
                .map(|_| u.int_in_range(0..=63u8).map(usize::from))
                .collect::<Result<_>>()?;
            StreamOp::Frame { conn, body, splits }
        }
        6 | 7 => {
            let len = usize::from(u.int_in_range(0..=11u8)?);
            StreamOp::Raw {
                conn,
                bytes: u.bytes(len.min(u.len()))?.to_vec(),
            }
        }
        8 => StreamOp::Oversize {
            conn,
            extra: u.arbitrary()?,
        },
        9 => StreamOp::HalfClose { conn },
        _ => StreamOp::Reset { conn },
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while ops.len() < 32 {
        match op(&mut u) {
            Ok(o) => ops.push(o),
            Err(_) => break,
        }
    }
    let mut s = STREAMS
        .get_or_init(|| Mutex::new(Streams::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    s.begin();
    for o in &ops {
        s.apply(o);
    }
    s.finish();
});
