//! `lfrt inversion`'s front-end: its flags, checked against their bounds and the machine and
//! resolved into a [`Plan`], and [`run`], which measures, prints the table and writes the JSON
//! (or hands `--borrow` to its own experiment).

use super::borrow;
use super::driver::measure;
use super::plan::{Architecture, LockPlan, Plan, MAX_RATE};
use super::text::table;
use lfrt::os;
use lfrt::RtMode;
use std::path::PathBuf;
use std::time::Duration;

/// Command-line arguments of `lfrt inversion`.
#[derive(clap::Args, Debug, Clone)]
pub struct InversionArgs {
    /// Numbers of low-priority streams to run, one run per value and architecture.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,16")]
    pub n_low: Vec<usize>,
    /// CPU work per low-priority datagram, µs (thread CPU time).
    #[arg(long, default_value_t = 100)]
    pub work_us: u64,
    /// Length of each run, including the warm-up (`5`, `5s`, `1500ms`: the duration syntax of
    /// every lfrt command).
    #[arg(long, value_name = "TIME", default_value = "5", value_parser = crate::duration::parse)]
    pub duration: Duration,
    /// High-priority events left out of the latency figures at the start of each run, ms.
    #[arg(long, default_value_t = 200)]
    pub warmup_ms: u64,
    /// Rate of the high-priority UDP stream, datagrams/s (fixed period).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Period of the high-priority timer, µs.
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Mean rate of each low-priority stream (Poisson), datagrams/s; capped by --low-budget.
    #[arg(long, default_value_t = 500)]
    pub low_rate: u64,
    /// Cap on the offered low work, as a fraction of one CPU (0 < x <= 0.8).
    #[arg(long, default_value_t = 0.6)]
    pub low_budget: f64,
    /// Architectures to run (`bands,shared_pool`: experiment 1b, every stream on one port).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "lanes,single_pool,hsha"
    )]
    pub arch: Vec<Architecture>,
    /// Threads per lane; single_pool and hsha get twice as many (same total).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Datagrams a handler (or the HS/HA I/O thread) reads per readiness event.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// SCHED_FIFO priority of the high lane, of single_pool and of hsha.
    #[arg(long, default_value_t = 80)]
    pub high_prio: u8,
    /// SCHED_FIFO priority of the low lane (the lock experiment's hog runs halfway between).
    #[arg(long, default_value_t = 40)]
    pub low_prio: u8,
    /// CPU every server thread is pinned to.
    #[arg(long, default_value_t = 1)]
    pub server_cpu: usize,
    /// CPU the generators and the controller are pinned to.
    #[arg(long, default_value_t = 0)]
    pub client_cpu: usize,
    /// Lock experiment: repetitions per mutex kind (0 skips the experiment).
    #[arg(long, default_value_t = 10)]
    pub lock_reps: usize,
    /// Lock experiment: how long the medium-priority hog spins, ms.
    #[arg(long, default_value_t = 50)]
    pub hog_ms: u64,
    /// Lock experiment: CPU work of the low handler inside the lock, µs.
    #[arg(long, default_value_t = 1000)]
    pub cs_us: u64,
    /// Run everything in well under a minute: N = 0,4,16, 2 s runs, 5 lock repetitions
    /// (overrides --n-low, --duration and --lock-reps).
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run only the lane-borrowing experiment ([`borrow`]: a burst on a 1-thread high lane,
    /// without and with borrowing from a 2-thread low lane; uses --duration, --work-us,
    /// --high-prio and --low-prio).
    #[arg(long)]
    pub borrow: bool,
}

impl Default for InversionArgs {
    fn default() -> InversionArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: InversionArgs,
        }
        Wrap::parse_from(["inversion"]).args
    }
}

