//! Deadline lanes against the kernel's rules (`sched_setattr`'s bounds and admission).

use super::super::*;
use super::*;
use crate::sys::sched;

/// What the kernel accepts of SCHED_DEADLINE parameters here, as validation reads it.
#[derive(Debug, Clone)]
pub(crate) struct DeadlineKernel {
    /// `sched_deadline_period_{min,max}_us` (/proc/sys/kernel).
    pub(crate) period_us: (u64, u64),
    /// The calling thread's CPU affinity (pool threads inherit it).
    pub(crate) affinity: Vec<usize>,
}

impl DeadlineKernel {
    /// The smallest runtime `sched_setattr` accepts (`1 << DL_SCALE` ns in kernel/sched).
    const MIN_RUNTIME_NS: u64 = 1024;

    pub(crate) fn probe() -> DeadlineKernel {
        let read = |which: &str, default: u64| {
            std::fs::read_to_string(format!("/proc/sys/kernel/sched_deadline_period_{which}_us"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(default)
        };
        DeadlineKernel {
            // The kernel's defaults: 100 µs and 2^22 µs (about 4.2 s).
            period_us: (read("min", 100), read("max", 1 << 22)),
            affinity: sched::available_cpus(),
        }
    }
}

impl RuntimeConfig {
    /// Deadline lanes: parameters present exactly for `policy = "deadline"`, `1 ≤ runtime ≤
    /// deadline ≤ period`, the kernel's own bounds (`kernel`: a runtime of at least 1024 ns, a
    /// period within `sched_deadline_period_{min,max}_us`; `sched_setattr` refuses anything
    /// else with EINVAL), no CPU restriction and no narrowed process affinity (the kernel admits
    /// a deadline thread only with an affinity spanning its root domain, EPERM otherwise), no
    /// demotion (the kernel throttles instead), and the total bandwidth (threads × runtime /
    /// period, over every deadline lane) within the RT limit `bandwidth` × CPUs, which the
    /// kernel's admission control enforces with `EBUSY`.
    pub(crate) fn check_deadlines(
        &self,
        cpus: &[usize],
        bandwidth: Option<f64>,
        kernel: &DeadlineKernel,
    ) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Lane(g),
            field,
            message,
        };
        let mut total = 0.0;
        for (gi, g) in self.lanes.iter().enumerate() {
            let d = match (g.policy, g.deadline) {
                (Policy::Deadline, Some(d)) => d,
                (Policy::Deadline, None) => {
                    return Err(bad(
                        gi,
                        "deadline",
                        "missing: policy \"deadline\" needs \
                        deadline = { runtime_us = …, deadline_us = …, period_us = … }"
                            .into(),
                    ))
                }
                (_, Some(_)) => {
                    return Err(bad(
                        gi,
                        "deadline",
                        "only a policy = \"deadline\" lane takes \
                        deadline parameters"
                            .into(),
                    ))
                }
                (_, None) => continue,
            };
            if d.runtime_us == 0 || d.runtime_us > d.deadline_us || d.deadline_us > d.period_us {
                return Err(bad(
                    gi,
                    "deadline",
                    format!(
                    "runtime_us {} ≤ deadline_us {} ≤ period_us {} does not hold (and runtime_us \
                     must be at least 1)", d.runtime_us, d.deadline_us, d.period_us),
                ));
            }
            if d.runtime_us.saturating_mul(1000) < DeadlineKernel::MIN_RUNTIME_NS {
                return Err(bad(
                    gi,
                    "deadline",
                    format!(
                        "runtime_us {} is below the kernel's minimum runtime of {} ns: \
                         sched_setattr refuses it; give at least runtime_us = 2",
                        d.runtime_us,
                        DeadlineKernel::MIN_RUNTIME_NS
                    ),
                ));
            }
            let (min, max) = kernel.period_us;
            if d.period_us < min || d.period_us > max {
                let (which, bound) = if d.period_us < min {
                    ("min", min)
                } else {
                    ("max", max)
                };
                return Err(bad(
                    gi,
                    "deadline",
                    format!(
                        "period_us {} is outside the kernel's range {min}..={max} \
                         (/proc/sys/kernel/sched_deadline_period_{which}_us {bound}): \
                         sched_setattr refuses it",
                        d.period_us
                    ),
                ));
            }
            if cpus.iter().any(|c| !kernel.affinity.contains(c)) {
                return Err(bad(
                    gi,
                    "policy",
                    format!(
                        "this process's CPU affinity is narrowed to {:?} of the CPUs {cpus:?} \
                         (as under taskset): the kernel admits a SCHED_DEADLINE thread only \
                         with an affinity spanning its root domain, and refuses it otherwise \
                         (EPERM) whatever the privilege; run without the narrowed affinity",
                        kernel.affinity
                    ),
                ));
            }
            if let Some(own) = &g.cpus {
                if cpus.iter().any(|c| !own.contains(c)) {
                    return Err(bad(
                        gi,
                        "cpus",
                        format!(
                            "{own:?} does not span every CPU {cpus:?}: the kernel admits a \
                         SCHED_DEADLINE thread only with an affinity covering its root domain; \
                         leave `cpus` out"
                        ),
                    ));
                }
            }
            if g.on_overrun == OnOverrun::Demote {
                return Err(bad(
                    gi,
                    "on_overrun",
                    "\"demote\" does not apply to a deadline \
                    lane: the kernel throttles a thread that overruns its runtime"
                        .into(),
                ));
            }
            total += g.threads as f64 * d.runtime_us as f64 / d.period_us as f64;
            if let Some(bw) = bandwidth {
                let limit = bw * cpus.len().max(1) as f64;
                if total > limit {
                    return Err(bad(
                        gi,
                        "deadline",
                        format!(
                        "the deadline lanes reserve {total:.2} CPUs (threads × runtime / period), \
                         more than the {limit:.2} the kernel admits (sched_rt_runtime_us / \
                         sched_rt_period_us × {} CPUs)", cpus.len()),
                    ));
                }
            }
        }
        Ok(())
    }
}
