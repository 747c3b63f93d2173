-- 130_operator: what an operator does to jobs: list them a page at a time, remove one, promote a
-- waiting one to now, and the bulk forms of requeue, remove and promote.
--
-- Tables: jobs.jobs (read: both job tables as one), jobs.jobs_live and jobs.jobs_history
-- (update, delete, and a requeue's move from history back to live), jobs.steps (delete). Lock
-- order: job rows, then their steps. Bulk calls touch at most 1,000 rows and answer (affected,
-- remaining), so "call until zero" ends.

create type jobs.job_summary as (
  id uuid,
  run_id uuid,
  name text,
  queue text,
  state text,
  tenant_id text,
  attempt integer,
  max_attempts integer,
  priority integer,
  run_at timestamptz,
  created_at timestamptz,
  updated_at timestamptz,
  finished_at timestamptz,
  last_error text,
  last_error_code text
);

create type jobs.bulk_result as (
  affected integer,
  remaining bigint
);

-- jobs._queue_after: the least queue name of a waiting or finished job greater than `after`
-- (the least of all when NULL), or NULL when none: one descent of each table's
-- (queue, created_at, id) index. Raises nothing.
create function jobs._queue_after(after text)
returns text
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if after is null then
    -- `is not null` for the live table's index, partial on it (000_schema)
    return least(
      (select min(j.queue) from jobs.jobs_live j
        where j.queue is not null and j.state <> 'running'),
      (select min(j.queue) from jobs.jobs_history j where j.queue is not null));
  end if;
  return least(
    (select min(j.queue) from jobs.jobs_live j
      where j.queue > _queue_after.after and j.state <> 'running'),
    (select min(j.queue) from jobs.jobs_history j where j.queue > _queue_after.after));
end;
$$;

-- jobs._listed_queues: the queues jobs.list_jobs reads: `queue` when given, else every queue
-- name of a job: those of the waiting and finished rows each found by jobs._queue_after (the
-- next name after the last), not by reading the rows, and those of the running rows (no index
-- orders them by queue: all of them are read, once). Answers setof text, in name order.
-- Raises nothing.
create function jobs._listed_queues(queue text)
returns setof text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with recursive names (queue) as (
    select jobs._queue_after(null)
     where _listed_queues.queue is null
    union all
    select jobs._queue_after(n.queue)
      from names n
     where n.queue is not null
  )
  select _listed_queues.queue
   where _listed_queues.queue is not null
  union
  select n.queue from names n where n.queue is not null
  union
  select j.queue
    from jobs.jobs_live j
   where _listed_queues.queue is null
     and j.state = 'running'
     and j.lease_expires_at is not null  -- every running row: for jobs_lease_idx
  order by 1
$$;

-- jobs.list_jobs: a page of jobs, newest first by (created_at, id), filtered.
-- Arguments: queue, name, state, tenant_id, id_prefix (the start of the id's text), created_from,
-- created_to (inclusive), page_size (100, at most 200), after (the id of the last row of the
-- previous page: older rows), before (the id of the first row of the page: newer rows, still
-- answered newest first), idempotency_key (exactly), run_id (the jobs of one run: a job and
-- what a requeue from its steps made). Never both cursors.
-- The seek reads the cursor row's own created_at, so rows created in the same millisecond are
-- neither skipped nor repeated. A short page is the last one.
-- Reads the asked queue's rows from the cursor on, or, without a queue, each queue's in turn
-- (jobs._queue_after finds the next queue name) merged into one page: the waiting rows through
-- jobs_queue_created_idx and the finished ones through jobs_history_queue_created_idx, in index
-- order; the running rows, which no index orders by queue (a claim would write an entry for
-- each), are read once, all of them, through jobs_lease_idx, and sorted for each queue.
-- No index on (created_at, id) alone: it would cost every insert and update of the hot path an
-- entry. The per-queue seek reads up to a page per queue, so an unfiltered page over thousands of
-- queues, or a filter a large queue never matches, reads many entries; pass the queue when you
-- know it.
-- Raises X_JOB_PAGE_INVALID (page_size out of range, both cursors, a cursor naming no job),
-- X_ARGUMENT_INVALID. Locks nothing.
create function jobs.list_jobs(
  queue text default null,
  name text default null,
  state text default null,
  tenant_id text default null,
  id_prefix text default null,
  created_from timestamptz default null,
  created_to timestamptz default null,
  page_size integer default 100,
  after uuid default null,
  before uuid default null,
  idempotency_key text default null,
  run_id uuid default null
)
returns setof jobs.job_summary
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
-- each table's rows are read in index order from the cursor and merged: the planner, seeing
-- few rows in a table, could rather read every row past the cursor and sort them (4,000 index
-- entries for a page of 20, 4,000 rows deep). The final sort, which every plan has, then costs
-- past the JIT threshold: compiling it took 250 ms of a 3 ms page
set enable_sort = off
set jit = off
as $$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
  v_seek text := '<=';
  v_order text := 'desc';
  v_branch text;
begin
  perform jobs._require(array['operator'], 'jobs.list_jobs', scoped => true);
  -- a session bound to a tenant acts on its tenant's rows alone (014_tenants)
  if jobs._any_binding() then
    list_jobs.tenant_id := jobs._scoped_tenant('jobs.list_jobs', 'tenant_id',
                                                 list_jobs.tenant_id);
  end if;
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
  if coalesce(list_jobs.after, list_jobs.before) is not null then
    select j.created_at, j.id
      into v_cursor_at, v_cursor_id
      from jobs.jobs j
     where j.id = coalesce(list_jobs.after, list_jobs.before)
       and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id);
    if not found then
      perform jobs._raise(
        'X_JOB_PAGE_INVALID',
        format('%s names no job: pass the id of a row a page answered',
               case when list_jobs.after is not null then 'after' else 'before' end),
        jsonb_build_object('argument',
                           case when list_jobs.after is not null then 'after' else 'before' end));
    end if;
  end if;

  -- `before`: each queue's rows just newer than the cursor, the oldest of them first, the page
  -- then answered newest first; else the rows from the cursor down, newest first
  if list_jobs.before is not null then
    v_seek := '>';
    v_order := 'asc';
  end if;
  -- one branch for each way a queue's rows are found in order (000_schema): the waiting rows
  -- through jobs_queue_created_idx, the running rows from one read of them all (jobs_lease_idx;
  -- no index orders them by queue), sorted, and the finished rows through
  -- jobs_history_queue_created_idx. Not a view of the three: a member of a union with a WHERE
  -- clause of its own is planned apart, and reads its whole queue instead of seeking
  v_branch := $branch$
      (select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
              j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
              j.finished_at, j.last_error, j.last_error_code
         from %1$s j
        where j.queue = q.queue
          and %2$s
          and (j.created_at, j.id) %3$s ($1, $2)
          and ($3::uuid is null or j.id <> $3)
          and ($4::text is null or j.name = $4)
          and ($5::text is null or j.state = $5)
          and ($6::text is null or j.tenant_id = $6)
          and ($7::text is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length($7)) = lower($7))
          and ($8::timestamptz is null or j.created_at >= $8)
          and ($9::timestamptz is null or j.created_at <= $9)
          and ($10::text is null or j.idempotency_key = $10)
          and ($11::uuid is null or j.run_id = $11)
        order by j.created_at %4$s, j.id %4$s
        limit $12)
  $branch$;
  return query execute format(
    $page$
      with running as materialized (
        select j.*
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at is not null  -- every running row: for jobs_lease_idx
           and ($13::text is null or j.queue = $13)
      )
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues($13) q (queue)
           cross join lateral (%1$s union all %2$s union all %3$s) n
           order by n.created_at %4$s, n.id %4$s
           limit $12
        ) p
       order by p.created_at desc, p.id desc
    $page$,
    format(v_branch, 'jobs.jobs_live', 'j.state <> ''running''', v_seek, v_order),
    format(v_branch, 'running', 'true', v_seek, v_order),
    format(v_branch, 'jobs.jobs_history', 'true', v_seek, v_order),
    v_order)
    using v_cursor_at, v_cursor_id, list_jobs.after, list_jobs.name, list_jobs.state,
          list_jobs.tenant_id, list_jobs.id_prefix, list_jobs.created_from,
          list_jobs.created_to, list_jobs.idempotency_key, list_jobs.run_id,
          list_jobs.page_size, list_jobs.queue;
