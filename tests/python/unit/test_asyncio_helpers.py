"""The runtime's asyncio helpers, on their own."""

from __future__ import annotations

import asyncio

from durajobs.runtime._asyncio import cancel_and_wait


def test_cancel_and_wait_outlasts_a_task_that_drops_cancels():
    dropped: list[int] = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                dropped.append(1)
                if len(dropped) == 3:
                    raise

    async def scenario() -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        async with asyncio.timeout(5):
            await cancel_and_wait(task)
        return task

    task = asyncio.run(scenario())
    assert task.cancelled()
    assert dropped == [1, 1, 1]
