//! The kernel's view of lfrt's threads: a private ftrace instance
//! (`/sys/kernel/tracing/instances/lfrt-PID`) recording scheduling, IRQ and timer events, read
//! back when a flight-recorder trigger fires.
//!
//! [`KernelTrace::open`] creates the instance, points it at the lanes' CPUs and turns on
//! [`EVENTS`]: the context switches and wake-ups that say which thread ran when and who made
//! it runnable, the device interrupts and timer expiries that took a CPU away from it. The
//! kernel then records into a ring of its own per CPU, in overwrite mode, so the ring always
//! holds the newest events: the kernel half of a flight recorder. When a trigger fires,
//! [`KernelTrace::read_window`] pauses the ring, reads its text (`trace`, which leaves the ring
//! as it was), keeps the events of the window and resumes; [`parse_trace_text`] is the parser.
//! Dropping the [`KernelTrace`] turns the instance off and removes it.
//!
//! **Why an instance.** The top-level trace (`/sys/kernel/tracing/trace`) belongs to the
//! system: an operator's `trace-cmd`, `perf` or `cyclictest -b` may be using it, and its
//! clock, buffer size, CPU mask and events are theirs to set. An instance (`instances/NAME`)
//! has its own ring, clock, CPU mask, options and event switches, so lfrt sets all of them
//! for itself and leaves the top level as it found it (`tracing_on`, `current_tracer`,
//! `trace_clock`, `set_event`). It is named after the process (`lfrt-PID`). An instance left
//! behind by a process that died without dropping its `KernelTrace` (killed) is removed by the
//! next process that gets the same PID; while the `KernelTrace` lives it keeps its `tracing_on`
//! open, which makes the kernel refuse to remove the instance (`EBUSY`) to anyone else.
//!
//! **The clock.** The instance's `trace_clock` is `mono`, so its timestamps are
//! `CLOCK_MONOTONIC`, the clock of every lfrt timestamp ([`now_ns`](super::now_ns)): a kernel
//! event and a dispatch [`Sample`](crate::telemetry::Sample) line up without conversion. The
//! text prints them as seconds and microseconds, so a [`KernelEvent`]'s `ts_ns` is a whole
//! number of microseconds, up to 999 ns before the event; a window therefore starts at its
//! `from_ns` rounded down to the microsecond.
//!
//! **What it costs.** Nothing on lfrt's dispatch path: no system call, no shared memory, no
//! lock. The kernel writes each event into the ring of the CPU it happened on (a fraction of a
//! microsecond per event, paid by whatever that CPU was doing, lfrt's threads included, for
//! as long as the instance exists), and the memory is `buffer_size_kb` per CPU of the mask.
//! lfrt reads only when a trigger fires, on the collector thread, which allocates freely
//! there: formatting and parsing a full ring takes milliseconds, during which the ring is
//! paused and records nothing.
//!
//! **What it does not do.** It records no function traces, stacks or user-space events, only
//! the seven events above (an event this kernel lacks is skipped and listed by
//! [`KernelTrace::missing_events`]); it does not read the binary ring (`trace_pipe_raw`),
//! which would give nanoseconds at the price of parsing the kernel's event formats; it does
//! not consume the ring, so consecutive windows may share events; and it cannot tell an
//! instance of another PID namespace's process that has the same PID from a stale one, other
//! than by the kernel's `EBUSY` while that process holds its instance open. One `KernelTrace`
//! per process at a time. It needs root (tracefs is root's, mode 0700, unless mounted with
//! `gid=`).

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// Where tracefs may be mounted, in the order tried: its own mount point, then the one inside
/// debugfs that older systems have.
const MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// How much of the ring's text [`KernelTrace::read_window`] parses at a time, in bytes.
const CHUNK: usize = 1 << 16;

/// The events [`KernelTrace::open`] turns on, as `SYSTEM/EVENT` under the instance's `events/`.
pub(crate) const EVENTS: [&str; 7] = [
    "sched/sched_switch",
    "sched/sched_waking",
    "sched/sched_wakeup",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "timer/hrtimer_expire_entry",
    "irq_vectors/local_timer_entry",
];

/// What an error for lack of permission adds: tracefs is root's (directories mode 0700/0750,
/// files 0640), and access is decided by those modes alone.
const PRIVILEGE: &str = "needs root (or CAP_DAC_OVERRIDE, or tracefs mounted with gid= of one \
                         of this process's lanes)";

/// The PID whose `KernelTrace` is open (0: none): one per process, since the instance is named
/// after the PID. A forked child has another PID, so its parent's value does not hold it back.
static OPEN_PID: AtomicU32 = AtomicU32::new(0);

/// A private ftrace instance (`…/tracing/instances/lfrt-PID`) recording context switches,
/// wake-ups, IRQ handlers, hrtimer expiries and local timer interrupts on a set of CPUs, in
/// overwrite mode, on `CLOCK_MONOTONIC`: the kernel half of the flight recorder, which keeps
/// the newest events until a trigger asks for a window of them. The system's own trace is
/// left alone. Dropping it turns the instance off and removes it.
///
/// It costs nothing on lfrt's dispatch path (the kernel records; lfrt reads only in
/// [`read_window`](Self::read_window)). Needs root.
///
/// # Examples
#[doc = os_example!(no_run)]
/// use lfrt::os::{now_ns, KernelTrace};
/// let trace = KernelTrace::open(&[0, 1], 1024)?; // needs root
/// let t0 = now_ns();
/// std::thread::sleep(std::time::Duration::from_millis(5));
/// for ev in trace.read_window(t0, now_ns())? {
///     println!("{} cpu{} {:?}", ev.ts_ns, ev.cpu, ev.kind);
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct KernelTrace {
    /// The instance's directory.
    dir: PathBuf,
    /// Its `tracing_on`, open for writing while the value lives (which also makes the kernel
    /// refuse to remove the instance); `None` only in `drop`. The lock keeps two windows from
    /// pausing and resuming the ring under each other.
    tracing_on: Mutex<Option<File>>,
    /// Events of [`EVENTS`] this kernel does not have.
    missing: Vec<&'static str>,
}

