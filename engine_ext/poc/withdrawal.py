"""The file that withdraws a mining round's queued batches once the round stops (see block_lease).

The engine core runs on the same host as the server (vLLM's local engine core), so a file is the
one signal it can see while the stop message would wait in its input queue behind the forward.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Memory-backed where Linux has it: the check costs a stat per batch.
SHARED_MEMORY_DIR = Path("/dev/shm")


class Withdrawal:
    def __init__(self, round_id: str) -> None:
        folder = SHARED_MEMORY_DIR if SHARED_MEMORY_DIR.is_dir() else Path(tempfile.gettempdir())
        self.path = folder / f"gonka-mlnode-poc-{round_id}.withdrawn"

    def withdraw(self) -> None:
        self.path.touch()

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
