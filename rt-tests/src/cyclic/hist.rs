//! A latency histogram that the thread handling a timer's expiry updates in place: fixed
//! buckets, allocated and touched before the run, one relaxed `fetch_add` per value, no lock
//! and no ring in between (cyclictest's `-h` arrays, with hdrhistogram's bucket layout).
//!
//! The buckets are exactly those of [`lfrt::telemetry::new_histogram`] (1 ns to
//! [`HIST_MAX_NS`], 3 significant digits: exact below 2048 ns, within ±0.05% above), so after
//! the run [`AtomicHistogram::to_histogram`] hands the report an `hdrhistogram` equal to the one
//! that recording every value into `new_histogram()` would have given. A unit test checks the
//! layout against hdrhistogram's own.

use hdrhistogram::Histogram;
use lfrt::telemetry::{new_histogram, HIST_MAX_NS};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Sub-buckets per bucket for 3 significant digits: the smallest power of two ≥ 2 × 10³.
const SUB_BUCKET_COUNT: u64 = 2048;
/// log2 of half of it: each bucket after the first holds its upper half only.
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF_COUNT: u64 = SUB_BUCKET_COUNT / 2;
/// `leading_zeros` of the largest value of bucket 0 (2047): bucket = this − leading zeros.
const LEADING_ZERO_BASE: u32 = 64 - 11;

/// Buckets needed to reach [`HIST_MAX_NS`] (hdrhistogram's `buckets_to_cover`).
const fn buckets() -> u64 {
    let mut smallest_untrackable = SUB_BUCKET_COUNT;
    let mut n = 1;
    while smallest_untrackable <= HIST_MAX_NS {
        smallest_untrackable <<= 1;
        n += 1;
    }
    n
}

/// Counters per histogram (25 600 for 10 s: 200 KiB).
pub(crate) const COUNTS: usize = ((buckets() + 1) * SUB_BUCKET_HALF_COUNT) as usize;

/// The counter of `value` (0 counts as 1). As hdrhistogram's `saturating_record`, a value
/// beyond the last counter (about 17 s) is counted as [`HIST_MAX_NS`].
fn index_of(value: u64) -> usize {
    let v = value.max(1);
    let bucket = LEADING_ZERO_BASE - (v | (SUB_BUCKET_COUNT - 1)).leading_zeros();
    let sub = v >> bucket;
    let i = ((u64::from(bucket) + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub - SUB_BUCKET_HALF_COUNT;
    if i < COUNTS as u64 {
        i as usize
    } else {
        index_of(HIST_MAX_NS)
    }
}

/// The lowest value that counter `index` holds.
fn lowest_of(index: usize) -> u64 {
    let index = index as u64;
    let bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE) as i64 - 1;
    let sub = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    if bucket < 0 {
        sub - SUB_BUCKET_HALF_COUNT
    } else {
        sub << bucket
    }
}

/// The value every value of `value`'s counter is reported as: the counter's midpoint, as
/// hdrhistogram's `median_equivalent` (and so as every figure taken from the report's
/// histograms).
pub(crate) fn median_equivalent(value: u64) -> u64 {
    let i = index_of(value);
    let lo = lowest_of(i);
    let width = lowest_of(i + 1) - lo;
    lo + width / 2
}

/// Fixed-bucket counters that any number of threads may update at once.
///
/// # Real-time safety
/// [`record`](Self::record) is one relaxed `fetch_add` on a counter that [`new`](Self::new)
/// has already written (so its page is resident): no allocation, no page fault, no lock.
#[derive(Debug)]
pub(crate) struct AtomicHistogram {
    counts: Box<[AtomicU64]>,
}

impl AtomicHistogram {
    /// All counters zero, each written once now so that its page is mapped before any RT
    /// thread touches it.
    pub(crate) fn new() -> AtomicHistogram {
        let counts: Box<[AtomicU64]> = (0..COUNTS).map(|_| AtomicU64::new(0)).collect();
        // The allocation may come straight from mmap, whose pages are mapped on first write:
        // write them here (atomic stores are not elided), not in the first RT dispatch.
        for c in counts.iter() {
            c.store(0, Relaxed);
        }
        AtomicHistogram { counts }
    }

    /// Counts one value (ns; 0 counts as 1, beyond the last counter as [`HIST_MAX_NS`]).
    #[inline]
    pub(crate) fn record(&self, value: u64) {
        self.counts[index_of(value)].fetch_add(1, Relaxed);
    }

    /// The counts so far as an hdrhistogram with [`new_histogram`]'s bounds. Exact once no
    /// thread records any more (after the runtime's shutdown); during a run, a snapshot.
    pub(crate) fn to_histogram(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for (i, c) in self.counts.iter().enumerate() {
            let n = c.load(Relaxed);
            if n > 0 {
                // The lowest value of a counter within range is within range.
                h.record_n(lowest_of(i), n)
                    .expect("a counter's lowest value is within the histogram's bounds");
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<u64> {
        let mut v: Vec<u64> = (0..5000).collect();
        let mut x = 1u64;
        while x < 3 * HIST_MAX_NS {
            v.extend([x - 1, x, x + 1, x * 3 / 2, x * 7 / 5]);
            x *= 2;
        }
        v.extend([
            98_990,
            99_000,
            250_000,
            HIST_MAX_NS,
            HIST_MAX_NS + 1,
            u64::MAX,
        ]);
        v
    }

    /// Same layout as hdrhistogram: every value lands in the counter hdrhistogram puts it in,
    /// so the converted histogram equals one recorded directly, value for value.
    #[test]
    fn layout_is_hdrhistograms() {
        let mut reference = new_histogram();
        assert_eq!(COUNTS, reference.distinct_values());
        let (a, mut direct) = (AtomicHistogram::new(), new_histogram());
        for v in values() {
            a.record(v);
            direct.saturating_record(v.max(1));
            // What saturating_record counts the value as.
            let clamped = if reference.record(v.max(1)).is_ok() {
                v.max(1)
            } else {
                HIST_MAX_NS
            };
            assert_eq!(
                lowest_of(index_of(v)),
                reference.lowest_equivalent(clamped),
                "{v}"
            );
            assert_eq!(
                median_equivalent(v),
                reference.median_equivalent(clamped),
                "{v}"
            );
        }
        let converted = a.to_histogram();
        assert_eq!(converted.len(), direct.len());
        let pairs = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
            h.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect()
        };
        // Compared as a whole (not assert_eq!: thousands of pairs).
        assert!(pairs(&converted) == pairs(&direct), "histograms differ");
        assert_eq!(converted.min(), direct.min());
        assert_eq!(converted.max(), direct.max());
        assert_eq!(converted.mean(), direct.mean());
    }

    /// Several threads recording into one histogram at once lose nothing.
    #[test]
    fn concurrent_records_are_all_counted() {
        let h = AtomicHistogram::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        h.record(1000 + (i * 7 + t) % 3000);
                    }
                });
            }
        });
        assert_eq!(h.to_histogram().len(), 40_000);
    }
}
