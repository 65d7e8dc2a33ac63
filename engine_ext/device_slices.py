"""How many engine instances a server runs (--instances) and the device slice each one gets.

An instance's slice is a few environment variables set on top of the server's own environment while its
engine processes are spawned (they inherit the environment then), never a rebuilt environment: whatever
the host sets for every engine (NCCL_NVLS_ENABLE=0, NCCL_CUMEM_ENABLE=0, VLLM_ALLREDUCE_USE_SYMM_MEM=0...)
reaches every instance. On an accelerator the slice is the device-control variable (CUDA_VISIBLE_DEVICES:
GPUs i*g .. i*g+g-1 of those visible, g = tensor x pipeline parallel size, as the deployed node slices
them); on a CPU, VLLM_CPU_OMP_THREADS_BIND (the instance's own cores, one list per rank). One instance
gets no slice at all: the server's environment as it is, as before there were instances.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

CPU_BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"
# vLLM's own values of that variable: cores chosen by vLLM, or no binding at all.
CPU_BIND_AUTO = "auto"
CPU_BIND_NONE = "nobind"
# The deployed node's bound (INFERENCE_MAX_INSTANCES, mlnode-http-api.md section 7).
MAX_INSTANCES = 128
# prometheus_client's multiprocess mode keeps one value per metric and label set in files shared by the
# process: two engines in one process would write over each other's (engine_ext.engine_metrics).
PROMETHEUS_MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


class InstancesUnsupported(ValueError):
    """The host or the engine's configuration cannot run the instances asked for."""


@dataclass(frozen=True)
class DeviceSlice:
    index: int
    # Set on top of the server's environment for this instance's engine processes.
    environment: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return " ".join(f"{name}={value}" for name, value in self.environment.items()) or "the whole host"


def plan_instances(requested: int | None, ranks: int, data_parallel_size: int) -> list[DeviceSlice]:
    """The slices of `requested` instances (None: as many as the visible accelerators hold, 1 on a CPU),
    each running `ranks` (tensor x pipeline parallel) workers."""
    from vllm.platforms import current_platform

    on_cpu = current_platform.is_cpu()
    count = (
        requested
        if requested is not None
        else (1 if on_cpu else auto_instance_count(current_platform.device_count(), ranks))
    )
    if count == 1:
        return [DeviceSlice(0)]
    if data_parallel_size > 1:
        raise InstancesUnsupported(
            f"--instances {count} with --data-parallel-size {data_parallel_size}: each instance is one engine (one "
            "nonce group); run data parallelism as instances instead"
        )
    if os.environ.get(PROMETHEUS_MULTIPROC_VARIABLE):
        raise InstancesUnsupported(
            f"--instances {count} with {PROMETHEUS_MULTIPROC_VARIABLE} set: prometheus_client's multiprocess files would "
            "mix the instances' engine metrics; unset it"
        )
    if on_cpu:
        return cpu_slices(
            count, ranks, os.environ.get(CPU_BIND_VARIABLE, CPU_BIND_AUTO), sorted(os.sched_getaffinity(0))
        )
    variable = current_platform.device_control_env_var
    listed = os.environ.get(variable, "")
    visible = listed.split(",") if listed else [str(device) for device in range(current_platform.device_count())]
    return accelerator_slices(count, ranks, variable, visible)


def auto_instance_count(devices: int, ranks: int) -> int:
    """As the deployed node counts them: min(128, max(1, devices // (tensor x pipeline parallel size)))."""
    return min(MAX_INSTANCES, max(1, devices // ranks))


def accelerator_slices(count: int, ranks: int, variable: str, visible: Sequence[str]) -> list[DeviceSlice]:
    """Instance i gets the visible devices i*ranks .. i*ranks+ranks-1 (contiguous, as the deployed node)."""
    if count * ranks > len(visible):
        raise InstancesUnsupported(
            f"--instances {count} at {ranks} device(s) each needs {count * ranks} devices; {len(visible)} are visible "
            f"({variable}={','.join(visible) or 'unset'})"
        )
    return [
        DeviceSlice(index, {variable: ",".join(visible[index * ranks : (index + 1) * ranks])}) for index in range(count)
    ]


def cpu_slices(count: int, ranks: int, bind: str, cores: Sequence[int]) -> list[DeviceSlice]:
    """`bind`: the server's VLLM_CPU_OMP_THREADS_BIND. Unset or auto: the server's cores in `count` equal
    contiguous parts, each split among the instance's ranks. An explicit list ("0-3|4-7|...", one entry per
    rank) is handed out in order, `ranks` entries per instance. nobind stays nobind."""
    if bind == CPU_BIND_NONE:
        return [DeviceSlice(index, {CPU_BIND_VARIABLE: CPU_BIND_NONE}) for index in range(count)]
    if bind != CPU_BIND_AUTO:
        entries = bind.split("|")
        if len(entries) != count * ranks:
            raise InstancesUnsupported(
                f"{CPU_BIND_VARIABLE}={bind!r} lists {len(entries)} core set(s); --instances {count} at {ranks} rank(s) "
                f"each needs {count * ranks}, one per rank, separated by '|'"
            )
        return [
            DeviceSlice(index, {CPU_BIND_VARIABLE: "|".join(entries[index * ranks : (index + 1) * ranks])})
            for index in range(count)
        ]
    per_rank = len(cores) // (count * ranks)
    if per_rank < 1:
        raise InstancesUnsupported(
            f"--instances {count} at {ranks} rank(s) each needs {count * ranks} cores; this server may run on {len(cores)}"
        )
    slices = []
    for index in range(count):
        first = index * ranks * per_rank
        per_rank_lists = [
            core_list(cores[first + rank * per_rank : first + (rank + 1) * per_rank]) for rank in range(ranks)
        ]
        slices.append(DeviceSlice(index, {CPU_BIND_VARIABLE: "|".join(per_rank_lists)}))
    return slices


def core_list(cores: Sequence[int]) -> str:
    """Cores as vLLM parses them: "0-3,8,10-11"."""
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


@contextmanager
def overlaid_environment(variables: Mapping[str, str]) -> Iterator[None]:
    """The variables set in os.environ while the block runs (processes spawned meanwhile inherit them), the
    previous values back after it."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