impl KernelTrace {
    /// Whether [`open`](Self::open) may create an instance here: tracefs is mounted and this
    /// process may write its `instances` directory (root's). What `check` asks before `run`
    /// opens one, and what `lfrt cyclic -b` asks before it turns the kernel recorder on.
    ///
    /// # Errors
    /// Which mount is missing, or which directory this process may not write.
    pub fn may_open() -> io::Result<()> {
        let instances = tracefs_root()?.join("instances");
        nix::unistd::access(&instances, nix::unistd::AccessFlags::W_OK)
            .map_err(|e| failed("writing", &instances, io::Error::from(e)))
    }

    /// Creates the instance `lfrt-PID` (under `/sys/kernel/tracing/instances`, or
    /// `/sys/kernel/debug/tracing/instances` where tracefs is mounted only there), replacing
    /// a stale one left by a dead process of the same PID, and starts recording on `cpus`:
    /// `sched_switch`, `sched_waking`, `sched_wakeup`, `irq_handler_entry`,
    /// `irq_handler_exit`, `hrtimer_expire_entry` and `local_timer_entry`, with `trace_clock`
    /// `mono`, `buffer_kb_per_cpu` KiB of ring per CPU and overwrite mode on. An event this
    /// kernel does not have is skipped ([`missing_events`](Self::missing_events)).
    ///
    /// # Errors
    /// Each says what failed and on which file: tracefs not mounted; permission denied (it
    /// needs root); an instance of this PID in use (`AlreadyExists`: this process has a
    /// `KernelTrace` already, or another PID namespace's process holds it); `cpus` empty or
    /// `buffer_kb_per_cpu` 0 (`InvalidInput`), or a CPU the kernel does not have; a kernel
    /// without the `mono` trace clock. Nothing is left behind on an error.
    pub fn open(cpus: &[u16], buffer_kb_per_cpu: u32) -> io::Result<KernelTrace> {
        Self::open_with(cpus, buffer_kb_per_cpu, &EVENTS)
    }

