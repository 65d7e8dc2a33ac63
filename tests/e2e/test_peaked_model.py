"""Logprobs modes where they differ: the peaked embedded model (output head x32), whose sampling filters
really cut a top-5 list, so processed-mode padding shows and the mode detector has something to see."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest

from engine_ext.consensus import detect_logprobs_mode, sequence_distance
from engine_ext.consensus.logprobs_mode import LogprobsMode
from gonka.mlnode.client import AsyncInferenceClient, Generation, InferenceClient
from server.embedded_model import PEAKED_MODEL_DIR
from tests.support.server_process import REPO_ROOT, SERVER_LAYER_FLAGS, ServerProcess, start_server

CONFIGURATIONS = {
    "greedy": dict(temperature=0.0),
    "temperature 0.7": dict(temperature=0.7),
    "temperature 1.0": dict(temperature=1.0),
    "top_p 0.9": dict(temperature=1.0, top_p=0.9),
    "top_k 20": dict(temperature=1.0, top_k=20),
}
REQUESTS_PER_CONFIGURATION = 9
TOKENS = 24


@pytest.fixture(scope="module")
def peaked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    model = REPO_ROOT / PEAKED_MODEL_DIR
    if not (model / "build_info.json").is_file():
        pytest.fail(f"the peaked model is not built at {model}: run `make test` (it builds it)")
    process = start_server(
        tmp_path_factory.mktemp("peaked") / "server.log", ["--model", str(model), *SERVER_LAYER_FLAGS]
    )
    yield process
    assert process.stop() == 0, process.log_tail()


def run_all(server: ServerProcess, mode: str) -> dict[str, list[Generation]]:
    async def scenario() -> dict[str, list[Generation]]:
        async with AsyncInferenceClient(server.target) as aio:
            jobs = {
                name: [
                    aio.generate(
                        token_ids=[1000 + 37 * index, 2000 + index, 11],
                        max_tokens=TOKENS,
                        ignore_eos=True,
                        seed=index,
                        top_logprobs=5,
                        logprobs_mode=mode,
                        chain_top_logprobs=True,
                        **options,
                    )
                    for index in range(REQUESTS_PER_CONFIGURATION)
                ]
                for name, options in CONFIGURATIONS.items()
            }
            return {name: list(await asyncio.gather(*requests)) for name, requests in jobs.items()}

    return asyncio.run(scenario())


def test_processed_lists_are_padded_with_the_lowest_ids_where_top_p_cuts(peaked_server: ServerProcess) -> None:
    with InferenceClient(peaked_server.target) as client:
        processed = client.generate(
            token_ids=[1000, 2000, 11],
            max_tokens=40,
            ignore_eos=True,
            temperature=1.0,
            top_p=0.9,
            seed=3,
            top_logprobs=5,
            logprobs_mode="processed",
        ).first
        raw = client.generate(
            token_ids=[1000, 2000, 11],
            max_tokens=40,
            ignore_eos=True,
            temperature=1.0,
            top_p=0.9,
            seed=3,
            top_logprobs=5,
            logprobs_mode="raw",
        ).first
    assert processed.token_ids == raw.token_ids  # the mode changes what is reported, not what is sampled
    padded_positions = 0
    for ids, values in zip(processed.logprobs.top_ids, processed.logprobs.top_logprobs):
        survivors = [token for token, value in zip(ids, values) if value != -9999.0]
        padding = [token for token, value in zip(ids, values) if value == -9999.0]
        if padding:
            padded_positions += 1
            assert padding == [token for token in range(5 + len(survivors)) if token not in survivors][: len(padding)]
    assert padded_positions >= 5, padded_positions
    assert all(value != -9999.0 for row in raw.logprobs.top_logprobs for value in row)


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_replays_on_the_peaked_model_reproduce_their_output(peaked_server: ServerProcess, mode: str) -> None:
    with InferenceClient(peaked_server.target) as client:
        request = dict(
            token_ids=[1000, 2000, 11],
            max_tokens=32,
            ignore_eos=True,
            temperature=1.0,
            top_p=0.9,
            seed=4,
            top_logprobs=5,
            logprobs_mode=mode,
            chain_top_logprobs=True,
        )
        original = client.generate(**request).first
        replay = client.generate(**request, enforced_token_ids=original.token_ids).first
    assert replay.token_ids == original.token_ids
    distance = sequence_distance(
        list(zip(original.token_ids, original.logprobs.chain_top)),
        list(zip(replay.token_ids, replay.logprobs.chain_top)),
    )
    assert 0 <= distance < 0.001


def test_the_mode_detector_on_the_servers_own_lists(peaked_server: ServerProcess) -> None:
    """Reported, per configuration: how often detection names the mode the lists were produced in.

    Processed lists show their mode only where padding shows (top-p cutting below 5 tokens); where
    nothing is masked they equal raw lists, and detection says raw, which replays to the same numbers
    whenever processing changed nothing (greedy, temperature 1.0) but not at temperature 0.7."""
    produced = {"raw": run_all(peaked_server, "raw"), "processed": run_all(peaked_server, "processed")}
    report: list[str] = []
    correct: Counter[str] = Counter()
    positions: Counter[str] = Counter()
    for mode, by_configuration in produced.items():
        for name, generations in by_configuration.items():
            hits = 0
            for generation in generations:
                lists = generation.first.logprobs.chain_top
                positions[mode] += len(lists)
                hits += detect_logprobs_mode(lists) == LogprobsMode(f"{mode}_logprobs")
            correct[mode] += hits
            report.append(f"{mode:>9} lists, {name:<15}: {hits}/{len(generations)} requests detected as {mode}")
    print("\nmode detection on the peaked model (requests of 24 positions, top-5):\n" + "\n".join(report))
    assert positions["raw"] >= 1000 and positions["processed"] >= 1000
    # Raw lists never hold padding: detection is right on every raw request.
    assert correct["raw"] == len(CONFIGURATIONS) * REQUESTS_PER_CONFIGURATION
    # Where top-p cuts, the padding gives processed lists away (8 of 9 here: one request's lists kept
    # enough survivors that its padding stayed under the detector's 10 % of ids).
    top_p_hits = sum(
        detect_logprobs_mode(g.first.logprobs.chain_top) == LogprobsMode.PROCESSED
        for g in produced["processed"]["top_p 0.9"]
    )
    assert top_p_hits >= REQUESTS_PER_CONFIGURATION - 2
