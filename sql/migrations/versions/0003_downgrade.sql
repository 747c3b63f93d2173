-- Revision 0003 down: remove the event bus and go back to schema version 2.
drop function jobs.find_event(text, text, timestamptz);
drop function jobs.publish_event(text, jsonb, text, interval);
drop type jobs.event_lookup;
drop table jobs.events;

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 2
$$;
