"""Read a database's durajobs catalogue, to compare two installations object by object."""

from __future__ import annotations

from typing import Any

import psycopg

QUERIES = {
    "functions": """
        select p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
          from pg_proc p
         where p.pronamespace = 'jobs'::regnamespace
         order by 1, 2""",
    "columns": """
        select c.table_name, c.column_name, c.data_type, c.column_default, c.is_nullable,
               c.ordinal_position
          from information_schema.columns c
         where c.table_schema = 'jobs' and c.table_name <> 'alembic_version'
         order by 1, 6""",
    "indexes": """
        select i.tablename, i.indexname, i.indexdef
          from pg_indexes i
         where i.schemaname = 'jobs' and i.tablename <> 'alembic_version'
         order by 1, 2""",
    "constraints": """
        select r.relname, c.conname, pg_get_constraintdef(c.oid)
          from pg_constraint c
          join pg_class r on r.oid = c.conrelid
         where r.relnamespace = 'jobs'::regnamespace and r.relname <> 'alembic_version'
         order by 1, 2""",
    "types": """
        select t.typname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnum
          from pg_type t
          join pg_class k on k.oid = t.typrelid and k.relkind = 'c'
          join pg_attribute a on a.attrelid = k.oid and a.attnum > 0
         where t.typnamespace = 'jobs'::regnamespace
         order by 1, 4""",
    "error_codes": "select code, sqlstate, fix from jobs.error_codes order by 1",
    "storage": """
        -- as a set: `alter table ... set` moves a changed option to the end of the array
        select c.relname, (select array_agg(o order by o) from unnest(c.reloptions) o)
          from pg_class c
         where c.relnamespace = 'jobs'::regnamespace and c.relkind = 'r'
           and c.relname <> 'alembic_version'
         order by 1""",
}


def read_catalogue(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as connection:
        return {name: connection.execute(query).fetchall() for name, query in QUERIES.items()}
