"""Consensus on this host: a mining round's artifacts of a model with real weights (the embedded one unless
MLNODE_GPU_REFERENCE_MODEL_DIR names another) equal the ones tests/support/poc_reference.py computes on CPU with
transformers and the consensus core, within the tolerance of tests/e2e/test_poc_artifacts.py (L2 0.02 per artifact,
a tenth of the network's 0.2). The model under test cannot serve here: no reference has its dummy weights."""

from __future__ import annotations

from gonka.mlnode.client import InferenceClient, decode_batch
from tests.gpu.mining import BATCH_SIZE, BLOCK_HASH, K, PUBLIC_KEY, SEQ_LEN, mine
from tests.gpu.servers import ServedModel
from tests.support.poc_reference import HfPocReference, l2_distance

TOLERANCE = 0.02
MINED_BATCHES = 2


def test_a_rounds_artifacts_equal_the_cpu_reference(
    reference_client: InferenceClient, reference_model: ServedModel
) -> None:
    mined = mine(reference_client, MINED_BATCHES)
    rows = [row for batch in mined.batches for row in decode_batch(batch)]
    assert len(rows) == MINED_BATCHES * BATCH_SIZE
    reference = HfPocReference(reference_model.model_dir)
    distances = {
        nonce: l2_distance(vector, reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, SEQ_LEN, K))
        for nonce, vector in rows
    }
    print(f"{len(rows)} artifacts vs the CPU reference: max L2 {max(distances.values()):.4g}")
    assert max(distances.values()) <= TOLERANCE, distances
