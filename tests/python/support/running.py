"""Run an in-process worker until a condition holds, for the tests that drive a real Worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from durajobs.runtime.worker import Worker


async def run_until(worker: Worker, done: Callable[[], bool], *, timeout: float = 20.0) -> None:
    """Run `worker` until `done()` is true, then stop it and wait for it."""
    runner = asyncio.ensure_future(worker.run())
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the worker did not get there in time"
            assert not runner.done(), runner.exception() if runner.done() else None
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(runner, 30)
