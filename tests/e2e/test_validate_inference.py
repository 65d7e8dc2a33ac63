"""ValidationService.ValidateInference against the real server: the server's own outputs replay and pass,
tampered records fail with the reason and place, bad items get their own error, the distance is the
consensus core's."""

from __future__ import annotations

import json

import grpc
import pytest

from engine_ext.consensus import sequence_distance
from gonka.mlnode.client import Generation, InferenceClient, ServerError, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
THRESHOLD = 0.94
SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


def executed(client: InferenceClient, mode: str = "processed", **overrides) -> tuple[pb.GenerateRequest, Generation]:
    """What an executor serves and records: the request and its chain lists (top-5)."""
    fields = dict(token_ids=PROMPT_IDS, max_tokens=20, temperature=0.99, seed=11, top_logprobs=5) | overrides
    request = build_request(**fields, logprobs_mode=mode)
    recorded = client.generate(build_request(**fields, logprobs_mode=mode, chain_top_logprobs=True))
    return request, recorded


def item_of(request: pb.GenerateRequest, recorded: Generation, mode: str | None = None, **changes) -> vpb.InferenceItem:
    output = recorded.first
    return inference_item(
        request, output.token_ids, output.logprobs.chain_top, threshold=THRESHOLD, mode=mode, **changes
    )


def verdicts(client: InferenceClient, items: list[vpb.InferenceItem]) -> dict[int, vpb.ValidateInferenceResponse]:
    responses = client.validate_inference(items, timeout=300)
    by_index = {response.index: response for response in responses}
    assert sorted(by_index) == list(range(len(items)))  # one verdict per item
    return by_index


def test_the_servers_own_outputs_pass_in_both_modes_stated_or_detected(client: InferenceClient) -> None:
    cases = [
        ("processed", "processed", dict()),
        ("raw", "raw", dict(top_k=20, seed=12)),
        ("processed", None, dict(temperature=0.0)),
        ("raw", None, dict(top_p=0.9, seed=13)),
        (
            "processed",
            "processed",
            dict(json_schema=SCHEMA, temperature=0.7, seed=14, token_ids=None, messages=[("user", "JSON please")]),
        ),
    ]
    items = []
    for mode, stated, overrides in cases:
        request, recorded = executed(client, mode, **overrides)
        items.append(item_of(request, recorded, mode=stated))
    results = verdicts(client, items)
    for index, (mode, stated, _) in enumerate(cases):
        verdict = results[index].verdict
        assert results[index].WhichOneof("outcome") == "verdict", results[index]
        assert verdict.passed and verdict.failure == vpb.INFERENCE_FAILURE_UNSPECIFIED, (index, verdict)
        assert 0 <= verdict.distance < 0.001 and verdict.similarity > 0.999 and verdict.top_ids_found == 1.0
        assert verdict.replayed_tokens == len(items[index].positions.token_ids)
        expected_mode = pb.LOGPROBS_MODE_RAW if mode == "raw" else pb.LOGPROBS_MODE_PROCESSED
        if stated is not None:
            assert (verdict.mode, verdict.mode_detected) == (expected_mode, False), index
        else:
            # Raw lists of the random-weight model never hold ids below 4; nothing is padded either,
            # so detection says raw for both (or falls back to the default): the replay still passes
            # only when it ran in the executor's mode.
            assert verdict.mode in (pb.LOGPROBS_MODE_RAW, pb.LOGPROBS_MODE_PROCESSED)


def test_the_distance_is_the_consensus_cores_over_the_replays_lists(client: InferenceClient) -> None:
    request, recorded = executed(client, "raw")
    # An executor whose logprobs are all a little off: a real, non-zero distance.
    tampered = [{token: value - 0.05 for token, value in top.items()} for top in recorded.first.logprobs.chain_top]
    item = inference_item(request, recorded.first.token_ids, tampered, threshold=THRESHOLD, mode="raw")
    verdict = verdicts(client, [item])[0].verdict
    replay = client.generate(
        build_request(
            **dict(token_ids=PROMPT_IDS, max_tokens=20, temperature=0.99, seed=11, top_logprobs=5),
            logprobs_mode="raw",
            chain_top_logprobs=True,
            enforced_token_ids=recorded.first.token_ids,
        )
    )
    # The executor's lists as the server received them (float32 on the wire).
    sent = item.positions
    executor = [
        (token, dict(zip(sent.top_ids[i * 5 : i * 5 + 5], sent.top_logprobs[i * 5 : i * 5 + 5])))
        for i, token in enumerate(sent.token_ids)
    ]
    expected = sequence_distance(executor, list(zip(replay.first.token_ids, replay.first.logprobs.chain_top)), 5)
    assert verdict.distance == pytest.approx(expected, rel=1e-9, abs=1e-12) and verdict.distance > 0


