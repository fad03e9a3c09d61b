"""CPU and memory of the processes the invoke benchmark started, and how busy the machine was."""

from __future__ import annotations

import os
import threading
import time

from bench.invoke_stack import Stack
from bench.procfs import machine_cpu_ticks, proc_cpu_seconds, proc_rss_kib


class Meter:
    """CPU seconds of our processes and of the whole machine, sampled around each run; RSS of
    `watched` (the API, the worker and LiteLLM unless told) sampled every 250 ms in a thread,
    each sample also kept with its `time.monotonic()` in `rss_timeline`."""

    def __init__(
        self, stack: Stack, watched: tuple[str, ...] = ("api", "worker", "litellm")
    ) -> None:
        self.stack = stack
        self.watched = watched
        self.rss_peak: dict[str, int] = {}
        self.rss_first: dict[str, int] = {}
        self.rss_last: dict[str, int] = {}
        self.rss_timeline: dict[str, list[tuple[float, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_rss, daemon=True)

    def pids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {"bench": [os.getpid()]}
        for name in ("api", "worker", "temporal", "upstream", "litellm"):
            child = self.stack.child(name)
            if child is not None:
                out[name] = [child.pid]
        pg = self.stack.postgres
        if pg is not None and pg.postmaster is not None:
            out["postgres"] = pg.pids()
        return out

    def cpu(self) -> tuple[dict[str, float], tuple[float, float]]:
        per = {name: sum(proc_cpu_seconds(p) for p in pids) for name, pids in self.pids().items()}
        pg = self.stack.postgres
        if pg is not None and pg.postmaster is not None:
            # Backends come and go: the postmaster's reaped-children time keeps theirs.
            per["postgres"] += proc_cpu_seconds(pg.postmaster, reaped_children=True)
            per["postgres"] -= proc_cpu_seconds(pg.postmaster)
        return per, machine_cpu_ticks()

    def _sample_rss(self) -> None:
        while not self._stop.is_set():
            for name in self.watched:
                child = self.stack.child(name)
                if child is None or not child.alive():
                    continue
                rss, _ = proc_rss_kib(child.pid)
                self.rss_timeline.setdefault(name, []).append((time.monotonic(), rss))
                self.rss_first.setdefault(name, rss)
                self.rss_last[name] = rss
                self.rss_peak[name] = max(self.rss_peak.get(name, 0), rss)
            self._stop.wait(0.25)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def rss(self) -> dict[str, tuple[int, int, int, int]]:
        """name -> first, peak, last sampled RSS and the kernel's high-water mark (KiB)."""
        out: dict[str, tuple[int, int, int, int]] = {}
        for name in self.watched:
            child = self.stack.child(name)
            if child is not None and name in self.rss_peak:
                hwm = proc_rss_kib(child.pid)[1]
                out[name] = (self.rss_first[name], self.rss_peak[name], self.rss_last[name], hwm)
        return out