end;
$$;

-- jobs.remove: delete a job that is not running, and its run's steps once no row of the run
-- is left. Arguments: id; tenant_id (optional: act only on that tenant's job; a session bound
-- to a tenant always acts for its tenant). Answers true.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_REMOVABLE (it is running: cancel it first).
-- Locks: the job row, then its steps. Whether a row of the run is left is two index probes
-- (jobs._run_stands), not a read of the table.
create function jobs.remove(id uuid, tenant_id text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job record;
begin
  perform jobs._require(array['operator'], 'jobs.remove', scoped => true);
  if jobs._foreign_job(remove.id,
                       jobs._scoped_tenant('jobs.remove', 'tenant_id', remove.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', remove.id),
                        jsonb_build_object('id', remove.id));
  end if;
  select j.state, j.run_id into v_job from jobs.jobs_live j where j.id = remove.id for update;
  if found then
    if v_job.state = 'running' then
      perform jobs._raise('X_JOB_NOT_REMOVABLE',
                          format('job %s is running; cancel it first', remove.id),
                          jsonb_build_object('id', remove.id, 'state', v_job.state));
    end if;
    delete from jobs.jobs_live j where j.id = remove.id;
  else
    delete from jobs.jobs_history j where j.id = remove.id returning j.run_id into v_job;
    if not found then
      perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', remove.id),
                          jsonb_build_object('id', remove.id));
    end if;
  end if;
  if not jobs._run_stands(v_job.run_id) then
    delete from jobs.steps s where s.run_id = v_job.run_id;
  end if;
  return true;
end;
$$;

-- jobs.promote: make a waiting job due now: a delayed one, or a ready one backing off.
-- Arguments: id; tenant_id (as jobs.remove's). Answers true. Wakes its queue.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_PROMOTABLE (it is not waiting on its run_at).
-- Locks the row.
create function jobs.promote(id uuid, tenant_id text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_queue text;
  v_state text;
begin
  perform jobs._require(array['operator'], 'jobs.promote', scoped => true);
  if jobs._foreign_job(promote.id,
                       jobs._scoped_tenant('jobs.promote', 'tenant_id', promote.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', promote.id),
                        jsonb_build_object('id', promote.id));
  end if;
  update jobs.jobs_live j
     set state = 'ready',
         run_at = v_now,
         updated_at = v_now
   where j.id = promote.id
     and j.state in ('delayed', 'ready')
     and j.run_at > v_now
  returning j.queue into v_queue;
  if found then
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
    return true;
  end if;
  select j.state into v_state from jobs.jobs j where j.id = promote.id;
  if v_state is null then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', promote.id),
                        jsonb_build_object('id', promote.id));
  end if;
  perform jobs._raise(
    'X_JOB_NOT_PROMOTABLE',
    format('job %s is %s and not waiting on its run_at', promote.id, v_state),
    jsonb_build_object('id', promote.id, 'state', v_state));
  return false;
end;
$$;

-- jobs._bulk_check: refuse a bulk call without a state in its list.
-- Raises X_ARGUMENT_INVALID.
create function jobs._bulk_check(function_name text, state text, allowed text[])
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if state is null or not (state = any(allowed)) then
    perform jobs._invalid(function_name, 'state', 'must be one of ' || array_to_string(allowed, ', '));
  end if;
end;
$$;

-- jobs.requeue_many: requeue finished jobs of one state (done, failed, dead, cancelled),
-- optionally of one queue, name and tenant, at most 1,000 a call. A row whose key a live job
-- holds stays; of several finished rows sharing a key, the oldest is requeued. Keeps each run,
-- so completed steps replay.
-- Answers (affected, remaining): remaining counts the rows a next call could still move, as of
-- the call's snapshot.
-- Raises X_ARGUMENT_INVALID. Locks the rows it moves (skip locked). Wakes their queues.
-- Finds the movable rows once a call, with a join to the live rows rather than a jobs._find_live
-- call per finished row (about 1.7 s a pass next to 200,000 finished rows), and checks each row's
-- state again under its lock, so a row claimed since the call read it is not reset to ready.
create function jobs.requeue_many(
  state text,
  queue text default null,
  name text default null,
  tenant_id text default null
)
returns jobs.bulk_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
  perform jobs._require(array['operator'], 'jobs.requeue_many', scoped => true);
  -- a session bound to a tenant acts on its tenant's rows alone (014_tenants)
  if jobs._any_binding() then
    requeue_many.tenant_id := jobs._scoped_tenant('jobs.requeue_many', 'tenant_id',
                                                    requeue_many.tenant_id);
  end if;
  perform jobs._bulk_check('jobs.requeue_many', requeue_many.state,
                           array['done', 'failed', 'dead', 'cancelled']);
  with movable as materialized (
    -- of several finished rows sharing a key, the oldest; none whose key a live job holds
    select distinct on (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id
      from jobs.jobs_history j
     where j.state = requeue_many.state
       and (requeue_many.queue is null or j.queue = requeue_many.queue)
       and (requeue_many.name is null or j.name = requeue_many.name)
       and (requeue_many.tenant_id is null or j.tenant_id = requeue_many.tenant_id)
       and not exists (
             select 1
               from jobs.jobs_live live
              where live.name = j.name
                and coalesce(live.tenant_id, '') = coalesce(j.tenant_id, '')
                and live.idempotency_key = j.idempotency_key
                and live.state in ('ready', 'delayed', 'running', 'suspended'))
     order by j.name, coalesce(j.tenant_id, ''), j.idempotency_key, j.created_at, j.id
  ),
  batch as materialized (
    -- the state again, under the lock: a row another session moved on since `movable` was read
    -- (requeued and claimed, say) is read anew here, and a lock by id alone would take it
    select j.id
      from jobs.jobs_history j
      join movable m on m.id = j.id
     where j.state = requeue_many.state
     order by j.created_at, j.id
     limit 1000
       for update of j skip locked
  ),
  gone as (
    -- by id, as jobs.remove_many deletes
    delete from jobs.jobs_history j
     where j.id = any(array(select b.id from batch b))
       and j.state = requeue_many.state
    returning j
  ),
  moved as (
    insert into jobs.jobs_live as l
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e
    returning l.queue
  )
  select (select count(*) from movable), count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_movable, v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;

  -- each moved row was its key's only movable row, and its key is live now
  return (v_affected, v_movable - v_affected)::jobs.bulk_result;
end;
$$;

-- jobs.remove_many: delete jobs of one state (any but running), optionally of one queue, name
-- and tenant, at most 1,000 a call, with the steps of runs no row is left of.
-- A call's rows are in no particular order.
-- Answers (affected, remaining). Raises X_ARGUMENT_INVALID. Locks the rows (skip locked), then
-- their steps. Whether a run has a row left is two index probes a run (jobs._run_stands), not a
-- read of the table.
create function jobs.remove_many(
  state text,
  queue text default null,
  name text default null,
  tenant_id text default null
)
returns jobs.bulk_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_table text;
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
  perform jobs._require(array['operator'], 'jobs.remove_many', scoped => true);
  -- a session bound to a tenant acts on its tenant's rows alone (014_tenants)
  if jobs._any_binding() then
    remove_many.tenant_id := jobs._scoped_tenant('jobs.remove_many', 'tenant_id',
                                                   remove_many.tenant_id);
  end if;
  perform jobs._bulk_check('jobs.remove_many', remove_many.state,
                           array['ready', 'delayed', 'suspended', 'done', 'failed', 'dead',
                                 'cancelled']);
  -- a state lives in one table, and the statements are the same for both
  v_table := case when remove_many.state in ('ready', 'delayed', 'suspended') then 'jobs.jobs_live'
                  else 'jobs.jobs_history' end;
  execute format($sql$
    with batch as materialized (
      -- in no particular order: every row of the state goes, and no index orders the table by
      -- age (an order by age would sort the whole state before the first row is locked)
      select j.id
        from %1$s j
       where j.state = $1
         and ($2 is null or j.queue = $2)
         and ($3 is null or j.name = $3)
         and ($4 is null or j.tenant_id = $4)
       limit 1000
         for update skip locked
    ),
    removed as (
      -- by id, and the state, so only the state's partitions are probed: a join to `batch` let
      -- the planner hash a scan of every partition
      delete from %1$s j
       where j.id = any(array(select b.id from batch b))
         and j.state = $1
      returning j.run_id
    )
    select count(*), coalesce(array_agg(distinct r.run_id), '{}')
      from removed r
    $sql$, v_table)
    into v_affected, v_runs
    using remove_many.state, remove_many.queue, remove_many.name, remove_many.tenant_id;

  delete from jobs.steps s
   where s.run_id = any(v_runs)
     and not jobs._run_stands(s.run_id);

  execute format($sql$
    select count(*)
      from %s j
     where j.state = $1
       and ($2 is null or j.queue = $2)
       and ($3 is null or j.name = $3)
       and ($4 is null or j.tenant_id = $4)
    $sql$, v_table)
    into v_remaining
    using remove_many.state, remove_many.queue, remove_many.name, remove_many.tenant_id;
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$$;

-- jobs.promote_many: make waiting jobs of one state (delayed, or ready backing off) due now,
-- optionally of one queue, name and tenant, at most 1,000 a call.
-- Answers (affected, remaining: rows still waiting on their run_at). Raises X_ARGUMENT_INVALID.
-- Locks the rows (skip locked). Wakes their queues.
create function jobs.promote_many(
  state text,
  queue text default null,
  name text default null,
  tenant_id text default null
)
returns jobs.bulk_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_affected integer;
  v_remaining bigint;
  v_queues text[];
  v_queue text;
begin
  perform jobs._require(array['operator'], 'jobs.promote_many', scoped => true);
  -- a session bound to a tenant acts on its tenant's rows alone (014_tenants)
  if jobs._any_binding() then
    promote_many.tenant_id := jobs._scoped_tenant('jobs.promote_many', 'tenant_id',
                                                    promote_many.tenant_id);
  end if;
  perform jobs._bulk_check('jobs.promote_many', promote_many.state, array['delayed', 'ready']);
  with batch as materialized (
    select j.id
      from jobs.jobs_live j
     where j.state = promote_many.state
       and j.run_at > v_now
       and (promote_many.queue is null or j.queue = promote_many.queue)
       and (promote_many.name is null or j.name = promote_many.name)
       and (promote_many.tenant_id is null or j.tenant_id = promote_many.tenant_id)
     order by j.run_at, j.id
     limit 1000
       for update skip locked
  ),
  moved as (
    update jobs.jobs_live j
       set state = 'ready', run_at = v_now, updated_at = v_now
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;

  select count(*)
    into v_remaining
    from jobs.jobs j
   where j.state = promote_many.state
     and j.run_at > v_now
     and (promote_many.queue is null or j.queue = promote_many.queue)
     and (promote_many.name is null or j.name = promote_many.name)
     and (promote_many.tenant_id is null or j.tenant_id = promote_many.tenant_id);
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$$;
