"""Mined DeepSeek-V4 artifacts against the CPU references (tests/support/poc_reference.py, plain and sm90), and the
dump a GPU round leaves so the comparison can be redone on CPU.

`python -m tests.support.deepseek_v4_consensus DUMP.json [MODEL_DIR]` recomputes both references for the dump's
nonces (MODEL_DIR defaults to the tiny variant's own directory; it must be the build the dump records) and prints
the same summary the GPU test prints. With `--leave-one-out N` it prints instead, for the dump's first N nonces, how
far each of vLLM's sm90 roundings moves the reference and how far the mined artifacts lie from the reference without
it (docs/gpu.md's table).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests.support.deepseek_v4_sm90 import ROUNDINGS, apply_sm90_numerics
from tests.support.poc_reference import HfPocReference, l2_distance

# The network's PoC distance threshold for DeepSeek-V4 (poc-v2-models.md section 7.3).
CHAIN_THRESHOLD = 0.41


@dataclass(frozen=True)
class MinedArtifacts:
    block_hash: str
    public_key: str
    seq_len: int
    k: int
    # The model's build_info.json sha256 of its weights, so a dump is compared against the same build.
    weights_sha256: str
    rows: list[tuple[int, np.ndarray]]

    def write(self, path: Path) -> None:
        record = {
            "block_hash": self.block_hash,
            "public_key": self.public_key,
            "seq_len": self.seq_len,
            "k": self.k,
            "weights_sha256": self.weights_sha256,
            # float16 values widen to float exactly, so the JSON round trip is lossless.
            "rows": [[nonce, vector.astype(np.float32).tolist()] for nonce, vector in self.rows],
        }
        path.write_text(json.dumps(record) + "\n")

    @classmethod
    def read(cls, path: Path) -> MinedArtifacts:
        record = json.loads(path.read_text())
        rows = [(int(nonce), np.array(values, dtype=np.float16)) for nonce, values in record.pop("rows")]
        return cls(rows=rows, **record)


def weights_sha256(model_dir: Path) -> str:
    return str(json.loads((model_dir / "build_info.json").read_text())["files_sha256"]["model.safetensors"])


def reference_distances(model_dir: Path, mined: MinedArtifacts) -> dict[str, list[float]]:
    """Each mined artifact's L2 distance to the plain and to the sm90 reference, in the rows' order."""
    _require_the_mined_build(model_dir, mined)
    nonces = [nonce for nonce, _ in mined.rows]
    distances = {}
    for numerics in ("plain", "sm90"):
        reference = HfPocReference(model_dir, numerics=numerics)
        expected = reference.vectors(mined.block_hash, mined.public_key, nonces, mined.seq_len, mined.k)
        distances[numerics] = [l2_distance(vector, row) for (_, vector), row in zip(mined.rows, expected, strict=True)]
    return distances


@dataclass(frozen=True)
class Ablation:
    left_out: str
    # Median L2 distances over the nonces: the ablated reference from the whole sm90 one, the mined artifacts from it.
    reference_moves: float
    mined_to_reference: float


# A perturbation of the size of bf16's last bit, for scale beside the roundings.
LAST_BIT_NOISE = "bf16 noise of one unit in the last place on layer 0's input (plain reference)"


def leave_one_out(model_dir: Path, mined: MinedArtifacts, nonces: int) -> list[Ablation]:
    """The sm90 reference whole and with each of ROUNDINGS left out in turn, over the dump's first `nonces` rows; last,
    LAST_BIT_NOISE against the plain reference (its `mined_to_reference` is then the mined artifacts' distance from
    the perturbed plain reference)."""
    _require_the_mined_build(model_dir, mined)
    rows = mined.rows[:nonces]
    arguments = (mined.block_hash, mined.public_key, [nonce for nonce, _ in rows], mined.seq_len, mined.k)
    mined_vectors = [vector for _, vector in rows]

    def sm90_without(left_out: frozenset[str]) -> np.ndarray:
        reference = HfPocReference(model_dir, numerics="plain")
        apply_sm90_numerics(reference.model, left_out)
        return reference.vectors(*arguments)

    whole = sm90_without(frozenset())
    ablations = [Ablation("nothing", 0.0, _median_distance(mined_vectors, whole))]
    for rounding in ROUNDINGS:
        ablated = sm90_without(frozenset({rounding}))
        ablations.append(Ablation(rounding, _median_distance(whole, ablated), _median_distance(mined_vectors, ablated)))
    plain = HfPocReference(model_dir, numerics="plain")
    unperturbed = plain.vectors(*arguments)
    noise = torch.Generator().manual_seed(0)

    def last_bit_noise(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        # The decoder layer takes its hidden states first, by position (transformers 5.24).
        hidden, *rest = args
        step = torch.randn(hidden.shape, generator=noise).to(hidden.dtype)
        return (hidden + hidden * step * 2.0**-8, *rest), kwargs

    handle = plain.model.model.layers[0].register_forward_pre_hook(last_bit_noise, with_kwargs=True)
    perturbed = plain.vectors(*arguments)
    handle.remove()
    ablations.append(
        Ablation(LAST_BIT_NOISE, _median_distance(unperturbed, perturbed), _median_distance(mined_vectors, perturbed))
    )
    return ablations


def ablation_table(ablations: list[Ablation]) -> str:
    lines = [
        "| left out of the sm90 reference | reference moves (median) | mined to reference (median) |",
        "|---|---|---|",
    ]
    lines += [f"| {a.left_out} | {a.reference_moves:.4f} | {a.mined_to_reference:.4f} |" for a in ablations]
    return "\n".join(lines)


def _median_distance(vectors: Sequence[np.ndarray] | np.ndarray, others: Sequence[np.ndarray] | np.ndarray) -> float:
    return float(np.median([l2_distance(a, b) for a, b in zip(vectors, others, strict=True)]))


def _require_the_mined_build(model_dir: Path, mined: MinedArtifacts) -> None:
    if weights_sha256(model_dir) != mined.weights_sha256:
        raise ValueError(f"{model_dir} is not the build these artifacts were mined with")


def summary(distances: dict[str, list[float]]) -> str:
    """One line per entry of `distances`: "plain" and "sm90" name the references, any other key names itself."""
    lines = []
    for name, values in distances.items():
        array = np.asarray(values)
        against = f"the {name} reference" if name in ("plain", "sm90") else name
        lines.append(
            f"{len(values)} artifacts vs {against}: max {array.max():.4f}, "
            f"p99 {np.percentile(array, 99):.4f}, median {np.median(array):.4f} (chain threshold {CHAIN_THRESHOLD})"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    from server.embedded_model.variants import DEEPSEEK_V4_TINY_MODEL_DIR

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dump", type=Path, help="the JSON a GPU round wrote (MLNODE_GPU_DEEPSEEK_V4_DUMP)")
    parser.add_argument("model_dir", type=Path, nargs="?", default=DEEPSEEK_V4_TINY_MODEL_DIR)
    parser.add_argument("--leave-one-out", type=int, metavar="N", help="the ablation table over the first N nonces")
    args = parser.parse_args(argv)
    mined = MinedArtifacts.read(args.dump)
    if args.leave_one_out:
        print(ablation_table(leave_one_out(args.model_dir, mined, args.leave_one_out)))
    else:
        print(summary(reference_distances(args.model_dir, mined)))


if __name__ == "__main__":
    main()
