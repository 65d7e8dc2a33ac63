"""Serving benchmark: this server against vLLM's OpenAI-compatible server, its gRPC server (vLLM 0.15
only) and its offline `LLM.generate`.

The configurations are started one after the other and then run side by side (default: one engine
loads at a time, all stay resident), or with --one-at-a-time each is started, measured and stopped
before the next starts (where two engines cannot share the accelerator). For each concurrency
(default 1, 16, 64) every configuration gets a short untimed warm-up round, then --repeats cycles of
measured rounds: in each cycle every configuration runs one round, in an order rotated from cycle to
cycle. In a round all streams start together, each generating exactly --tokens tokens (temperature
1.0, a distinct seed per stream, ignore_eos) from the same chat prompt. Measured per round: delivered
tokens/s, time to first token (p50, p99; with --ttft-rounds one-token rounds after it for more
samples), the CPU seconds (utime + stime, from /proc/<pid>/stat) that the server's API process itself
spent per delivered token, and beside it those of all its descendant processes (engine core, workers;
on a GPU host the worker busy-polls, so that figure follows wall time as much as work). The load
generator is this process.

Printed: per concurrency each figure's median over the cycles (TTFT percentiles: over all cycles'
samples), tokens/s across the concurrencies (where each configuration saturates), and the goals. Goals
on CPU and speed are judged on the median of ours-over-theirs ratios within each cycle (side by side,
rounds minutes apart): this machine's speed drifts by 10-15% over minutes, which would land straight
in ratios of rounds far apart. Goals on TTFT are judged on the percentiles of all cycles' samples: one
cycle's tail is one or two draws of the engine's prefill cascade (see measurement.measure_ttft).

Configurations, all with the same model, engine flags (--max-num-seqs and --max-num-batched-tokens
sized for the largest concurrency, then --server-flags) and environment (the project's vLLM plugin is
kept out of stock vLLM):
  ours       `python -m server`: chat input with top-5 logprobs, and token-id input without logprobs
  openai     `vllm.entrypoints.openai.api_server`: streamed chat completions, top-5 logprobs
  vllm-grpc  `vllm.entrypoints.grpc_server`: token-id input (it has no logprobs); vLLM 0.15 only
  offline    `LLM.generate` in a process of its own: per round one call with one prompt per stream (the
             chat prompt's token ids as rendered here with the model's chat template), the same
             sampling and seeds, top-5 logprobs; tokens/s = generated tokens / the call's wall time,
             after an untimed warm-up call; no TTFT
The default --only lists those the installed vLLM has.

It prints figures and asserts nothing about speed; it fails only when a configuration misbehaves (a
stream short of tokens, a wrong prompt length, missing logprobs, an RPC error). The code lives in
benchmarks/serving/ (its __init__ lists the modules); this file is the entry point. Usage, from the
repository root:

    .venv/bin/python benchmarks/serving_bench.py                     # or: make bench
    .venv/bin/python benchmarks/serving_bench.py --only ours --concurrency 1,16 --repeats 1 --json out.json
    # A GPU host, one engine at a time (the reference first), dummy weights of a model's shape:
    python3 benchmarks/serving_bench.py --one-at-a-time --only offline,ours,openai --model .build/models/qwen3-8b-shape \
        --server-flags "--load-format dummy --max-model-len 4096 --gpu-memory-utilization 0.85" \
        --concurrency 64,256 --tokens 256 --repeats 2 --ttft-rounds 2 --coalesce-ms 0 --json serving-h200.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, only benchmarks/ is on the path; the package and tests/support (its server
# launcher helpers, not an installed package) are found from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serving.cli import main

if __name__ == "__main__":
    sys.exit(main())
