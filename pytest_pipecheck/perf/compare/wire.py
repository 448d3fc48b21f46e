"""The wire between the parent and REV's process: one line of JSON each way per request."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import TYPE_CHECKING, Any

from .errors import CompareError

if TYPE_CHECKING:  # pragma: no cover
    pass


class ChannelClosed(CompareError):
    """The other side closed the socket (its process ended)."""


class ChannelTimeout(CompareError):
    """No message within the time allowed."""


class Channel:
    """JSON lines over a connected socket, each read bounded by a timeout."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            raise ChannelClosed(f"cannot send {message.get('op')!r}: {exc}") from None

    def recv(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelTimeout(f"no answer within {timeout:g} s")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not chunk:
                raise ChannelClosed("end of file")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise CompareError(f"a garbled message: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise CompareError(f"a garbled message: {line[:200]!r}")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
