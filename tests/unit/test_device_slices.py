"""Each engine instance's device slice (--instances): contiguous accelerators as the deployed node slices them, or
a CPU's cores; set on top of the server's environment, never instead of it."""

from __future__ import annotations

import os

import pytest

from engine_ext.device_slices import (
    CPU_BIND_VARIABLE,
    InstancesUnsupported,
    accelerator_slices,
    auto_instance_count,
    core_list,
    cpu_slices,
    overlaid_environment,
)


def environments(slices) -> list[dict[str, str]]:
    return [dict(device_slice.environment) for device_slice in slices]


def test_auto_counts_instances_as_the_deployed_node() -> None:
    # min(128, max(1, GPUs // (TP x PP))): 8 GPUs at TP 2 are 4 instances, at TP 4 two.
    assert [auto_instance_count(8, ranks) for ranks in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert auto_instance_count(1024, 1) == 128


def test_accelerators_are_sliced_contiguously_from_those_visible() -> None:
    slices = accelerator_slices(4, 2, "CUDA_VISIBLE_DEVICES", [str(gpu) for gpu in range(8)])
    assert environments(slices) == [{"CUDA_VISIBLE_DEVICES": gpus} for gpus in ("0,1", "2,3", "4,5", "6,7")]
    # A server already confined to some GPUs slices those.
    slices = accelerator_slices(2, 1, "CUDA_VISIBLE_DEVICES", ["3", "5"])
    assert environments(slices) == [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]
    assert slices[1].describe() == "CUDA_VISIBLE_DEVICES=5"
    with pytest.raises(InstancesUnsupported, match="needs 6 devices; 4 are visible"):
        accelerator_slices(3, 2, "CUDA_VISIBLE_DEVICES", ["0", "1", "2", "3"])


def test_a_cpu_is_split_into_each_instances_own_cores() -> None:
    assert environments(cpu_slices(2, 1, "auto", [0, 1])) == [{CPU_BIND_VARIABLE: "0"}, {CPU_BIND_VARIABLE: "1"}]
    # Equal contiguous parts, one list per tensor-parallel rank; a core left over stays unused.
    assert environments(cpu_slices(2, 2, "auto", list(range(9)))) == [
        {CPU_BIND_VARIABLE: "0-1|2-3"},
        {CPU_BIND_VARIABLE: "4-5|6-7"},
    ]
    assert environments(cpu_slices(2, 1, "auto", [0, 2, 4, 6])) == [
        {CPU_BIND_VARIABLE: "0,2"},
        {CPU_BIND_VARIABLE: "4,6"},
    ]
    with pytest.raises(InstancesUnsupported, match="needs 4 cores; this server may run on 2"):
        cpu_slices(2, 2, "auto", [0, 1])


def test_an_operators_cpu_binding_is_handed_out_rank_by_rank() -> None:
    assert environments(cpu_slices(2, 1, "0-3|4-7", [])) == [{CPU_BIND_VARIABLE: "0-3"}, {CPU_BIND_VARIABLE: "4-7"}]
    assert environments(cpu_slices(2, 1, "nobind", [])) == [{CPU_BIND_VARIABLE: "nobind"}] * 2
    with pytest.raises(InstancesUnsupported, match="lists 3 core set"):
        cpu_slices(2, 1, "0|1|2", [])


def test_core_lists_read_as_vllm_parses_them() -> None:
    assert core_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


def test_a_slice_is_added_to_the_servers_environment_and_taken_back_after() -> None:
    os.environ["MLNODE_TEST_KEPT"] = "host-wide"
    os.environ.pop("MLNODE_TEST_SLICE", None)
    try:
        with overlaid_environment({"MLNODE_TEST_SLICE": "1", "MLNODE_TEST_KEPT": "host-wide"}):
            assert os.environ["MLNODE_TEST_SLICE"] == "1" and os.environ["MLNODE_TEST_KEPT"] == "host-wide"
        assert "MLNODE_TEST_SLICE" not in os.environ and os.environ["MLNODE_TEST_KEPT"] == "host-wide"
    finally:
        del os.environ["MLNODE_TEST_KEPT"]
