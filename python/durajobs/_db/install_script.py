"""The schema as one psql script, for shops without Python or alembic.

`install_script()` is every revision's frozen upgrade in order, in one transaction, recording
the head revision in `jobs.alembic_version` exactly as alembic would, so `durajobs migrate`
later upgrades a database installed with it. `install_script(since="0001")` is the upgrade from
that revision. `sql/install.sql` is the committed copy of the first (scripts/freeze-revision
writes it, a test keeps it equal), shipped in the wheel and printed by `durajobs sql`.
"""

from __future__ import annotations

import re

from durajobs._db.migrations import (
    CLOSE_TO_PUBLIC,
    PIN_SEARCH_PATH,
    SCHEMA,
    VERSION_TABLE,
    package_sql_dir,
)
from durajobs.errors import ArgumentInvalid

INSTALL_FILE = "install.sql"

# alembic's own definition of its version table, so alembic reads the row it finds
_VERSION_TABLE = (
    f"create table {SCHEMA}.{VERSION_TABLE} (\n"
    "  version_num varchar(32) not null,\n"
    f"  constraint {VERSION_TABLE}_pkc primary key (version_num)\n"
    ");"
)


def revisions() -> list[str]:
    """The revision ids, oldest first."""
    versions = package_sql_dir() / "migrations" / "versions"
    return sorted(
        match.group(1)
        for path in versions.glob("*.py")
        if (match := re.fullmatch(r"(\d{4})_.*\.py", path.name))
    )


def _upgrade_text(revision: str) -> str:
    return (package_sql_dir() / "migrations" / "versions" / f"{revision}_upgrade.sql").read_text()


def _refuse_installed() -> str:
    return f"""\
do $$
declare
  v_installed text;
begin
  if to_regclass('{SCHEMA}.{VERSION_TABLE}') is not null then
    execute 'select max(version_num) from {SCHEMA}.{VERSION_TABLE}' into v_installed;
    raise exception 'durajobs is already installed here (revision %); upgrade it with the '
                    'script `durajobs sql --since %` prints, or `durajobs migrate`',
                    v_installed, v_installed;
  end if;
end;
$$;"""


def _refuse_other_revision(since: str) -> str:
    return f"""\
do $$
declare
  v_installed text;
begin
  if to_regclass('{SCHEMA}.{VERSION_TABLE}') is not null then
    execute 'select max(version_num) from {SCHEMA}.{VERSION_TABLE}' into v_installed;
  end if;
  if v_installed is distinct from '{since}' then
    raise exception 'this script upgrades durajobs revision {since}, the database has %; print '
                    'the right one with `durajobs sql --since <its revision>`',
                    coalesce(v_installed, 'no durajobs schema');
  end if;
end;
$$;"""


def install_script(*, since: str | None = None) -> str:
    """The psql script that installs the schema from nothing (or upgrades it from `since`) to
    the newest revision, in one transaction. Raises X_ARGUMENT_INVALID for an unknown `since`."""
    known = revisions()
    head = known[-1]
    if since is None:
        applied, guard = known, _refuse_installed()
        record = f"{_VERSION_TABLE}\ninsert into {SCHEMA}.{VERSION_TABLE} values ('{head}');"
        what = f"installs the durajobs schema at revision {head}"
    else:
        if since not in known:
            raise ArgumentInvalid(
                f"no durajobs revision {since!r}; the revisions are {', '.join(known)}",
                detail={"argument": "since", "revisions": known},
            )
        applied, guard = known[known.index(since) + 1 :], _refuse_other_revision(since)
        record = f"update {SCHEMA}.{VERSION_TABLE} set version_num = '{head}';"
        what = f"upgrades the durajobs schema from revision {since} to {head}"
    parts = [
        f"-- This script {what}, in one transaction.\n"
        "-- Generated from the frozen revisions by durajobs (`durajobs sql`); do not edit.\n"
        "-- Run it with: psql -v ON_ERROR_STOP=1 -f <this file>\n",
        "begin;",
        f"{PIN_SEARCH_PATH};",
        guard,
        *(f"-- revision {revision}\n{_upgrade_text(revision)}" for revision in applied),
        CLOSE_TO_PUBLIC.strip(),
        record,
        "commit;",
    ]
    return "\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def shipped_install_script() -> str:
    """The committed `sql/install.sql` (in a wheel, `durajobs/_sql/install.sql`)."""
    return (package_sql_dir() / INSTALL_FILE).read_text()
