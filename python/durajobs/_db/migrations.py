"""Install, upgrade and remove the `jobs` schema with alembic.

Each alembic revision applies a frozen SQL file of its own (`sql/migrations/versions/`), so an
old revision never changes meaning; `sql/functions/` is the source those files are cut from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from alembic.config import Config

# alembic and SQLAlchemy are imported where a migration runs: they are about half of
# `import durajobs`, which every worker, CLI call and `Client` pays otherwise

SCHEMA = "jobs"
VERSION_TABLE = "alembic_version"
HEAD = "head"


def package_sql_dir() -> Path:
    """Return the folder holding `functions/` and `migrations/`.

    A wheel carries it as `durajobs/_sql`; an editable checkout reads the repository's `sql/`.
    """
    here = Path(__file__).resolve().parent.parent  # the package's own folder
    for candidate in (here / "_sql", here.parent.parent / "sql"):
        if (candidate / "migrations" / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"durajobs: no sql/ folder beside {here}; reinstall the package")


def functions_sql() -> str:
    """Return `sql/functions/*.sql` concatenated in install order: the schema head describes."""
    files = sorted((package_sql_dir() / "functions").glob("*.sql"))
    return "\n".join(path.read_text() for path in files)


def sqlalchemy_url(url: str) -> str:
    """Return `url` with the psycopg 3 driver named, as SQLAlchemy wants it."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError(f"durajobs: not a PostgreSQL URL: {url!r}")


def alembic_config() -> Config:
    """Build the alembic configuration for durajobs' revisions, without reading alembic.ini."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(package_sql_dir() / "migrations"))
    return config


def _run(database_url: str, action: str, revision: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    config = alembic_config()
    # psycopg opens the connection, so any libpq string works: a URL or "host=... dbname=..."
    engine = create_engine(
        "postgresql+psycopg://", creator=lambda: psycopg.connect(database_url), poolclass=NullPool
    )
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            if action == "upgrade":
                command.upgrade(config, revision)
            else:
                command.downgrade(config, revision)
    finally:
        engine.dispose()


def migrate(database_url: str, revision: str = HEAD) -> None:
    """Upgrade the database at `database_url` (URL or libpq string) to `revision` (head).

    Runs in one transaction: a failure leaves the database as it was.
    """
    _run(database_url, "upgrade", revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """Downgrade the database at `database_url` to `revision`; `base` removes the jobs schema."""
    _run(database_url, "downgrade", revision)


# what the schema's DDL runs under, whatever the installing session's search_path says
PIN_SEARCH_PATH = "set local search_path = pg_catalog, pg_temp"

# Postgres gives PUBLIC EXECUTE on every new function, and a per-schema default privilege cannot
# take that away; from revision 0010 on, each upgrade takes it back once its functions exist
# (jobs.grant_roles gives EXECUTE to the roles that may call them)
# PUBLIC may execute no function of the schema; the roles of jobs.grant_roles keep every public
# one: a revision that drops and makes a function again (its signature changed) or adds one
# would otherwise leave an application's roles without it until grant_roles ran again
CLOSE_TO_PUBLIC = """
revoke execute on all functions in schema jobs from public;
do $$
declare
  v_role text;
  v_function regprocedure;
begin
  if to_regclass('jobs.roles') is null then
    return;
  end if;
  for v_role in
    select r.role_name from jobs.roles r join pg_roles p on p.rolname = r.role_name
  loop
    for v_function in
      select p.oid::regprocedure
        from pg_proc p
       where p.pronamespace = 'jobs'::regnamespace
         and p.proname !~ '^_'
    loop
      execute format('grant execute on function %s to %I', v_function, v_role);
    end loop;
  end loop;
end;
$$;
"""


def close_to_public() -> None:
    """Inside the running alembic migration: PUBLIC may execute no function of schema jobs, and
    the roles jobs.grant_roles made may execute every public one, old or new."""
    from alembic import op

    driver_connection = op.get_bind().connection.driver_connection
    assert driver_connection is not None
    driver_connection.execute(CLOSE_TO_PUBLIC)


def apply_sql_file(path: Path) -> None:
    """Execute one frozen SQL file inside the running alembic migration.

    The file goes to the driver whole: PL/pgSQL bodies hold semicolons, and psycopg runs several
    statements in one call when no parameters are bound. The search_path is pinned for the rest
    of the migration's transaction first: a caller's (say `hostile, pg_catalog`) would otherwise
    bind the operators of index predicates and constraints to another schema's, and one `=`
    there could turn the dedupe index off.
    """
    from alembic import op

    driver_connection = op.get_bind().connection.driver_connection
    assert driver_connection is not None
    driver_connection.execute(PIN_SEARCH_PATH)
    driver_connection.execute(path.read_text())
