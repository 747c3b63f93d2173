"""A fresh interpreter: what `import durajobs` loads, and a script that enqueues with nothing
else installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from uuid import UUID

from support.outbox import job_rows, staged_rows
from support.paths import REPOSITORY


def test_importing_the_package_loads_neither_alembic_nor_sqlalchemy():
    """They are half of `import durajobs`: a worker or a CLI call loads them only to migrate."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, durajobs, durajobs.cli, durajobs.runtime.worker; "
            "print(sorted(m for m in ('alembic', 'sqlalchemy') if m in sys.modules))",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert loaded.stdout.strip() == "[]"


def test_a_script_with_nothing_installed_publishes_directly(database_url):
    script = textwrap.dedent(
        """
        import os, sys
        from pydantic import BaseModel
        import durajobs

        class Item(BaseModel):
            key: str

        jobs = durajobs.Registry(os.environ["QUEUE_URL"])

        @jobs.job(name="send", input=Item, idempotency_key=lambda i: i.key, tenant="none")
        def send(ctx):
            return None

        assert durajobs.current_transaction() is None
        answer = send.enqueue({"key": "from-a-script"})
        print(answer.id, answer.run_id)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "QUEUE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job_id, run_id = done.stdout.split()
    assert job_rows(database_url) == [(UUID(job_id), UUID(run_id))]
    assert staged_rows(database_url) == []