    /// [`open`](Self::open) with the events to turn on (the tests add one no kernel has).
    fn open_with(
        cpus: &[u16],
        buffer_kb_per_cpu: u32,
        events: &[&'static str],
    ) -> io::Result<KernelTrace> {
        if cpus.is_empty() || buffer_kb_per_cpu == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a kernel trace needs at least one CPU and a buffer (cpus {cpus:?}, \
                     buffer_kb_per_cpu {buffer_kb_per_cpu})"
                ),
            ));
        }
        let pid = std::process::id();
        let mut held = OPEN_PID.load(Ordering::Acquire);
        loop {
            if held == pid {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("this process already records a kernel trace (instance lfrt-{pid})"),
                ));
            }
            match OPEN_PID.compare_exchange(held, pid, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        let made = Self::make(&tracefs_root()?, pid, cpus, buffer_kb_per_cpu, events);
        if made.is_err() {
            let _ = OPEN_PID.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        }
        made
    }

    /// Creates and starts instance `lfrt-PID` under tracefs mount `root`.
    fn make(
        root: &Path,
        pid: u32,
        cpus: &[u16],
        buffer_kb_per_cpu: u32,
        events: &[&'static str],
    ) -> io::Result<KernelTrace> {
        let dir = root.join("instances").join(format!("lfrt-{pid}"));
        if dir.exists() {
            // Left by a dead process of this PID (a live one in this namespace would be us, and
            // OPEN_PID says we have none): remove it, unless someone holds it open.
            fs::remove_dir(&dir).map_err(|e| {
                if e.raw_os_error() == Some(libc::EBUSY) {
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "removing the stale instance {}: in use (a process of another PID \
                             namespace with the same PID, or a reader of its files)",
                            dir.display()
                        ),
                    )
                } else {
                    failed("removing the stale instance", &dir, e)
                }
            })?;
        }
        fs::create_dir(&dir).map_err(|e| failed("creating", &dir, e))?;
        let on_path = dir.join("tracing_on");
        let on = match File::options().write(true).open(&on_path) {
            Ok(f) => f,
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                return Err(failed("opening", &on_path, e));
            }
        };
        // From here an error drops `trace`, which turns the instance off and removes it.
        let mut trace = KernelTrace {
            dir,
            tracing_on: Mutex::new(Some(on)),
            missing: Vec::new(),
        };
        trace.set_on(false)?;
        write(&trace.dir.join("trace_clock"), "mono")?;
        write(
            &trace.dir.join("buffer_size_kb"),
            &buffer_kb_per_cpu.to_string(),
        )?;
        write(&trace.dir.join("tracing_cpumask"), &cpu_mask(cpus))?;
        write(&trace.dir.join("options/overwrite"), "1")?;
        for &event in events {
            match write(&trace.dir.join("events").join(event).join("enable"), "1") {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => trace.missing.push(event),
                Err(e) => return Err(e),
            }
        }
        // Start from an empty ring (the clock change cleared it already; this says so).
        let ring = trace.dir.join("trace");
        File::options()
            .write(true)
            .truncate(true)
            .open(&ring)
            .map_err(|e| failed("clearing", &ring, e))?;
        trace.set_on(true)?;
        Ok(trace)
    }

    /// The events of the window `from_ns..=to_ns` (`CLOCK_MONOTONIC` ns; `from_ns` rounded
    /// down to the microsecond, the trace's resolution), oldest first. The ring is paused
    /// while it is read (events in that time are not recorded) and left as it was: a later
    /// window may return the same events again.
    ///
    /// For the collector thread, not a real-time one: it reads and parses the whole ring's
    /// text (milliseconds for a few MiB) and allocates.
    ///
    /// # Errors
    /// Pausing, reading or resuming the instance failed (the error names the file); the
    /// instance is resumed whatever the read did.
    pub fn read_window(&self, from_ns: u64, to_ns: u64) -> io::Result<Vec<KernelEvent>> {
        let on = self
            .tracing_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.set_on_locked(on.as_ref(), false)?;
        let read = self.read_ring(from_ns - from_ns % 1000, to_ns);
        let resumed = self.set_on_locked(on.as_ref(), true);
        let events = read?;
        resumed?;
        Ok(events)
    }

    /// The events of the seven this kernel does not have, which the instance records
    /// without (`SYSTEM/EVENT`, e.g. `irq_vectors/local_timer_entry` on a non-x86 kernel).
    pub fn missing_events(&self) -> &[&'static str] {
        &self.missing
    }

    /// The instance's directory (`…/tracing/instances/lfrt-PID`).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Reads the ring's text and keeps the events with `from_ns ≤ ts ≤ to_ns`, oldest first.
    fn read_ring(&self, from_ns: u64, to_ns: u64) -> io::Result<Vec<KernelEvent>> {
        let path = self.dir.join("trace");
        let file = File::open(&path).map_err(|e| failed("opening", &path, e))?;
        let mut reader = BufReader::with_capacity(CHUNK, file);
        let (mut chunk, mut events) = (Vec::with_capacity(2 * CHUNK), Vec::new());
        loop {
            // Whole lines, about CHUNK bytes at a time, so a big ring's text is never held whole;
            // bytes, not a String, since a command name need not be UTF-8.
            let n = reader
                .read_until(b'\n', &mut chunk)
                .map_err(|e| failed("reading", &path, e))?;
            if n == 0 || chunk.len() >= CHUNK {
                let text = String::from_utf8_lossy(&chunk);
                let within = parse_trace_text(&text)
                    .into_iter()
                    .filter(|ev| (from_ns..=to_ns).contains(&ev.ts_ns));
                events.extend(within);
                chunk.clear();
            }
            if n == 0 {
                break;
            }
        }
        // The kernel merges the CPUs' rings by time already; a stable sort makes it a promise.
        events.sort_by_key(|e| e.ts_ns);
        Ok(events)
    }

    /// Writes `tracing_on`.
    fn set_on(&self, on: bool) -> io::Result<()> {
        let file = self
            .tracing_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.set_on_locked(file.as_ref(), on)
    }

    /// Writes `tracing_on` through the held file.
    fn set_on_locked(&self, file: Option<&File>, on: bool) -> io::Result<()> {
        let value = if on { "1" } else { "0" };
        match file {
            Some(mut f) => f.write_all(value.as_bytes()),
            None => Err(io::ErrorKind::NotFound.into()),
        }
        .map_err(|e| {
            failed(
                &format!("writing {value} to"),
                &self.dir.join("tracing_on"),
                e,
            )
        })
    }
}

