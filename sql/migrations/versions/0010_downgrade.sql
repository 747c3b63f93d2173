-- Revision 0010 down: put back the jobs._uuid_v7 of revision 0007 (a SQL function) and the
-- jobs._announce of revision 0006 (its slot tests free to take any index), and go back to
-- schema version 9.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 9
$$;

create or replace function jobs._uuid_v7()
returns uuid
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select (jobs._uuid_v7_many(1))[1]
$$;

create or replace function jobs._announce(queue text, created_at timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  if exists (
       select 1
         from jobs.jobs j
        where j.queue = _announce.queue
          and j.created_at >= v_slot
          and j.created_at < _announce.created_at
          and j.state in ('ready', 'delayed')
          and j.run_at <= j.created_at + interval '1 second')
     or exists (
       select 1
         from jobs.jobs j
        where j.queue = _announce.queue
          and j.created_at > _announce.created_at
          and j.created_at < v_slot + interval '250 milliseconds'
          and j.state in ('ready', 'delayed')
          and j.run_at <= j.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$$;
