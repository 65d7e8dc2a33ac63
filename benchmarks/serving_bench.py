"""Serving benchmark: this server against vLLM 0.15.1's OpenAI-compatible and gRPC servers.

The servers are started one after the other and then run side by side; only one is ever loaded.
For each concurrency (default 1, 16, 64) every configuration gets a short untimed warm-up round, then
--repeats cycles of measured rounds: in each cycle every configuration runs one round, in an order
rotated from cycle to cycle. In a round all streams start together, each generating exactly --tokens
tokens (temperature 1.0, a distinct seed per stream, ignore_eos) from the same chat prompt. Measured
per round: delivered tokens/s, time to first token (p50, p99; with --ttft-rounds one-token rounds
after it for more samples) and the CPU seconds (utime + stime, from /proc/<pid>/stat) that the
server's API process itself spent per delivered token. The engine core is a child process of each
server and is not counted; the load generator is this process.

Printed: each figure's median over the cycles (TTFT percentiles: over all cycles' samples). Goals
on CPU and speed are judged on the median of the two servers' ratios within each cycle (rounds
minutes apart): this machine's speed drifts by 10-15% over minutes, which would land straight in
ratios of rounds far apart. Goals on TTFT are judged on the percentiles of all cycles' samples: one
cycle's tail is one or two draws of the engine's prefill cascade (see measurement.measure_ttft).

Configurations, all with the same model, engine flags and environment (the project's vLLM plugin is
kept out of the two stock vLLM servers):
  ours       `python -m server`: chat input with top-5 logprobs, and token-id input without logprobs
  openai     `vllm.entrypoints.openai.api_server`: streamed chat completions, top-5 logprobs
  vllm-grpc  `vllm.entrypoints.grpc_server`: token-id input (it has no logprobs)

It prints figures and asserts nothing about speed; it fails only when a server misbehaves (a stream
short of tokens, a wrong prompt length, an RPC error). The code lives in benchmarks/serving/ (its
__init__ lists the modules); this file is the entry point. Usage, from the repository root:

    .venv/bin/python benchmarks/serving_bench.py                     # or: make bench
    .venv/bin/python benchmarks/serving_bench.py --only ours --concurrency 1,16 --repeats 1 --json out.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, only benchmarks/ is on the path; the package and tests/support (its server
# launcher helpers, not an installed package) are found from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serving.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
