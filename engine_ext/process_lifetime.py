"""vLLM's engine processes end with the process that started them, and end quickly."""

from __future__ import annotations

import atexit
import ctypes
import gc
import multiprocessing
import os
import signal
import sys

# prctl(2): the signal this process gets when the thread that started it ends.
PR_SET_PDEATHSIG = 1


def end_with_parent() -> None:
    """In a process vLLM spawned (the engine core, a worker): SIGKILL it when its parent dies.

    vLLM's engine core and workers run on when the server is killed outright (SIGKILL, the OOM killer), holding the
    model's memory (on a GPU host, the memory a restarted server then needs). Linux's parent-death signal ends them
    with it; a clean shutdown is vLLM's own, as before. Only processes started by multiprocessing get it, never the
    server itself (which may run under a supervisor or nohup)."""
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return  # no such call here: the process runs on as vLLM starts it
    if os.getppid() != parent.pid:
        os._exit(1)  # the parent died before the signal was armed


def exit_without_a_final_collection() -> None:
    """In a process vLLM spawned: no garbage collection over the whole heap as the interpreter exits.

    An engine core or worker holds some 650,000 Python objects; the interpreter's last collections over them took
    more than 5 s on a busy 2-core host, past vLLM's grace for a worker or an engine core to exit, so every shutdown
    ended with vLLM force-killing the process (and a warning in the log). Freezing the heap at exit (the atexit
    handlers run before those collections, and collections skip frozen objects) lets it exit at once: its memory
    goes back to the system with the process."""
    if multiprocessing.parent_process() is not None:
        atexit.register(gc.freeze)
