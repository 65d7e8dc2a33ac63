"""One host, several test runs: `make test-all` runs two releases' suites at once on a 24-GiB machine, and a test
server takes about 4 GiB (its worker about 2, the KV cache included). A test that holds several servers, or a
tensor-parallel one, at once takes this lock first, so that no two such tests of the two runs overlap: when the
durability tests of both suites started their two servers each beside the shared ones, the kernel killed a worker.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_PATH = Path(tempfile.gettempdir()) / "gonka-mlnode-tests-several-servers.lock"


@contextmanager
def several_servers_at_once() -> Iterator[None]:
    """Held while a test runs several servers (or worker processes) at once; waits for another run's such test."""
    with LOCK_PATH.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
