"""What a configuration's log tells: the end of it for error messages, and vLLM's engine configuration."""

from __future__ import annotations

from pathlib import Path


def logged_engine_config(log_path: Path) -> str | None:
    """vLLM's one-line engine configuration from the server log, to confirm identical settings."""
    for line in log_path.read_text(errors="replace").splitlines():
        marker = line.find("with config: ")
        if "Initializing a V1 LLM engine" in line and marker >= 0:
            return line[marker:]
    return None


def short_tail(log_path: Path, lines: int = 40, width: int = 300) -> str:
    """The log's end, each line cut short (vLLM dumps whole scheduler states on one line)."""
    return "\n".join(line[:width] for line in log_path.read_text(errors="replace").splitlines()[-lines:])
