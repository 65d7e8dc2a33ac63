"""The HTTP listener that serves a registry at /metrics, on the server's own event loop.

On the event loop, not in prometheus_client's thread server: the collectors read live objects (the
running PoC round's counters and deque) that only the loop's tasks change, so a scrape on the loop
never sees them half-updated. A scrape holds the loop a few milliseconds (about 600 lines: 3-4 ms on
the 2-core development machine), once per scrape interval.

The handler is prometheus_client's own: the text format, or OpenMetrics when the scraper's Accept asks for it.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from server.metrics.options import MetricsOptions

METRICS_PATH = "/metrics"


class MetricsEndpoint:
    def __init__(self, registry: CollectorRegistry, options: MetricsOptions) -> None:
        self._registry = registry
        self._options = options
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return self._options.address

    async def start(self) -> None:
        """Raises OSError when the address cannot be bound."""
        app = web.Application()
        # Uncompressed, as scrapers have always been served here: gzip would lengthen the time a scrape holds the loop.
        app.router.add_get(METRICS_PATH, make_aiohttp_handler(self._registry, disable_compression=True))
        # No access log: a scraper every few seconds would fill the server's log.
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._options.host, self._options.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
