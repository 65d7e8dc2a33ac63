"""CPU seconds of processes, from /proc/<pid>/stat, and the processes a server started."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def process_cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) in clock ticks of one process (all its threads, not its children), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces; fields after its closing parenthesis start at 3.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])  # fields 14 and 15


def process_cpu_seconds(pid: int) -> float:
    return sum(process_cpu_ticks(pid)) / CLOCK_TICKS_PER_SECOND


def processes_cpu_seconds(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # a helper process that has exited meanwhile
    return total


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