def test_tampered_records_fail_with_the_reason_and_the_place(client: InferenceClient) -> None:
    request, recorded = executed(client, "processed")
    tokens, lists = recorded.first.token_ids, recorded.first.logprobs.chain_top
    eos = client.model_info().eos_token_id
    # Logprobs near 0 where the model gives about -12: each entry about as far as the distance allows.
    inflated = [{token: -0.001 for token in top} for top in lists]
    items = [
        # An end of sequence in the middle: the replay stops there.
        inference_item(request, tokens[:6] + [eos] + tokens[7:], lists, threshold=THRESHOLD),
        # Logprobs the model does not give: far apart.
        inference_item(request, tokens, inflated, threshold=THRESHOLD),
        # No top-k lists at all.
        vpb.InferenceItem(
            request=request, positions=vpb.ExecutorPositions(token_ids=tokens, top_k=0), threshold=THRESHOLD
        ),
        # Honest, for comparison.
        item_of(request, recorded),
    ]
    results = verdicts(client, items)
    stopped = results[0].verdict
    assert (stopped.passed, stopped.failure, stopped.first_differing_position) == (
        False,
        vpb.INFERENCE_FAILURE_LENGTH_DIFFERS,
        7,
    )
    assert not stopped.HasField("replay_token_id") and stopped.executor_token_id == tokens[7]
    far = results[1].verdict
    assert (
        not far.passed
        and far.failure == vpb.INFERENCE_FAILURE_SIMILARITY_BELOW_THRESHOLD
        and far.similarity <= THRESHOLD
    )
    assert results[2].verdict.failure == vpb.INFERENCE_FAILURE_EMPTY_TOP_K and not results[2].verdict.passed
    assert results[3].verdict.passed


def test_a_bad_item_gets_its_own_error_and_the_others_their_verdicts(client: InferenceClient) -> None:
    request, recorded = executed(client)
    good = item_of(request, recorded)
    no_threshold = item_of(request, recorded)
    no_threshold.ClearField("threshold")
    out_of_vocabulary = item_of(request, recorded)
    out_of_vocabulary.positions.token_ids[3] = 151936 + 9
    bad_sampling = item_of(request, recorded)
    bad_sampling.request.sampling.top_p = 1.5
    results = verdicts(client, [no_threshold, good, out_of_vocabulary, bad_sampling])
    assert results[1].verdict.passed
    errors = {index: results[index].error for index in (0, 2, 3)}
    assert all(results[index].WhichOneof("outcome") == "error" for index in errors)
    assert (errors[0].code, errors[0].field) == ("INVALID_ARGUMENT", "threshold")
    assert (errors[2].reason, errors[2].field) == ("TOKEN_OUT_OF_VOCABULARY", "positions.token_ids[3]")
    assert (errors[3].reason, errors[3].field, errors[3].retryable) == (
        "INVALID_FIELD",
        "request.sampling.top_p",
        False,
    )


def test_an_executor_that_could_not_serve_what_this_node_serves_is_at_fault(client: InferenceClient) -> None:
    servable = vpb.InferenceItem(
        request=build_request(token_ids=PROMPT_IDS, max_tokens=4), threshold=THRESHOLD, executor_could_not_serve=True
    )
    unservable = vpb.InferenceItem(
        request=build_request(token_ids=[100] * 9000, max_tokens=4), threshold=THRESHOLD, executor_could_not_serve=True
    )
    results = verdicts(client, [servable, unservable])
    assert (
        results[0].verdict.failure == vpb.INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE and not results[0].verdict.passed
    )
    assert results[1].verdict.passed  # nobody can serve a prompt longer than the context


@pytest.mark.parametrize("items", [0, 1025], ids=["no-items", "too-many"])
def test_a_call_with_no_items_or_too_many_is_invalid_argument(client: InferenceClient, items: int) -> None:
    request, recorded = executed(client) if items else (None, None)
    batch = [item_of(request, recorded)] * items if items else []
    with pytest.raises(ServerError) as caught:
        client.validate_inference(batch, timeout=60)
    assert (caught.value.code, caught.value.field) == (grpc.StatusCode.INVALID_ARGUMENT, "items")
