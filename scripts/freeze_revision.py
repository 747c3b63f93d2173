"""Freeze sql/functions/ into alembic revision NNNN: scripts/freeze-revision NNNN "what changed".

The first revision (no revision before it) is the whole of sql/functions/, and its downgrade
removes every durajobs object. A later revision is the difference from the one before: the
schema that revision installs and the one sql/functions/ describes are installed into two
scratch databases on the server at $DURAJOBS_TEST_DATABASE_URL (or $DATABASE_URL), and every
added, changed or removed function becomes SQL in NNNN_upgrade.sql and, read backwards, in
NNNN_downgrade.sql. Schema changes (tables, types, indexes, rows of jobs.error_codes) go by
hand into each file's marked section, which a new run keeps. Each run then proves the pair:
the previous revision plus the upgrade must equal sql/functions/, and the downgrade must bring
back the previous revision exactly; otherwise it prints what differs and exits 1. Last, it
rewrites sql/install.sql, the whole schema as one psql script, from the revisions.

Run it while the revision is unreleased as often as the source changes; a released revision is
never edited again.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql

import durajobs
from durajobs._db.install_script import INSTALL_FILE, install_script
from durajobs._db.migrations import functions_sql
from durajobs._db.revisions import (
    differences,
    functions_change,
    hand_written_part,
    read_catalogue,
    revision_file,
)

REPOSITORY = Path(__file__).resolve().parents[1]
VERSIONS = REPOSITORY / "sql" / "migrations" / "versions"
TEMPLATE = REPOSITORY / "sql" / "migrations" / "script.py.mako"

# the first revision's downgrade: every function, table and composite type of the schema, but
# alembic's version table, which alembic still writes to after it (env.py drops the emptied
# schema at base)
REMOVE_EVERYTHING = """\
do $$
declare
  v_object record;
begin
  for v_object in
    select p.oid::regprocedure as signature
      from pg_proc p
     where p.pronamespace = 'jobs'::regnamespace
  loop
    execute format('drop function %s cascade', v_object.signature);
  end loop;
  for v_object in
    select c.relname
      from pg_class c
     where c.relnamespace = 'jobs'::regnamespace
       and c.relkind = 'r'
       and c.relname <> 'alembic_version'
  loop
    execute format('drop table jobs.%I cascade', v_object.relname);
  end loop;
  for v_object in
    select t.typname
      from pg_type t
     where t.typnamespace = 'jobs'::regnamespace
       and t.typtype = 'c'
       and not exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind <> 'c')
  loop
    execute format('drop type jobs.%I cascade', v_object.typname);
  end loop;
end;
$$;
"""


def _revisions() -> list[str]:
    return sorted(
        match.group(1)
        for path in VERSIONS.glob("*.py")
        if (match := re.fullmatch(r"(\d{4})_.*\.py", path.name))
    )


def _server_url() -> str:
    url = os.environ.get("DURAJOBS_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit(
            "freeze-revision: set DURAJOBS_TEST_DATABASE_URL (or DATABASE_URL) to a server where "
            "scratch databases may be created"
        )
    return url


@contextmanager
def _scratch_database(server_url: str) -> Iterator[str]:
    name = f"durajobs_freeze_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield psycopg.conninfo.make_conninfo(server_url, dbname=name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def _execute(url: str, text: str) -> None:
    with psycopg.connect(url) as connection:
        connection.execute(text.encode())


def _write_module(revision: str, previous: str | None, message: str) -> None:
    if list(VERSIONS.glob(f"{revision}_*.py")):
        return
    slug = re.sub(r"[^a-z0-9_]", "", message.lower().replace(" ", "_"))
    module = TEMPLATE.read_text()
    replacements = {
        "${message}": message,
        "${up_revision}": revision,
        "${down_revision | comma,n}": previous or "",
        "${create_date}": datetime.now(UTC).strftime("%Y-%m-%d"),
        "${repr(up_revision)}": repr(revision),
        "${repr(down_revision)}": repr(previous),
    }
    for placeholder, value in replacements.items():
        module = module.replace(placeholder, value)
    path = VERSIONS / f"{revision}_{slug}.py"
    path.write_text(module.replace("'", '"'))
    print(f"wrote {path.relative_to(REPOSITORY)}")


def _header(revision: str, direction: str) -> str:
    return (
        f"-- durajobs revision {revision} {direction}, frozen by scripts/freeze-revision.\n"
        "-- Never edit after release: a change ships as a new revision."
    )


def _freeze_first(revision: str) -> None:
    (VERSIONS / f"{revision}_upgrade.sql").write_text(
        _header(revision, "up") + "\n\n" + functions_sql()
    )
    (VERSIONS / f"{revision}_downgrade.sql").write_text(
        _header(revision, "down") + "\n\n" + REMOVE_EVERYTHING
    )


def _freeze_change(revision: str, previous: str) -> int:
    up_path = VERSIONS / f"{revision}_upgrade.sql"
    down_path = VERSIONS / f"{revision}_downgrade.sql"
    up_hand = hand_written_part(up_path.read_text()) if up_path.exists() else ""
    down_hand = hand_written_part(down_path.read_text()) if down_path.exists() else ""
    server = _server_url()
    with _scratch_database(server) as before, _scratch_database(server) as after:
        durajobs.migrate(before, previous)
        _execute(after, functions_sql())
        # the hand-written parts run first, so the generated part sees their tables and types
        with _scratch_database(server) as probe:
            durajobs.migrate(probe, previous)
            _execute(probe, up_hand or "select")
            up_functions = functions_change(probe, after)
        with _scratch_database(server) as probe:
            _execute(probe, functions_sql())
            _execute(probe, down_hand or "select")
            down_functions = functions_change(probe, before)
        up_path.write_text(revision_file(_header(revision, "up"), up_hand, up_functions))
        down_path.write_text(revision_file(_header(revision, "down"), down_hand, down_functions))
        print(f"wrote {up_path.relative_to(REPOSITORY)} and {down_path.name}")

        wanted_after, wanted_before = read_catalogue(after), read_catalogue(before)
        with _scratch_database(server) as trial:
            durajobs.migrate(trial, previous)
            _execute(trial, up_path.read_text())
            up_left = differences(read_catalogue(trial), wanted_after)
            _execute(trial, down_path.read_text())
            down_left = differences(read_catalogue(trial), wanted_before)
    for direction, left in (("upgrade", up_left), ("downgrade", down_left)):
        if left:
            print(f"the {direction} does not reach its target; write these by hand in the")
            print(f"schema section of {revision}_{direction}.sql and run this again:")
            print("\n".join(left))
    return 1 if up_left or down_left else 0


def main(arguments: list[str]) -> int:
    if not arguments or not re.fullmatch(r"\d{4}", arguments[0]):
        raise SystemExit('usage: scripts/freeze-revision NNNN "what changed"')
    revision, message = arguments[0], (arguments[1] if len(arguments) > 1 else "freeze")
    previous = max((r for r in _revisions() if r < revision), default=None)
    _write_module(revision, previous, message)
    if previous is None:
        _freeze_first(revision)
        print(f"wrote {revision}_upgrade.sql and {revision}_downgrade.sql")
        _write_install_script()
        return 0
    status = _freeze_change(revision, previous)
    _write_install_script()
    return status


def _write_install_script() -> None:
    """Rewrite sql/install.sql, the one-file install for psql, from the revisions as they are."""
    path = REPOSITORY / "sql" / INSTALL_FILE
    path.write_text(install_script())
    print(f"wrote {path.relative_to(REPOSITORY)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
