#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Once a second for SECONDS: each CPU's busy share, and the CPU ticks (1/100 s) of the
processes a proxy benchmark involves (iperf3 client and server, haproxy, nginx, sluice,
ksoftirqd, kworkers), read from /proc. Run it alongside a bench/compare.sh run to see which
stage of a pipeline is saturated.

usage: bench/cpu-census.py SECONDS
"""
import os
import sys
import time

WATCHED = ("iperf3", "haproxy", "nginx", "sluice", "ksoftirqd", "kworker")


def cpu_times():
    """{cpuN: (busy jiffies, all jiffies)}; idle and iowait count as not busy."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                v = list(map(int, fields))
                out[name] = (sum(v) - v[3] - v[4], sum(v))
    return out


def process_ticks():
    """{pid: (label, utime + stime)} of the watched processes; kernel threads by kind."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            continue  # gone since listdir
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if not comm.startswith(WATCHED):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        label = comm.split("/")[0]
        if comm == "iperf3":
            label += " -c" if "-c" in argv else " -s"
        out[pid] = (label, int(fields[11]) + int(fields[12]))
    return out


def main():
    end = time.time() + float(sys.argv[1])
    cpus, procs = cpu_times(), process_ticks()
    while time.time() < end:
        time.sleep(1)
        cpus_now, procs_now = cpu_times(), process_ticks()
        busy = " ".join(
            f"{c}={100 * (cpus_now[c][0] - cpus[c][0]) / max(1, cpus_now[c][1] - cpus[c][1]):.0f}%"
            for c in sorted(cpus_now)
        )
        ticks = {}
        for pid, (label, t) in procs_now.items():
            if pid in procs:
                ticks[label] = ticks.get(label, 0) + t - procs[pid][1]
        top = " ".join(f"{k}={v}" for k, v in sorted(ticks.items(), key=lambda kv: -kv[1]) if v)
        print(time.strftime("%H:%M:%S"), busy, "|", top, flush=True)
        cpus, procs = cpus_now, procs_now


if __name__ == "__main__":
    main()
