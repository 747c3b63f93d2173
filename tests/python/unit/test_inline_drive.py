"""`drive` runs a suspended coroutine on inside the task it began in, as the task's own step
would: what it awaits, a cancel of the task, a bare yield and a bad yield all reach it the way
they reach a coroutine a task runs, and `current_task()` and its context stay its own."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import anyio
import pytest

from durajobs.runtime.inline import drive

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="unset")


async def _inline(body: Coroutine[Any, Any, Any]) -> Any:
    """What the runner does: the first step here in a context of its own, then `drive`."""
    context = contextvars.copy_context()
    try:
        yielded = context.run(body.send, None)
    except StopIteration as returned:
        return returned.value
    return await drive(body, context, yielded)


def _run_inline(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    async def main() -> Any:
        return await asyncio.get_running_loop().create_task(_inline(make()))

    return asyncio.run(main())


def test_a_body_reads_what_it_awaited_and_returns_its_value():
    async def body() -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(future.set_result, 20)
        got = await future
        await asyncio.sleep(0.001)
        return got + 1

    assert _run_inline(body) == 21


def test_the_error_of_an_awaited_future_is_raised_in_the_body():
    async def body() -> str:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(future.set_exception, KeyError("gone"))
        try:
            await future
        except KeyError as error:
            return f"caught {error}"
        return "not raised"

    assert _run_inline(body) == "caught 'gone'"


def test_an_error_the_body_raises_after_suspending_ends_the_task_with_it():
    async def body() -> None:
        await asyncio.sleep(0)
        raise ValueError("late")

    with pytest.raises(ValueError, match="late"):
        _run_inline(body)


def test_a_bare_yield_gives_the_loop_a_turn_and_goes_on():
    order: list[str] = []

    async def body() -> None:
        asyncio.get_running_loop().call_soon(order.append, "loop turn")
        await asyncio.sleep(0)  # a bare yield underneath
        order.append("body again")

    _run_inline(body)
    assert order == ["loop turn", "body again"]


class _BadYield:
    def __await__(self) -> Generator[Any, None, None]:
        yield "not a future"


def test_a_bad_yield_is_thrown_back_into_the_body():
    async def body() -> str:
        try:
            await _BadYield()
        except RuntimeError as error:
            return str(error)
        return "accepted"

    assert "not a future" in _run_inline(body)


async def _cancel_while_waiting(*, result_first: bool) -> tuple[str, bool]:
    """Cancel the task of a body waiting on a future (set first when `result_first`); answer
    what the body returned and whether the future was cancelled with the task."""
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[int] = loop.create_future()

    async def body() -> str:
        try:
            await waiting
        except asyncio.CancelledError:
            return "cancelled"
        return "ran on"

    task = loop.create_task(_inline(body()))
    await asyncio.sleep(0)
    if result_first:
        waiting.set_result(1)
    task.cancel()
    return await task, waiting.cancelled()


def test_a_cancel_of_the_task_reaches_the_body_while_it_waits():
    # as under a task: the awaited future is cancelled with it, and the body saw the cancel
    assert asyncio.run(_cancel_while_waiting(result_first=False)) == ("cancelled", True)


def test_a_cancel_that_lands_with_the_result_still_reaches_the_body():
    """The awaited future is done when the cancel comes, so the task cannot cancel it: the
    cancel is delivered on the task's next step, and must not be lost for the result."""
    assert asyncio.run(_cancel_while_waiting(result_first=True)) == ("cancelled", False)


def test_a_cancel_the_body_does_not_catch_cancels_the_task():
    async def main() -> bool:
        loop = asyncio.get_running_loop()

        async def body() -> None:
            await asyncio.sleep(10)

        task = loop.create_task(_inline(body()))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait({task})
        return task.cancelled()

    assert asyncio.run(main()) is True


def test_the_current_task_is_the_same_before_and_after_the_first_suspension():
    async def main() -> None:
        seen: list[asyncio.Task[Any] | None] = []

        async def body() -> None:
            seen.append(asyncio.current_task())
            await asyncio.sleep(0)
            seen.append(asyncio.current_task())

        task = asyncio.get_running_loop().create_task(_inline(body()))
        await task
        assert seen == [task, task]

    asyncio.run(main())


def test_the_body_keeps_its_context_and_the_task_keeps_its_own():
    async def main() -> None:
        async def body() -> str:
            LABEL.set("body")
            await asyncio.sleep(0)
            return LABEL.get()

        async def carrier() -> tuple[str, str]:
            got = await _inline(body())
            return got, LABEL.get()

        assert await asyncio.get_running_loop().create_task(carrier()) == ("body", "unset")

    asyncio.run(main())


def test_asyncio_timeout_entered_before_the_suspension_holds():
    async def body() -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(10)

    with pytest.raises(TimeoutError):
        _run_inline(body)


def test_a_task_group_in_the_body_runs_and_fails_as_it_would_under_a_task():
    async def body() -> list[int]:
        async with asyncio.TaskGroup() as group:
            children = [group.create_task(asyncio.sleep(0.001, n)) for n in range(3)]
        return [child.result() for child in children]

    assert _run_inline(body) == [0, 1, 2]

    async def failing() -> None:
        async def fail() -> None:
            await asyncio.sleep(0.001)
            raise ValueError("child")

        async with asyncio.TaskGroup() as group:
            group.create_task(fail())
            group.create_task(asyncio.sleep(10))

    with pytest.raises(ExceptionGroup):
        _run_inline(failing)


def test_an_anyio_cancel_scope_in_the_body_holds():
    async def body() -> bool:
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(10)
        return scope.cancelled_caught

    assert _run_inline(body) is True


def test_an_awaited_coroutine_chain_runs_through():
    async def leaf(n: int) -> int:
        await asyncio.sleep(0)
        return n * 2

    async def middle(step: Callable[[int], Awaitable[int]]) -> int:
        return await step(3) + await step(4)

    async def body() -> int:
        return await middle(leaf)

    assert _run_inline(body) == 14
