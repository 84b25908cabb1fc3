//! What the server sees: the header every generated datagram carries, the service every
//! architecture runs in experiment 1 (`Probe`), and its lock-free accounting of each stream's
//! sequence numbers (sightings, duplicates, latency) and of the timer's expiries.

use crate::service::{Request, RequestKind, Service};
use lfrt::handlers::cpu_work;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;

/// Size of every generated datagram.
pub const DATAGRAM_BYTES: usize = 64;
/// Header: stream (u32 LE), reserved (u32), sequence (u64 LE), send time (u64 LE, ns).
pub(crate) const HEADER_BYTES: usize = 24;

/// DSCP EF (46) in the IPv4 TOS byte, the mark of the high stream in the one-port runs.
pub(crate) const EF_TOS: u8 = 46 << 2;

/// Per-sequence-number sightings (and latency) of one stream. Lock-free, preallocated.
pub(crate) struct SeqLog {
    pub(crate) hits: Box<[AtomicU32]>,
    pub(crate) latency_ns: Box<[AtomicU64]>,
    pub(crate) out_of_range: AtomicU64,
}

impl SeqLog {
    pub(crate) fn new(capacity: usize, with_latency: bool) -> SeqLog {
        SeqLog {
            hits: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
            latency_ns: (0..if with_latency { capacity } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            out_of_range: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, seq: u64, latency_ns: u64) {
        let Some(h) = self.hits.get(seq as usize) else {
            self.out_of_range.fetch_add(1, Relaxed);
            return;
        };
        if h.fetch_add(1, Relaxed) == 0 {
            if let Some(l) = self.latency_ns.get(seq as usize) {
                l.store(latency_ns, Relaxed);
            }
        }
    }

    /// (distinct sequence numbers seen, extra sightings).
    pub(crate) fn counts(&self) -> (u64, u64) {
        self.hits
            .iter()
            .map(|h| h.load(Relaxed) as u64)
            .fold((0, 0), |(n, d), h| {
                (n + (h > 0) as u64, d + h.saturating_sub(1))
            })
    }

    /// Latencies of the sequence numbers from `from` on that were seen.
    pub(crate) fn latencies(&self, from: u64) -> Vec<u64> {
        (from as usize..self.latency_ns.len())
            .filter(|&i| self.hits[i].load(Relaxed) > 0)
            .map(|i| self.latency_ns[i].load(Relaxed))
            .collect()
    }
}

pub(crate) struct TimerLog {
    pub(crate) first_ns: u64,
    pub(crate) interval_ns: u64,
    pub(crate) count: u64,
    pub(crate) log: SeqLog,
    pub(crate) coalesced: AtomicU64,
}

impl TimerLog {
    fn record(&self, due_ns: u64, expirations: u64, entry_ns: u64) {
        let k = (due_ns.saturating_sub(self.first_ns) + self.interval_ns / 2) / self.interval_ns;
        if k < self.count {
            self.log.record(k, entry_ns.saturating_sub(due_ns));
        }
        // Expiries k+1 .. k+expirations-1 were folded into this read.
        let folded = (k + expirations)
            .min(self.count)
            .saturating_sub((k + 1).min(self.count));
        self.coalesced.fetch_add(folded, Relaxed);
    }
}

pub(crate) struct Streams {
    pub(crate) timer: TimerLog,
    pub(crate) high: SeqLog,
    pub(crate) low: Vec<SeqLog>,
    pub(crate) malformed: AtomicU64,
    pub(crate) misrouted: AtomicU64,
}

/// The service every architecture runs in experiment 1.
#[derive(Clone)]
pub(crate) struct Probe {
    pub(crate) streams: Arc<Streams>,
    pub(crate) work_ns: u64,
    /// `bands`: source 1 is the high band's socket, every other source a low one.
    pub(crate) banded: bool,
}

impl Service for Probe {
    fn serve(&mut self, request: &Request<'_>, _reply: &mut dyn FnMut(&[u8])) {
        let entry = lfrt::os::now_ns();
        // A datagram on the wrong band's socket is counted, then served as any other.
        if self.banded && matches!(request.kind, RequestKind::Datagram { .. }) {
            if let Some(h) = Header::parse(request.payload) {
                if (h.stream == 0) != (request.source == 1) {
                    self.streams.misrouted.fetch_add(1, Relaxed);
                }
            }
        }
        match request.kind {
            RequestKind::Timer {
                expirations,
                due_ns,
            } => self.streams.timer.record(due_ns, expirations, entry),
            RequestKind::Datagram { .. } => match Header::parse(request.payload) {
                Some(h) if h.stream == 0 => self
                    .streams
                    .high
                    .record(h.seq, entry.saturating_sub(h.sent_ns)),
                Some(h) => match self.streams.low.get(h.stream as usize - 1) {
                    Some(log) => {
                        log.record(h.seq, 0);
                        cpu_work(self.work_ns);
                    }
                    None => {
                        self.streams.malformed.fetch_add(1, Relaxed);
                    }
                },
                None => {
                    self.streams.malformed.fetch_add(1, Relaxed);
                }
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) stream: u32,
    pub(crate) seq: u64,
    pub(crate) sent_ns: u64,
}

impl Header {
    pub(crate) fn write(&self, buf: &mut [u8; DATAGRAM_BYTES]) {
        buf[0..4].copy_from_slice(&self.stream.to_le_bytes());
        buf[4..8].fill(0);
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
    }

    pub(crate) fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        Some(Header {
            stream: u32::from_le_bytes(b[0..4].try_into().ok()?),
            seq: u64::from_le_bytes(b[8..16].try_into().ok()?),
            sent_ns: u64::from_le_bytes(b[16..24].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_log_counts_distinct_duplicates_and_range() {
        let log = SeqLog::new(4, true);
        log.record(0, 10);
        log.record(2, 30);
        log.record(2, 99);
        log.record(7, 1);
        assert_eq!(log.counts(), (2, 1));
        assert_eq!(log.out_of_range.load(Relaxed), 1);
        assert_eq!(log.latencies(0), vec![10, 30]);
        assert_eq!(log.latencies(1), vec![30]);
    }

    #[test]
    fn timer_log_maps_due_times_and_counts_folded_expiries() {
        let t = TimerLog {
            first_ns: 1_000,
            interval_ns: 100,
            count: 5,
            log: SeqLog::new(5, true),
            coalesced: AtomicU64::new(0),
        };
        t.record(1_000, 1, 1_010); // k = 0
        t.record(1_100, 3, 1_350); // k = 1, folds 2 and 3
        t.record(1_400, 4, 1_420); // k = 4, folds 5..7: out of the run
        assert_eq!(t.log.counts(), (3, 0));
        assert_eq!(t.coalesced.load(Relaxed), 2);
        assert_eq!(t.log.latencies(0), vec![10, 250, 20]);
    }

    #[test]
    fn header_round_trips() {
        let mut b = [0u8; DATAGRAM_BYTES];
        let h = Header {
            stream: 3,
            seq: 77,
            sent_ns: 123_456_789,
        };
        h.write(&mut b);
        assert_eq!(Header::parse(&b), Some(h));
        assert_eq!(Header::parse(&b[..10]), None);
    }
}
