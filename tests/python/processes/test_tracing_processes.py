"""OpenTelemetry across processes: the command line stamps its flag or the inherited
TRACEPARENT, and an interpreter without OpenTelemetry enqueues and runs."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest


def _row(database_url, key):
    with psycopg.connect(database_url, autocommit=True) as connection:
        return connection.execute(
            "select state, traceparent from jobs.jobs where idempotency_key = %s", [key]
        ).fetchone()


def _cli_enqueue(database_url, key, *flags, environment=None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "durajobs.cli",
            "enqueue",
            "cli",
            "--input",
            "{}",
            "--key",
            key,
            *flags,
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url, **(environment or {})},
        timeout=120,
    )


def test_the_command_line_stamps_its_flag_or_the_inherited_traceparent(database_url):
    flag = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    inherited = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    done = _cli_enqueue(database_url, "t1", "--traceparent", flag)
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(database_url, "t2", environment={"TRACEPARENT": inherited})
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(
        database_url, "t3", "--traceparent", flag, environment={"TRACEPARENT": inherited}
    )
    assert done.returncode == 0, done.stderr
    done = _cli_enqueue(database_url, "t4")
    assert done.returncode == 0, done.stderr
    assert _row(database_url, "t1") == ("ready", flag)
    assert _row(database_url, "t2") == ("ready", inherited)
    assert _row(database_url, "t3") == ("ready", flag), "the flag wins over the environment"
    assert _row(database_url, "t4") == ("ready", None)


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-traceparent",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # uppercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
    ],
)
def test_the_command_line_refuses_a_malformed_traceparent_and_stores_nothing(database_url, bad):
    for flags, environment, source in (
        (("--traceparent", bad), None, "--traceparent"),
        ((), {"TRACEPARENT": bad}, "TRACEPARENT"),
    ):
        done = _cli_enqueue(database_url, "bad", *flags, environment=environment)
        assert done.returncode == 1
        assert "X_ARGUMENT_INVALID" in done.stderr
        assert f"{source} is not a W3C traceparent" in done.stderr
        assert "fix: pass version-traceid-parentid-flags" in done.stderr
    with psycopg.connect(database_url, autocommit=True) as connection:
        assert connection.execute("select count(*) from jobs.jobs").fetchone() == (0,)


def test_without_opentelemetry_enqueue_and_run_work(database_url, tmp_path):
    """The optional dependency is hidden from a fresh interpreter: nothing breaks."""
    script = tmp_path / "no_otel.py"
    script.write_text(
        "import sys, asyncio, time\n"
        "sys.modules['opentelemetry'] = None  # as if it were not installed\n"
        "import durajobs\n"
        "from pydantic import BaseModel\n"
        "class Empty(BaseModel):\n"
        "    pass\n"
        "from durajobs.runtime.worker import Worker\n"
        "from durajobs.observe.tracing import current_traceparent\n"
        "assert current_traceparent() is None\n"
        "registry = durajobs.Registry(database_url=sys.argv[1])\n"
        "@registry.job(name='n', input=Empty, idempotency_key=lambda i: 'k', tenant='none')\n"
        "async def n(ctx):\n"
        "    return None\n"
        "registry.get('n').enqueue({})\n"
        "worker = Worker(registry, sys.argv[1], listen=False)\n"
        "async def main():\n"
        "    runner = asyncio.ensure_future(worker.run())\n"
        "    while worker.stats().completed < 1:\n"
        "        await asyncio.sleep(0.02)\n"
        "    worker.stop()\n"
        "    await runner\n"
        "asyncio.run(main())\n"
        "print('ran')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), database_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran"
    assert _row(database_url, "k") == ("done", None)
