//! The driver: every (architecture, N) run of experiment 1, then experiment 2 for both mutex
//! kinds, one after another on a controller thread, with a progress line per finished run.

use super::lock::lock_experiment;
use super::plan::Plan;
use super::queueing::run_once_counting;
use super::results::{PoolCounters, Report};
use super::BoxError;

/// Runs both experiments as `plan` says, from a controller thread (the caller's own affinity
/// is left alone). `progress` gets one line per finished run.
///
/// # Errors
/// The first run that failed to set up.
pub fn measure(plan: &Plan, mut progress: impl FnMut(&str) + Send) -> Result<Report, BoxError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("inv-control".into())
            .spawn_scoped(s, || {
                let mut report = Report {
                    experiments: Vec::new(),
                    lock: Vec::new(),
                    pool_allocations: None,
                    pool_minor_faults: None,
                };
                let mut pool = PoolCounters::default();
                for &arch in &plan.architectures {
                    for &n in &plan.n_low {
                        let r = run_once_counting(plan, arch, n, &mut pool)?;
                        report.pool_allocations = pool.allocations;
                        report.pool_minor_faults = pool.minor_faults;
                        progress(&format!(
                            "{:<11} n_low={:<2} high p99={:.1} us lost={} low={:.0}/s",
                            arch.name(),
                            n,
                            r.high.p99_us,
                            r.lost,
                            r.low_throughput
                        ));
                        report.experiments.push(r);
                    }
                }
                if plan.lock.reps > 0 {
                    for pi in [false, true] {
                        let r = lock_experiment(plan, pi)?;
                        progress(&format!(
                            "lock {:<5} max={:.1} us p99={:.1} us",
                            r.mutex, r.high_block_max_us, r.high_block_p99_us
                        ));
                        report.lock.push(r);
                    }
                }
                Ok(report)
            })?
            .join()
            .map_err(|_| -> BoxError { "the controller thread panicked".into() })?
    })
}
