"""The project's vLLM plugin (entry point `vllm.general_plugins`: gonka_mlnode).

vLLM calls `register()` in every process it starts (API process, engine core, workers). It refuses
an unverified vLLM release, installs the seams for this release and adds the engine-core utility
calls the server uses.
"""

from __future__ import annotations

PLUGIN_NAME = "gonka_mlnode"
PLUGIN_GROUP = "vllm.general_plugins"


def plugin_not_loadable() -> str | None:
    """Why vLLM would not load this plugin into the processes it starts, or None: read before the engine starts
    (its processes take most of a minute to come up) from what vLLM itself reads, the entry point and the
    VLLM_PLUGINS allow-list. The engine core's own report (MlnodeEngine.require_extension) stays the final word."""
    from importlib.metadata import entry_points

    import vllm.envs

    if not any(point.name == PLUGIN_NAME for point in entry_points(group=PLUGIN_GROUP)):
        return f"the {PLUGIN_NAME} vLLM plugin is not installed (no entry point {PLUGIN_NAME} in {PLUGIN_GROUP}); install this project (make setup)"
    allowed = vllm.envs.VLLM_PLUGINS
    if allowed is not None and PLUGIN_NAME not in allowed:
        return (
            f"VLLM_PLUGINS={','.join(allowed)!r} leaves out the {PLUGIN_NAME} vLLM plugin, without whose seams the engine would "
            f"serve, but wrongly; add {PLUGIN_NAME} to it or unset it"
        )
    return None


def register() -> None:
    import vllm
    from vllm.platforms import current_platform

    from engine_ext.cuda_runtime_binding import bind_cuda_runtime_wrappers
    from engine_ext.engine_core_utilities import add_engine_core_utilities
    from engine_ext.process_lifetime import end_with_parent, exit_without_a_final_collection
    from engine_ext.seams import install_seams
    from engine_ext.seams.vllm_version import require_supported_vllm

    end_with_parent()
    exit_without_a_final_collection()
    require_supported_vllm(vllm.__version__)
    install_seams(is_cpu_platform=current_platform.is_cpu())
    if current_platform.is_cuda():
        bind_cuda_runtime_wrappers()
    add_engine_core_utilities()
