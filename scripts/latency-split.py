#!/usr/bin/env python3
"""Where a timer's latency goes, and which system calls an event costs (issue 27).

Two questions, answered from the kernel's own tracepoints (perf, CLOCK_MONOTONIC, ns):

  timers  Runs cyclictest and `lfrt cyclic` back to back with the same options and splits
          every measured wake-up the way `rtla timerlat` does:
            due     the timer's expiry (the hrtimer's `expires`, from hrtimer_start)
            irq     the local timer interrupt entered         (local_timer_entry)
            expire  the hrtimer callback ran                  (hrtimer_expire_entry)
            waking  the thread was woken                      (sched_waking)
            running the thread was switched in                (sched_switch)
            return  the blocking call returned to user space  (sys_exit of epoll_wait /
                                                               clock_nanosleep)
            handler the handler's first system call           (lfrt: the timerfd `read`;
                                                               cyclictest: = return)
          It prints each step's average, p50 and p99, and every system call the lane's
          thread made between `return` and `handler` (lfrt's dispatch path), per event, and
          every system call of lfrt's lane threads per timer event.
  echo    Runs `lfrt run` with one UDP echo lane (2 threads, SCHED_FIFO 80, the defaults
          otherwise) under `lfrt-loadgen`'s unbatched clients, records the lane threads'
          system calls for a few seconds and prints them per dispatched event, and the calls
          between a wait's return and the handler's first call (`recvmmsg`).

Usage:
  scripts/latency-split.py timers [-D SECONDS] [--aligned] [--lfrt-extra "OPTS"]
  scripts/latency-split.py echo   [-D SECONDS] [--ports N] [--lfrt-extra "--set K=V ..."]

Needs root (perf with kernel tracepoints), perf (Debian: linux-perf), cyclictest (rt-tests)
and a release build (`cargo build --release`; `LFRT=path/to/lfrt` measures another build, whose
lfrt-loadgen sits beside it). Tracing every system call slows each call by
a few hundred ns; both programs pay it alike, so read the split side by side, and take the
absolute latency from scripts/compare-cyclictest.sh. Bounded: each run has its own duration,
and the whole script holds the machine-wide RT lock (/tmp/lfrt-tools.lock).
"""

import argparse
import fcntl
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/lfrt-tools.lock"
EVENTS = [
    "irq_vectors:local_timer_entry",
    "timer:hrtimer_start",
    "timer:hrtimer_expire_entry",
    "timer:hrtimer_expire_exit",
    "sched:sched_waking",
    "sched:sched_switch",
    "raw_syscalls:sys_enter",
    "raw_syscalls:sys_exit",
]
LINE = re.compile(r"^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(\S+):\s*(.*)$")


def syscall_names():
    """x86_64 system call numbers from the kernel headers (linux-libc-dev)."""
    names = {}
    for path in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
        try:
            with open(path) as f:
                for line in f:
                    m = re.match(r"#define __NR_(\w+)\s+(\d+)", line)
                    if m:
                        names[int(m.group(2))] = m.group(1)
            break
        except OSError:
            continue
    return names


NAMES = syscall_names()
NR = {v: k for k, v in NAMES.items()}


def name(nr):
    return NAMES.get(nr, f"sys_{nr}")


def fields(s):
    return dict(kv.split("=", 1) for kv in s.split() if "=" in kv)


def parse(data):
    """Yields (comm, tid, cpu, t_ns, event, rest) from `perf script`."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "--ns", "-F", "comm,tid,cpu,time,event,trace"],
        capture_output=True, text=True, check=True,
    ).stdout
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        comm, tid, cpu, s, ns, ev, rest = m.groups()
        ns = ns.ljust(9, "0")[:9]
        yield comm, int(tid), int(cpu), int(s) * 1_000_000_000 + int(ns), ev, rest


def record(cmd, data, extra_events=()):
    """Runs `cmd` under `perf record -a` of EVENTS; returns the command's stdout."""
    full = ["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-m", "4096", "-o", data]
    for e in list(EVENTS) + list(extra_events):
        full += ["-e", e]
    full += ["--"] + cmd
    return subprocess.run(full, capture_output=True, text=True).stdout


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


