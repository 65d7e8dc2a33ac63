"""A round's artifacts for the API node's `/generated`, each batch in the deployed body before it is published to any
subscriber: with a URL, written to the durable callback store (server.poc.delivery.callback_store), whose sender
(server.poc.delivery.callback_sender) POSTs them to `{url}/generated`; without one (an HTTP round the API node gave no `url`),
posted to the pull stream's sink (server.poc.delivery.callback_stream), which its consumer reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from engine_ext.consensus.artifact import ArtifactEncoding, encoding_metadata
from server.poc.batches.artifacts import ArtifactEntry, artifact_entries
from server.poc.batches.round_params import RoundParameters
from server.poc.delivery.callback_store import CallbackStore, RoundCounts
from server.poc.delivery.callback_stream import CallbackSink, poc_batches_path


@dataclass(frozen=True)
class CallbackIdentity:
    """Who produced the artifacts, as the receiver files them."""

    public_key: str
    block_hash: str
    block_height: int
    node_id: int

    @classmethod
    def of_round(cls, params: RoundParameters) -> CallbackIdentity:
        return cls(params.artifacts.public_key, params.artifacts.block_hash, params.block_height, params.node_id)


def generated_url(url: str) -> str:
    return url.rstrip("/") + "/generated"


class _Producer(TypedDict):
    """Who produced a body's artifacts, and for which job: the leading fields of the deployed `/generated` body."""

    public_key: str
    block_hash: str
    block_height: int
    node_id: int
    request_id: NotRequired[str]  # a generate job's, for its artifacts; absent for a round's


class GeneratedBody(_Producer):
    """The deployed `/generated` body of one batch, in this key order: identity, [request_id,] artifacts, encoding.
    A TypedDict rather than a struct: a body is a JSON object wherever it goes (the store, the pull stream's sink)."""

    artifacts: list[ArtifactEntry]
    encoding: ArtifactEncoding


class GeneratedBodies:
    """A round's (or a generate job's) `/generated` bodies, one per batch: the same producer and encoding in each."""

    def __init__(self, identity: CallbackIdentity, k_dim: int, request_id: str | None = None) -> None:
        self._producer: _Producer = {
            "public_key": identity.public_key,
            "block_hash": identity.block_hash,
            "block_height": identity.block_height,
            "node_id": identity.node_id,
        }
        if request_id is not None:
            self._producer["request_id"] = request_id
        self._encoding = encoding_metadata(k_dim)
        self._k_dim = k_dim

    def of(self, nonces: Sequence[int], vectors: bytes) -> GeneratedBody:
        return {
            **self._producer,
            "artifacts": artifact_entries(nonces, vectors, self._k_dim),
            "encoding": self._encoding,
        }


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
        self._bodies = GeneratedBodies(identity, k_dim, request_id)
        self._round_id = round_id
        self._store = store
        self._flush = flush

    def add(self, nonces: Sequence[int], vectors: bytes) -> None:
        """One batch, on disk when this returns (the deployed body: identity, [request_id,] artifacts, encoding)."""
        self._store.append(self.generated_url, self._bodies.of(nonces, vectors), self._round_id, len(nonces))

    def finish(self) -> None:
        """No more artifacts: what is pending goes now, not at the next interval."""
        self._flush()

    def counts(self) -> RoundCounts | None:
        return self._store.round_counts(self._round_id)


class StreamedArtifacts:
    """A round's artifacts for the pull stream: each batch one callback, to `/v2/poc-batches/{model}/generated`."""

    def __init__(
        self, sink: CallbackSink, model: str, identity: CallbackIdentity, k_dim: int, request_id: str | None = None
    ) -> None:
        """`model`: as the API node named it (its callback path carries that name). `request_id`: the HTTP `generate`
        job the artifacts answer."""
        self._sink = sink
        self._path = poc_batches_path(model, "generated")
        self._bodies = GeneratedBodies(identity, k_dim, request_id)

    def add(self, nonces: Sequence[int], vectors: bytes) -> None:
        self._sink.post(self._path, self._bodies.of(nonces, vectors))

    def finish(self) -> None:
        """Nothing waits: every batch is in the stream's buffer as it comes."""

    def counts(self) -> RoundCounts | None:
        """None: the stream's consumer, not the callback store, takes these (GetRoundStatus reports no counts)."""
        return None


def streamed_round(sink: CallbackSink, model: str) -> Callable[[str, RoundParameters], StreamedArtifacts]:
    """A round's callback factory (RoundControl.start) for a round whose artifacts go to the pull stream."""
    return lambda _round_id, params: StreamedArtifacts(
        sink, model, CallbackIdentity.of_round(params), params.artifacts.k_dim
    )
