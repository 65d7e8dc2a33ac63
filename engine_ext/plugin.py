"""The project's vLLM plugin (entry point `vllm.general_plugins`: gonka_mlnode).

vLLM calls `register()` in every process it starts (API process, engine core, workers). It refuses
an unverified vLLM release, installs the seams for this release and adds the engine-core utility
calls the server uses.
"""

from __future__ import annotations

import os


def register() -> None:
    import vllm
    from vllm.platforms import current_platform

    from engine_ext.engine_core_utilities import add_engine_core_utilities
    from engine_ext.seams import install_seams
    from engine_ext.vllm_version import require_supported_vllm, require_v1_model_runner

    require_supported_vllm(vllm.__version__)
    require_v1_model_runner(os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0") not in ("", "0"))
    install_seams(is_cpu_platform=current_platform.is_cpu())
    add_engine_core_utilities()
