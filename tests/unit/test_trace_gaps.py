"""benchmarks/trace_gaps.py on a small hand-made trace: busy time, the gaps, and what it blames for each."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from benchmarks.trace_gaps import report


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def _trace() -> dict[str, object]:
    return {
        "traceEvents": [
            _x("user_annotation", "poc_batch", 0, 1000),
            # Host side: two ops, each launching one kernel; a device sync in between.
            _x("cpu_op", "vllm::moe_forward", 10, 40),
            _x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1),
            _x("cuda_runtime", "cudaStreamSynchronize", 300, 350),
            _x("cpu_op", "aten::mm", 640, 20),
            _x("cpu_op", "aten::add", 645, 5),  # nested: the innermost op launches
            _x("cuda_runtime", "cudaLaunchKernel", 646, 2, correlation=2),
            # Device: 100-400 busy, idle 400-700 (the sync's tail), busy 700-900, idle to the window's end.
            _x("kernel", "fused_moe_kernel", 100, 300, tid=7, correlation=1),
            _x("kernel", "add_kernel", 700, 200, tid=7, correlation=2),
            {"ph": "i", "cat": "instant", "name": "ignored", "ts": 5},
        ]
    }


def test_busy_share_gaps_and_their_causes(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(_trace(), handle)
    text = report(path, "poc_batch", rows=5)
    assert "device busy 0.5 ms of 1.0 ms (50.0%); 3 idle gaps >= 20 us, 0.5 ms in all" in text
    # The 300-us gap before add_kernel: launched inside aten::add (the innermost op), overlapped by the sync.
    assert (
        "0.30 ms at +    0.4 ms: fused_moe_kernel -> add_kernel (launched in aten::add; cudaStreamSynchronize 0.25 ms)"
        in text
    )
    assert "     0.25 ms  cudaStreamSynchronize" in text
    assert (
        "0.10 ms at +    0.0 ms: (window start) -> fused_moe_kernel (launched in vllm::moe_forward; no host call)"
        in text
    )
    assert "0.10 ms at +    0.9 ms: add_kernel -> (window end)" in text


def test_without_a_window_the_device_span_is_measured(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace()))
    assert "device busy 0.5 ms of 0.8 ms (62.5%); 1 idle gaps" in report(path, None, rows=5)


def test_a_trace_without_device_activity_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": [_x("cpu_op", "aten::mm", 0, 10)]}))
    assert "no device activity" in report(path, None, rows=5)


def test_how_far_ahead_the_host_launched(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_trace()))
    text = report(path, "poc_batch", rows=5)
    # fused_moe_kernel starts 75 us after its launch ended, add_kernel 52 us; the last launch ends at 648 us.
    assert (
        "the host's lead over the device (kernel start - its launch's end), 2 launches: "
        "min 0.05 ms, median 0.07 ms, max 0.07 ms; last launch at +0.6 ms of 1.0 ms"
    ) in text
    assert "      0.35 ms in    1 calls  cudaStreamSynchronize" in text


def test_kernels_launched_before_the_window_count_with_their_launch(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    events = [_x("user_annotation", "poc_batch", 680, 320)] + _trace()["traceEvents"][1:]  # type: ignore[index]
    path.write_text(json.dumps({"traceEvents": events}))
    # Only add_kernel starts in the window, launched 32 us before the window opened.
    assert "1 launches: min 0.05 ms, median 0.05 ms, max 0.05 ms; last launch at -0.0 ms of 0.3 ms" in report(
        path, "poc_batch", rows=5
    )
