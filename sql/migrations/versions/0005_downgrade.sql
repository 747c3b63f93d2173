-- Revision 0005 down: remove the operator functions, their error codes and the listing index,
-- and go back to schema version 4.
drop function jobs.promote_many(text, text, text, text);
drop function jobs.remove_many(text, text, text, text);
drop function jobs.requeue_many(text, text, text, text);
drop function jobs._bulk_check(text, text, text[]);
drop function jobs.promote(uuid);
drop function jobs.remove(uuid);
drop function jobs.list_jobs(text, text, text, text, text, timestamptz, timestamptz, integer, uuid, uuid);
drop type jobs.bulk_result;
drop type jobs.job_summary;
drop index jobs.jobs_created_idx;
delete from jobs.error_codes where code in ('X_JOB_PAGE_INVALID', 'X_JOB_NOT_REMOVABLE', 'X_JOB_NOT_PROMOTABLE');

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 4
$$;
