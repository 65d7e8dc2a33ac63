"""What the extension looks like from inside one engine process: for tests and status calls."""

from __future__ import annotations

import os
from typing import Any


def describe_this_process() -> dict[str, Any]:
    import vllm

    from engine_ext.seams import installed_seams

    return {"pid": os.getpid(), "vllm_version": vllm.__version__, "seams": installed_seams()}