STEPS = ["irq", "expire", "waking", "running", "return", "handler"]


def split_timers(data, threads, wait_nrs, handler_is_return, callback):
    """One chain per handler entry of a measured thread (comm matches `threads`).

    Returns (chains, calls, unchained): chains = list of dicts step -> ns after `due`;
    calls = {syscall: count} made between the wait's return and the handler; unchained =
    handler entries that were not preceded by a timer wake-up of their thread (the event was
    taken by a thread that was already running)."""
    expires = {}          # hrtimer -> expires (ns)
    irq = {}              # cpu -> last local_timer_entry ts
    current = {}          # cpu -> (due, irq_ts, expire_ts) of the callback running there
    chain = {}            # tid -> partial chain
    chains, unchained = [], 0
    calls, events = {}, 0
    every, reads = {}, 0  # every system call of the measured threads, and their timer reads
    for comm, tid, cpu, t, ev, rest in parse(data):
        if ev == "irq_vectors:local_timer_entry":
            irq[cpu] = t
        elif ev == "timer:hrtimer_start":
            f = fields(rest)
            expires[f["hrtimer"]] = int(f["expires"])
        elif ev == "timer:hrtimer_expire_entry":
            f = fields(rest)
            due = expires.get(f["hrtimer"])
            if (f.get("function") == callback and due is not None and irq.get(cpu) is not None
                    and 0 <= t - irq[cpu] < 1_000_000):
                current[cpu] = (due, irq[cpu], t)
        elif ev == "timer:hrtimer_expire_exit":
            current.pop(cpu, None)
        elif ev == "sched:sched_waking":
            # A wake-up inside a measured timer's callback, on the callback's CPU.
            f = fields(rest)
            target = int(f["pid"])
            if re.fullmatch(threads, f.get("comm", "")) and cpu in current:
                due, irq_ts, exp_ts = current[cpu]
                chain[target] = {"due": due, "irq": irq_ts, "expire": exp_ts, "waking": t}
        elif ev == "sched:sched_switch":
            f = fields(rest)
            nxt = int(f["next_pid"])
            c = chain.get(nxt)
            if c is not None and "running" not in c:
                c["running"] = t
        elif ev == "raw_syscalls:sys_exit" and re.fullmatch(threads, comm):
            nr = int(rest.split()[1])
            c = chain.get(tid)
            if nr in wait_nrs:
                if c is not None and "running" in c and "return" not in c:
                    c["return"] = t
                    c["calls"] = []
                    if handler_is_return:
                        c["handler"] = t
                        chains.append(c)
                        del chain[tid]
                elif c is None:
                    chain[tid] = {"return": t, "calls": [], "unchained": True}
        elif ev == "raw_syscalls:sys_enter" and re.fullmatch(threads, comm):
            parts = rest.split(None, 2)
            nr = int(parts[1])
            every[name(nr)] = every.get(name(nr), 0) + 1
            args = parts[2].strip("()").split(", ") if len(parts) > 2 else []
            if nr == NR.get("read") and len(args) > 2 and args[2] == "8":
                reads += 1
            c = chain.get(tid)
            if c is None or "return" not in c:
                continue
            args = parts[2].strip("()").split(", ") if len(parts) > 2 else []
            if nr == NR.get("read") and len(args) > 2 and args[2] == "8":
                events += 1
                for k in c["calls"]:
                    calls[k] = calls.get(k, 0) + 1
                if c.get("unchained"):
                    unchained += 1
                else:
                    c["handler"] = t
                    chains.append(c)
                del chain[tid]
            elif nr in wait_nrs:
                del chain[tid]  # waited again without a handler: not a measured timer
            else:
                c["calls"].append(name(nr))
    return chains, calls, unchained, events, (every, reads)


