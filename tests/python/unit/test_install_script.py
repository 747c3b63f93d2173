"""sql/install.sql, the schema as one psql script, is what the revisions generate today."""

from __future__ import annotations

import pytest

from durajobs import ArgumentInvalid
from durajobs._db.install_script import install_script, revisions, shipped_install_script


def test_the_shipped_install_script_is_the_one_the_revisions_make():
    assert shipped_install_script() == install_script(), (
        "sql/install.sql is stale: scripts/freeze-revision rewrites it"
    )


def test_the_install_script_applies_every_revision_in_order_and_records_the_head():
    script = install_script()
    positions = [script.index(f"-- revision {revision}\n") for revision in revisions()]
    assert positions == sorted(positions)
    assert script.rstrip().endswith(
        f"insert into jobs.alembic_version values ('{revisions()[-1]}');\n\ncommit;"
    )


def test_both_scripts_pin_the_search_path_before_any_ddl():
    """As `durajobs migrate` does: a psql session's own search_path must not bind the schema's
    operators (test_migrations has the hostile install)."""
    for script in (install_script(), install_script(since=revisions()[0])):
        begin = script.index("begin;\n")
        assert script[begin:].startswith("begin;\n\nset local search_path = pg_catalog, pg_temp;\n")


def test_an_upgrade_script_holds_only_the_later_revisions():
    first, *later = revisions()
    script = install_script(since=first)
    assert f"-- revision {first}\n" not in script
    assert all(f"-- revision {revision}\n" in script for revision in later)
    assert f"set version_num = '{revisions()[-1]}'" in script


def test_an_unknown_revision_is_refused_naming_the_known_ones():
    with pytest.raises(ArgumentInvalid, match="0001"):
        install_script(since="9999")


def test_durajobs_sql_prints_the_script_and_since_prints_the_upgrade(capsys):
    from durajobs.cli import main

    assert main(["sql"]) == 0
    assert capsys.readouterr().out == shipped_install_script()
    first = revisions()[0]
    assert main(["sql", "--since", first]) == 0
    assert capsys.readouterr().out == install_script(since=first)
    assert main(["sql", "--since", "9999"]) == 1
    assert "error: X_ARGUMENT_INVALID" in capsys.readouterr().err
