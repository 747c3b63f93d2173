"""The fault suite: real worker, relay and scheduler processes meet SIGKILL, SIGSTOP, SIGTERM,
terminated backends and a restarted server, and every test counts the effects in a table of its
own: nothing lost, no completed step run again, duplicates only inside the fault window.

It runs on a cluster of its own (cluster.py), since one test restarts the server. Bounded by
default (CI runs it so, inside scripts/test); `scripts/test --faults` runs it at full strength
(--full-faults): more rounds, more jobs, longer bursts."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from cluster import ThrowawayCluster
from kit import EFFECTS_TABLE, Process


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full-faults",
        action="store_true",
        help="the fault suite at full strength (more rounds and jobs; minutes)",
    )


@dataclass(frozen=True)
class Strength:
    """How hard each fault test pushes: the bounded numbers run in CI."""

    full: bool

    def pick(self, bounded: int, full: int) -> int:
        return full if self.full else bounded


@pytest.fixture(scope="session")
def strength(request: pytest.FixtureRequest) -> Strength:
    return Strength(full=bool(request.config.getoption("--full-faults")))


@pytest.fixture(scope="session")
def cluster() -> Iterator[ThrowawayCluster]:
    server = ThrowawayCluster()
    server.start()
    try:
        template = server.create_database("faults_template")
        subprocess.run(
            [sys.executable, "-m", "durajobs.cli", "migrate", "--database-url", template],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield server
    finally:
        server.remove()


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    yield
    while Process.started:
        process = Process.started.pop()
        if process.popen.poll() is None:
            process.popen.kill()
            process.popen.wait(timeout=10)


@dataclass(frozen=True)
class FaultDatabase:
    """A fresh, migrated database of the fault cluster, with an empty effects table."""

    name: str
    url: str
    cluster: ThrowawayCluster


def _fault_database(cluster: ThrowawayCluster) -> FaultDatabase:
    name = f"fault_{uuid.uuid4().hex[:12]}"
    url = cluster.create_database(name, template="faults_template")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(EFFECTS_TABLE)
    return FaultDatabase(name=name, url=url, cluster=cluster)


@pytest.fixture
def db(cluster: ThrowawayCluster) -> FaultDatabase:
    return _fault_database(cluster)


@pytest.fixture
def second_db(cluster: ThrowawayCluster) -> FaultDatabase:
    """Another database of the cluster: an application's, apart from the queue's."""
    return _fault_database(cluster)