def report_timers(label, chains, calls, unchained, events, totals):
    print(f"\n## {label}: {len(chains)} wake-ups traced"
          + (f", {unchained} events taken without one" if unchained else ""))
    print(f"{'step':<26}{'avg µs':>9}{'p50':>9}{'p99':>9}{'max':>9}")
    prev = "due"
    for step in STEPS:
        xs = [(c[step] - c[prev]) / 1000 for c in chains if step in c and prev in c]
        if xs:
            what = {"irq": "due -> timer irq", "expire": "irq -> hrtimer callback",
                    "waking": "callback -> wake-up", "running": "wake-up -> running",
                    "return": "running -> wait returns", "handler": "wait returns -> handler"}[step]
            print(f"{what:<26}{statistics.mean(xs):>9.2f}{pct(xs, .5):>9.2f}{pct(xs, .99):>9.2f}{max(xs):>9.1f}")
        prev = step
    tot = [(c["handler"] - c["due"]) / 1000 for c in chains]
    if tot:
        print(f"{'total: due -> handler':<26}{statistics.mean(tot):>9.2f}{pct(tot, .5):>9.2f}{pct(tot, .99):>9.2f}{max(tot):>9.1f}")
    if events:
        per = ", ".join(f"{k} {v / events:.2f}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]))
        print(f"system calls between the wait's return and the handler, per event: {per or 'none'}")
    every, reads = totals
    if reads:
        per = ", ".join(f"{k} {v / reads:.3f}" for k, v in sorted(every.items(), key=lambda kv: -kv[1]))
        kc = sum(every.get(k, 0) for k in ("epoll_ctl", "timerfd_settime"))
        print(f"every system call of the measured threads, per timer event: {per}")
        print(f"epoll_ctl + timerfd_settime per event: {kc / reads:.3f}")


def lock():
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def lfrt_bin(name="lfrt"):
    if os.environ.get("LFRT"):
        # Another build (e.g. an older engine beside this one): its tools sit next to it.
        return os.path.join(os.path.dirname(os.environ["LFRT"]), name)
    path = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", name)
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", name], cwd=ROOT, check=True)
    return path


def timers(args):
    opts = ["-m", "-p", "80", "-t", "2", "-i", "1000", "-d", "0", "-D", str(args.duration), "-q"]
    if args.aligned:
        opts.append("--aligned=0")
    lfrt = lfrt_bin()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            ("cyclictest " + " ".join(opts), ["cyclictest"] + opts, r"cyclictest",
             {NR["clock_nanosleep"]}, True, "hrtimer_wakeup"),
            (f"lfrt cyclic {' '.join(opts)} {args.lfrt_extra}".strip(),
             [lfrt, "cyclic"] + opts + shlex.split(args.lfrt_extra), r"lf-.*",
             {NR["epoll_wait"], NR["epoll_pwait"]}, False, "timerfd_tmrproc"),
        ]
        print(f"# machine: {os.cpu_count()} CPUs, kernel {os.uname().release}; "
              f"perf record -a -k CLOCK_MONOTONIC -e {','.join(EVENTS)}")
        for label, cmd, threads, waits, is_return, callback in runs:
            data = os.path.join(tmp, "perf.data")
            out = record(cmd, data)
            summary = [l for l in out.splitlines() if l.startswith("#") and ("all" in l or "cyclic " in l)]
            report_timers(label, *split_timers(data, threads, waits, is_return, callback))
            for l in summary[-1:]:
                print(f"(its own summary: {l.strip()})")


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0
    for line in text.splitlines():
        if line.startswith("lfrt_lane_dispatched_total"):
            total += float(line.split()[-1])
    return total


