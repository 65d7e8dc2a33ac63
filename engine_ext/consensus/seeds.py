"""Seed strings and uint32 seeds for every PoC v2 purpose (poc-v2.md section 1).

A seed is the first 4 bytes of SHA-256 of a UTF-8 string, read big-endian. The exact strings are part
of the consensus: one character off and every vector of the network differs.
"""

from __future__ import annotations

import hashlib

from ._validate import require_int, require_int_at_least, require_str


def seed_of(text: str) -> int:
    """uint32 seed of a string: the first 4 bytes of its SHA-256, big-endian."""
    require_str("seed string", text)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")


def input_seed_string(block_hash: str, public_key: str, nonce: int) -> str:
    # No underscore before the number here, unlike the pick and rotation strings.
    return f"{_bh(block_hash)}_{_pk(public_key)}_nonce{_nonce(nonce)}"


def input_ids_seed_string(block_hash: str, public_key: str, nonce: int) -> str:
    """DeepSeek-V4's pseudo input ids (poc-v2-models.md section 2.2): the input string, then `_input_ids`."""
    return f"{input_seed_string(block_hash, public_key, nonce)}_input_ids"


def layer_seed_string(block_hash: str, layer_index: int) -> str:
    require_int_at_least("layer_index", layer_index, 0)
    return f"{_bh(block_hash)}_layer_{layer_index}_householder"


def pick_seed_string(block_hash: str, public_key: str, nonce: int, k: int) -> str:
    require_int("k", k)
    return f"{_bh(block_hash)}_{_pk(public_key)}_nonce_{_nonce(nonce)}_pick_{k}"


def rotation_seed_string(block_hash: str, public_key: str, nonce: int, k: int, step: int) -> str:
    require_int("k", k)
    require_int("step", step)
    if not 0 <= step <= k - 2:
        raise ValueError(f"rotation step must be in [0, k-2] = [0, {k - 2}], got {step}")
    return f"{_bh(block_hash)}_{_pk(public_key)}_nonce_{_nonce(nonce)}_haar_hh_{k}_{step}"


def input_seed(block_hash: str, public_key: str, nonce: int) -> int:
    """Seed of a nonce's input embeddings (base RNG)."""
    return seed_of(input_seed_string(block_hash, public_key, nonce))


def input_ids_seed(block_hash: str, public_key: str, nonce: int) -> int:
    """Seed of a nonce's pseudo input ids (DeepSeek-V4's hash-routed layers)."""
    return seed_of(input_ids_seed_string(block_hash, public_key, nonce))


def stronger_sub_seeds(block_hash: str, public_key: str, nonce: int) -> list[int]:
    """The eight big-endian uint32 words of SHA-256 of the input seed string (stronger RNG)."""
    digest = hashlib.sha256(input_seed_string(block_hash, public_key, nonce).encode("utf-8")).digest()
    return [int.from_bytes(digest[4 * j : 4 * j + 4], "big") for j in range(8)]


def layer_seed(block_hash: str, layer_index: int) -> int:
    """Seed of decoder layer `layer_index`'s reflection vector (global layer index; no key, no nonce)."""
    return seed_of(layer_seed_string(block_hash, layer_index))


def pick_seed(block_hash: str, public_key: str, nonce: int, k: int) -> int:
    """Seed of the head's coordinate pick."""
    return seed_of(pick_seed_string(block_hash, public_key, nonce, k))


def rotation_seeds(block_hash: str, public_key: str, nonce: int, k: int) -> list[int]:
    """Seeds of the head's k-1 rotation steps, in application order."""
    require_int_at_least("k", k, 2)
    return [seed_of(rotation_seed_string(block_hash, public_key, nonce, k, j)) for j in range(k - 1)]


def _bh(block_hash: str) -> str:
    return require_str("block_hash", block_hash)


def _pk(public_key: str) -> str:
    return require_str("public_key", public_key)


def _nonce(nonce: int) -> int:
    # str(int) is the spec's formatting: no padding, a minus sign for negatives.
    return require_int("nonce", nonce)
