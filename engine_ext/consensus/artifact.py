"""Artifact codec and the check of someone else's claimed vector (poc-v2.md sections 5.7 and 7).

A vector is k float16 values, little-endian (2k bytes), in standard base64 with padding (32 characters
for k = 12). A claim is a mismatch if it does not decode to exactly k finite float16 values, or if
||computed - claimed||_2 > dist_threshold (strict) on the two fp16 vectors widened to float32.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Literal, TypedDict

import numpy as np
import torch

from ._validate import require_finite, require_int_at_least

_LE_F16 = np.dtype("<f2")


class ArtifactDecodeError(ValueError):
    """A base64 artifact that is not valid base64 or not exactly k float16 values."""


class ArtifactEncoding(TypedDict):
    """The metadata sent beside artifacts, in this key order."""

    dtype: Literal["f16"]
    k_dim: int
    endian: Literal["le"]


def encoding_metadata(k: int) -> ArtifactEncoding:
    """{"dtype": "f16", "k_dim": k, "endian": "le"}."""
    require_int_at_least("k", k, 1)
    return {"dtype": "f16", "k_dim": k, "endian": "le"}


def encode_vector(vector: torch.Tensor | np.ndarray) -> str:
    """One float16 vector [k] -> base64 of its little-endian bytes."""
    arr = _as_f16_array(vector)
    if arr.ndim != 1:
        raise ValueError(f"an artifact vector must be 1-D, got shape {arr.shape}")
    return base64.b64encode(arr.astype(_LE_F16, copy=False).tobytes()).decode("ascii")


def encode_vectors(vectors: torch.Tensor | np.ndarray) -> list[str]:
    """A batch [B, k] of float16 vectors -> B base64 strings."""
    arr = _as_f16_array(vectors)
    if arr.ndim != 2:
        raise ValueError(f"a batch of artifact vectors must be [B, k], got shape {arr.shape}")
    return [encode_vector(row) for row in arr]


def decode_vector(text: str, k: int) -> np.ndarray:
    """base64 -> float16 array [k]; raises ArtifactDecodeError on invalid base64 or a wrong length.

    Non-finite values decode as they are; `check_claimed_vector` counts them as mismatches.
    """
    require_int_at_least("k", k, 1)
    if not isinstance(text, str):
        raise ArtifactDecodeError(f"artifact must be a base64 str, got {type(text).__name__}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ArtifactDecodeError(f"artifact is not valid base64: {exc}") from exc
    if len(raw) != 2 * k:
        raise ArtifactDecodeError(f"artifact decodes to {len(raw)} bytes, expected {2 * k} (k={k} float16 values)")
    return np.frombuffer(raw, dtype=_LE_F16).astype(np.float16)


@dataclass(frozen=True)
class ClaimCheck:
    """Verdict on one claimed vector: `reason` says why it is a mismatch ('' when it is not)."""

    mismatch: bool
    reason: str
    distance: float | None


def check_claimed_vector(computed: torch.Tensor | np.ndarray, claimed_b64: str, dist_threshold: float) -> ClaimCheck:
    """Compare a claimed base64 vector with our own computed float16 vector [k]."""
    threshold = require_finite("dist_threshold", dist_threshold)
    if threshold < 0:
        raise ValueError(f"dist_threshold must be >= 0, got {dist_threshold}")
    ours = _as_f16_array(computed)
    if ours.ndim != 1:
        raise ValueError(f"computed vector must be 1-D, got shape {ours.shape}")
    if not np.isfinite(ours).all():
        raise ValueError("computed vector holds a non-finite value; such a nonce must not be validated")
    try:
        theirs = decode_vector(claimed_b64, ours.shape[0])
    except ArtifactDecodeError as exc:
        return ClaimCheck(True, str(exc), None)
    if not np.isfinite(theirs).all():
        return ClaimCheck(True, "claimed vector holds a non-finite value", None)
    diff = ours.astype(np.float32) - theirs.astype(np.float32)
    distance = float(np.sqrt(np.sum(diff * diff, dtype=np.float32)))
    if distance > threshold:
        return ClaimCheck(True, f"distance {distance:.6g} > threshold {threshold:.6g}", distance)
    return ClaimCheck(False, "", distance)


def _as_f16_array(vector: torch.Tensor | np.ndarray) -> np.ndarray:
    # Require float16 rather than converting: a float32 vector here means the head step was skipped.
    arr = vector.detach().cpu().numpy() if isinstance(vector, torch.Tensor) else np.asarray(vector)
    if arr.dtype != np.float16:
        raise TypeError(f"artifact vectors must be float16, got {arr.dtype}")
    return arr
