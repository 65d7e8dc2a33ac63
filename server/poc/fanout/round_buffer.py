"""A round's published artifact batches: dense sequence numbers from 1, the newest kept within a budget."""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence

from server.poc.batches.artifacts import ArtifactBatch, NonceFailure


class RoundBuffer:
    """Numbers batches as they are appended and keeps the newest ones holding at most `capacity_artifacts`
    artifacts (whole batches are evicted, oldest first; the newest batch is always kept, even when it alone is
    larger than the budget, so every batch is readable at least until the next one arrives).

    Evicted batches leave their artifact counts behind, so a reader that missed them can be told exactly what
    it lost.
    """

    def __init__(self, k_dim: int, capacity_artifacts: int) -> None:
        if k_dim < 1:
            raise ValueError(f"k_dim must be >= 1, got {k_dim}")
        if capacity_artifacts < 1:
            raise ValueError(f"capacity_artifacts must be >= 1, got {capacity_artifacts}")
        self.k_dim = k_dim
        self._capacity = capacity_artifacts
        self._batches: deque[ArtifactBatch] = deque()
        self._buffered_artifacts = 0
        # _published_through[s]: artifacts in sequences 1..s. Eight bytes a batch, so counts of evicted
        # ranges stay exact for the whole round.
        self._published_through = array("q", [0])

    @property
    def last_sequence(self) -> int:
        """The newest sequence published; 0 before the first batch."""
        return len(self._published_through) - 1

    @property
    def first_buffered_sequence(self) -> int:
        """The oldest sequence still readable (last_sequence + 1 when nothing was published)."""
        return self._batches[0].sequence if self._batches else self.last_sequence + 1

    @property
    def artifacts_published(self) -> int:
        return self._published_through[-1]

    @property
    def buffered_batches(self) -> int:
        return len(self._batches)

    @property
    def buffered_artifacts(self) -> int:
        return self._buffered_artifacts

    def append(
        self,
        nonces: Sequence[int],
        vectors: bytes,
        group_id: int = 0,
        instance: int = 0,
        failures: Sequence[NonceFailure] = (),
    ) -> ArtifactBatch:
        batch = ArtifactBatch(
            self.last_sequence + 1,
            tuple(int(nonce) for nonce in nonces),
            bytes(vectors),
            self.k_dim,
            group_id,
            instance,
            tuple(failures),
        )
        self._batches.append(batch)
        self._buffered_artifacts += len(batch)
        self._published_through.append(self._published_through[-1] + len(batch))
        while self._buffered_artifacts > self._capacity and len(self._batches) > 1:
            self._buffered_artifacts -= len(self._batches.popleft())
        return batch

    def batch(self, sequence: int) -> ArtifactBatch:
        """A batch still in the buffer; KeyError for one evicted or not yet published."""
        offset = sequence - self.first_buffered_sequence
        if not 0 <= offset < len(self._batches):
            raise KeyError(f"sequence {sequence} is not buffered")
        return self._batches[offset]

    def artifacts_between(self, first_sequence: int, last_sequence: int) -> int:
        """Artifacts published in sequences first..last (inclusive), buffered or evicted."""
        if not 1 <= first_sequence <= last_sequence <= self.last_sequence:
            raise ValueError(f"sequences {first_sequence}..{last_sequence} outside 1..{self.last_sequence}")
        return self._published_through[last_sequence] - self._published_through[first_sequence - 1]
