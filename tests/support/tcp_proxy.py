"""A TCP relay in front of a server whose connections a test can cut, to drop a client's streams the
way a network does (the server itself keeps running, and sees only a vanished peer)."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

CHUNK_BYTES = 65536


class TcpProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self.connections = 0
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, name="tcp-proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self._listener.getsockname()[1]}"

    def cut(self) -> int:
        """Closes every relayed connection now; new ones are still accepted. Returns how many."""
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            _close(sock)
        return len(sockets) // 2

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.cut()
        self._acceptor.join(timeout=5)

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, server]
                self.connections += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), name="tcp-proxy-pump", daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(CHUNK_BYTES):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    # shutdown first: close() alone does not wake a thread blocked in recv() on the same socket.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
