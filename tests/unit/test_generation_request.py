"""The project's GenerationRequest -> vLLM's SamplingParams (the only place that knows vLLM's spelling)."""

from __future__ import annotations

import pytest
from vllm.sampling_params import RequestOutputKind, SamplingParams

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.generation.errors import RequestRejected
from engine_ext.generation.generation_request import Constraint, GenerationRequest, with_end_of_sequence
from engine_ext.generation.generation_request import sampling_params as to_sampling_params
from engine_ext.generation.replay_rows import LOGPROBS_MODE_ARG, REPLAY_TOKENS_ARG

EOS = 151645


def sampling_params(request: GenerationRequest, mode: LogprobsMode = LogprobsMode.PROCESSED):
    return to_sampling_params(request, mode, EOS)


def test_unset_options_keep_vllms_defaults_and_text_free_streams_skip_detokenizing() -> None:
    params = sampling_params(GenerationRequest("r", [1, 2, 3]))
    default = SamplingParams()
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "n",
        "ignore_eos",
        "skip_special_tokens",
        "max_tokens",
    ):
        assert getattr(params, name) == getattr(default, name), name
    assert params.logprobs is None and params.prompt_logprobs is None and params.flat_logprobs
    assert params.detokenize is False and params.output_kind == RequestOutputKind.DELTA


def test_options_logprobs_and_output_kind_are_passed_through() -> None:
    request = GenerationRequest(
        "r",
        [1],
        sampling={"temperature": 0.5, "seed": 7, "max_tokens": 9, "n": 2},
        stop=("x",),
        stop_token_ids=(5,),
        top_logprobs=3,
        prompt_logprobs=0,
        final_only=True,
    )
    params = sampling_params(request)
    assert (params.temperature, params.seed, params.max_tokens, params.n) == (0.5, 7, 9, 2)
    assert params.stop == ["x"] and 5 in params.stop_token_ids
    assert (params.logprobs, params.prompt_logprobs) == (3, 0)
    assert params.detokenize is True  # stop strings need text
    assert params.output_kind == RequestOutputKind.FINAL_ONLY


@pytest.mark.parametrize(
    ("constraint", "attribute", "value"),
    [
        (Constraint("json_schema", '{"type": "object"}'), "json", '{"type": "object"}'),
        (Constraint("regex", "a+"), "regex", "a+"),
        (Constraint("grammar", 'root ::= "x"'), "grammar", 'root ::= "x"'),
        (Constraint("choice", ("a", "b")), "choice", ["a", "b"]),
        (Constraint("json_object", True), "json_object", True),
    ],
)
def test_each_constraint_kind_reaches_vllms_structured_outputs(constraint: Constraint, attribute: str, value) -> None:
    structured = sampling_params(GenerationRequest("r", [1], constraint=constraint)).structured_outputs
    assert getattr(structured, attribute) == value


def test_what_vllm_refuses_is_a_rejection_of_the_sampling_options() -> None:
    with pytest.raises(RequestRejected) as caught:
        sampling_params(GenerationRequest("r", [1], sampling={"temperature": 0.5, "top_k": -5}))
    assert caught.value.part == "sampling" and "top_k" in caught.value.message


def test_an_unknown_option_is_a_server_bug_not_a_rejection() -> None:
    with pytest.raises(ValueError) as caught:
        sampling_params(GenerationRequest("r", [1], sampling={"temprature": 0.5}))
    assert not isinstance(caught.value, RequestRejected)


def test_the_logprobs_mode_travels_only_with_logprobs() -> None:
    assert sampling_params(GenerationRequest("r", [1])).extra_args is None
    raw = sampling_params(GenerationRequest("r", [1], top_logprobs=0), LogprobsMode.RAW)
    assert raw.extra_args == {LOGPROBS_MODE_ARG: "raw_logprobs"}


def test_a_replay_carries_its_tokens_ending_with_end_of_sequence() -> None:
    params = sampling_params(GenerationRequest("r", [1], enforced_token_ids=(5, 6)))
    assert params.extra_args == {REPLAY_TOKENS_ARG: [5, 6, EOS]}
    assert with_end_of_sequence((5, EOS), EOS) == [5, EOS] and with_end_of_sequence((), EOS) == [EOS]
