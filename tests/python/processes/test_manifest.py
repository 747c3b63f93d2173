"""`durajobs manifest --app`: every job and task described, as a file a deploy commits and diffs.
It must be byte-identical across runs and locales (R25: a manifest sorted by locale collation
differed between machines), name no key, and list a task's jobs in its entries' order (T209)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.apps import MANIFEST_APP
from support.paths import TESTS

# a root login's PATH (as test_cli.py)
_ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _manifest(locale: str, out: Path | None = None) -> bytes:
    arguments = ["manifest", "--app", MANIFEST_APP]
    if out is not None:
        arguments += ["--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "durajobs.cli", *arguments],
        capture_output=True,
        cwd=TESTS,
        env={"PATH": _ROOT_PATH, "LC_ALL": locale, "LANG": locale, "PYTHONHASHSEED": "random"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return out.read_bytes() if out is not None else done.stdout


def test_the_manifest_is_byte_identical_across_runs_and_locales(tmp_path):
    printed = {_manifest(locale) for locale in ("C", "C.UTF-8", "POSIX", "en_US.UTF-8")}
    assert len(printed) == 1
    written = _manifest("C", out=tmp_path / "manifest.json")
    assert written == printed.pop()


def test_the_manifest_sorts_by_code_point_and_describes_tasks_by_their_entries():
    document = json.loads(_manifest("C.UTF-8"))
    assert document["manifest_version"] == 1
    assert [job["name"] for job in document["jobs"]] == ["B", "a", "b", "e", "é"]
    assert all(job["kind"] == "job" and job["steps"] == [] for job in document["jobs"])
    assert all(job["idempotent"] is True for job in document["jobs"])
    (task,) = document["tasks"]
    assert task == {
        "kind": "task",
        "name": "nightly",
        "cron": "0 3 * * *",
        "tz": "Europe/Paris",
        "catch_up": "run-once",
        "max_catch_up": 10,
        "jobs": ["e", "a"],
    }
    assert "idempotency_key" not in json.dumps(document)
