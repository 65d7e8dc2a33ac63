"""ValidateInference's answers for people: one line per item, and the tally of a whole run."""

from __future__ import annotations

from dataclasses import dataclass

from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb


def verdict_line(response: vpb.ValidateInferenceResponse) -> str:
    """`item 3: passed, similarity ...`, `item 4: FAILED token_differs at position 7 ...` or
    `item 5: ERROR INVALID_ARGUMENT ...`."""
    if response.WhichOneof("outcome") == "error":
        error = response.error
        where = f" (field {error.field})" if error.field else ""
        retry = " (retryable)" if error.retryable else ""
        return f"item {response.index}: ERROR {error.code} {error.reason}{where}: {error.message}{retry}"
    verdict = response.verdict
    mode = pb.LogprobsMode.Name(verdict.mode).removeprefix("LOGPROBS_MODE_").lower() + (
        " (detected)" if verdict.mode_detected else ""
    )
    measures = (
        f"similarity {verdict.similarity:.6f}, distance {verdict.distance:.6g}, top ids found {verdict.top_ids_found:.0%}, "
        f"{verdict.replayed_tokens} tokens replayed, mode {mode}"
    )
    if verdict.passed:
        return f"item {response.index}: passed, {measures}"
    failure = vpb.InferenceFailure.Name(verdict.failure).removeprefix("INFERENCE_FAILURE_").lower()
    return f"item {response.index}: FAILED {failure}{_where(verdict)}, {measures}"


def _where(verdict: vpb.InferenceVerdict) -> str:
    if verdict.failure not in (
        vpb.INFERENCE_FAILURE_TOKEN_DIFFERS,
        vpb.INFERENCE_FAILURE_LENGTH_DIFFERS,
        vpb.INFERENCE_FAILURE_EMPTY_TOP_K,
    ):
        return ""
    tokens = [
        f"{side} token {getattr(verdict, field)}"
        for side, field in (("executor", "executor_token_id"), ("replay", "replay_token_id"))
        if verdict.HasField(field)
    ]
    return f" at position {verdict.first_differing_position}" + (f" ({', '.join(tokens)})" if tokens else "")


@dataclass
class Tally:
    items: int
    passed: int = 0
    failed: int = 0
    errors: int = 0

    def add(self, response: vpb.ValidateInferenceResponse) -> None:
        if response.WhichOneof("outcome") == "error":
            self.errors += 1
        elif response.verdict.passed:
            self.passed += 1
        else:
            self.failed += 1

    @property
    def answered(self) -> int:
        return self.passed + self.failed + self.errors

    @property
    def all_passed(self) -> bool:
        return self.passed == self.items

    def __str__(self) -> str:
        # Unanswered items are those a failed call left without a verdict: they must be sent again.
        unanswered = self.items - self.answered
        return f"{self.items} items: {self.passed} passed, {self.failed} failed, {self.errors} errors" + (
            f", {unanswered} unanswered" if unanswered else ""
        )