impl Drop for KernelTrace {
    /// Turns the instance off and removes it (best effort: an instance whose files someone
    /// else holds open stays, and the next process of this PID removes it).
    fn drop(&mut self) {
        let on = self
            .tracing_on
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(mut f) = on.take() {
            let _ = f.write_all(b"0");
            // Closed before the rmdir: the kernel refuses to remove an instance with open files.
            drop(f);
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            tracing::warn!(
                instance = %self.dir.display(),
                error = %e,
                "kernel trace: could not remove the ftrace instance (the next process of this \
                 PID removes it)"
            );
        }
        let _ =
            OPEN_PID.compare_exchange(std::process::id(), 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The tracefs mount: the first of [`MOUNTS`] that has `instances`.
fn tracefs_root() -> io::Result<PathBuf> {
    let mut denied = None;
    for root in MOUNTS {
        let instances = Path::new(root).join("instances");
        match fs::metadata(&instances) {
            Ok(m) if m.is_dir() => return Ok(PathBuf::from(root)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                denied.get_or_insert((instances, e));
            }
            Err(_) => {}
        }
    }
    Err(match denied {
        Some((path, e)) => failed("reading", &path, e),
        None => io::Error::new(
            io::ErrorKind::NotFound,
            format!("tracefs not mounted at {} or {}", MOUNTS[0], MOUNTS[1]),
        ),
    })
}

/// Writes `value` to tracefs file `path` (no create, no truncate: tracefs files take writes as
/// commands).
fn write(path: &Path, value: &str) -> io::Result<()> {
    File::options()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| failed(&format!("writing {value:?} to"), path, e))
}

/// `e`, saying what failed on which file, and what a permission error needs; of the same
/// kind.
fn failed(what: &str, path: &Path, e: io::Error) -> io::Error {
    let kind = e.kind();
    let msg = if kind == io::ErrorKind::PermissionDenied {
        format!("permission denied {what} {}: {PRIVILEGE}", path.display())
    } else {
        format!("{what} {}: {e}", path.display())
    };
    io::Error::new(kind, msg)
}

/// `cpus` as the kernel writes a CPU mask (`tracing_cpumask`): hexadecimal, in 32-bit lanes
/// separated by commas, most significant first, with no lane above the highest CPU (the
/// kernel refuses more lanes than it has CPUs for).
fn cpu_mask(cpus: &[u16]) -> String {
    let top = cpus.iter().copied().max().unwrap_or(0) as usize / 32;
    let mut words = vec![0u32; top + 1];
    for &c in cpus {
        words[c as usize / 32] |= 1 << (c % 32);
    }
    let mut mask = format!("{:x}", words[top]);
    for w in words[..top].iter().rev() {
        mask.push_str(&format!(",{w:08x}"));
    }
    mask
}

/// The events of an ftrace text (an instance's `trace`), in the order of the text. Lines it
/// does not know (comments, other events, `CPU:N [LOST M EVENTS]`) are skipped.
///
/// A line is `COMM-PID [(TGID)] [CPU] FLAGS SECONDS.MICROS: EVENT: FIELDS`. The command name
/// may hold spaces, dashes, `=` and even ` ==> `, so neither the head nor the fields are split
/// on spaces: the event is the first `: EVENT: ` that names an event lfrt knows with fields
/// that match its format (a command name, at most 15 bytes, is too short to hold one), the
/// head is read from its end, and a name in the fields may end at any place its format allows,
/// tried in turn.
pub(crate) fn parse_trace_text(text: &str) -> Vec<KernelEvent> {
    text.lines().filter_map(parse_line).collect()
}

/// One line of an ftrace text, if it is an event lfrt knows.
fn parse_line(line: &str) -> Option<KernelEvent> {
    let line = line.trim_end();
    if line.trim_start().starts_with('#') {
        return None;
    }
    for (at, _) in line.match_indices(": ") {
        let rest = &line[at + 2..];
        let Some((event, fields)) = rest.split_once(": ") else {
            continue;
        };
        let Some(kind) = parse_fields(event, fields) else {
            continue;
        };
        let Some((cpu, ts_ns)) = parse_head(&line[..at]) else {
            continue;
        };
        return Some(KernelEvent { ts_ns, cpu, kind });
    }
    None
}

/// The CPU and time of a line's head, `COMM-PID [(TGID)] [CPU] FLAGS SECONDS.MICROS`.
fn parse_head(head: &str) -> Option<(u16, u64)> {
    let (before, ts) = head.rsplit_once(char::is_whitespace)?;
    let ts_ns = parse_ts(ts)?;
    // The CPU's bracket is the last one: a command name may hold brackets, and it comes first.
    let open = before.rfind('[')?;
    let (task, cpu) = (&before[..open], &before[open + 1..]);
    let cpu = cpu[..cpu.find(']')?].parse().ok()?;
    // `COMM-PID`, then ` (TGID)` with the record-tgid option; the PID is after the last dash.
    let task = task.trim();
    let task = match task.strip_suffix(')') {
        Some(t) => t[..t.rfind('(')?].trim_end(),
        None => task,
    };
    let (_comm, pid) = task.rsplit_once('-')?;
    pid.parse::<i32>().ok()?;
    Some((cpu, ts_ns))
}

/// `SECONDS.FRACTION` (ftrace prints microseconds) in nanoseconds.
fn parse_ts(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    let frac_ns = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    secs.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac_ns)
}

/// A piece of an event's field format: literal text, or a value.
#[derive(Clone, Copy)]
enum Tok {
    /// This text exactly.
    Lit(&'static str),
    /// A string (a name: may hold anything, spaces included).
    Str,
    /// A decimal integer, maybe negative.
    Int,
}

use Tok::{Int, Lit, Str};

/// `sched_switch`'s fields: `prev_comm=… prev_pid=… prev_prio=… prev_state=… ==>
/// next_comm=… next_pid=… next_prio=…`.
const SWITCH: &[Tok] = &[
    Lit("prev_comm="),
    Str,
    Lit(" prev_pid="),
    Int,
    Lit(" prev_prio="),
    Int,
    Lit(" prev_state="),
    Str,
    Lit(" ==> next_comm="),
    Str,
    Lit(" next_pid="),
    Int,
    Lit(" next_prio="),
    Int,
];
/// `sched_waking`'s and `sched_wakeup`'s fields.
const WAKE: &[Tok] = &[
    Lit("comm="),
    Str,
    Lit(" pid="),
    Int,
    Lit(" prio="),
    Int,
    Lit(" target_cpu="),
    Int,
];
/// The same on older kernels, which printed `success=1` too.
const WAKE_OLD: &[Tok] = &[
    Lit("comm="),
    Str,
    Lit(" pid="),
    Int,
    Lit(" prio="),
    Int,
    Lit(" success="),
    Int,
    Lit(" target_cpu="),
    Int,
];
/// `irq_handler_entry`'s fields.
const IRQ_ENTRY: &[Tok] = &[Lit("irq="), Int, Lit(" name="), Str];
/// `irq_handler_exit`'s fields.
const IRQ_EXIT: &[Tok] = &[Lit("irq="), Int, Lit(" ret="), Str];
/// `hrtimer_expire_entry`'s fields.
const HRTIMER: &[Tok] = &[
    Lit("hrtimer="),
    Str,
    Lit(" function="),
    Str,
    Lit(" now="),
    Int,
];
/// `local_timer_entry`'s fields.
const LOCAL_TIMER: &[Tok] = &[Lit("vector="), Int];

/// The fields of event `event`, if lfrt knows the event and they match its format.
fn parse_fields(event: &str, fields: &str) -> Option<KernelEventKind> {
    let wake = |woken| {
        let v = fields_of::<4>(fields, WAKE)
            .or_else(|| fields_of::<5>(fields, WAKE_OLD).map(|v| [v[0], v[1], v[2], v[4]]))?;
        Some(KernelEventKind::Wake {
            comm: v[0].to_owned(),
            tid: v[1].parse().ok()?,
            prio: v[2].parse().ok()?,
            target_cpu: v[3].parse().ok()?,
            woken,
        })
    };
    match event {
        "sched_switch" => {
            let v = fields_of::<7>(fields, SWITCH)?;
            Some(KernelEventKind::Switch {
                prev_comm: v[0].to_owned(),
                prev_tid: v[1].parse().ok()?,
                prev_prio: v[2].parse().ok()?,
                prev_state: v[3].to_owned(),
                next_comm: v[4].to_owned(),
                next_tid: v[5].parse().ok()?,
                next_prio: v[6].parse().ok()?,
            })
        }
        "sched_waking" => wake(false),
        "sched_wakeup" => wake(true),
        "irq_handler_entry" => {
            let v = fields_of::<2>(fields, IRQ_ENTRY)?;
            Some(KernelEventKind::IrqEntry {
                irq: v[0].parse().ok()?,
                name: v[1].to_owned(),
            })
        }
        "irq_handler_exit" => {
            let v = fields_of::<2>(fields, IRQ_EXIT)?;
            Some(KernelEventKind::IrqExit {
                irq: v[0].parse().ok()?,
            })
        }
        "hrtimer_expire_entry" => {
            let v = fields_of::<3>(fields, HRTIMER)?;
            Some(KernelEventKind::HrtimerExpire {
                function: v[1].to_owned(),
            })
        }
        "local_timer_entry" => {
            fields_of::<1>(fields, LOCAL_TIMER).map(|_| KernelEventKind::LocalTimer)
        }
        _ => None,
    }
}

/// The `N` values of `s` matched against format `pat` (which has `N` value pieces), if it
/// matches as a whole.
fn fields_of<'a, const N: usize>(s: &'a str, pat: &[Tok]) -> Option<[&'a str; N]> {
    let mut out = [""; N];
    match_from(s, pat, &mut out).then_some(out)
}

/// Whether `s` matches `pat`, writing the values into `out`. A string value ends at one of the
/// places the next literal occurs, tried from the first: the first that lets the rest match.
fn match_from<'a>(s: &'a str, pat: &[Tok], out: &mut [&'a str]) -> bool {
    match pat {
        [] => s.is_empty(),
        [Lit(l), rest @ ..] => s.strip_prefix(l).is_some_and(|s| match_from(s, rest, out)),
        [Int, rest @ ..] => {
            let sign = usize::from(s.starts_with('-'));
            let len = sign + s[sign..].bytes().take_while(u8::is_ascii_digit).count();
            let Some((slot, out)) = out.split_first_mut() else {
                return false;
            };
            *slot = &s[..len];
            len > sign && match_from(&s[len..], rest, out)
        }
        [Str, rest @ ..] => {
            let Some((slot, out)) = out.split_first_mut() else {
                return false;
            };
            match rest.first() {
                None => {
                    *slot = s;
                    true
                }
                Some(Lit(next)) => s.match_indices(next).any(|(i, _)| {
                    *slot = &s[..i];
                    match_from(&s[i..], rest, out)
                }),
                // Formats never put two values side by side.
                Some(_) => false,
            }
        }
    }
}

/// One event the kernel recorded in lfrt's ftrace instance. Times are `CLOCK_MONOTONIC`
/// nanoseconds (the instance's `trace_clock` is `mono`), the clock of every lfrt
/// timestamp, so they line up with a dispatch [`Sample`](crate::telemetry::Sample).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelEvent {
    /// When, in `CLOCK_MONOTONIC` ns.
    pub ts_ns: u64,
    /// The CPU the event happened on.
    pub cpu: u16,
    /// What happened.
    pub kind: KernelEventKind,
}

