-- Revision 0008 down: put back jobs_created_idx with the jobs.list_jobs and jobs.remove_many of
-- revision 0005 that read it and the jobs.queue_stats of revision 0001, drop jobs_dead_idx and
-- jobs._listed_queues, and go back to schema version 7.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 7
$$;

-- jobs.queue_stats: per queue, how many jobs are ready, delayed, running, suspended and dead,
-- and how long the oldest ready-and-due job has waited past its run_at.
-- Each row counts in exactly one bucket. ready: state 'ready' (a shed row included, even while
-- its short delay runs) and 'delayed' rows that came due; delayed: 'delayed' rows not yet due.
-- A suspended row (a sleep, a park) is excluded from oldest_ready_age even when due, on purpose.
-- Arguments: queues (NULL: every queue holding a job; given: exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Introduced in revision 0001.
create or replace function jobs.queue_stats(queues text[] default null)
returns setof jobs.queue_stat
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted as (
      select j.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where j.state = 'ready'
                                 or (j.state = 'delayed' and j.run_at <= v_now)) as ready,
             count(*) filter (where j.state = 'delayed' and j.run_at > v_now) as delayed,
             count(*) filter (where j.state = 'running') as running,
             count(*) filter (where j.state = 'suspended') as suspended,
             count(*) filter (where j.state = 'dead') as dead,
             v_now - min(j.run_at) filter (where j.state in ('ready', 'delayed')
                                             and j.run_at <= v_now) as oldest_ready_age
        from jobs.jobs j
       where j.state in ('ready', 'delayed', 'running', 'suspended', 'dead')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
       group by j.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
    )
    select w.queue,
           coalesce(c.ready, 0),
           coalesce(c.delayed, 0),
           coalesce(c.running, 0),
           coalesce(c.suspended, 0),
           coalesce(c.dead, 0),
           c.oldest_ready_age,
           exists (select 1 from jobs.queue_pauses p where p.queue = w.queue)
      from wanted w
      left join counted c on c.queue = w.queue
     order by w.queue;
end;
$$;

drop index jobs.jobs_dead_idx;

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

-- jobs.remove_many: delete jobs of one state (any but running), optionally of one queue, name
-- and tenant, at most 1,000 a call, with the steps of runs no row is left of.
-- Answers (affected, remaining). Raises X_ARGUMENT_INVALID. Locks the rows (skip locked), then
-- their steps. Introduced in revision 0005.
create or replace function jobs.remove_many(
  state text,
  queue text default null,
  name text default null,
  tenant_id text default null
)
returns jobs.bulk_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
  perform jobs._bulk_check('jobs.remove_many', remove_many.state,
                           array['ready', 'delayed', 'suspended', 'done', 'failed', 'dead',
                                 'cancelled']);
  with batch as materialized (
    select j.id
      from jobs.jobs j
     where j.state = remove_many.state
       and (remove_many.queue is null or j.queue = remove_many.queue)
       and (remove_many.name is null or j.name = remove_many.name)
       and (remove_many.tenant_id is null or j.tenant_id = remove_many.tenant_id)
     order by j.created_at, j.id
     limit 1000
       for update skip locked
  ),
  removed as (
    delete from jobs.jobs j
     using batch b
     where j.id = b.id
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_affected, v_runs
    from removed r;

  delete from jobs.steps s
   where s.run_id = any(v_runs)
     and not exists (select 1 from jobs.jobs j where j.run_id = s.run_id);

  select count(*)
    into v_remaining
    from jobs.jobs j
   where j.state = remove_many.state
     and (remove_many.queue is null or j.queue = remove_many.queue)
     and (remove_many.name is null or j.name = remove_many.name)
     and (remove_many.tenant_id is null or j.tenant_id = remove_many.tenant_id);
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$$;

drop function jobs._listed_queues(text);
