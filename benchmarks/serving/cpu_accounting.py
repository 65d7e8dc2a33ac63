"""CPU seconds of processes, from /proc/<pid>/stat, over a window; and the processes a server started."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
REAP_TIMEOUT_SECONDS = 10.0


def process_cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) in clock ticks of one process (all its threads, not its children), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces; fields after its closing parenthesis start at 3.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])  # fields 14 and 15


def cpu_seconds_by_pid(pids: Sequence[int]) -> dict[int, float]:
    """Processes that have exited are left out."""
    seconds = {}
    for pid in pids:
        try:
            seconds[pid] = sum(process_cpu_ticks(pid)) / CLOCK_TICKS_PER_SECOND
        except (FileNotFoundError, ProcessLookupError):
            pass
    return seconds


def cpu_seconds_between(before: dict[int, float], after: dict[int, float]) -> float:
    """Over the processes alive at both ends: one that exits meanwhile must not subtract its total."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    command: str


def describe(process: psutil.Process) -> ProcessInfo:
    try:
        command = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        command = "?"
    return ProcessInfo(process.pid, command.strip()[:100])


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def descendant_pids(pid: int) -> list[int]:
    return [process.pid for process in descendants(pid)]


def kill_and_reap(processes: Sequence[psutil.Process]) -> None:
    """Kills what a stopped server left behind and waits for it: on a GPU the next configuration's
    engine needs the memory those processes hold."""
    for process in processes:
        try:
            process.kill()  # psutil checks the pid still names the same process
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=REAP_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class CpuSpent:
    """CPU seconds over one window."""

    api_user: float  # the serving process itself
    api_system: float
    engine: float  # every descendant of the serving process (engine core, its workers, helpers)
    bystanders: float  # every process of the other configurations
    load_generator: float  # this process

    @property
    def api(self) -> float:
        return self.api_user + self.api_system


class CpuWindow:
    """Opened just before a round and closed just after it. The serving process's descendants are
    listed when it opens: vLLM may start helpers after readiness."""

    def __init__(self, api_pid: int, bystander_pids: Sequence[int]) -> None:
        self.api_pid = api_pid
        self.engine_pids = descendant_pids(api_pid)
        self.bystander_pids = list(bystander_pids)
        self.engine_before = cpu_seconds_by_pid(self.engine_pids)
        self.bystanders_before = cpu_seconds_by_pid(self.bystander_pids)
        self.load_generator_before = time.process_time()
        self.api_before = process_cpu_ticks(api_pid)  # last in, first out: the tightest window

    def close(self) -> CpuSpent:
        api_after = process_cpu_ticks(self.api_pid)
        # Differences of whole ticks: equal figures of two servers stay exactly equal.
        return CpuSpent(
            api_user=(api_after[0] - self.api_before[0]) / CLOCK_TICKS_PER_SECOND,
            api_system=(api_after[1] - self.api_before[1]) / CLOCK_TICKS_PER_SECOND,
            engine=cpu_seconds_between(self.engine_before, cpu_seconds_by_pid(self.engine_pids)),
            bystanders=cpu_seconds_between(self.bystanders_before, cpu_seconds_by_pid(self.bystander_pids)),
            load_generator=time.process_time() - self.load_generator_before,
        )
