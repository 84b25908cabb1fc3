//! The band classifier (`band::bind`: SO_REUSEPORT sockets steered by a classic BPF program the
//! kernel runs) against its model: any plan (DSCP or a payload byte at any offset, any map,
//! default and band count, invalid ones too) and datagrams of any TOS and payload (empty,
//! shorter than the classifying byte). Each datagram must land whole in the model's band;
//! invalid plans must be refused and valid ones bound. See `rt-tests/tests/peers/mod.rs`.
#![no_main]

#[path = "../../rt-tests/tests/peers/mod.rs"]
mod peers;

use lfrt::band::{Bands, Classify};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

/// A plan and the datagrams sent to it: `(tos, payload)`.
type Input = (Bands, Vec<(u8, Vec<u8>)>);

fn input(u: &mut Unstructured<'_>) -> Result<Input> {
    let classify = match u.int_in_range(0..=2u8)? {
        0 => Classify::Dscp,
        1 => Classify::PayloadByte(u16::from(u.int_in_range(0..=15u8)?)),
        _ => Classify::PayloadByte(u.arbitrary()?),
    };
    let count = usize::from(u.int_in_range(0..=5u8)?);
    let entries = usize::from(u.int_in_range(0..=8u8)?);
    let map = (0..entries)
        .map(|_| Ok((u.arbitrary()?, usize::from(u.int_in_range(0..=5u8)?))))
        .collect::<Result<_>>()?;
    let default = usize::from(u.int_in_range(0..=5u8)?);
    let n = usize::from(u.int_in_range(1..=8u8)?);
    let grams = (0..n)
        .map(|_| {
            let tos = u.arbitrary()?;
            let len = usize::from(u.int_in_range(0..=24u8)?);
            Ok((tos, u.bytes(len.min(u.len()))?.to_vec()))
        })
        .collect::<Result<_>>()?;
    Ok((
        Bands {
            classify,
            map,
            default,
            count,
        },
        grams,
    ))
}

fuzz_target!(|data: &[u8]| {
    if let Ok((plan, grams)) = input(&mut Unstructured::new(data)) {
        peers::bands(&plan, &grams);
    }
});
