"""A DeepSeek-V4 checkpoint in the released format (FP8 blocks, MXFP4 experts) loaded by transformers in bf16.

transformers' DeepseekV4 reads the released tensor names (its conversion_mapping renames them) but not the
quantized formats this project writes, so the checkpoint is dequantized (exactly: block_formats.py) into a
temporary bf16 copy with the same names and loaded from there. vLLM serves the quantized original; both see the
same weights.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from server.embedded_model.block_formats import dequantize_fp8_blocks, dequantize_mxfp4

# The config keys that describe the quantized storage, not the network.
QUANTIZATION_KEYS = ("quantization_config", "expert_dtype")
# The first transformers whose DeepseekV4 keeps its norm weights, sinks and compressor biases in float32 as vLLM does
# (5.17, a GPU image's, multiplies norm weights in bf16 and stops on a float32 activation); the CPU pin is 5.24.0.
REFERENCE_TRANSFORMERS = "5.24.0"


def dequantized_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a released-format safetensors file, quantized weights replaced by their bf16 values and their
    `.scale` companions dropped."""
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(checkpoint), framework="pt") as source:
        names = set(source.keys())
        for name in sorted(names):
            if name.endswith(".scale"):
                continue
            tensor = source.get_tensor(name)
            scale_name = name.removesuffix(".weight") + ".scale"
            if scale_name in names:
                tensor = _dequantize(tensor, source.get_tensor(scale_name)).to(torch.bfloat16)
            tensors[name] = tensor
    return tensors


def _dequantize(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    if weight.dtype == torch.float8_e4m3fn:
        return dequantize_fp8_blocks(weight, scale)
    if weight.dtype == torch.uint8:
        return dequantize_mxfp4(weight, scale)
    raise ValueError(f"no dequantization for a {weight.dtype} weight with a scale")


def load_bf16_deepseek_v4(model_dir: Path) -> Any:
    """transformers' DeepseekV4ForCausalLM of `model_dir`'s checkpoint, in bf16 (its float32 modules as it keeps
    them), eval mode, on CPU."""
    # transformers' own classes by name: vLLM registers a DeepseekV4Config of its own for `deepseek_v4` with the
    # Auto classes once its config module is imported (in a test session, another test may have done so).
    import transformers
    from packaging.version import Version
    from transformers.models.deepseek_v4 import DeepseekV4Config, DeepseekV4ForCausalLM

    if Version(transformers.__version__) < Version(REFERENCE_TRANSFORMERS):
        raise RuntimeError(
            f"transformers {transformers.__version__} here: DeepSeek-V4's reference needs {REFERENCE_TRANSFORMERS} or "
            "later (install its wheel beside the others, or redo the comparison on a checkout's virtualenv from a dump)"
        )

    config = json.loads((model_dir / "config.json").read_text())
    with tempfile.TemporaryDirectory(prefix="deepseek-v4-bf16-") as staging:
        bf16_dir = Path(staging)
        plain_config = {key: value for key, value in config.items() if key not in QUANTIZATION_KEYS}
        (bf16_dir / "config.json").write_text(json.dumps(plain_config))
        save_file(dequantized_tensors(model_dir / "model.safetensors"), str(bf16_dir / "model.safetensors"))
        model, info = DeepseekV4ForCausalLM.from_pretrained(
            str(bf16_dir),
            config=DeepseekV4Config.from_pretrained(str(bf16_dir)),
            dtype=torch.bfloat16,
            output_loading_info=True,
        )
    # A tensor the layout misnames would otherwise be left at transformers' initial value, silently.
    problems = {key: value for key, value in info.items() if value}
    if problems:
        raise ValueError(f"transformers did not load {model_dir} cleanly: {problems}")
    model.eval()
    return model
