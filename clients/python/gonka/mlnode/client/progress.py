"""A one-line progress display for long CLI commands, on stderr so stdout stays the command's output.

On a terminal the line is rewritten in place (often); into a pipe or a log it is a plain line at most
once per `log_interval` seconds, so a long round does not flood the log.

Hand-written on purpose: tqdm and rich redraw with carriage returns into a pipe as well (a log of one endless line, or
with rich's file console none at all until the end), where this writes whole lines; and the client needs no display
library beside grpcio and protobuf.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

CLEAR_LINE = "\r\x1b[K"


class Progress:
    def __init__(
        self,
        stream: TextIO,
        *,
        enabled: bool = True,
        tty_interval: float = 0.2,
        log_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._enabled = enabled
        self._tty = enabled and stream.isatty()
        self._interval = tty_interval if self._tty else log_interval
        self._clock = clock
        self._started = clock()
        self._shown_at: float | None = None
        self._on_screen = False

    def rate(self, count: int) -> float:
        """`count` per second since this display started."""
        elapsed = self._clock() - self._started
        return count / elapsed if elapsed > 0 else 0.0

    def show(self, text: str, *, final: bool = False) -> None:
        """Shows `text` unless the last update was too recent; `final` always shows and ends the line."""
        if not self._enabled:
            return
        now = self._clock()
        if not final and self._shown_at is not None and now - self._shown_at < self._interval:
            return
        self._shown_at = now
        if self._tty:
            self._stream.write(CLEAR_LINE + text + ("\n" if final else ""))
            self._on_screen = not final
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def clear(self) -> None:
        """Erases an in-place line, before other output goes to the same terminal (it comes back on
        the next update)."""
        if self._on_screen:
            self._stream.write(CLEAR_LINE)
            self._stream.flush()
            self._on_screen = False
