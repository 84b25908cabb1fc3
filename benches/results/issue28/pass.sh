#!/usr/bin/env bash
# Issue 28 measurement pass: the task layer before (ae02f78) and after, alternating.
set -u
O=${O:-/tmp/apass}
mkdir -p $O
L=/tmp/lfrt-tools.lock
PRE=${PRE:-/tmp/tasks-pre28}
NEW=${NEW:-/tmp/tasks-new28}
echo "start $(date -u +%H:%M:%S) $(uptime)" > $O/log
for r in 1 2; do
  for B in pre new; do
    bin=$PRE; [ $B = new ] && bin=$NEW
    flock $L $bin echo --secs 5 --prio 50 --ports 4 --window 8 --gen-threads 2 > $O/echo-$B-$r.txt 2>&1
  done
done
echo "echo done $(date -u +%H:%M:%S)" >> $O/log
EV=raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_futex
for S in async handler; do
  for B in pre new; do
    bin=$PRE; [ $B = new ] && bin=$NEW
    flock $L $bin echo --secs 9 --prio 50 --ports 4 --window 8 --gen-threads 2 --server $S > $O/sys-$S-$B.txt 2>&1 &
    sleep 4
    pid=$(pgrep -f "^$bin echo --secs 9" | head -1)
    perf stat -e $EV -x, -o $O/perf-$S-$B.txt -p $pid -- sleep 4
    wait
  done
done
echo "sys done $(date -u +%H:%M:%S)" >> $O/log
for r in 1 2; do
  for B in pre new; do
    bin=$PRE; [ $B = new ] && bin=$NEW
    flock $L $bin timer --secs 10 --prio 80 > $O/timer-$B-$r.txt 2>&1
  done
done
echo "timer done $(date -u +%H:%M:%S)" >> $O/log
for r in 1 2; do
  for B in pre new; do
    bin=$PRE; [ $B = new ] && bin=$NEW
    flock $L $bin relay --secs 5 --prio 80 --clients 4 > $O/relay-$B-$r.txt 2>&1
  done
done
echo "end $(date -u +%H:%M:%S) $(uptime)" >> $O/log
