"""Where a GPU sat idle in a profiled run: reads a torch.profiler Chrome trace and prints the device's busy
share, its idle gaps, the host calls that overlapped them, which host op launched the work after each gap, and
how far ahead of the device the host launched.

A kernel table says what the device did; the time it did nothing (waiting on a host sync, an allocator call,
Python between launches) appears in no row of it. This is the view the PoC forward's remaining gaps need.

Usage, from the repository root (traces from `poc_forward_bench.py --profile --trace-dir DIR`, gzipped or not):

    python3 benchmarks/trace_gaps.py DIR/1024x32-compiled.json [--window poc_batch] [--rows 12]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
HOST_CALL_CATEGORIES = {"cuda_runtime", "cuda_driver"}
# Host calls that are not launches: a gap that one of these overlaps was very likely caused by it.
LAUNCH_CALLS = {
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
}
MIN_GAP_US = 20.0


@dataclass(frozen=True)
class Span:
    name: str
    start: float
    end: float
    tid: Any = None
    correlation: Any = None


@dataclass(frozen=True)
class Gap:
    start: float
    end: float
    before: str
    after: str
    launched_by: str
    host_calls: tuple[tuple[str, float], ...]

    @property
    def length(self) -> float:
        return self.end - self.start


def load_events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        trace = json.load(handle)
    return [event for event in trace.get("traceEvents", []) if event.get("ph") == "X"]


def spans(events: list[dict[str, Any]], categories: set[str]) -> list[Span]:
    out = [
        Span(
            e["name"],
            float(e["ts"]),
            float(e["ts"]) + float(e.get("dur", 0)),
            e.get("tid"),
            (e.get("args") or {}).get("correlation"),
        )
        for e in events
        if e.get("cat") in categories
    ]
    return sorted(out, key=lambda span: span.start)


def window_of(events: list[dict[str, Any]], name: str | None, device: list[Span]) -> tuple[float, float]:
    for event in events:
        if name and event.get("cat") == "user_annotation" and event.get("name") == name:
            return float(event["ts"]), float(event["ts"]) + float(event["dur"])
    return device[0].start, max(span.end for span in device)


def launching_ops(events: list[dict[str, Any]], host_calls: list[Span]) -> dict[Any, str]:
    """correlation id -> the innermost CPU op around the host call that launched it."""
    ops_by_thread: dict[Any, list[Span]] = defaultdict(list)
    for span in spans(events, {"cpu_op"}):
        ops_by_thread[span.tid].append(span)
    starts_by_thread = {tid: [op.start for op in ops] for tid, ops in ops_by_thread.items()}
    launched: dict[Any, str] = {}
    for call in host_calls:
        if call.correlation is None:
            continue
        ops = ops_by_thread.get(call.tid, [])
        # Ops are sorted by start: the innermost enclosing op is the latest-starting one that still spans the call.
        index = bisect_right(starts_by_thread.get(call.tid, []), call.start) - 1
        while index >= 0 and ops[index].end < call.end:
            index -= 1
        launched[call.correlation] = ops[index].name if index >= 0 else "(no op)"
    return launched


def find_gaps(
    device: list[Span], host_calls: list[Span], launched: dict[Any, str], lo: float, hi: float
) -> tuple[float, list[Gap]]:
    """Busy microseconds inside [lo, hi] and every idle gap of at least MIN_GAP_US between device spans."""
    busy, gaps = 0.0, []
    cursor, previous = lo, "(window start)"
    host_calls = [call for call in host_calls if call.name not in LAUNCH_CALLS]
    call_starts = [call.start for call in host_calls]
    for span in device:
        if span.end <= lo or span.start >= hi:
            continue
        start, end = max(span.start, lo), min(span.end, hi)
        if start - cursor >= MIN_GAP_US:
            gaps.append(make_gap(cursor, start, previous, span, host_calls, call_starts, launched))
        if end > cursor:
            busy += end - max(start, cursor)
            cursor, previous = end, span.name
    if hi - cursor >= MIN_GAP_US:
        gaps.append(Gap(cursor, hi, previous, "(window end)", "", overlapping(host_calls, call_starts, cursor, hi)))
    return busy, gaps


def make_gap(
    start: float,
    end: float,
    previous: str,
    after: Span,
    host_calls: list[Span],
    call_starts: list[float],
    launched: dict[Any, str],
) -> Gap:
    return Gap(
        start,
        end,
        previous,
        after.name,
        launched.get(after.correlation, ""),
        overlapping(host_calls, call_starts, start, end),
    )


def overlapping(
    host_calls: list[Span], call_starts: list[float], start: float, end: float
) -> tuple[tuple[str, float], ...]:
    """Host calls (launches already left out) that overlap [start, end], with how much of the gap each covers."""
    found: dict[str, float] = defaultdict(float)
    for call in host_calls[: bisect_right(call_starts, end)]:
        if call.end <= start:
            continue
        found[call.name] += min(call.end, end) - max(call.start, start)
    return tuple(sorted(found.items(), key=lambda item: -item[1]))


def launch_lead(device: list[Span], host_calls: list[Span], lo: float, hi: float) -> list[str]:
    """How far ahead of the device the host ran: a host that launches each kernel just before it runs (a sync in
    the forward, or launches slower than the kernels) leaves no host time to overlap anything with the forward."""
    launches = {
        call.correlation: call for call in host_calls if call.name in LAUNCH_CALLS and call.correlation is not None
    }
    # Each kernel of the window with its launch (which may precede the window).
    launched = [
        (launches[span.correlation], span) for span in device if lo <= span.start < hi and span.correlation in launches
    ]
    if not launched:
        return []
    leads = sorted(span.start - call.end for call, span in launched)
    last_launch = max(call.end for call, _ in launched)
    waits: dict[str, list[float]] = defaultdict(list)
    for call in host_calls:
        if call.name not in LAUNCH_CALLS and lo <= call.start < hi and call.end - call.start >= MIN_GAP_US:
            waits[call.name].append(call.end - call.start)
    lines = [
        f"the host's lead over the device (kernel start - its launch's end), {len(leads)} launches: "
        f"min {leads[0] / 1e3:.2f} ms, median {leads[len(leads) // 2] / 1e3:.2f} ms, max {leads[-1] / 1e3:.2f} ms; "
        f"last launch at {(last_launch - lo) / 1e3:+.1f} ms of {(hi - lo) / 1e3:.1f} ms",
        f"host calls of at least {MIN_GAP_US:.0f} us other than launches:",
    ]
    for name, lengths in sorted(waits.items(), key=lambda item: -sum(item[1])):
        lines.append(f"  {sum(lengths) / 1e3:8.2f} ms in {len(lengths):4d} calls  {name}")
    return lines


def short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def report(path: Path, window: str | None, rows: int) -> str:
    events = load_events(path)
    device = spans(events, DEVICE_CATEGORIES)
    if not device:
        return f"{path.name}: no device activity in the trace (a CPU run?)"
    host_calls = spans(events, HOST_CALL_CATEGORIES)
    lo, hi = window_of(events, window, device)
    busy, gaps = find_gaps(device, host_calls, launching_ops(events, host_calls), lo, hi)
    wall = hi - lo
    idle = sum(gap.length for gap in gaps)
    lines = [
        f"{path.name}: device busy {busy / 1e3:.1f} ms of {wall / 1e3:.1f} ms ({busy / wall:.1%}); "
        f"{len(gaps)} idle gaps >= {MIN_GAP_US:.0f} us, {idle / 1e3:.1f} ms in all"
    ]
    by_launcher: dict[str, list[float]] = defaultdict(list)
    by_call: dict[str, float] = defaultdict(float)
    for gap in gaps:
        by_launcher[gap.launched_by or gap.after].append(gap.length)
        for name, covered in gap.host_calls:
            by_call[name] += covered
    lines.append("idle time by the host op that launched the work after the gap:")
    for name, lengths in sorted(by_launcher.items(), key=lambda item: -sum(item[1]))[:rows]:
        lines.append(f"  {sum(lengths) / 1e3:8.2f} ms in {len(lengths):4d} gaps  {short(name, 90)}")
    lines.append("host calls (other than launches) overlapping the gaps:")
    for name, covered in sorted(by_call.items(), key=lambda item: -item[1])[:rows]:
        lines.append(f"  {covered / 1e3:8.2f} ms  {name}")
    lines.append("largest gaps:")
    for gap in sorted(gaps, key=lambda g: -g.length)[:rows]:
        calls = ", ".join(f"{name} {covered / 1e3:.2f} ms" for name, covered in gap.host_calls[:3]) or "no host call"
        lines.append(
            f"  {gap.length / 1e3:6.2f} ms at +{(gap.start - lo) / 1e3:7.1f} ms: {short(gap.before, 40)} -> {short(gap.after, 40)}"
            f" (launched in {short(gap.launched_by or '?', 40)}; {calls})"
        )
    lines.extend(launch_lead(device, host_calls, lo, hi))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument(
        "--window", help="a record_function range to measure within (default: first to last device activity)"
    )
    parser.add_argument("--rows", type=int, default=12)
    args = parser.parse_args()
    for path in args.traces:
        print(report(path, args.window, args.rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
