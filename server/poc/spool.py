"""Callback POSTs the process could not deliver before it exited, kept on disk for the next start.

The file is JSON lines, one POST per line. Appends are whole lines, flushed and fsynced, so a crash
mid-write can only tear the line being written; a torn or unreadable line is skipped (and counted), never
allowed to hide the entries around it. Removing delivered entries rewrites the file to a temporary name
and renames it over the old one, so a crash leaves either the old file or the new one.

One process owns a spool path; within it all calls come from the event loop thread.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from .retry import PostOutcome, RetrySchedule, post_with_retry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpooledPost:
    entry_id: str
    url: str
    body: dict[str, Any]


@dataclass(frozen=True)
class SpoolContents:
    entries: tuple[SpooledPost, ...]
    unreadable_lines: int


@dataclass(frozen=True)
class SpoolReport:
    """What one deliver_all pass did. `remaining` entries are still on disk for a later pass."""

    delivered: int
    remaining: int
    given_up: int
    unreadable_dropped: int


@dataclass(frozen=True)
class SpoolCounts:
    """Totals over this object's life (this process)."""

    spooled: int
    delivered: int
    given_up: int


class Spool:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._spooled = 0
        self._delivered = 0
        self._given_up = 0

    def append(self, url: str, body: Mapping[str, Any]) -> None:
        line = json.dumps({"id": uuid.uuid4().hex, "url": url, "body": body}, separators=(",", ":")) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        with open(self.path, "ab+") as spool_file:
            # After a torn last line, start on a fresh line so the torn bytes cannot swallow this entry.
            if spool_file.seek(0, os.SEEK_END) > 0:
                spool_file.seek(-1, os.SEEK_END)
                if spool_file.read(1) != b"\n":
                    line = "\n" + line
            spool_file.write(line.encode())
            spool_file.flush()
            os.fsync(spool_file.fileno())
        if created:
            _fsync_directory(self.path.parent)
        self._spooled += 1

    def read(self) -> SpoolContents:
        if not self.path.exists():
            return SpoolContents((), 0)
        entries: list[SpooledPost] = []
        unreadable = 0
        for line in self.path.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            entry = _parse_entry(line)
            if entry is None:
                unreadable += 1
            else:
                entries.append(entry)
        return SpoolContents(tuple(entries), unreadable)

    def counts(self) -> SpoolCounts:
        return SpoolCounts(self._spooled, self._delivered, self._given_up)

    async def deliver_all(self, session: aiohttp.ClientSession, retry: RetrySchedule) -> SpoolReport:
        """Deliver the spooled POSTs in order, each on the retry schedule, removing each from the file as
        soon as it is settled (so a crash during the pass re-sends at most the one in flight).

        An entry the receiver refused through the whole schedule is given up and removed, as a live
        delivery would be: the receiver answered, and a later start will not change its answer. An entry
        that never reached its receiver stays, and so do the later entries for that receiver, untried: it is
        down, and each would wait out the same schedule. Unreadable lines are dropped.
        """
        contents = self.read()
        if contents.unreadable_lines:
            self._rewrite_without(set())
        delivered = given_up = 0
        settled: set[str] = set()
        down_receivers: set[str] = set()
        for entry in contents.entries:
            receiver = _receiver_of(entry.url)
            if receiver in down_receivers:
                continue
            outcome = await post_with_retry(session, entry.url, entry.body, retry)
            if outcome is PostOutcome.UNREACHABLE:
                down_receivers.add(receiver)
                log.warning("spooled callbacks: %s unreachable, its entries kept for a later pass", receiver)
                continue
            if outcome is PostOutcome.DELIVERED:
                delivered += 1
            else:
                given_up += 1
                log.warning("spooled callback to %s refused through its whole retry schedule: dropped", entry.url)
            settled.add(entry.entry_id)
            self._rewrite_without(settled)
        self._delivered += delivered
        self._given_up += given_up
        return SpoolReport(delivered, len(self.read().entries), given_up, contents.unreadable_lines)

    def _rewrite_without(self, entry_ids: set[str]) -> None:
        # Re-read rather than reuse the pass's snapshot: entries appended during the pass must survive.
        kept = [entry for entry in self.read().entries if entry.entry_id not in entry_ids]
        if not kept:
            self.path.unlink(missing_ok=True)
            _fsync_directory(self.path.parent)
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        with open(temporary, "wb") as spool_file:
            for entry in kept:
                record = {"id": entry.entry_id, "url": entry.url, "body": entry.body}
                spool_file.write((json.dumps(record, separators=(",", ":")) + "\n").encode())
            spool_file.flush()
            os.fsync(spool_file.fileno())
        os.replace(temporary, self.path)
        _fsync_directory(self.path.parent)


def _parse_entry(line: bytes) -> SpooledPost | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    entry_id, url, body = record.get("id"), record.get("url"), record.get("body")
    if not (isinstance(entry_id, str) and isinstance(url, str) and isinstance(body, dict)):
        return None
    return SpooledPost(entry_id, url, body)


def _receiver_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _fsync_directory(directory: Path) -> None:
    # A new or renamed file's directory entry is only durable once the directory itself is synced.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
