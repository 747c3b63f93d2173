-- Revision 0011 down: remove jobs.purge, its result type and the two indexes of finished rows
-- by age, and go back to schema version 10. Nothing stored is touched.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 10
$$;

drop function jobs.purge(interval, interval, interval, integer);
drop type jobs.purge_result;
drop index jobs.jobs_ended_idx;
drop index jobs.jobs_done_idx;
