-- Revision 0008 down: put back jobs_created_idx and the jobs.list_jobs of revision 0005 that
-- reads it, and go back to schema version 7.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 7
$$;

-- keyset listing, newest first, over every state
create index jobs_created_idx
  on jobs.jobs (created_at, id);

-- jobs.list_jobs: a page of jobs, newest first by (created_at, id), filtered.
-- Arguments: queue, name, state, tenant_id, id_prefix (the start of the id's text), created_from,
-- created_to (inclusive), page_size (100, at most 200), after (the id of the last row of the
-- previous page: older rows), before (the id of the first row of the page: newer rows, still
-- answered newest first). Never both cursors.
-- The seek reads the cursor row's own created_at, so rows created in the same millisecond are
-- neither skipped nor repeated. A short page is the last one.
-- Raises X_JOB_PAGE_INVALID (page_size out of range, both cursors, a cursor naming no job),
-- X_ARGUMENT_INVALID. Locks nothing. Introduced in revision 0005.
create or replace function jobs.list_jobs(
  queue text default null,
  name text default null,
  state text default null,
  tenant_id text default null,
  id_prefix text default null,
  created_from timestamptz default null,
  created_to timestamptz default null,
  page_size integer default 100,
  after uuid default null,
  before uuid default null
)
returns setof jobs.job_summary
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_cursor_at timestamptz;
  v_cursor_id uuid;
begin
  if page_size is null or page_size < 1 or page_size > 200 then
    perform jobs._raise('X_JOB_PAGE_INVALID',
                        format('page_size must be from 1 to 200, got %s', page_size),
                        jsonb_build_object('argument', 'page_size'));
  end if;
  if after is not null and before is not null then
    perform jobs._raise('X_JOB_PAGE_INVALID', 'pass after or before, not both',
                        jsonb_build_object('argument', 'after, before'));
  end if;
  if state is not null and not (state = any(jobs.job_states())) then
    perform jobs._invalid('jobs.list_jobs', 'state',
                          'must be one of ' || array_to_string(jobs.job_states(), ', '));
  end if;
  v_cursor_id := coalesce(list_jobs.after, list_jobs.before);
  if v_cursor_id is not null then
    select j.created_at into v_cursor_at from jobs.jobs j where j.id = v_cursor_id;
    if not found then
      perform jobs._raise(
        'X_JOB_PAGE_INVALID',
        format('%s names no job: pass the id of a row a page answered',
               case when list_jobs.after is not null then 'after' else 'before' end),
        jsonb_build_object('argument',
                           case when list_jobs.after is not null then 'after' else 'before' end));
    end if;
  end if;

  if list_jobs.before is not null then
    -- the rows just newer than the cursor, then answered newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                 j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                 j.finished_at, j.last_error, j.last_error_code
            from jobs.jobs j
           where (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
             and (list_jobs.queue is null or j.queue = list_jobs.queue)
             and (list_jobs.name is null or j.name = list_jobs.name)
             and (list_jobs.state is null or j.state = list_jobs.state)
             and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
             and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                  or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
             and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
             and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
           order by j.created_at, j.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
           j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
           j.last_error_code
      from jobs.jobs j
     where (v_cursor_id is null or (j.created_at, j.id) < (v_cursor_at, v_cursor_id))
       and (list_jobs.queue is null or j.queue = list_jobs.queue)
       and (list_jobs.name is null or j.name = list_jobs.name)
       and (list_jobs.state is null or j.state = list_jobs.state)
       and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
       and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
            or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
       and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
       and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
     order by j.created_at desc, j.id desc
     limit list_jobs.page_size;
end;
$$;
