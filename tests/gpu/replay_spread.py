"""How far an honest replay lands from its own record on the served model, and why: prints, for each request,
the chain distance of the server's replay of its own generation (ValidateInference) beside the distance between
two identical generations (same seed, same tokens, run one after the other). When the second is as large as the
first, the spread is the engine's run-to-run variation, not the replay; when it is zero, the replay differs.

Requests: the 7-token prompt of tests/gpu/test_core.py, 32 tokens, top-5; sampled (temperature 0.7, seed 21) in
processed and raw mode, and greedy. Then a regex-constrained generation ([a-z ]+, so that a model whose tokenizer's
EOS lies past its rows never needs it) and its replay, and a replay of unconstrained tokens under that regex (the
grammar must turn itself off for that request, not fail), and a plain generation after it.

Prints figures; asserts nothing (it stops on an RPC error). Usage on a GPU host (docs/gpu.md):
    python3 tests/gpu/replay_spread.py --model .build/models/deepseek-v4-tiny \\
        --server-flags="--kv-cache-dtype fp8 --max-model-len 4096"
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
from pathlib import Path
from typing import Any

from engine_ext.consensus.inference_distance import sequence_distance
from gonka.mlnode.client import Generation, InferenceClient, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import SHARED_SERVER_FLAGS, start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
TOP_K = 5
THRESHOLD = 0.90  # the chain's inference threshold for DeepSeek-V4-Flash (poc-v2-models.md 7.3)
REQUESTS: dict[str, dict[str, Any]] = {
    "sampled, processed": dict(temperature=0.7, seed=21),
    "sampled, raw": dict(temperature=0.7, seed=21, logprobs_mode="raw"),
    "greedy": dict(temperature=0.0),
}
LOWERCASE = "[a-z ]+"


def record(generation: Generation) -> list[tuple[int, dict[int, float]]]:
    output = generation.first
    return list(zip(output.token_ids, output.logprobs.chain_top, strict=True))


def replay_distance(client: InferenceClient, request: pb.GenerateRequest, generation: Generation) -> str:
    output = generation.first
    item = inference_item(request, output.token_ids, output.logprobs.chain_top, threshold=THRESHOLD)
    [response] = client.validate_inference([item], timeout=300)
    if response.WhichOneof("outcome") != "verdict":
        return f"no verdict: {response}"
    verdict = response.verdict
    return f"{verdict.distance:.4g} (passed {verdict.passed}, top ids found {verdict.top_ids_found:.2f})"


def spread(client: InferenceClient, name: str, fields: dict[str, Any]) -> None:
    request = build_request(token_ids=PROMPT_IDS, max_tokens=32, top_logprobs=TOP_K, **fields)
    recorded = build_request(token_ids=PROMPT_IDS, max_tokens=32, top_logprobs=TOP_K, chain_top_logprobs=True, **fields)
    first, second = client.generate(recorded), client.generate(recorded)
    between = sequence_distance(record(first), record(second))
    replayed = replay_distance(client, request, first)
    print(f"{name}: replay of its own record {replayed}; two identical generations {between:.4g} (-1: other tokens)")
    print(f"  first position, first run {dict(first.first.logprobs.chain_top[0])}")
    print(f"  first position, second run {dict(second.first.logprobs.chain_top[0])}")


def grammar(client: InferenceClient) -> None:
    fields: dict[str, Any] = dict(
        token_ids=PROMPT_IDS, max_tokens=16, temperature=0.7, seed=5, top_logprobs=TOP_K, regex=LOWERCASE
    )
    request = build_request(**fields)
    constrained = client.generate(build_request(**fields, chain_top_logprobs=True, include_text=True))
    print(f"regex {LOWERCASE}: text {constrained.first.text!r}; replay {replay_distance(client, request, constrained)}")
    unconstrained: dict[str, Any] = dict(
        token_ids=PROMPT_IDS, max_tokens=16, temperature=0.7, seed=6, top_logprobs=TOP_K
    )
    free = client.generate(build_request(**unconstrained, chain_top_logprobs=True))
    print(f"unconstrained tokens replayed under the regex: {replay_distance(client, request, free)}")
    after = client.generate(token_ids=PROMPT_IDS, max_tokens=4, temperature=0.0)
    print(f"a generation after it: {len(after.first.token_ids)} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--server-flags", default="", help="vLLM flags added to the test suite's shared ones")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "server.log"
        arguments = ["--model", str(args.model.resolve()), *SHARED_SERVER_FLAGS, *shlex.split(args.server_flags)]
        server = start_server(log, arguments)
        try:
            with InferenceClient(server.target) as client:
                for name, fields in REQUESTS.items():
                    spread(client, name, fields)
                grammar(client)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
