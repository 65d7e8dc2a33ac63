"""Methods vLLM mixes into each worker (`worker_extension_cls`), called by name with
`collective_rpc`: no pickled callables, no insecure serialization."""

from __future__ import annotations

from typing import Any

WORKER_EXTENSION_CLASS = "engine_ext.worker_extension.MlnodeWorkerExtension"


class MlnodeWorkerExtension:
    def mlnode_process_report(self) -> dict[str, Any]:
        from engine_ext.process_report import describe_this_process

        return describe_this_process()
