"""PoC v2 maths and validation statistics as pure functions (imports only torch, numpy, scipy, stdlib).

The engine's PoC forward, the validators and the tests all call this one implementation, so a prover
and a validator cannot drift apart. The contracts are ../shared/spec/poc-v2.md and
inference-validation.md; docs/consensus-core.md describes the API, memory bounds and measured figures.
"""

from .artifact import (
    ArtifactDecodeError,
    ClaimCheck,
    check_claimed_vector,
    decode_vector,
    encode_vector,
    encode_vectors,
    encoding_metadata,
)
from .fraud_test import FraudTestResult, fraud_test
from .head import (
    DEFAULT_K,
    HeadOutcome,
    HeadPlan,
    UncomputedNonceError,
    check_k,
    head_outcomes,
    head_plan,
    head_vectors,
    pick_indices,
    planned_head_vectors,
    rotate,
    rotation_vectors,
    unchecked_head_vectors,
)
from .inference_distance import (
    DEFAULT_TOP_K,
    TOKENS_DIFFER,
    inference_passes,
    position_distance,
    sequence_distance,
    similarity,
)
from .inputs import generate_inputs, inputs_for_nonce
from .logprobs_mode import (
    DEFAULT_MODE,
    LogprobsMode,
    ModeResolution,
    ModeSource,
    detect_logprobs_mode,
    modes_indistinguishable,
    replay_logprobs_mode,
    resolve_logprobs_mode,
    stated_logprobs_mode,
)
from .murmur import murmur3_32
from .nonces import INT32_MAX, nonce_at, nonce_batches
from .pseudo_ids import pseudo_input_ids
from .reflection import layer_vector, layer_vectors, reflect, reflect_, reflect_stream
from .rng import Backend, fill_normal_rows, normal, normal_rows, uniform
from .seeds import (
    input_ids_seed,
    input_ids_seed_string,
    input_seed,
    input_seed_string,
    layer_seed,
    layer_seed_string,
    pick_seed,
    pick_seed_string,
    rotation_seed_string,
    rotation_seeds,
    seed_of,
    stronger_sub_seeds,
)
from .topk_list import MASKED_LOGPROB, build_topk_list, reported_logprob

__all__ = [
    "DEFAULT_K",
    "DEFAULT_MODE",
    "DEFAULT_TOP_K",
    "INT32_MAX",
    "MASKED_LOGPROB",
    "TOKENS_DIFFER",
    "ArtifactDecodeError",
    "Backend",
    "ClaimCheck",
    "FraudTestResult",
    "HeadOutcome",
    "HeadPlan",
    "LogprobsMode",
    "ModeResolution",
    "ModeSource",
    "UncomputedNonceError",
    "build_topk_list",
    "check_claimed_vector",
    "check_k",
    "decode_vector",
    "detect_logprobs_mode",
    "encode_vector",
    "encode_vectors",
    "encoding_metadata",
    "fill_normal_rows",
    "fraud_test",
    "generate_inputs",
    "head_outcomes",
    "head_plan",
    "head_vectors",
    "inference_passes",
    "input_ids_seed",
    "input_ids_seed_string",
    "input_seed",
    "input_seed_string",
    "inputs_for_nonce",
    "layer_seed",
    "layer_seed_string",
    "layer_vector",
    "layer_vectors",
    "modes_indistinguishable",
    "murmur3_32",
    "nonce_at",
    "nonce_batches",
    "normal",
    "normal_rows",
    "pick_indices",
    "pick_seed",
    "pick_seed_string",
    "planned_head_vectors",
    "position_distance",
    "pseudo_input_ids",
    "reflect",
    "reflect_",
    "reflect_stream",
    "replay_logprobs_mode",
    "reported_logprob",
    "resolve_logprobs_mode",
    "rotate",
    "rotation_seed_string",
    "rotation_seeds",
    "rotation_vectors",
    "seed_of",
    "sequence_distance",
    "similarity",
    "stated_logprobs_mode",
    "stronger_sub_seeds",
    "unchecked_head_vectors",
    "uniform",
]
