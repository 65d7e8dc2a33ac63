"""The Python client's request builder and result assembly."""

from __future__ import annotations

import pytest

from gonka.mlnode.client import Generation, build_request
from gonka.mlnode.v1 import inference_pb2 as pb


def test_exactly_one_input_is_required() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        build_request(prompt="a", token_ids=[1])
    with pytest.raises(ValueError, match="exactly one"):
        build_request()


def test_unknown_sampling_options_and_double_constraints_are_refused() -> None:
    with pytest.raises(TypeError, match="tempreature"):
        build_request(prompt="a", tempreature=0.5)
    with pytest.raises(ValueError, match="at most one"):
        build_request(prompt="a", regex="x", choice=["y"])
    with pytest.raises(ValueError, match="unknown chat role"):
        build_request(messages=[("robot", "beep")])


def test_presence_of_zero_values_is_kept() -> None:
    request = build_request(prompt="a", temperature=0.0, seed=0)
    assert request.sampling.HasField("temperature") and request.sampling.HasField("seed")
    assert not request.sampling.HasField("top_p")


def test_a_generation_is_assembled_from_its_messages() -> None:
    generation = Generation()
    batch = pb.TokenBatch(
        ids=[1, 2],
        logprobs=[-0.1, -0.2],
        ranks=[1, 2],
        top_k=2,
        top_ids=[1, 3, 4, 2],
        top_logprobs=[-0.1, -1, -0.15, -0.2],
    )
    generation.add(pb.GenerateResponse(request_id="r", tokens=batch, text="ab"))
    generation.add(
        pb.GenerateResponse(
            request_id="r",
            tokens=pb.TokenBatch(ids=[3]),
            finish=pb.Finish(reason=pb.FINISH_REASON_STOP, stop_token_id=3),
        )
    )
    output = generation.first
    assert (output.token_ids, output.text, output.finish_reason, output.stop_reason) == ([1, 2, 3], "ab", "stop", 3)
    assert output.logprobs.top_ids == [[1, 3], [4, 2]] and generation.finished
