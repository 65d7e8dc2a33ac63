"""Proto messages as JSON objects: 64-bit integers as numbers on every supported protobuf runtime."""

from __future__ import annotations

import json

from google.protobuf import json_format

from gonka.mlnode.client.proto_json import message_to_dict
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import poc_pb2


def test_int64_fields_are_numbers_at_any_depth_and_in_repeated_fields() -> None:
    response = poc_pb2.SubscribeArtifactsResponse(batch=poc_pb2.ArtifactBatch(sequence=7, nonces=[3, 2**40]))
    as_dict = message_to_dict(response)
    assert as_dict["batch"]["sequence"] == 7
    assert as_dict["batch"]["nonces"] == [3, 2**40]
    request = pb.GenerateRequest()
    request.sampling.seed = -5
    assert message_to_dict(request) == {"sampling": {"seed": -5}}


def test_the_json_reads_back_as_the_same_message() -> None:
    response = poc_pb2.SubscribeArtifactsResponse(batch=poc_pb2.ArtifactBatch(sequence=2**53 - 1, nonces=[1, 2, 3]))
    text = json.dumps(message_to_dict(response, print_defaults=True))
    assert json_format.Parse(text, poc_pb2.SubscribeArtifactsResponse()) == response


def test_defaults_are_written_only_when_asked() -> None:
    status = poc_pb2.CallbackCounts()
    assert message_to_dict(status) == {}
    assert message_to_dict(status, print_defaults=True)["delivered"] == 0
