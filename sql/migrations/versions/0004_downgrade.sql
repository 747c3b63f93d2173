-- Revision 0004 down: remove the scheduler and go back to schema version 3. The tasks'
-- watermarks go with it: a scheduler upgraded again arms its tasks afresh, from now.
drop function jobs.task_fires();
drop function jobs.resume_task(text);
drop function jobs.pause_task(text);
drop function jobs.scheduler_resign(text, text);
drop function jobs.scheduler_lead(text, interval, text);
drop function jobs.scheduler_skip(text, timestamptz);
drop function jobs.scheduler_fire(text, timestamptz, jsonb, timestamptz);
drop function jobs.scheduler_arm(text, timestamptz);
drop type jobs.task_state;
drop table jobs.scheduler_leases;
drop table jobs.scheduler_tasks;

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 3
$$;
