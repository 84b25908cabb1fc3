//! `handlers::UdpEcho` end to end: one runtime per fuzz process (a lane of policy `other`, slots
//! of `peers::SLOT` bytes) echoes on loopback; each input is a sequence of datagrams of any
//! TOS and length (empty, short, exactly a slot, longer, above the largest UDP payload),
//! checked against the model of `rt-tests/tests/peers/mod.rs`: echoed verbatim if it fits a
//! slot, else unanswered and counted once in `datagrams_truncated`.
#![no_main]

#[path = "../../rt-tests/tests/peers/mod.rs"]
mod peers;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use peers::{Datagrams, SLOT};
use std::sync::{Mutex, OnceLock};

static DATAGRAMS: OnceLock<Mutex<Datagrams>> = OnceLock::new();

fn datagram(u: &mut Unstructured<'_>) -> Result<(u8, Vec<u8>)> {
    let tos = u.arbitrary()?;
    let len = match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 => SLOT,
        2 => SLOT + 1,
        3 => 65_507,
        4 => 65_508,
        5 => usize::from(u.arbitrary::<u16>()?),
        _ => usize::from(u.int_in_range(0..=64u8)?),
    };
    // The payload's first bytes come from the input, the rest is a pattern.
    let head = u.bytes(len.min(u.len()).min(64))?;
    let mut payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    payload[..head.len()].copy_from_slice(head);
    Ok((tos, payload))
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let mut grams = Vec::new();
    while grams.len() < 16 {
        match datagram(&mut u) {
            Ok(g) => grams.push(g),
            Err(_) => break,
        }
    }
    let mut d = DATAGRAMS
        .get_or_init(|| Mutex::new(Datagrams::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    d.begin();
    d.exchange(&grams);
});
