"""A round's artifacts for the API node's `{url}/generated`: each batch written to the durable callback store
(server.poc.callback_store) in the deployed body, committed before the batch is published to any subscriber;
the store's sender (server.poc.callback_sender) delivers them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_ext.consensus.artifact import encoding_metadata

from .artifacts import vector_b64
from .callback_store import CallbackStore, RoundCounts


@dataclass(frozen=True)
class CallbackIdentity:
    """Who produced the artifacts, as the receiver files them."""

    public_key: str
    block_hash: str
    block_height: int
    node_id: int


def generated_url(url: str) -> str:
    return url.rstrip("/") + "/generated"


class ArtifactCallback:
    def __init__(
        self,
        url: str,
        identity: CallbackIdentity,
        k_dim: int,
        round_id: str,
        store: CallbackStore,
        flush: Callable[[], None],
        request_id: str | None = None,
    ) -> None:
        """`flush`: asks the store's sender to send what is pending now (CallbackSender.flush). `request_id`: the
        HTTP `generate` job the artifacts answer (the deployed body carries it then)."""
        self.generated_url = generated_url(url)
        self._fields: dict[str, str | int] = {
            "public_key": identity.public_key,
            "block_hash": identity.block_hash,
            "block_height": identity.block_height,
            "node_id": identity.node_id,
        }
        if request_id is not None:
            self._fields["request_id"] = request_id
        self._encoding = encoding_metadata(k_dim)
        self._k_dim = k_dim
        self._round_id = round_id
        self._store = store
        self._flush = flush

    def add(self, nonces: Sequence[int], vectors: bytes) -> None:
        """One batch, on disk when this returns (the deployed body: identity, [request_id,] artifacts, encoding)."""
        artifacts = [
            {"nonce": int(nonce), "vector_b64": vector_b64(vectors, self._k_dim, index)}
            for index, nonce in enumerate(nonces)
        ]
        body = {**self._fields, "artifacts": artifacts, "encoding": self._encoding}
        self._store.append(self.generated_url, body, self._round_id, len(artifacts))

    def finish(self) -> None:
        """No more artifacts: what is pending goes now, not at the next interval."""
        self._flush()

    def counts(self) -> RoundCounts:
        return self._store.round_counts(self._round_id)
