"""The durable callback store: every callback body the server is to deliver, on disk from the moment it is
produced until the receiver has accepted it or it is given up.

One SQLite database per server (stdlib sqlite3, WAL journal), locked to its process (server.poc.delivery.store_lock).
Each entry is one body in the deployed JSON shape (a mining batch's artifacts, or one validation result) with
a stable id that only grows (AUTOINCREMENT: an id is never reused, even after its entry is purged), so a
consumer can resume after the last id it has, and the URL it goes to. Delivery is a state change
(pending -> delivered or given_up), not a delete; settled entries are purged some time later.

An append is committed before it returns. With WAL and synchronous=NORMAL a commit is in the operating
system's hands when it returns: it survives the process's death at any instant (SIGKILL, the OOM killer),
not a power cut of the machine (the last transactions may roll back then).

Posts: the HTTP sender sends the pending entries of one round to one URL together, in one body, as the
deployed server sends everything buffered each interval. The entries of one POST share a post id (the id of
its first entry), fixed when the POST is first tried and kept across restarts, so a repeated POST carries the
same entries and the same Idempotency-Key.

Not thread-safe: every call comes from the event loop's thread (each is a short local transaction).
"""

from __future__ import annotations

import enum
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from server.poc.delivery.body_json import encode_body
from server.poc.delivery.store_lock import StoreLock

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS store (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS callbacks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    round_id TEXT,
    artifacts INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'given_up')),
    post_id INTEGER,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    failed_attempts INTEGER NOT NULL DEFAULT 0,
    settled_at REAL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS callbacks_pending ON callbacks (url, next_attempt_at, post_id, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS callbacks_by_round ON callbacks (round_id) WHERE round_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS callbacks_settled ON callbacks (settled_at) WHERE state != 'pending';
"""


class EntryState(enum.Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    GIVEN_UP = "given_up"


class StoreUnreadable(RuntimeError):
    pass


@dataclass(frozen=True)
class Post:
    """Entries sent in one POST: the pending entries of one round to one URL (a validation result alone)."""

    post_id: int
    url: str
    round_id: str | None
    entry_ids: tuple[int, ...]
    artifacts: int
    created_at: float  # its oldest entry's


@dataclass(frozen=True)
class RoundCounts:
    """A round's artifacts by where their delivery stands."""

    delivered: int
    pending: int  # not yet sent, or in a POST being tried
    retrying: int  # pending after a whole retry schedule failed: tried again in later passes
    given_up: int
    failed_attempts: int


class CallbackStore:
    def __init__(self, lock: StoreLock, clock: Callable[[], float] = time.time) -> None:
        """Opens (or creates) the store `lock` holds. Raises StoreUnreadable for a file that is no store of this
        version."""
        self.path = lock.store_path
        self._lock = lock
        self._clock = clock
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise StoreUnreadable(
                    f"the callback store {self.path} has schema version {version}; this server reads {SCHEMA_VERSION}"
                )
            self._db.executescript(SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("INSERT OR IGNORE INTO store (key, value) VALUES ('id', ?)", (secrets.token_hex(8),))
            self.store_id: str = self._db.execute("SELECT value FROM store WHERE key = 'id'").fetchone()[0]
        except sqlite3.DatabaseError as error:
            raise StoreUnreadable(f"the callback store {self.path} cannot be read: {error}") from error

    def append(self, url: str, body: Mapping[str, object], round_id: str | None, artifacts: int) -> int:
        """Adds one body (a JSON object) to deliver to `url`; returns its id once it is committed."""
        text = encode_body(body).decode()  # a TEXT column: UTF-8 JSON stored as text
        cursor = self._db.execute(
            "INSERT INTO callbacks (created_at, url, body, round_id, artifacts) VALUES (?, ?, ?, ?, ?)",
            (self._clock(), url, text, round_id, artifacts),
        )
        row_id = cursor.lastrowid
        assert row_id is not None  # an INSERT sets it
        return row_id

    def urls_with_due_work(self, now: float) -> list[str]:
        rows = self._db.execute(
            "SELECT DISTINCT url FROM callbacks WHERE state = 'pending' AND next_attempt_at <= ?", (now,)
        ).fetchall()
        return [url for (url,) in rows]

    def due_posts(self, url: str, now: float, max_artifacts: int, mergeable: Callable[[str], bool]) -> list[Post]:
        """The posts to `url` due now, oldest first: those tried before whose next pass is due, then new ones
        formed from every entry not yet in a post. A new post holds consecutive entries of one round, at most
        `max_artifacts` artifacts (a single larger entry alone), only entries `mergeable` accepts (any other is
        a post of its own, so one unreadable body never takes others down with it); a validation result is
        always alone. Only new entries' bodies are read here (bodies() reads a post's when it is sent): a
        backlog is never in memory whole."""
        rows = [
            _Row(*row)
            for row in self._db.execute(
                "SELECT id, created_at, CASE WHEN post_id IS NULL THEN body END, round_id, artifacts, post_id "
                "FROM callbacks WHERE state = 'pending' AND url = ? AND next_attempt_at <= ? ORDER BY id",
                (url, now),
            )
        ]
        formed: dict[int, list[_Row]] = {}
        for row in rows:
            if row.post_id is not None:
                formed.setdefault(row.post_id, []).append(row)
        new_posts = _group([row for row in rows if row.post_id is None], max_artifacts, mergeable)
        if new_posts:
            self._db.execute("BEGIN IMMEDIATE")
            for members in new_posts:
                self._db.executemany(
                    "UPDATE callbacks SET post_id = ? WHERE id = ?", [(members[0].id, row.id) for row in members]
                )
            self._db.execute("COMMIT")
        groups = sorted(formed.items()) + [(members[0].id, members) for members in new_posts]
        return [
            Post(
                post_id=post_id,
                url=url,
                round_id=members[0].round_id,
                entry_ids=tuple(row.id for row in members),
                artifacts=sum(row.artifacts for row in members),
                created_at=min(row.created_at for row in members),
            )
            for post_id, members in groups
        ]

    def bodies(self, post: Post) -> list[str]:
        """The post's entries' JSON texts, in id order."""
        return [
            body
            for (body,) in self._db.execute("SELECT body FROM callbacks WHERE post_id = ? ORDER BY id", (post.post_id,))
        ]

    def settle(self, post: Post, state: EntryState, outcome: str) -> None:
        if state is EntryState.PENDING:
            raise ValueError("settle() ends an entry's delivery: delivered or given up")
        self._db.execute(
            "UPDATE callbacks SET state = ?, settled_at = ?, outcome = ? WHERE post_id = ? AND state = 'pending'",
            (state.value, self._clock(), outcome, post.post_id),
        )

    def postpone(self, post: Post, next_attempt_at: float, outcome: str) -> None:
        self._db.execute(
            "UPDATE callbacks SET next_attempt_at = ?, outcome = ? WHERE post_id = ? AND state = 'pending'",
            (next_attempt_at, outcome, post.post_id),
        )

    def count_failed_attempt(self, post: Post) -> None:
        """One more failed POST attempt, kept on the post's first entry."""
        self._db.execute("UPDATE callbacks SET failed_attempts = failed_attempts + 1 WHERE id = ?", (post.post_id,))

    def round_counts(self, round_id: str) -> RoundCounts:
        rows = self._db.execute(
            "SELECT state, next_attempt_at > 0, SUM(artifacts), SUM(CASE WHEN id = post_id THEN failed_attempts ELSE 0 END) "
            "FROM callbacks WHERE round_id = ? GROUP BY state, next_attempt_at > 0",
            (round_id,),
        ).fetchall()
        by_kind: dict[str, int] = {}
        failed_attempts = 0
        for state, postponed, artifacts, failed in rows:
            kind = "retrying" if state == EntryState.PENDING.value and postponed else state
            by_kind[kind] = by_kind.get(kind, 0) + int(artifacts)
            failed_attempts += int(failed)
        return RoundCounts(
            delivered=by_kind.get(EntryState.DELIVERED.value, 0),
            pending=by_kind.get(EntryState.PENDING.value, 0),
            retrying=by_kind.get("retrying", 0),
            given_up=by_kind.get(EntryState.GIVEN_UP.value, 0),
            failed_attempts=failed_attempts,
        )

    def pending_entries(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM callbacks WHERE state = 'pending'").fetchone()[0])

    def purge_settled(self, settled_before: float) -> int:
        """Deletes delivered and given-up entries settled before the time given; returns how many."""
        cursor = self._db.execute(
            "DELETE FROM callbacks WHERE state != 'pending' AND settled_at < ?", (settled_before,)
        )
        return cursor.rowcount

    def close(self) -> None:
        self._db.close()
        self._lock.release()


@dataclass(frozen=True)
class _Row:
    id: int
    created_at: float
    body: str | None  # read for entries not yet in a post only
    round_id: str | None
    artifacts: int
    post_id: int | None


def _group(rows: list[_Row], max_artifacts: int, mergeable: Callable[[str], bool]) -> list[list[_Row]]:
    """Consecutive rows of one round, mergeable, within the artifact bound, together; every other row alone."""
    groups: list[list[_Row]] = []
    open_group: list[_Row] | None = None
    open_artifacts = 0
    for row in rows:
        alone = row.round_id is None or row.body is None or not mergeable(row.body)
        if (
            not alone
            and open_group is not None
            and open_group[0].round_id == row.round_id
            and open_artifacts + row.artifacts <= max_artifacts
        ):
            open_group.append(row)
            open_artifacts += row.artifacts
            continue
        group = [row]
        groups.append(group)
        open_group, open_artifacts = (None, 0) if alone else (group, row.artifacts)
    return groups