impl InversionArgs {
    /// Applies `--quick` and checks every bound against the machine.
    ///
    /// # Errors
    /// A message naming the offending flag.
    pub fn plan(&self) -> Result<Plan, String> {
        let mut a = self.clone();
        if a.quick {
            a.n_low = vec![0, 4, 16];
            a.duration = a.duration.min(Duration::from_secs(2));
            a.lock_reps = a.lock_reps.min(5);
        }
        let cpus = os::available_cpus();
        let mut arch = a.arch.clone();
        arch.dedup();
        let check = |ok: bool, msg: String| if ok { Ok(()) } else { Err(msg) };
        check(
            !arch.is_empty(),
            "--arch: name at least one architecture".into(),
        )?;
        check(
            !a.n_low.is_empty() && a.n_low.iter().all(|&n| n <= 64),
            "--n-low: 1 to many values, each at most 64".into(),
        )?;
        check(
            a.work_us <= 10_000,
            format!("--work-us {}: at most 10000", a.work_us),
        )?;
        check(
            (Duration::from_millis(500)..=Duration::from_secs(60)).contains(&a.duration),
            format!("--duration {:?}: 500ms to 60s", a.duration),
        )?;
        check(
            u128::from(a.warmup_ms) * 2 < a.duration.as_millis(),
            "--warmup-ms: less than half of --duration".into(),
        )?;
        check(
            (1..=MAX_RATE).contains(&a.rate),
            format!("--rate {}: 1 to {MAX_RATE}", a.rate),
        )?;
        check(
            (100..=1_000_000).contains(&a.interval_us),
            format!("--interval-us {}: 100 to 1000000", a.interval_us),
        )?;
        check(
            (1..=MAX_RATE).contains(&a.low_rate),
            format!("--low-rate {}: 1 to {MAX_RATE}", a.low_rate),
        )?;
        check(
            a.low_budget > 0.0 && a.low_budget <= 0.8,
            format!("--low-budget {}: above 0, at most 0.8", a.low_budget),
        )?;
        check(
            (1..=16).contains(&a.threads),
            format!("--threads {}: 1 to 16", a.threads),
        )?;
        check(
            (1..=64).contains(&a.batch),
            format!("--batch {}: 1 to 64", a.batch),
        )?;
        check(
            (1..=99).contains(&a.high_prio) && (1..=99).contains(&a.low_prio) && a.high_prio >= a.low_prio + 2,
            format!("--high-prio {} / --low-prio {}: 1..=99, high at least low + 2 (the hog runs between)", a.high_prio, a.low_prio),
        )?;
        check(
            a.server_cpu != a.client_cpu,
            "--server-cpu and --client-cpu must differ".into(),
        )?;
        for (flag, c) in [
            ("--server-cpu", a.server_cpu),
            ("--client-cpu", a.client_cpu),
        ] {
            check(
                cpus.contains(&c),
                format!("{flag} {c}: not one of this process's CPUs {cpus:?}"),
            )?;
        }
        check(
            a.lock_reps <= 100,
            format!("--lock-reps {}: at most 100", a.lock_reps),
        )?;
        check(
            (1..=200).contains(&a.hog_ms),
            format!("--hog-ms {}: 1 to 200", a.hog_ms),
        )?;
        check(
            (1..=10_000).contains(&a.cs_us) && a.cs_us < a.hog_ms * 1000,
            "--cs-us: 1 to 10000 and shorter than the hog".into(),
        )?;
        let rt = if os::RtPrivilege::probe().allows(a.high_prio) {
            RtMode::Required
        } else {
            RtMode::BestEffort
        };
        Ok(Plan {
            architectures: arch,
            n_low: a.n_low,
            work_ns: a.work_us * 1000,
            duration: a.duration,
            warmup: Duration::from_millis(a.warmup_ms),
            rate: a.rate,
            interval_ns: a.interval_us * 1000,
            low_rate: a.low_rate,
            low_budget: a.low_budget,
            threads: a.threads,
            batch: a.batch,
            high_prio: a.high_prio,
            low_prio: a.low_prio,
            server_cpu: a.server_cpu,
            client_cpu: a.client_cpu,
            lock: LockPlan {
                reps: a.lock_reps,
                hog: Duration::from_millis(a.hog_ms),
                cs_ns: a.cs_us * 1000,
            },
            rt,
        })
    }
}

/// `lfrt inversion`: plan, measure, print the table, write the JSON.
///
/// # Errors
/// An invalid flag, a set-up failure, or the JSON file not being writable.
pub fn run(args: &InversionArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.borrow {
        return borrow::run(args);
    }
    let plan = args.plan()?;
    if plan.rt != RtMode::Required {
        eprintln!("lfrt inversion: SCHED_FIFO {} not permitted; running at normal priority, the figures mean little", plan.high_prio);
    }
    let runs = plan.architectures.len() * plan.n_low.len();
    eprintln!(
        "lfrt inversion: {runs} runs of {:.1} s{}",
        plan.duration.as_secs_f64(),
        if plan.lock.reps > 0 {
            format!(" + lock experiment ({} reps x 2)", plan.lock.reps)
        } else {
            String::new()
        }
    );
    // Experiment k of n with the time left, on a terminal only (indicatif estimates it from the
    // experiments done so far); elsewhere each experiment's line alone.
    let experiments = runs + if plan.lock.reps > 0 { 2 } else { 0 };
    let progress = crate::progress::Progress::new(experiments as u64, "experiment");
    let report = measure(&plan, |line| {
        progress.println(&format!("  {line}"));
        progress.inc();
    })
    .map_err(|e| e as Box<dyn std::error::Error>)?;
    drop(progress);
    print!("{}", table(&plan, &report));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inversion::lock::LOCK_COOLDOWN;
    use crate::inversion::queueing::{DRAIN_LIMIT, LEAD};

    fn args(extra: &[&str]) -> InversionArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: InversionArgs,
        }
        let mut v = vec!["inversion"];
        v.extend_from_slice(extra);
        Wrap::parse_from(v).args
    }

    #[test]
    fn quick_plan_holds_every_architecture_and_is_short() {
        let mut a = args(&["--quick"]);
        a.server_cpu = 1;
        a.client_cpu = 0;
        if os::available_cpus().len() < 2 {
            return; // one-CPU machine: the plan is refused, which another test checks
        }
        let p = a.plan().unwrap();
        assert_eq!(p.architectures, Architecture::ALL.to_vec());
        assert_eq!(p.n_low, vec![0, 4, 16]);
        assert!(p.duration <= Duration::from_secs(2));
        assert!(p.lock.reps <= 5);
        // Upper bound of the quick wall time: runs + lead + drain + lock reps.
        let runs = (p.architectures.len() * p.n_low.len()) as f64;
        let bound = runs * (p.duration + LEAD + DRAIN_LIMIT).as_secs_f64()
            + 2.0 * p.lock.reps as f64 * (p.lock.hog + LOCK_COOLDOWN).as_secs_f64();
        assert!(bound < 60.0, "{bound}");
    }

    #[test]
    fn bad_flags_name_themselves() {
        let a = InversionArgs {
            server_cpu: 0,
            client_cpu: 0,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--server-cpu"));
        let a = InversionArgs {
            low_budget: 0.95,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--low-budget"));
        let a = InversionArgs {
            high_prio: 41,
            ..Default::default()
        };
        assert!(a.plan().unwrap_err().contains("--high-prio"));
        let a = args(&["--n-low", "0,65"]);
        assert!(a.plan().unwrap_err().contains("--n-low"));
    }
}