def echo(args):
    lfrt, loadgen = lfrt_bin(), lfrt_bin("lfrt-loadgen")
    ports = f"7300-{7300 + args.ports - 1}"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "echo.toml")
        handlers = "".join(
            f'[[lane.handler]]\nkind = "udp-echo"\nbind = "127.0.0.1:{7300 + i}"\n'
            for i in range(args.ports))
        with open(cfg, "w") as f:
            f.write('[runtime]\nrt = "required"\n[[lane]]\nname = "echo"\npriority = 80\n'
                    'policy = "fifo"\nthreads = 2\nbuffer_bytes = 2048\n' + handlers)
        run_s = args.duration + 4
        srv = subprocess.Popen(
            [lfrt, "run", cfg, "-D", f"{run_s}s", "--metrics", "127.0.0.1:9477"]
            + shlex.split(args.lfrt_extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        gen = subprocess.Popen(
            [loadgen, "--ports", ports, "--mode", "closed", "--window", "16",
             "--duration", f"{args.duration + 2}s", "--json", os.path.join(tmp, "gen.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        tids = [t for t in os.listdir(f"/proc/{srv.pid}/task")
                if open(f"/proc/{srv.pid}/task/{t}/comm").read().startswith("lf-echo")]
        data = os.path.join(tmp, "perf.data")
        # The counter is read by a command perf runs, so that both reads bracket exactly the
        # recorded window.
        window = os.path.join(tmp, "window")
        probe = (f"import sys, time; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                 f"import importlib; m = importlib.import_module('latency-split'); "
                 f"a = m.scrape(9477); time.sleep({args.duration}); b = m.scrape(9477); "
                 f"open({window!r}, 'w').write(f'{{a}} {{b}}')")
        subprocess.run(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-o", data, "-t", ",".join(tids),
                        "-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit", "--",
                        sys.executable, "-c", probe], capture_output=True)
        before, after = map(float, open(window).read().split())
        gen.wait()
        srv.send_signal(signal.SIGINT)
        srv.wait()
        dispatched = after - before
        counts, between, state, handled = {}, {}, {}, 0
        for comm, tid, cpu, t, ev, rest in parse(data):
            nr = int(rest.split()[1])
            if ev == "raw_syscalls:sys_enter":
                counts[name(nr)] = counts.get(name(nr), 0) + 1
                if nr == NR["recvmmsg"] and tid in state:
                    handled += 1
                    for k in state.pop(tid):
                        between[k] = between.get(k, 0) + 1
                elif tid in state:
                    state[tid].append(name(nr))
            elif nr in (NR["epoll_wait"], NR["epoll_pwait"]) and not rest.endswith("= 0"):
                state[tid] = []
        print(f"# lfrt run (UDP echo, {args.ports} ports, 2 threads FIFO 80) {args.lfrt_extra}; "
              f"lfrt-loadgen unbatched clients, --window 16; {args.duration} s traced")
        print(f"dispatched events in the window: {dispatched:.0f}")
        if dispatched:
            per = ", ".join(f"{k} {v / dispatched:.3f}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
            print(f"system calls per dispatched event: {per}")
            kc = sum(counts.get(k, 0) for k in ("epoll_ctl", "timerfd_settime"))
            print(f"epoll_ctl + timerfd_settime per event: {kc / dispatched:.3f}")
        if handled:
            per = ", ".join(f"{k} {v / handled:.3f}" for k, v in sorted(between.items(), key=lambda kv: -kv[1]))
            print(f"between a wait's return and the handler's recvmmsg, per handler entry: {per or 'none'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["timers", "echo"])
    p.add_argument("-D", "--duration", type=int, default=5)
    p.add_argument("--aligned", action="store_true", help="timers expire at the same instant")
    p.add_argument("--ports", type=int, default=4)
    p.add_argument("--lfrt-extra", default="", help="extra options for lfrt only")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (perf with kernel tracepoints, SCHED_FIFO)")
    if subprocess.run(["which", "perf"], capture_output=True).returncode != 0:
        sys.exit("perf not found: apt-get install -y linux-perf")
    _held = lock()
    timers(args) if args.what == "timers" else echo(args)


if __name__ == "__main__":
    main()
