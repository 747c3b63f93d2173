"""The SQL the package ships, read as text: each revision carries its own frozen copy, no
statement reads whole rows, and a regenerated revision keeps its hand-written section."""

from __future__ import annotations

import re

import pytest

from durajobs._db.migrations import package_sql_dir
from durajobs._db.revisions import hand_written_part, revision_file


def test_every_revision_carries_its_own_frozen_sql():
    versions = package_sql_dir() / "migrations" / "versions"
    modules = sorted(versions.glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert modules
    for module in modules:
        revision = module.name[:4]
        assert (versions / f"{revision}_upgrade.sql").is_file()
        assert (versions / f"{revision}_downgrade.sql").is_file()
        assert "sql/functions" not in module.read_text(), "a revision must not read live SQL"


@pytest.mark.parametrize("pattern", [r"select\s+\*", r"returning\s+\*"])
def test_no_production_sql_reads_whole_rows(pattern):
    """A column added to a table must never change what a client receives (R94)."""
    sources = [*(package_sql_dir() / "functions").glob("*.sql")]
    sources += [*(package_sql_dir() / "migrations" / "versions").glob("*.sql")]
    offenders = [
        f"{path.name}: {line.strip()}"
        for path in sources
        for line in path.read_text().splitlines()
        if re.search(pattern, line, re.IGNORECASE) and not line.strip().startswith("--")
    ]
    assert offenders == []


def test_a_regenerated_file_keeps_its_hand_written_section():
    first = revision_file("-- header", "alter table jobs.jobs add column x integer;", "select 1;\n")
    assert hand_written_part(first) == "alter table jobs.jobs add column x integer;"
    again = revision_file("-- header", hand_written_part(first), "select 2;\n")
    assert "alter table jobs.jobs add column x integer;" in again
    assert "select 1;" not in again
    assert hand_written_part("-- a file without sections") == ""
