"""The several-servers lock of the test suites: a second run's holder waits until the first lets go."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.host_memory import several_servers_at_once
from tests.support.server_process import REPO_ROOT

SECOND_RUN = (
    "import time\n"
    "from tests.support.host_memory import several_servers_at_once\n"
    "with several_servers_at_once():\n"
    "    print(time.monotonic(), flush=True)\n"
)


def test_a_second_run_waits_for_the_lock_to_be_let_go() -> None:
    with several_servers_at_once():
        second = subprocess.Popen([sys.executable, "-c", SECOND_RUN], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert second.poll() is None  # still waiting
        released = time.monotonic()
    output, _ = second.communicate(timeout=30)
    assert second.returncode == 0 and float(output) >= released
