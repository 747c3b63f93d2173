-- 190_purge: retention. What has outlived its window is deleted a bounded batch a call, so the
-- tables stop growing with history: finished jobs, the steps of runs no row is left of,
-- published outbox rows and expired events.
--
-- Tables: jobs.jobs, jobs.steps, jobs.outbox, jobs.events (delete). Also here: how a run's rows
-- are found (jobs_run_shared_idx, jobs._run_stands, used by jobs.remove and jobs.remove_many
-- too); the default run_id of jobs.enqueue, jobs.enqueue_many and jobs.outbox_stage is the
-- job's own id, which keeps that index small (the functions themselves stay in their files).
-- Lock order: job rows (skip locked), then their runs' steps, then outbox rows (skip locked),
-- then events (skip locked).
-- Calls are serialised by a transaction-scoped advisory lock: two purges splitting one run
-- between them would each see the other's row still standing and leave the run's steps behind.
-- One clock reading a call (jobs._now()).

-- the finished rows by age, one index per window: with one index for both, every call would walk
-- the whole band of failed and dead rows kept for 90 days before reaching the done rows that
-- came of age. A finished row is in exactly one of them, so an ack adds one index entry.
create index jobs_done_idx
  on jobs.jobs (finished_at)
  where state = 'done';

create index jobs_ended_idx
  on jobs.jobs (finished_at)
  where state in ('failed', 'dead', 'cancelled');

-- the jobs that continue another job's run. A job enqueued without a run_id has its own id as
-- run_id, so a run's rows are the row whose id is the run's plus the rows of this index: whether
-- a run has a row left is two index probes, not a read of the table. A job enters it only when
-- enqueued with another's run_id.
create index jobs_run_shared_idx
  on jobs.jobs (run_id)
  where run_id <> id;

-- jobs._run_stands: whether a job row of the run is left: the row whose id is the run's (a job
-- enqueued without a run_id), or one continuing the run (jobs_run_shared_idx, its predicate
-- spelled out so the planner can prove it). Two index probes.
-- Answers boolean. Raises nothing. Locks nothing.
create function jobs._run_stands(run_id uuid)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (
           select 1 from jobs.jobs j where j.id = _run_stands.run_id and j.run_id = j.id
         )
      or exists (
           select 1 from jobs.jobs j where j.run_id = _run_stands.run_id and j.run_id <> j.id
         )
$$;

-- jobs._outbox_awaits: whether an unpublished outbox row of this database names the job id: its
-- relay published it and stopped before marking the row, so the row will be published again,
-- and the job must stay to meet that publish (jobs.enqueue dedupes on the id) or it runs twice.
-- A primary key probe. Answers boolean. Raises nothing. Locks nothing.
create function jobs._outbox_awaits(id uuid)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from jobs.outbox o where o.id = _outbox_awaits.id and o.published_at is null
  )
$$;

create type jobs.purge_result as (
  jobs integer,
  steps integer,
  outbox integer,
  events integer
);

-- jobs.purge: delete, a batch each, done jobs finished more than done_after ago; failed, dead
-- and cancelled jobs finished more than ended_after ago; the steps of the runs whose last row
-- went; outbox rows published more than published_after ago; events past their expiry.
-- Never a live job (ready, delayed, running, suspended), never an unpublished outbox row, and
-- never a finished job that an unpublished outbox row of this database names (its relay
-- published it and stopped before marking the row: the job must stay to meet the next publish,
-- or it would run again).
-- Arguments: done_after (default 14 days), ended_after (90 days), published_after (7 days),
-- batch_size (1..10000, default 1000: at most that many jobs of each window, outbox rows and
-- events a call). Answers (jobs, steps, outbox, events) deleted; call again until all are 0.
-- Raises X_ARGUMENT_INVALID. Locks: see the file's head.
create function jobs.purge(
  done_after interval default interval '14 days',
  ended_after interval default interval '90 days',
  published_after interval default interval '7 days',
  batch_size integer default 1000
)
returns jobs.purge_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
begin
  if done_after is null or done_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'done_after', 'must be an interval of 0 or more');
  end if;
  if ended_after is null or ended_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'ended_after', 'must be an interval of 0 or more');
  end if;
  if published_after is null or published_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'published_after', 'must be an interval of 0 or more');
  end if;
  if batch_size is null or batch_size < 1 or batch_size > 10000 then
    perform jobs._invalid('jobs.purge', 'batch_size', 'must be between 1 and 10000');
  end if;

  perform pg_advisory_xact_lock(hashtext('jobs.purge'));

  -- each window in its own subquery, so each walks its own partial index oldest first
  with batch as materialized (
    select d.id
      from (select j.id
              from jobs.jobs j
             where j.state = 'done'
               and j.finished_at < v_now - purge.done_after
               and not jobs._outbox_awaits(j.id)
             order by j.finished_at
             limit purge.batch_size
               for update skip locked) d
    union all
    select e.id
      from (select j.id
              from jobs.jobs j
             where j.state in ('failed', 'dead', 'cancelled')
               and j.finished_at < v_now - purge.ended_after
               and not jobs._outbox_awaits(j.id)
             order by j.finished_at
             limit purge.batch_size
               for update skip locked) e
  ),
  removed as (
    delete from jobs.jobs j
     using batch b
     where j.id = b.id
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_jobs, v_runs
    from removed r;

  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select count(*) into v_steps from gone;

  -- no index orders either table by age: the scan stops at the batch's last row, and both are
  -- written in about the order they age in
  with gone as (
    delete from jobs.outbox o
     where o.id in (
       select p.id
         from jobs.outbox p
        where p.published_at < v_now - purge.published_after
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_outbox from gone;

  with gone as (
    delete from jobs.events e
     where e.id in (
       select x.id
         from jobs.events x
        where x.expires_at <= v_now
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_events from gone;

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$$;
