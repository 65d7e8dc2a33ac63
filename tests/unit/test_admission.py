"""Admission: the concurrent-stream bound (refused with TOO_MANY_STREAMS and a retry delay) and shutdown."""

from __future__ import annotations

import grpc
import pytest

from server.admission import Admission
from server.errors import ServiceError


def test_streams_beyond_the_bound_are_refused_until_one_ends() -> None:
    admission = Admission(max_streams=2)
    with admission.stream(), admission.stream():
        with pytest.raises(ServiceError) as refused:
            with admission.stream():
                pass
        error = refused.value
        assert (error.code, error.reason_name, error.retry_after_seconds) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
            1.0,
        )
        assert "--max-concurrent-streams" in error.message
    with admission.stream():
        pass  # both slots came back, the refused attempt took none


def test_a_slot_comes_back_when_its_stream_fails() -> None:
    admission = Admission(max_streams=1)
    with pytest.raises(RuntimeError):
        with admission.stream():
            raise RuntimeError("the stream failed")
    with admission.stream():
        pass


def test_zero_admits_any_number() -> None:
    admission = Admission(max_streams=0)
    with admission.stream(), admission.stream(), admission.stream():
        pass


def test_no_stream_is_admitted_once_closed() -> None:
    admission = Admission(max_streams=5)
    admission.close()
    with pytest.raises(ServiceError) as refused:
        with admission.stream():
            pass
    assert (refused.value.code, refused.value.reason_name) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")


def test_no_inference_stream_while_a_round_holds_the_gate() -> None:
    admission = Admission(max_streams=4)
    admission.gate.close("round-1")
    with pytest.raises(ServiceError) as refused:
        with admission.stream():
            pass
    assert (refused.value.code, refused.value.reason_name) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
    admission.gate.open()
    with admission.stream():
        pass
