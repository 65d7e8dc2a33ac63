"""Mined DeepSeek-V4 artifacts against the CPU references (tests/support/poc_reference.py, plain and sm90), and the
dump a GPU round leaves so the comparison can be redone on CPU.

`python -m tests.support.deepseek_v4_consensus DUMP.json [MODEL_DIR]` recomputes both references for the dump's
nonces (MODEL_DIR defaults to the tiny variant's own directory; it must be the build the dump records) and prints
the same summary the GPU test prints.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
    if weights_sha256(model_dir) != mined.weights_sha256:
        raise ValueError(f"{model_dir} is not the build these artifacts were mined with")
    nonces = [nonce for nonce, _ in mined.rows]
    distances = {}
    for numerics in ("plain", "sm90"):
        reference = HfPocReference(model_dir, numerics=numerics)
        expected = reference.vectors(mined.block_hash, mined.public_key, nonces, mined.seq_len, mined.k)
        distances[numerics] = [l2_distance(vector, row) for (_, vector), row in zip(mined.rows, expected, strict=True)]
    return distances


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
    args = parser.parse_args(argv)
    print(summary(reference_distances(args.model_dir, MinedArtifacts.read(args.dump))))


if __name__ == "__main__":
    main()
