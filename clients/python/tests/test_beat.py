"""The asyncio heartbeat's wait for its socket: a cancellation is never lost."""

from __future__ import annotations

import asyncio
import socket

from pgcoord import _beat


async def test_wait_fd_cancel_is_never_swallowed() -> None:
    # Cancel at every step of the loop between the socket turning readable and the wait
    # returning: a wait not finished when cancelled must end cancelled (a lock's release
    # cancels its heartbeat and waits for it to end). asyncio.wait_for of Python 3.11 returned
    # the result instead, at some of these steps.
    for steps in range(8):
        a, b = socket.socketpair()
        try:
            b.send(b"x")
            t = asyncio.ensure_future(_beat._wait_fd(a.fileno(), False, 5))
            for _ in range(steps):
                await asyncio.sleep(0)
            finished = t.done()
            t.cancel()
            try:
                assert await t is True
                assert finished, f"cancelled {steps} steps in, the wait returned instead of ending cancelled"
            except asyncio.CancelledError:
                assert not finished
        finally:
            a.close()
            b.close()


async def test_wait_fd_times_out() -> None:
    a, b = socket.socketpair()
    try:
        assert await _beat._wait_fd(a.fileno(), False, 0.05) is False
        assert await _beat._wait_fd(a.fileno(), True, 1) is True
    finally:
        a.close()
        b.close()
