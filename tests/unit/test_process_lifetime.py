"""engine_ext.process_lifetime: a process vLLM spawns exits with its heap frozen (no final collection over it)."""

from __future__ import annotations

import atexit
import gc
import multiprocessing
from pathlib import Path

from engine_ext.process_lifetime import exit_without_a_final_collection


def _report_frozen_objects_at_exit(path: str) -> None:
    # Registered first, so it runs last (atexit runs handlers in reverse order): after the freeze, where the
    # interpreter's own final collections would start.
    atexit.register(lambda: Path(path).write_text(str(gc.get_freeze_count())))
    exit_without_a_final_collection()


def test_a_spawned_process_exits_with_its_heap_frozen(tmp_path: Path) -> None:
    report = tmp_path / "frozen.txt"
    process = multiprocessing.get_context("spawn").Process(target=_report_frozen_objects_at_exit, args=(str(report),))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert int(report.read_text()) > 1000, "the child's heap was not frozen when it exited"


def test_the_process_vllm_did_not_spawn_keeps_its_final_collection() -> None:
    handlers_before = atexit._ncallbacks()
    exit_without_a_final_collection()
    assert atexit._ncallbacks() == handlers_before