/// What a [`KernelEvent`] records (the fields the trace events carry that lfrt uses).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum KernelEventKind {
    /// `sched_switch`: `prev` stopped running on this CPU and `next` started.
    Switch {
        /// Thread id of the task that stopped.
        prev_tid: i32,
        /// Its command name.
        prev_comm: String,
        /// Its kernel priority (`prio`; SCHED_FIFO N shows as 99 - N).
        prev_prio: i32,
        /// Its state as ftrace prints it (`R`, `R+`, `S`, `D`, …): `R` means preempted.
        prev_state: String,
        /// Thread id of the task that started.
        next_tid: i32,
        /// Its command name.
        next_comm: String,
        /// Its kernel priority.
        next_prio: i32,
    },
    /// `sched_waking` (`woken = false`: the wake-up was asked for) or `sched_wakeup`
    /// (`woken = true`: the task is runnable on `target_cpu`).
    Wake {
        /// Thread id of the task woken.
        tid: i32,
        /// Its command name.
        comm: String,
        /// Its kernel priority.
        prio: i32,
        /// The CPU it will run on.
        target_cpu: u16,
        /// `sched_wakeup` rather than `sched_waking`.
        woken: bool,
    },
    /// `irq_handler_entry`.
    IrqEntry {
        /// IRQ number.
        irq: u32,
        /// Handler name.
        name: String,
    },
    /// `irq_handler_exit`.
    IrqExit {
        /// IRQ number.
        irq: u32,
    },
    /// `hrtimer_expire_entry`: an hrtimer's callback ran.
    HrtimerExpire {
        /// The callback's symbol.
        function: String,
    },
    /// `local_timer_entry`: the local APIC timer interrupt.
    LocalTimer,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sys::{gettid, now_ns};
    use std::time::Duration;

    /// Lines this kernel (6.18, x86-64, `trace_clock` mono) wrote, headers included; the
    /// second block with the `record-tgid` option, from a shell whose command name was set
    /// to `my -w ==> x=1`.
    const RECORDED: &str = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 177/177   #P:2
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
            bash-4463    [000] d..2. 34063.512744: sched_switch: prev_comm=bash prev_pid=4463 prev_prio=120 prev_state=S ==> next_comm=bash next_pid=4471 next_prio=120
             cat-4471    [000] dN.5. 34063.513738: sched_waking: comm=bash pid=4463 prio=120 target_cpu=000
             cat-4471    [000] dN.6. 34063.513740: sched_wakeup: comm=bash pid=4463 prio=120 target_cpu=000
          <idle>-0       [001] d.h1. 34063.515343: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1. 34063.515346: irq_handler_exit: irq=36 ret=handled
          <idle>-0       [001] d.s4. 34063.515350: sched_waking: comm=bash pid=4473 prio=120 target_cpu=000
          <idle>-0       [001] dNs5. 34063.515354: sched_wakeup: comm=bash pid=4473 prio=120 target_cpu=001
           sleep-4473    [001] d.h.. 34063.516014: local_timer_entry: vector=236
           sleep-4473    [001] d.h.. 34063.516015: hrtimer_expire_entry: hrtimer=00000000d5e05e24 function=tick_nohz_handler now=34063516014513
   my -w ==> x=1-8737    (   8737) [000] d..2. 34214.801870: sched_switch: prev_comm=my -w ==> x=1 prev_pid=8737 prev_prio=120 prev_state=S ==> next_comm=lto cgu.15 next_pid=8715 next_prio=139
           sleep-8738    (   8738) [001] d..2. 34214.804197: sched_switch: prev_comm=my -w ==> x=1 prev_pid=8738 prev_prio=120 prev_state=R+ ==> next_comm=migration/1 next_pid=21 next_prio=0
           sleep-8738    (   8738) [000] dN.5. 34214.815381: sched_waking: comm=my -w ==> x=1 pid=8737 prio=120 target_cpu=000
           sleep-8738    (   8738) [000] dN.6. 34214.815384: sched_wakeup: comm=my -w ==> x=1 pid=8737 prio=120 target_cpu=000
             yes-8748    (   8748) [000] d..2. 34214.844217: sched_switch: prev_comm=my -w ==> x=1 prev_pid=8748 prev_prio=120 prev_state=D ==> next_comm=bash next_pid=8747 next_prio=120
            bash-8735    [001] d.h2. 34214.797088: hrtimer_expire_entry: hrtimer=00000000aa61df93 function=hrtimer_wakeup now=34214797087561
