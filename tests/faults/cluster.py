"""A Postgres cluster of the fault suite's own, made from the machine's binaries: the suite
restarts it under load, which no test may do to a server others share.

initdb refuses to run as root, so as root every server command runs as the `postgres` system
user (the PostgreSQL package makes it) over a folder it owns."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from glob import glob
from pathlib import Path

import psycopg


def _bin_dir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("no PostgreSQL binaries: install postgresql (scripts/setup --test)")
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ThrowawayCluster:
    """One initdb'd cluster in a temporary folder, on a free port of localhost, trust auth."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="durajobs-faults-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._bin = _bin_dir()
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, user="postgres", group="postgres")

    def _run(self, program: str, *arguments: str) -> None:
        command = [str(self._bin / program), *arguments]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=localhost -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        """Stop fast (every session is cut, as on a failover) and start again."""
        self.stop("fast")
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"host=localhost port={self.port} user=postgres dbname={database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.url(), autocommit=True) as connection:
            clause = f" template {template}" if template else ""
            connection.execute(f'create database "{name}"{clause}')
        return self.url(name)

    def remove(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
