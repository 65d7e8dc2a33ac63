"""Progress lines on stderr, timestamped, while the report waits for the end of the run."""

from __future__ import annotations

import sys
import time

from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.workload import logprobs_label


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def format_progress(result: RoundResult) -> str:
    ttft = (
        "no TTFT"
        if result.ttft_p99_ms is None
        else f"TTFT p50 {result.ttft_p50_ms:.0f} ms, p99 {result.ttft_p99_ms:.0f} ms"
    )
    return (
        f"{result.server} ({logprobs_label(result.logprobs)}) x{result.streams}, cycle {result.cycle + 1}: {result.tokens_per_second:.0f} tok/s, "
        f"{ttft}, API CPU {result.api_cpu_us_per_token:.1f} us/token, engine side {result.engine_cpu_us_per_token:.0f} us/token, "
        f"wall {result.wall_seconds:.1f}s"
    )
