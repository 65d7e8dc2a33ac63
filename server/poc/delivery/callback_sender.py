"""Delivers the callback store's pending entries over HTTP while the server runs (server.poc.delivery.callback_store).

As the deployed server: every interval (--poc-callback-interval-s, 5 s), everything not yet sent to a URL goes
in one POST (a round's artifacts in one body), retried on the deployed schedule (1 s doubling to 30 s, 10
attempts); a round's end and a new validation result send at once. Beyond it:
- nothing is dropped after the schedule: a POST whose whole schedule failed (5xx, 408, 429, no answer) stays
  in the store and is tried again, a whole schedule each pass, every `pass_delay_seconds`;
- an entry is given up, with a log line and a metric, when its receiver rejects it (a 4xx other than 408 and
  429: resending cannot change that answer), when its URL or body cannot be sent at all, or when it is older
  than `give_up_after_seconds` (24 h);
- every URL has a worker of its own, so an entry that cannot be delivered (a dead receiver, a bad URL) never
  holds up another URL's. Within a URL POSTs go one at a time, in order, as deployed: one the receiver keeps
  failing (5xx) delays the next by its schedule (about 151 s), then waits for its next pass while they go;
  when the receiver does not answer at all through a schedule, it is down, and the URL's other due POSTs
  wait for the next pass with it (rather than each spending a schedule to find that out);
- every POST carries an Idempotency-Key (the store's id and the POST's first entry id) that a repeat of it, in
  this process or after a restart, carries again. Delivery is at least once: a POST cut off or timed out may
  have reached the receiver.

Not thread-safe: runs on the event loop, as the store does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

import aiohttp

from server.poc.batches.callback_url import callback_url_problem
from server.poc.delivery.body_json import is_mergeable, post_body
from server.poc.delivery.callback_store import CallbackStore, EntryState, Post
from server.poc.delivery.retry import PostOutcome, RetrySchedule, post_with_retry

log = logging.getLogger(__name__)

GIVE_UP_AFTER_SECONDS = 24 * 3600.0
# After a POST's whole retry schedule failed, its next pass starts this much later.
PASS_DELAY_SECONDS = 60.0
# The most artifacts one POST carries (a backlog after an outage goes in several). The deployed server sends
# up to its whole buffer, 1,000,000.
MAX_ARTIFACTS_PER_POST = 100_000
# Delivered and given-up entries stay in the store this long at least (a later reader may look back).
SETTLED_KEPT_SECONDS = 3600.0
PURGE_EVERY_SECONDS = 300.0
IDEMPOTENCY_HEADER = "Idempotency-Key"


class GiveUpReason:
    REJECTED = "rejected"  # the receiver answered 4xx
    EXPIRED = "expired"  # older than give_up_after_seconds
    UNSENDABLE = "unsendable"  # its URL or body cannot be sent


class CallbackSender:
    def __init__(
        self,
        store: CallbackStore,
        session: aiohttp.ClientSession,
        retry: RetrySchedule = RetrySchedule(),
        interval_seconds: float = 5.0,
        give_up_after_seconds: float = GIVE_UP_AFTER_SECONDS,
        pass_delay_seconds: float = PASS_DELAY_SECONDS,
        settled_kept_seconds: float = SETTLED_KEPT_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        self._store = store
        self._session = session
        self._retry = retry
        self._interval_seconds = interval_seconds
        self._give_up_after_seconds = give_up_after_seconds
        self._pass_delay_seconds = pass_delay_seconds
        self._settled_kept_seconds = settled_kept_seconds
        self._clock = clock
        self._flush_requested = asyncio.Event()
        self._closing = False
        self._main: asyncio.Task[None] | None = None
        self._workers: dict[str, asyncio.Task[None]] = {}
        # URLs whose worker is to look for due posts (again): set at every tick, taken by the worker.
        self._requested: set[str] = set()
        self._last_purge = 0.0
        # Over this process's life, for metrics.
        self.delivered_entries = 0
        self.failed_attempts = 0
        self.given_up_entries: Counter[str] = Counter()
        self.given_up_artifacts: Counter[str] = Counter()

    def start(self) -> None:
        """Starts delivering, at once what an earlier run left pending (once; later calls change nothing)."""
        if self._main is None:
            self._main = asyncio.get_running_loop().create_task(self._run(), name="poc-callback-sender")

    def flush(self) -> None:
        """Send what is pending now rather than at the next interval (a round ended, a result was added)."""
        self._flush_requested.set()

    def pending_entries(self) -> int:
        return self._store.pending_entries()

    async def close(self, flush_timeout_seconds: float) -> None:
        """One last pass at everything pending, for at most the time given; what is left stays in the store
        (which stays open: a validation finishing during the shutdown still writes its result there)."""
        # The main loop is told, not cancelled: a cancellation that meets a flush request inside wait_for is
        # lost on Python 3.11 (wait_for returns the event's result instead), and the loop would run on.
        self._closing = True
        self.flush()
        if self._main is not None:
            await self._main
        self._tick()
        workers = set(self._workers.values())
        if workers:
            _, unfinished = await asyncio.wait(workers, timeout=max(flush_timeout_seconds, 0.0))
            for worker in unfinished:
                worker.cancel()
            if unfinished:
                await asyncio.wait(unfinished)
        left = self._store.pending_entries()
        if left:
            log.warning("callbacks: %d undelivered entries stay in %s for the next start", left, self._store.path)

    async def _run(self) -> None:
        while not self._closing:
            self._tick()
            self._purge_if_due()
            try:
                await asyncio.wait_for(self._flush_requested.wait(), self._interval_seconds)
            except asyncio.TimeoutError:
                pass
            self._flush_requested.clear()

    def _tick(self) -> None:
        for url in self._store.urls_with_due_work(self._clock()):
            self._requested.add(url)
            if url not in self._workers:
                self._workers[url] = asyncio.get_running_loop().create_task(
                    self._drain(url), name=f"poc-callbacks {url}"
                )

    async def _drain(self, url: str) -> None:
        try:
            while url in self._requested:
                self._requested.discard(url)
                posts = self._store.due_posts(url, self._clock(), MAX_ARTIFACTS_PER_POST, is_mergeable)
                for index, post in enumerate(posts):
                    if not await self._send(post):
                        # The receiver did not answer a whole schedule: it is down, and every later POST to it
                        # would spend a schedule of its own finding that out. They wait for the next pass too.
                        for later in posts[index + 1 :]:
                            self._store.postpone(
                                later, self._clock() + self._pass_delay_seconds, "its receiver was down"
                            )
                        break
        except asyncio.CancelledError:
            raise
        except Exception:  # a worker never dies silently; its URL is taken up again at the next tick
            log.exception("callbacks to %s: the delivery worker failed", url)
        finally:
            del self._workers[url]

    async def _send(self, post: Post) -> bool:
        """Delivers, gives up or postpones the post; False when its receiver never answered (it is down)."""
        if self._clock() - post.created_at > self._give_up_after_seconds:
            self._give_up(post, GiveUpReason.EXPIRED, f"undelivered after {self._give_up_after_seconds:g} s")
            return True
        problem = callback_url_problem(post.url)
        if problem is not None:
            self._give_up(post, GiveUpReason.UNSENDABLE, f"the URL {problem}")
            return True
        try:
            body = post_body(self._store.bodies(post))
        except ValueError as error:
            self._give_up(post, GiveUpReason.UNSENDABLE, f"the stored body is unreadable ({error})")
            return True
        key = f"{self._store.store_id}-{post.post_id}"

        def failed_attempt(detail: str) -> None:
            self.failed_attempts += 1
            self._store.count_failed_attempt(post)
            log.warning("callback POST %s (%s, %d artifacts) failed: %s", _safe(post.url), key, post.artifacts, detail)

        result = await post_with_retry(
            self._session, post.url, body, {IDEMPOTENCY_HEADER: key}, self._retry, failed_attempt
        )
        if result.outcome is PostOutcome.DELIVERED:
            self._store.settle(post, EntryState.DELIVERED, result.detail)
            self.delivered_entries += len(post.entry_ids)
        elif result.outcome is PostOutcome.REJECTED:
            self._give_up(post, GiveUpReason.REJECTED, f"the receiver rejected it ({result.detail})")
        else:
            self._store.postpone(post, self._clock() + self._pass_delay_seconds, result.detail)
            log.warning(
                "callback POST %s (%s): the whole retry schedule failed (%s); next pass in %g s",
                _safe(post.url),
                key,
                result.detail,
                self._pass_delay_seconds,
            )
        return result.answered

    def _give_up(self, post: Post, reason: str, why: str) -> None:
        self._store.settle(post, EntryState.GIVEN_UP, why)
        self.given_up_entries[reason] += len(post.entry_ids)
        self.given_up_artifacts[reason] += post.artifacts
        log.error(
            "callback to %s given up (%s): %d entries (ids %d..%d), %d artifacts: %s",
            _safe(post.url),
            reason,
            len(post.entry_ids),
            post.entry_ids[0],
            post.entry_ids[-1],
            post.artifacts,
            why,
        )

    def _purge_if_due(self) -> None:
        now = self._clock()
        if now - self._last_purge >= PURGE_EVERY_SECONDS:
            self._last_purge = now
            self._store.purge_settled(now - self._settled_kept_seconds)


def _safe(url: str) -> str:
    """A URL for the log: an unsendable one may hold anything, a newline included."""
    return ascii(url[:200])
