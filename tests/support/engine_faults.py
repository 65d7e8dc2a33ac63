"""Engine faults that only test servers have: a vLLM general plugin that a test server loads when its
environment puts tests/support/engine_fault_plugin (the plugin's distribution record) on PYTHONPATH, and
that does nothing unless ENGINE_FAULTS_ENV describes faults. Production installs never see it.

Faults, in ENGINE_FAULTS_ENV (JSON):
- "fail_seed", "fail_after_tokens": a request whose sampling seed is fail_seed ends with a request-level
  engine error (FINISHED_ERROR, finish reason "error") once it has generated fail_after_tokens tokens,
  the way vLLM ends a request whose KV-cache load failed (_finish_with_error).
- "non_finite_nonces": the PoC forward's last hidden state is NaN for these nonces, so that each of them
  comes back without an artifact (HeadOutcome.NON_FINITE_HIDDEN) beside its batch's other nonces, as a model
  overflowing on them would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENGINE_FAULTS_ENV = "MLNODE_TEST_ENGINE_FAULTS"
PLUGIN_PATH = Path(__file__).resolve().parent / "engine_fault_plugin"
# Set on the wrappers, so that a second load of the plugin in one process wraps nothing twice.
FAULT_MARK = "__gonka_mlnode_test_engine_fault__"


def fault_environment(env: dict[str, str], faults: dict[str, Any]) -> dict[str, str]:
    """`env` for a server whose engine has `faults`."""
    path = os.pathsep.join(filter(None, [str(PLUGIN_PATH), env.get("PYTHONPATH", "")]))
    return {**env, "PYTHONPATH": path, ENGINE_FAULTS_ENV: json.dumps(faults)}


def install() -> None:
    faults = json.loads(os.environ.get(ENGINE_FAULTS_ENV) or "{}")
    if "fail_seed" in faults:
        _fail_requests_with_seed(int(faults["fail_seed"]), int(faults.get("fail_after_tokens", 1)))
    if faults.get("non_finite_nonces"):
        _non_finite_nonces(frozenset(int(nonce) for nonce in faults["non_finite_nonces"]))


def _fail_requests_with_seed(seed: int, after_tokens: int) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.update_from_output
    if getattr(original, FAULT_MARK, False):
        return

    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        outputs = original(self, scheduler_output, model_runner_output)
        failing = []
        for request_id in scheduler_output.num_scheduled_tokens:
            request = self.requests.get(request_id)
            params = None if request is None else request.sampling_params
            if (
                params is not None
                and params.seed == seed
                and not request.is_finished()
                and request.num_output_tokens >= after_tokens
            ):
                failing.append(request)
        if failing:
            _finish_with_error(self, outputs, failing)
        return outputs

    setattr(update_from_output, FAULT_MARK, True)
    update_from_output.__wrapped__ = original  # type: ignore[attr-defined]
    Scheduler.update_from_output = update_from_output


def _finish_with_error(scheduler: Any, outputs: dict[int, Any], requests: list[Any]) -> None:
    """Finishes running requests with FINISHED_ERROR from inside `Scheduler.update_from_output`, adding
    to its `outputs` (client index -> EngineCoreOutputs) the last output each client must receive, as
    the scheduler itself does for a failed KV-cache load."""
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.request import RequestStatus

    scheduler.finish_requests([request.request_id for request in requests], RequestStatus.FINISHED_ERROR)
    for request in requests:
        last = EngineCoreOutput(
            request_id=request.request_id,
            new_token_ids=[],
            finish_reason=request.get_finished_reason(),
            events=request.take_events(),
            trace_headers=request.trace_headers,
        )
        client = outputs.get(request.client_index)
        if client is None:
            outputs[request.client_index] = client = EngineCoreOutputs()
        client.outputs.append(last)


def _non_finite_nonces(nonces: frozenset[int]) -> None:
    from engine_ext.poc.worker_forward import PocWorkerForward

    original = PocWorkerForward._forward
    if getattr(original, FAULT_MARK, False):
        return

    def _forward(self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        last_hidden = original(self, batch, *args, **kwargs)
        rows = [row for row, nonce in enumerate(batch.nonces) if nonce in nonces]
        if rows:
            last_hidden = last_hidden.clone()
            last_hidden[rows] = float("nan")
        return last_hidden

    setattr(_forward, FAULT_MARK, True)
    PocWorkerForward._forward = _forward
