"""The Python side of the shared-queue test (processes/test_node_client.py): one job that the Node
worker at clients/node/test/fixtures/shared-worker.js serves too.

Each run records which runtime ran it in the table `node_effects` (the test creates it), whose
primary key is the job id: a job that ran twice would fail its insert.
"""

from __future__ import annotations

import os
import time

import psycopg

from durajobs import Registry
from support.factory import declare

DATABASE_URL = os.environ.get("DATABASE_URL", "")
registry = Registry(database_url=DATABASE_URL or None)


@declare(registry, "shared-effect", queue="shared")
def shared_effect(ctx) -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as connection:
        connection.execute(
            "insert into node_effects (job_id, by) values (%s, 'python')", [ctx.job_id]
        )
    time.sleep(0.01)
