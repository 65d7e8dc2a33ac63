"""Methods vLLM mixes into each worker (`worker_extension_cls`), called by name with
`collective_rpc`: no pickled callables, no insecure serialization."""

from __future__ import annotations

from typing import Any

WORKER_EXTENSION_CLASS = "engine_ext.worker_extension.MlnodeWorkerExtension"


class MlnodeWorkerExtension:
    # The worker's (vLLM mixes this class into its Worker): vLLM's GPU or CPU model runner, which it types per platform.
    model_runner: Any

    def mlnode_process_report(self) -> dict[str, Any]:
        from engine_ext.generation.replay_rows import replay_rows_of
        from engine_ext.process_report import describe_model_runner, describe_this_process

        runner = describe_model_runner(self.model_runner)
        # A V2 runner has no V1 input batch; the server refuses it on this report (MlnodeEngine.require_extension).
        replay = replay_rows_of(self.model_runner.input_batch.logitsprocs) if runner["v1_model_runner"] else None
        return {
            **describe_this_process(),
            **runner,
            "mixed_logprobs_steps": 0 if replay is None else replay.mixed_steps,
        }

    def mlnode_poc_decoder(self) -> dict[str, Any]:
        """The PoC decoder of the served model on this rank (engine_ext.poc.decoders), made now: {"architecture",
        "decoder", "compiles"}, or {"architecture", "unsupported": why} for a model the PoC forward cannot run."""
        from engine_ext.poc.decoders import UnsupportedArchitecture

        architecture = type(self.model_runner.get_model()).__name__
        try:
            decoder = self._mlnode_poc().decoder
        except UnsupportedArchitecture as error:
            return {"architecture": architecture, "unsupported": str(error)}
        return {"architecture": architecture, "decoder": decoder.name, "compiles": decoder.compiles}

    def mlnode_poc_forward(
        self, wire_batch: dict[str, Any], block_ids: list[list[int]], compiled: bool
    ) -> dict[str, Any] | None:
        """One PoC batch on this rank (engine_ext.poc.worker_forward), on KV blocks the engine core
        borrowed for it, with the compiled or the eager forward; None on ranks that do not compute
        the head."""
        from engine_ext.poc.batch import PocBatch

        return self._mlnode_poc().run(PocBatch.from_wire(wire_batch), block_ids, compiled).to_wire()

    def _mlnode_poc(self) -> Any:
        """The worker object owns its PoC state (decoder, compiled layers, prefetched inputs, reflection vectors);
        the attribute is this extension's, created on first use."""
        from engine_ext.poc.worker_forward import PocWorkerForward

        forward = getattr(self, "_mlnode_poc_forward", None)
        if forward is None:
            forward = PocWorkerForward(self.model_runner)
            self._mlnode_poc_forward = forward
        return forward
