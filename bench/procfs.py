"""CPU time and memory of processes, and the machine's CPU counters, read from /proc."""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB from /proc, (0, 0) when the process is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def proc_cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """User + system CPU seconds of one process (its threads included), and with
    `reaped_children` also of its children that exited and were waited for."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def children_of(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            found.append(int(entry))
    return found


def machine_cpu_ticks() -> tuple[float, float]:
    """(all, idle) CPU ticks of the whole machine since boot, every core and process counted."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return float(sum(fields)), float(idle)