";

    fn switch(prev: (&str, i32, i32, &str), next: (&str, i32, i32)) -> KernelEventKind {
        KernelEventKind::Switch {
            prev_comm: prev.0.into(),
            prev_tid: prev.1,
            prev_prio: prev.2,
            prev_state: prev.3.into(),
            next_comm: next.0.into(),
            next_tid: next.1,
            next_prio: next.2,
        }
    }

    fn wake(comm: &str, tid: i32, prio: i32, target_cpu: u16, woken: bool) -> KernelEventKind {
        KernelEventKind::Wake {
            tid,
            comm: comm.into(),
            prio,
            target_cpu,
            woken,
        }
    }

    fn ev(ts_ns: u64, cpu: u16, kind: KernelEventKind) -> KernelEvent {
        KernelEvent { ts_ns, cpu, kind }
    }

    #[test]
    fn parses_every_recorded_line_and_skips_the_header() {
        let events = parse_trace_text(RECORDED);
        let lines = RECORDED.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(events.len(), lines, "{events:#?}");
    }

    #[test]
    fn parses_sched_switch() {
        let e = parse_trace_text(RECORDED);
        assert_eq!(
            e[0],
            ev(
                34_063_512_744_000,
                0,
                switch(("bash", 4463, 120, "S"), ("bash", 4471, 120))
            )
        );
        // A command name with spaces, a dash, `=` and ` ==> `; the record-tgid column; `R+`.
        assert_eq!(
            e[9],
            ev(
                34_214_801_870_000,
                0,
                switch(("my -w ==> x=1", 8737, 120, "S"), ("lto cgu.15", 8715, 139))
            )
        );
        assert_eq!(
            e[10],
            ev(
                34_214_804_197_000,
                1,
                switch(("my -w ==> x=1", 8738, 120, "R+"), ("migration/1", 21, 0))
            )
        );
        assert_eq!(
            e[13].kind,
            switch(("my -w ==> x=1", 8748, 120, "D"), ("bash", 8747, 120))
        );
    }

    #[test]
    fn parses_sched_waking_and_wakeup() {
        let e = parse_trace_text(RECORDED);
        assert_eq!(
            e[1],
            ev(34_063_513_738_000, 0, wake("bash", 4463, 120, 0, false))
        );
        assert_eq!(
            e[2],
            ev(34_063_513_740_000, 0, wake("bash", 4463, 120, 0, true))
        );
        assert_eq!(
            e[6],
            ev(34_063_515_354_000, 1, wake("bash", 4473, 120, 1, true))
        );
        assert_eq!(e[11].kind, wake("my -w ==> x=1", 8737, 120, 0, false));
        assert_eq!(e[12].kind, wake("my -w ==> x=1", 8737, 120, 0, true));
        // Older kernels printed `success=1` before the target CPU.
        let old = "  foo-12 [003] d..3 100.000001: sched_wakeup: comm=a b pid=7 prio=-1 success=1 \
                   target_cpu=003";
        assert_eq!(
            parse_trace_text(old),
            [ev(100_000_001_000, 3, wake("a b", 7, -1, 3, true))]
        );
    }

    #[test]
    fn parses_irq_handler_entry_and_exit() {
        let e = parse_trace_text(RECORDED);
        let entry = KernelEventKind::IrqEntry {
            irq: 36,
            name: "virtio1-req.0".into(),
        };
        assert_eq!(e[3], ev(34_063_515_343_000, 1, entry));
        assert_eq!(
            e[4],
            ev(34_063_515_346_000, 1, KernelEventKind::IrqExit { irq: 36 })
        );
    }

    #[test]
    fn parses_hrtimer_expire_entry() {
        let e = parse_trace_text(RECORDED);
        let tick = KernelEventKind::HrtimerExpire {
            function: "tick_nohz_handler".into(),
        };
        assert_eq!(e[8], ev(34_063_516_015_000, 1, tick));
        let wakeup = KernelEventKind::HrtimerExpire {
            function: "hrtimer_wakeup".into(),
        };
        assert_eq!(e[14], ev(34_214_797_088_000, 1, wakeup));
    }

    #[test]
    fn parses_local_timer_entry() {
        let e = parse_trace_text(RECORDED);
        assert_eq!(e[7], ev(34_063_516_014_000, 1, KernelEventKind::LocalTimer));
    }

    #[test]
    fn skips_what_it_does_not_know() {
        let text = "\
CPU:1 [LOST 1234 EVENTS]
            bash-1    [000] d..2. 5.000001: sched_migrate_task: comm=bash pid=1 prio=120 orig_cpu=0 dest_cpu=1
            bash-1    [000] d..2. 5.000001: sched_switch: prev_comm=bash prev_pid=x
            bash-1    [000] d..2. notatime: local_timer_entry: vector=236
garbage: sched_switch: nothing

   <...>-1234    [001] d.h1. 5.000002: local_timer_entry: vector=236
";
        assert_eq!(
            parse_trace_text(text),
            [ev(5_000_002_000, 1, KernelEventKind::LocalTimer)]
        );
    }

    #[test]
    fn a_name_may_hold_what_the_format_separates_with() {
        // A command name holding ` prev_pid=`, and a head holding `: ` before the event's.
        let line = " a: b-9 [002] .... 1.5: sched_switch: prev_comm=a prev_pid=1 prev_pid=5 \
                    prev_prio=120 prev_state=S ==> next_comm=x next_pid=6 next_prio=98";
        assert_eq!(
            parse_trace_text(line),
            [ev(
                1_500_000_000,
                2,
                switch(("a prev_pid=1", 5, 120, "S"), ("x", 6, 98))
            )]
        );
    }

    #[test]
    fn times_are_nanoseconds() {
        assert_eq!(parse_ts("34063.512744"), Some(34_063_512_744_000));
        assert_eq!(parse_ts("0.000001"), Some(1_000));
        assert_eq!(parse_ts("1.123456789"), Some(1_123_456_789));
        for bad in ["", "1", "1.", ".5", "1.2.3", "-1.5", "1.1234567890", "a.b"] {
            assert_eq!(parse_ts(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpu_masks_are_the_kernels() {
        assert_eq!(cpu_mask(&[0]), "1");
        assert_eq!(cpu_mask(&[0, 1]), "3");
        assert_eq!(cpu_mask(&[1, 3, 1]), "a");
        assert_eq!(cpu_mask(&[31]), "80000000");
        assert_eq!(cpu_mask(&[0, 33]), "2,00000001");
        assert_eq!(cpu_mask(&[64]), "1,00000000,00000000");
    }

    #[test]
    fn refuses_no_cpus_or_no_buffer() {
        for (cpus, kb) in [(&[][..], 64), (&[0][..], 0)] {
            let e = KernelTrace::open(cpus, kb).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        }
    }

    // ---- The instance itself: root and tracefs ----------------------------------------------

    /// Serialises the tests below: one instance per process.
    static INSTANCE: Mutex<()> = Mutex::new(());

    /// Whether this process may make an instance (root, tracefs mounted). Otherwise the test
    /// skips as the crate's others do (a line in `/tmp/lfrt-skipped-tests.log`); under CI it
    /// fails instead.
    fn may_trace(test: &str) -> bool {
        let why = if !nix::unistd::geteuid().is_root() {
            "not root".to_owned()
        } else if let Err(e) = tracefs_root() {
            e.to_string()
        } else {
            return true;
        };
        crate::engine::testing::skip(&format!(
            "SKIP {test}: the kernel-trace tests need root and tracefs ({why})"
        ));
        false
    }

    fn all_cpus() -> Vec<u16> {
        crate::sys::sched::online_cpus()
            .into_iter()
            .map(|c| c as u16)
            .collect()
    }

    #[test]
    fn a_window_shows_a_sleeping_thread_on_the_monotonic_clock() {
        if !may_trace("sys::tracefs::a_window_shows_a_sleeping_thread_on_the_monotonic_clock") {
            return;
        }
        let _one = INSTANCE.lock().unwrap_or_else(PoisonError::into_inner);
        let trace = KernelTrace::open(&all_cpus(), 1024).expect("open the instance");
        assert!(
            trace
                .missing_events()
                .iter()
                .all(|e| !e.starts_with("sched/")),
            "missing: {:?}",
            trace.missing_events()
        );
        let clock = fs::read_to_string(trace.path().join("trace_clock")).unwrap();
        assert!(clock.contains("[mono]"), "trace_clock: {clock}");

        let start = now_ns();
        let (tid, t_in, t_out) = std::thread::spawn(|| {
            let t_in = now_ns();
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(1));
            }
            (gettid(), t_in, now_ns())
        })
        .join()
        .unwrap();
        let end = now_ns();
        let events = trace.read_window(start, end).expect("read the window");

        let us = |t: u64| t - t % 1000; // the trace's resolution
        assert!(
            events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
            "oldest first"
        );
        assert!(events.iter().all(|e| (us(start)..=end).contains(&e.ts_ns)));
        // While the thread lived (t_in..t_out on its own clock reads), it went to sleep and was
        // woken 20 times: the kernel's times for those lie between the thread's own.
        let lived = us(t_in)..=t_out;
        let (mut out, mut into, mut waking, mut wakeup) = (0, 0, 0, 0);
        for e in &events {
            match &e.kind {
                KernelEventKind::Switch {
                    prev_tid, next_tid, ..
                } => {
                    if *prev_tid == tid && *next_tid != tid {
                        out += 1;
                    }
                    if *next_tid == tid {
                        into += 1;
                    }
                }
                KernelEventKind::Wake { tid: t, woken, .. } if *t == tid => {
                    assert!(lived.contains(&e.ts_ns), "{e:?} outside {lived:?}");
                    if *woken {
                        wakeup += 1;
                    } else {
                        waking += 1;
                    }
                }
                _ => {}
            }
        }
        // Switches *into* the thread are not counted: on this 2-vCPU VM (cpuidle haltpoll,
        // kernel 6.18) CPU 1 records no `sched_switch` out of its idle task at all, with perf
        // as with ftrace, so a thread woken there shows its wake-up and its switch out only.
        let _ = into;
        assert!(
            out >= 20 && waking >= 20 && wakeup >= 20,
            "tid {tid}: {out} switches out, {into} in, {waking} sched_waking, {wakeup} \
             sched_wakeup in {} events",
            events.len()
        );
        // The window is the caller's: nothing after `to_ns`, nothing before `from_ns`.
        let mid = trace.read_window(t_in, t_out).unwrap();
        assert!(mid.iter().all(|e| (us(t_in)..=t_out).contains(&e.ts_ns)));
        assert!(mid.len() < events.len());
    }

    #[test]
    fn drop_removes_the_instance_and_a_stale_one_is_replaced() {
        if !may_trace("sys::tracefs::drop_removes_the_instance_and_a_stale_one_is_replaced") {
            return;
        }
        let _one = INSTANCE.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = tracefs_root()
            .unwrap()
            .join("instances")
            .join(format!("lfrt-{}", std::process::id()));
        fs::create_dir(&stale).expect("make a stale instance");
        let trace = KernelTrace::open(&all_cpus(), 64).expect("open over a stale instance");
        assert_eq!(trace.path(), stale);
        assert!(fs::read_to_string(stale.join("trace_clock"))
            .unwrap()
            .contains("[mono]"));
        let again = KernelTrace::open(&all_cpus(), 64).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
        assert!(stale.exists(), "a refused second open left the first alone");
        drop(trace);
        assert!(
            !stale.exists(),
            "{} still there after drop",
            stale.display()
        );
        // An error after the instance was made leaves nothing behind either.
        let e = KernelTrace::open(&[4095], 64).unwrap_err();
        assert!(e.to_string().contains("tracing_cpumask"), "{e}");
        assert!(!stale.exists());
        drop(KernelTrace::open(&[0], 64).expect("open after an error"));
    }

    #[test]
    fn a_missing_event_is_skipped_and_reported() {
        if !may_trace("sys::tracefs::a_missing_event_is_skipped_and_reported") {
            return;
        }
        let _one = INSTANCE.lock().unwrap_or_else(PoisonError::into_inner);
        let events = [
            "sched/sched_switch",
            "sched/no_such_event",
            "no_such_system/x",
        ];
        let trace = KernelTrace::open_with(&all_cpus(), 64, &events).expect("open");
        assert_eq!(trace.missing_events(), &events[1..]);
        let on = fs::read_to_string(trace.path().join("set_event")).unwrap();
        assert_eq!(on.trim(), "sched:sched_switch");
    }

    #[test]
    fn the_systems_trace_is_left_alone() {
        if !may_trace("sys::tracefs::the_systems_trace_is_left_alone") {
            return;
        }
        let _one = INSTANCE.lock().unwrap_or_else(PoisonError::into_inner);
        let root = tracefs_root().unwrap();
        let top = || {
            [
                "tracing_on",
                "current_tracer",
                "trace_clock",
                "set_event",
                "buffer_size_kb",
            ]
            .map(|f| fs::read_to_string(root.join(f)).unwrap())
        };
        let before = top();
        let trace = KernelTrace::open(&[0], 256).expect("open");
        assert_eq!(top(), before, "while open");
        trace.read_window(0, u64::MAX).unwrap();
        assert_eq!(top(), before, "after a window");
        drop(trace);
        assert_eq!(top(), before, "after drop");
    }
}
