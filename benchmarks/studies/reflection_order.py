"""How far the reflection's rounding order moves artifacts (poc-v2-models.md section 4.2). Prints figures; asserts
nothing.

The deployed plugin reflects in bf16 as p = x*v, dot = sum(p), t = (2*dot)*v, y = x - t, each rounded; this project
computed the dot as one matmul and the update as one addcmul (x + (-2*dot)*v rounded once) until it adopted the
deployed order (engine_ext.consensus.reflection). Both are the same map; they differ by ulps per layer. Two
measurements, each the L2 between the artifacts of the two orders, beside the chain's distance threshold:
- models: tests/support/poc_reference.py's transformers forward of each model (the embedded Qwen3 and MiniMax-M2
  variants by default), every nonce computed with each order;
- chains: the network models' width and depth (MiniMax-M2.7: H 3072, 62 layers; DeepSeek-V4-Flash: H 4096, 43
  layers, 4 residual streams reflected each), a stream of bf16 values taking a random update before each reflection
  (a stand-in for the layers, the same in both orders), then the final RMS norm and the head: how the rounding
  difference accumulates at full size.

    PYTHONPATH=.:clients/python .venv/bin/python benchmarks/studies/reflection_order.py --nonces 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine_ext.consensus import head_vectors, layer_vectors, reflect
from server.embedded_model import DEFAULT_MODEL_DIR
from server.embedded_model.variants import MINIMAX_M2_MODEL_DIR

BLOCK_HASH = "reflection-order-block"
PUBLIC_KEY = "reflection-order-key"
# The chain's dist_threshold per model (poc-v2.md section 7, poc-v2-models.md section 7.3).
THRESHOLDS = {"qwen3": 0.2, "minimax_m2": 0.75, "deepseek_v4": 0.41}
# (name, hidden, layers, streams): the network models' shapes.
CHAINS = (("MiniMax-M2.7", 3072, 62, 1), ("DeepSeek-V4-Flash", 4096, 43, 4))


def reflect_before(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The order this project used before: the dot as one matmul, the update as one addcmul."""
    v = v.to(dtype=x.dtype, device=x.device)
    return x.clone().addcmul_(torch.matmul(x, v).unsqueeze(-1), v, value=-2.0)


def l2(a: np.ndarray | torch.Tensor, b: np.ndarray | torch.Tensor) -> float:
    return float(np.linalg.norm(np.asarray(a, dtype=np.float32) - np.asarray(b, dtype=np.float32)))


def summary(distances: list[float]) -> str:
    ordered = sorted(distances)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"max {max(ordered):.6f}  p99 {p99:.6f}  median {statistics.median(ordered):.6f}  ({sum(d == 0 for d in ordered)} of {len(ordered)} identical)"


def measure_model(model_dir: Path, nonces: int, seq_len: int) -> None:
    from tests.support.poc_reference import HfPocReference

    reference = HfPocReference(model_dir)
    model_type = reference.model.config.model_type
    distances = [
        l2(
            reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, seq_len),
            reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, seq_len, reflection=reflect_before),
        )
        for nonce in range(nonces)
    ]
    print(
        f"{model_dir.name} ({model_type}, {reference.num_layers} layers, H {reference.hidden}), {nonces} nonces of {seq_len} tokens: "
        f"{summary(distances)}; threshold {THRESHOLDS.get(model_type, float('nan'))}"
    )


def measure_chain(name: str, hidden: int, layers: int, streams: int, nonces: int) -> None:
    vectors = layer_vectors(BLOCK_HASH, range(layers), hidden, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(2026)
    start = torch.randn((nonces, streams, hidden), generator=generator).to(torch.bfloat16)
    updates = [torch.randn((nonces, streams, hidden), generator=generator).to(torch.bfloat16) for _ in range(layers)]
    finals = []
    for reflection in (reflect, reflect_before):
        x = start
        for layer in range(layers):
            x = reflection(x + updates[layer], vectors[layer])
        collapsed = x.float().mean(dim=1)
        finals.append(torch.nn.functional.rms_norm(collapsed, (hidden,)))
    heads = [head_vectors(final, BLOCK_HASH, PUBLIC_KEY, list(range(nonces))) for final in finals]
    distances = [l2(a, b) for a, b in zip(*heads)]
    print(f"chain {name} (H {hidden}, {layers} layers, {streams} stream(s)), {nonces} nonces: {summary(distances)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", type=Path, default=[DEFAULT_MODEL_DIR, MINIMAX_M2_MODEL_DIR])
    parser.add_argument("--nonces", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()
    for model_dir in args.models:
        measure_model(model_dir, args.nonces, args.seq_len)
    for chain in CHAINS:
        measure_chain(*chain, nonces=args.nonces)


if __name__ == "__main__":
    main()
