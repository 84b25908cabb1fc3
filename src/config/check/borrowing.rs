//! Lane borrowing: who may lend to whom, how deep, and with what privilege.

use super::super::*;
use super::*;
use crate::engine::follower_queue::Promotion;
use crate::sys::sched;

/// The longest borrowing chain, in lanes. The kernel nests at most 5 epoll instances in one
/// another (`EP_MAX_NESTS`: 4 levels below the outermost; `epoll_ctl` refuses a sixth with
/// ELOOP, which `epoll_nesting_is_the_kernels` checks on the running kernel). A chain of lanes
/// is a chain of nested epoll sets, and one level more is kept for a gate: the private epoll
/// set of a `tcp-echo` or [`Framed`](crate::sources::stream::Framed) listener, and of each
/// `Framed` connection, is a member of its lane's set. A gate on the lane at the top of the
/// chain (its innermost set) makes the chain's sets one deeper; `check` cannot see a listener
/// registered in code, so every chain keeps that level.
pub(crate) const MAX_EPOLL_CHAIN: usize = 4;

impl RuntimeConfig {
    /// Lane borrowing (`borrow_from`, `max_borrowed`; `borrow.rs`): a real-time lane borrows
    /// from existing real-time lanes of lower priority, not itself, each named once, and at most
    /// as many threads as they have together. Deadline lanes neither borrow nor lend: a
    /// reservation is admitted by the kernel per thread (`EBUSY`), it cannot be taken on and
    /// handed back per event. A concurrent borrower has no leader whose absence says "all busy".
    pub(crate) fn check_borrowing(&self) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Lane(g),
            field,
            message,
        };
        for (gi, g) in self.lanes.iter().enumerate() {
            if g.borrow_from.is_empty() {
                if g.max_borrowed.is_some() {
                    return Err(bad(
                        gi,
                        "max_borrowed",
                        "without `borrow_from` there is nothing to borrow: add \
                         borrow_from = [\"<lower lane>\"] or remove it"
                            .into(),
                    ));
                }
                continue;
            }
            match (g.policy, g.promotion) {
                (Policy::Deadline, _) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a deadline lane cannot borrow: a lent thread would have to take on its \
                         SCHED_DEADLINE reservation for one event, and the kernel admits \
                         reservations per thread (sched_setattr may fail with EBUSY)"
                            .into(),
                    ))
                }
                (Policy::Other, _) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a policy \"other\" lane has no priority to lend at: only fifo and rr \
                         lanes borrow"
                            .into(),
                    ))
                }
                (_, Promotion::Concurrent) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a promotion = \"concurrent\" lane has no leader whose absence shows \
                         that all its threads are busy: use priority, lifo or fifo promotion"
                            .into(),
                    ))
                }
                _ => {}
            }
            let mut lent = 0usize;
            for (k, name) in g.borrow_from.iter().enumerate() {
                if g.borrow_from[..k].contains(name) {
                    return Err(bad(gi, "borrow_from", format!("`{name}` is named twice")));
                }
                if *name == g.name {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!("`{name}` is this lane: a lane cannot borrow from itself"),
                    ));
                }
                let Some(l) = self.lanes.iter().find(|l| l.name == *name) else {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!("`{name}` is not the name of a [[lane]]"),
                    ));
                };
                if !matches!(l.policy, Policy::Fifo | Policy::Rr) {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` is a policy {:?} lane: only fifo and rr lanes lend (a \
                             deadline thread cannot leave its reservation for one event)",
                            l.policy
                        ),
                    ));
                }
                if l.bound.is_some() || g.bound.is_some() {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` or this lane is a bound lane: its threads serve a bound \
                             pool, which neither lends threads nor borrows them"
                        ),
                    ));
                }
                if l.buffer_bytes < g.buffer_bytes || l.stack_bytes < g.stack_bytes {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` has buffer_bytes {} and stack_bytes {}, less than this \
                             lane's {} and {}: a lent thread runs this lane's handlers with its \
                             own buffers and stack, so the lender needs at least as much",
                            l.buffer_bytes, l.stack_bytes, g.buffer_bytes, g.stack_bytes
                        ),
                    ));
                }
                if l.priority >= g.priority {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` (priority {}) is not below this lane (priority {}): a lane \
                             borrows only from lower lanes",
                            l.priority, g.priority
                        ),
                    ));
                }
                lent += l.threads;
            }
            let max = g.max_borrowed.unwrap_or(1);
            if max == 0 || max > lent {
                return Err(bad(
                    gi,
                    "max_borrowed",
                    format!(
                        "{max}: must be 1..={lent} (the threads of the borrow_from lanes together)"
                    ),
                ));
            }
        }
        // Each borrower's epoll instance is nested in its lenders': a chain of lanes is a chain
        // of nested epoll instances, which the kernel refuses (epoll_ctl ELOOP) deeper than
        // MAX_EPOLL_CHAIN and a gate. Lanes borrow only from lower ones, so the chains end.
        fn chain<'a>(c: &'a RuntimeConfig, g: &'a LaneConfig) -> Vec<&'a str> {
            let longest = g
                .borrow_from
                .iter()
                .filter_map(|n| c.lanes.iter().find(|l| l.name == *n))
                .map(|l| chain(c, l))
                .max_by_key(Vec::len)
                .unwrap_or_default();
            std::iter::once(g.name.as_str()).chain(longest).collect()
        }
        for (gi, g) in self.lanes.iter().enumerate() {
            let lanes = chain(self, g);
            if lanes.len() > MAX_EPOLL_CHAIN {
                return Err(bad(
                    gi,
                    "borrow_from",
                    format!(
                        "the borrowing chain {} is {} lanes deep: each borrower's epoll instance \
                         is nested in its lenders', a listener's gate (tcp-echo, Framed) is one \
                         more inside its lane's, and the kernel nests epoll instances at most {} \
                         deep (EP_MAX_NESTS; epoll_ctl fails with ELOOP), so a chain is at most \
                         {MAX_EPOLL_CHAIN} lanes; borrow from fewer levels",
                        lanes.join(" → "),
                        lanes.len(),
                        MAX_EPOLL_CHAIN + 1
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A lender that gets its real-time priority must also be allowed its borrowers': a lent
    /// thread raises itself to the borrower's priority for every lent event, and a raise the
    /// kernel refuses (`EPERM`: no CAP_SYS_NICE, `RLIMIT_RTPRIO` below the borrower's priority)
    /// would fail on every one, leaving the borrower's handler at the lender's priority. (A
    /// lender refused real time altogether runs time-shared and lends as it is.)
    pub(crate) fn check_lender_privilege(&self, p: sched::RtPrivilege) -> Result<(), Invalid> {
        for (gi, g) in self.lanes.iter().enumerate() {
            if g.borrow_from.is_empty() || p.allows(g.priority) {
                continue;
            }
            for name in &g.borrow_from {
                let Some(l) = self.lanes.iter().find(|l| l.name == *name) else {
                    continue; // check_borrowing names it
                };
                if let Some(lp) = (0..l.threads)
                    .map(|i| l.thread_priority(i))
                    .find(|&lp| p.allows(lp))
                {
                    return Err(Invalid {
                        section: Section::Lane(gi),
                        field: "borrow_from",
                        message: format!(
                            "`{name}` runs at real-time priority {lp} here but cannot be raised \
                             to this lane's priority {}: the kernel refuses it (CAP_SYS_NICE {}, \
                             RLIMIT_RTPRIO {}); grant CAP_SYS_NICE, raise RLIMIT_RTPRIO to {}, \
                             or stop borrowing",
                            g.priority,
                            if p.cap_sys_nice { "yes" } else { "no" },
                            p.rlimit_rtprio,
                            g.priority
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
