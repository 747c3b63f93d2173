"""The outbox relay as a real process: `durajobs relay` publishes and stops on SIGTERM, and a relay
killed between its publish and its mark still runs the job once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import durajobs
from support.outbox import job_rows, outbox_rows, relay_into, send_job, stage
from support.rows import fetch_all
from support.waiting import clock_at


def test_the_relay_command_publishes_and_stops_on_sigterm(database_url):
    job = send_job(durajobs.Registry(database_url, outbox=True))
    staged = stage(database_url, job, ["a", "b", "c"])
    process = subprocess.Popen(
        [sys.executable, "-m", "durajobs.cli", "relay"],
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while len(job_rows(database_url)) < 3:
            assert time.monotonic() < deadline, "the relay command published nothing"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert job_rows(database_url) == sorted((s.id, s.run_id) for s in staged)
    assert all(published for *_, published in outbox_rows(database_url))


def test_a_relay_process_killed_between_publish_and_mark_still_runs_the_job_once(
    database_url, queue_url
):
    ran: list[str] = []
    registry = durajobs.Registry(queue_url, outbox=True)
    job = send_job(registry, handler=lambda ctx: ran.append(ctx.input.key))
    (staged,) = stage(database_url, job, ["once"])
    # a relay that publishes, then hangs before its mark: the moment SIGKILL lands
    script = (
        "import asyncio, sys\n"
        "from durajobs.services.relay import OutboxRelay\n"
        "relay = OutboxRelay(sys.argv[1], sys.argv[2], claim_lease='500ms', listen=False)\n"
        "async def hang(ids):\n"
        "    await asyncio.sleep(3600)\n"
        "relay.mark_published = hang\n"
        "asyncio.run(relay.run())\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script, database_url, queue_url])
    try:
        deadline = time.monotonic() + 30
        while not job_rows(queue_url):
            assert time.monotonic() < deadline, "the doomed relay never published"
            time.sleep(0.05)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    assert outbox_rows(database_url)[0][3] is False  # published, never marked

    # the survivor claims on the database's clock at the instant the dead relay's lease lapses
    [(lapses,)] = fetch_all(database_url, "select claim_expires_at from jobs.outbox")
    survivor = relay_into(clock_at(database_url, lapses), queue_url, listen=False)

    async def scenario():
        await survivor.open()
        try:
            return await survivor.run_once()
        finally:
            await survivor.close()

    assert asyncio.run(scenario()) == 1  # re-published: it meets the first job
    assert job_rows(queue_url) == [(staged.id, staged.run_id)]
    assert outbox_rows(database_url)[0][3] is True

    worker = durajobs.Worker(registry, queue_url, listen=False)

    async def work():
        runner = asyncio.ensure_future(worker.run())
        deadline = time.monotonic() + 20
        while fetch_all(queue_url, "select state from jobs.jobs") != [("done",)]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        worker.stop()
        await runner

    asyncio.run(work())
    assert ran == ["once"]
