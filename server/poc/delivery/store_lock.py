"""One server per callback store: an exclusive lock on a file beside it, held for the process's life.

Claimed before vLLM is imported (server.cli), so a second server pointed at a store in use is refused in a
fraction of a second. The kernel drops the lock when the process ends, however it ends (SIGKILL included),
so a killed server never leaves its store locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class StoreInUse(RuntimeError):
    pass


class StoreLock:
    def __init__(self, store_path: Path, descriptor: int) -> None:
        self.store_path = store_path
        self._descriptor = descriptor

    @classmethod
    def claim(cls, store_path: Path) -> StoreLock:
        """Raises StoreInUse when another process holds the store, OSError when its folder cannot be made."""
        store_path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = lock_path_of(store_path)
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise StoreInUse(
                f"the callback store {store_path} is in use by another server (pid {holder}); give this one a store of "
                "its own (--callback-store, or another --port)"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        return cls(store_path, descriptor)

    def release(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)  # closing the only descriptor drops the flock
            self._descriptor = -1


def lock_path_of(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".lock")
