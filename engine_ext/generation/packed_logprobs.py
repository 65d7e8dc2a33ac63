"""Packed logprobs: a token stream's sampled logprobs as one bytes value per request and step.

vLLM's engine core ships each request's sampled logprobs to the frontend as three small numpy
arrays; the frontend decodes every one through a Python hook, per request and per step: the
largest single cost of a streamed token with logprobs (about 10 µs per token at 64 streams on the
2-core CI machine). For token streams the engine core packs them instead into one bytes value that
msgpack carries natively, in the output's `kv_transfer_params` under PACKED_LOGPROBS_KEY.

Layout: per position, 2w + 1 little-endian 32-bit words, w = 1 + the step's largest top-k:
the chosen token id then the top-k ids (int32), their logprobs (float32), the chosen token's rank.
"""

from __future__ import annotations

import functools
import struct

import numpy as np
from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import LogprobsLists

# In SamplingParams.extra_args: the frontend asks the engine core to pack this request's logprobs.
PACKED_LOGPROBS_ARG = "gonka_mlnode_packed_logprobs"
# In EngineCoreOutput.kv_transfer_params: the packed bytes.
PACKED_LOGPROBS_KEY = "gonka_mlnode_packed_logprobs"


def request_packed_logprobs(params: SamplingParams) -> None:
    params.extra_args = {**(params.extra_args or {}), PACKED_LOGPROBS_ARG: True}


def wants_packed_logprobs(params: SamplingParams | None) -> bool:
    return (
        params is not None and params.logprobs is not None and bool((params.extra_args or {}).get(PACKED_LOGPROBS_ARG))
    )


def pack(lists: LogprobsLists) -> bytes:
    ids, logprobs, ranks, _ = lists
    words = (
        ids.astype(np.int32, copy=False),
        logprobs.astype(np.float32, copy=False).view(np.int32),
        ranks.astype(np.int32, copy=False).reshape(-1, 1),
    )
    return np.concatenate(words, axis=1).astype("<i4", copy=False).tobytes()


@functools.cache
def _position_format(width: int) -> struct.Struct:
    return struct.Struct(f"<{width}i{width}fi")


def unpack(parts: list[tuple[int, bytes]], k: int) -> tuple[list[float], list[int], list[int], list[float]]:
    """Columns (chosen logprobs, chosen ranks, top-k ids, top-k logprobs; the top-k flattened) of
    `parts`: (number of positions, packed bytes) per engine step. The first `k` of each position's
    top entries are kept: the engine pads every row to the step's largest k."""
    logprobs: list[float] = []
    ranks: list[int] = []
    top_ids: list[int] = []
    top_logprobs: list[float] = []
    for positions, packed in parts:
        width = (len(packed) // (4 * positions) - 1) // 2
        for row in _position_format(width).iter_unpack(packed):
            top_ids.extend(row[1 : k + 1])
            logprobs.append(row[width])
            top_logprobs.extend(row[width + 1 : width + 1 + k])
            ranks.append(row[2 * width])
    return logprobs, ranks, top_ids, top_logprobs
