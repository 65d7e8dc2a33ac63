"""Binds the ctypes wrappers of the CUDA runtime to the real runtime before TileLang can shadow it.

FlashInfer's `flashinfer.comm` and vLLM's `vllm.device_allocator.cumem` each open, when first imported, the first
library in /proc/self/maps whose file name starts with `libcudart`. TileLang (DeepSeek-V4's hyper-connection kernels)
loads its own `libcudart_stub.so`, which lacks most of the runtime: once a DeepSeek-V4 model is built, vLLM's kernel
warm-up imports `flashinfer.comm` and its worker's shutdown imports `cumem`, and each binds the stub and fails
("libcudart_stub.so: undefined symbol: cudaDeviceReset"; an H200, vLLM 0.25.1, FlashInfer 0.6.13, TileLang 0.1.9).
Imported in every vLLM process before any model is loaded, both bind torch's runtime, the only one loaded then.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging

logger = logging.getLogger(__name__)

# Modules that bind a CUDA runtime when imported, and the distribution that has them.
RUNTIME_BINDING_MODULES = (("flashinfer", "flashinfer.comm"), ("vllm", "vllm.device_allocator.cumem"))


def bind_cuda_runtime_wrappers() -> None:
    """On CUDA hosts: import each module that binds a CUDA runtime now, while torch's libcudart is the only one."""
    for distribution, module in RUNTIME_BINDING_MODULES:
        if importlib.util.find_spec(distribution) is None:
            continue
        try:
            importlib.import_module(module)
        except Exception as error:  # its own import later reports the cause where it is needed
            logger.warning(
                "%s could not be imported early (%s); it is imported again where it is needed", module, error
            )
