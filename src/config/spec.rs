//! What the engine is handed: a [`LaneConfig`] turned into the engine's own plain
//! parameters ([`LaneSpec`]). The engine never reads the configuration; this is the one place
//! a document's policy, priorities, deadline and borrowing become per-thread scheduling.

use super::{LaneConfig, Policy};
use crate::engine::borrow::BorrowSpec;
use crate::engine::lane::LaneSpec;
use crate::sys::sched::Sched;

impl LaneConfig {
    /// The engine's parameters of this (validated) lane.
    pub(crate) fn engine_spec(&self) -> LaneSpec {
        LaneSpec {
            name: self.name.clone(),
            priority: self.priority,
            threads: (0..self.threads)
                .map(|i| {
                    let p = self.thread_priority(i);
                    (self.sched_at(p), p)
                })
                .collect(),
            promotion: self.promotion,
            promote_after_ns: self.promote_after_us.saturating_mul(1000),
            max_handles: self.max_handles,
            buffer_bytes: self.buffer_bytes,
            stack_bytes: self.stack_bytes,
            cpus: self.cpus.clone(),
            budget_us: self.budget_us,
            on_overrun: self.on_overrun,
            borrow: (!self.borrow_from.is_empty()).then(|| BorrowSpec {
                from: self.borrow_from.clone(),
                // Validation admits only fifo and rr borrowers.
                sched: match self.policy {
                    Policy::Rr => Sched::Rr(self.priority),
                    _ => Sched::Fifo(self.priority),
                },
                max: self.max_borrowed.unwrap_or(1).min(u32::MAX as usize) as u32,
            }),
        }
    }

    /// The lane's policy at priority `p`.
    fn sched_at(&self, p: u8) -> Sched {
        match self.policy {
            Policy::Fifo => Sched::Fifo(p),
            Policy::Rr => Sched::Rr(p),
            Policy::Other => Sched::Other,
            Policy::Deadline => {
                let d = self.deadline.unwrap_or_default();
                Sched::Deadline {
                    runtime_ns: d.runtime_us * 1000,
                    deadline_ns: d.deadline_us * 1000,
                    period_ns: d.period_us * 1000,
                }
            }
        }
    }
}
