-- 190_purge: retention. What has outlived its window goes, so the tables stop growing with
-- history: finished jobs (a day partition of done rows dropped whole, the rest deleted a bounded
-- batch a call), the steps of runs no row is left of, published outbox rows and expired events.
--
-- Tables: jobs.jobs_history (drop of day partitions, delete), jobs.steps, jobs.outbox,
-- jobs.events, jobs.limit_starts, jobs.webhook_attempts (delete), jobs.purge_cursor (where the orphan-step sweep stopped). Also here: how a run's rows are found (the run_shared indexes,
-- jobs._run_stands, used by jobs.remove and jobs.remove_many too); the default run_id of
-- jobs.enqueue, jobs.enqueue_many and jobs.outbox_stage is the job's own id, which keeps those
-- indexes small (the functions themselves stay in their files).
-- Lock order: a day partition (its drop waits at most 2 s for the table's lock, else it is left
-- for the next call), then job rows (skip locked), then their runs' steps, then outbox rows
-- (skip locked), then events (skip locked).
-- Calls are serialised by a transaction-scoped advisory lock: two purges splitting one run
-- between them would each see the other's row still standing and leave the run's steps behind.
-- One clock reading a call (jobs._now()).

-- where the orphan sweep of jobs.purge stopped: the last run id of jobs.steps it examined
-- (NULL: start from the first). One row.
create table jobs.purge_cursor (
  only_row boolean primary key default true check (only_row),
  steps_after uuid
);

insert into jobs.purge_cursor (steps_after) values (null);

-- the finished rows by age that are deleted row by row: the done rows that landed in the default
-- partition (they finished on a day with no partition of its own) and the ended rows. A day
-- partition needs no such index: it goes whole.
create index jobs_done_idx
  on jobs.jobs_history_done_default (finished_at);

create index jobs_ended_idx
  on jobs.jobs_history_ended (finished_at);

-- the jobs that continue another job's run, in each table. A job enqueued without a run_id has
-- its own id as run_id, so a run's rows are the row whose id is the run's plus the rows of these
-- indexes: whether a run has a row left is four index probes, not a read of the tables. A job
-- enters them only when enqueued with another's run_id.
create index jobs_run_shared_idx
  on jobs.jobs_live (run_id)
  where run_id <> id;

create index jobs_history_run_shared_idx
  on jobs.jobs_history (run_id)
  where run_id <> id;

-- jobs._run_stands: whether a job row of the run is left, live or finished: the row whose id is
-- the run's (a job enqueued without a run_id), or one continuing the run (the run_shared
-- indexes, their predicate spelled out so the planner can prove it). Index probes only.
-- Answers boolean. Raises nothing. Locks nothing.
create function jobs._run_stands(run_id uuid)
returns boolean
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  -- PL/pgSQL, one probe a statement: inlined into a caller's delete, the four tests became a
  -- hashed subplan that read every finished row once per call
  return exists (select 1 from jobs.jobs_live j where j.id = _run_stands.run_id and j.run_id = j.id)
      or exists (select 1
                   from jobs.jobs_live j
                  where j.run_id = _run_stands.run_id and j.run_id <> j.id)
      or exists (select 1
                   from jobs.jobs_history j
                  where j.id = _run_stands.run_id and j.run_id = j.id)
      or exists (select 1
                   from jobs.jobs_history j
                  where j.run_id = _run_stands.run_id and j.run_id <> j.id);
end;
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

-- jobs._drop_day: end one day partition of done rows that has outlived its window: drop it
-- with the steps of the runs it ends; or, while an unpublished outbox row names a job in it
-- (that job must stay), delete up to batch_size of its other rows instead. Waits at most 2 s for
-- the table's lock: a drop must not stall the acks behind a long reader (it is then left for
-- the next call). Answers how many jobs and steps went. Raises nothing. Locks the partition
-- and jobs.jobs_history_done for a drop; the rows it deletes otherwise (skip locked).
create function jobs._drop_day(
  partition_name text,
  batch_size integer,
  out dropped_jobs integer,
  out dropped_steps integer
)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_runs uuid[];
  v_count integer;
  v_awaited boolean;
  v_timeout text := current_setting('lock_timeout');
begin
  dropped_jobs := 0;
  dropped_steps := 0;
  execute format('select exists (select 1 from jobs.outbox o '
                 'where o.published_at is null '
                 'and exists (select 1 from jobs.%I p where p.id = o.id))', partition_name)
     into v_awaited;
  if v_awaited then
    execute format('with gone as ('
                   '  delete from jobs.%1$I p'
                   '   where p.ctid in (select q.ctid from jobs.%1$I q'
                   '                     where not jobs._outbox_awaits(q.id)'
                   '                     limit $1 for update skip locked)'
                   '  returning p.run_id) '
                   'select count(*)::integer, coalesce(array_agg(distinct g.run_id), ''{}'') '
                   '  from gone g', partition_name)
       into v_count, v_runs
      using batch_size;
  else
    execute format('select count(*)::integer, coalesce(array_agg(distinct p.run_id) filter ('
                   'where exists (select 1 from jobs.steps s where s.run_id = p.run_id)), '
                   '''{}'') from jobs.%I p', partition_name)
       into v_count, v_runs;
    begin
      perform set_config('lock_timeout', '2s', true);
      execute format('drop table jobs.%I', partition_name);
      perform set_config('lock_timeout', v_timeout, true);
    exception
      when lock_not_available then
        perform set_config('lock_timeout', v_timeout, true);
        return;
    end;
  end if;
  dropped_jobs := v_count;
  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select count(*) into dropped_steps from gone;
end;
$$;

-- jobs.purge: delete done jobs finished more than done_after ago (a day partition dropped whole
-- once the day's end is that old, at most one a call, and a batch of the default partition's
-- rows); failed, dead and cancelled jobs
-- finished more than ended_after ago (a batch); the steps of the runs whose last row went;
-- outbox rows published more than published_after ago; events past their expiry; and the
-- steps of the next batch_size runs of jobs.steps (from where the last call stopped) that have
-- no row left at all (the orphan sweep). Also removes, uncounted in the answer, a batch of the
-- starts a rate limit counted that are past their rule's window (jobs.limit_starts) and a batch
-- of webhook attempts recorded more than ended_after ago (jobs.webhook_attempts); and makes the
-- day partitions of the next days (jobs.prepare_history).
-- Never a live job (ready, delayed, running, suspended), never an unpublished outbox row, and
-- never a finished job that an unpublished outbox row of this database names (its relay
-- published it and stopped before marking the row: the job must stay to meet the next publish,
-- or it would run again).
-- Arguments: done_after (default 14 days), ended_after (90 days), published_after (7 days),
-- batch_size (1..10000, default 1000: at most that many rows of each window, outbox rows and
-- events a call, besides a dropped day). Answers (jobs, steps, outbox, events) deleted; call
-- again until all are 0.
-- Raises X_ARGUMENT_INVALID. Locks: see the file's head.
create function jobs.purge(
  done_after interval default interval '14 days',
  ended_after interval default interval '90 days',
  published_after interval default interval '7 days',
  batch_size integer default 1000
)
returns jobs.purge_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer := 0;
  v_rows integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
  v_day text;
  v_after uuid;
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.purge');
  perform jobs._check_interval('jobs.purge', 'done_after', purge.done_after, interval '0',
                               interval '100 years');
  perform jobs._check_interval('jobs.purge', 'ended_after', purge.ended_after, interval '0',
                               interval '100 years');
  perform jobs._check_interval('jobs.purge', 'published_after', purge.published_after, interval '0',
                               interval '100 years');
  if batch_size is null or batch_size < 1 or batch_size > 10000 then
    perform jobs._invalid('jobs.purge', 'batch_size', 'must be between 1 and 10000');
  end if;

  perform pg_advisory_xact_lock(hashtext('jobs.purge'));
  perform jobs.prepare_history();

  -- the oldest day partition whose whole day is past the window, by the day in its name
  for v_day in
    select c.relname
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'jobs.jobs_history_done'::regclass
       and c.relname ~ '^jobs_history_done_p[0-9]{8}$'
       and (to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp at time zone 'UTC')
             + interval '1 day' <= v_now - purge.done_after
     order by c.relname
  loop
    select d.dropped_jobs, d.dropped_steps
      into v_rows, v_steps
      from jobs._drop_day(v_day, purge.batch_size) d;
    v_jobs := v_jobs + v_rows;
    exit when v_rows > 0;
  end loop;

  -- each window in its own statement part, so each walks its own index oldest first, and each
  -- deletes from its own partition by id (a join to the ids let the planner hash a scan of
  -- every partition); the done rows read here are the default partition's (a day partition
  -- goes whole, above)
  with done as materialized (
    select j.id
      from jobs.jobs_history_done_default j
     where j.finished_at < v_now - purge.done_after
       and not jobs._outbox_awaits(j.id)
     order by j.finished_at
     limit purge.batch_size
       for update skip locked
  ),
  ended as materialized (
    select j.id
      from jobs.jobs_history_ended j
     where j.finished_at < v_now - purge.ended_after
       and not jobs._outbox_awaits(j.id)
     order by j.finished_at
     limit purge.batch_size
       for update skip locked
  ),
  removed_done as (
    delete from jobs.jobs_history_done_default j
     where j.id = any(array(select d.id from done d))
    returning j.run_id
  ),
  removed_ended as (
    delete from jobs.jobs_history_ended j
     where j.id = any(array(select e.id from ended e))
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_rows, v_runs
    from (select d.run_id from removed_done d
          union all
          select e.run_id from removed_ended e) r;
  v_jobs := v_jobs + v_rows;
  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select v_steps + count(*) into v_steps from gone;

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

  -- the starts a rate counts, past their rule's window: the claim prunes only the groups it
  -- looks at, so a tenant that stopped enqueuing would keep its rows for ever
  delete from jobs.limit_starts s
   where s.ctid = any(array(
           select x.ctid
             from jobs.limit_starts x
             join jobs.limit_rules r on r.id = x.rule_id
            where x.started_at <= v_now - r.per
            limit purge.batch_size));

  -- the webhook deliveries' attempts, kept as long as an ended job
  delete from jobs.webhook_attempts a
   where a.id in (
     select w.id
       from jobs.webhook_attempts w
      where w.at < v_now - purge.ended_after
      order by w.at, w.id
      limit purge.batch_size
        for update skip locked
   );

  -- the registrations of result waits that expired (their callers died before ending them)
  delete from jobs.result_waits w
   where w.id in (
     select x.id
       from jobs.result_waits x
      where x.expires_at <= v_now
      order by x.expires_at
      limit purge.batch_size
        for update skip locked
   );

  -- the orphan sweep: steps whose run has no row left (two purges that split a run under an
  -- older revision, a row deleted by hand). Each call examines the next batch_size runs of
  -- jobs.steps in key order from where the last one stopped, so it costs a bounded walk of the
  -- primary key and a few probes a run, and the whole table is swept over calls. A run whose
  -- row is enqueued meanwhile (a run_id naming it) starts with no stale steps to replay.
  select c.steps_after into v_after from jobs.purge_cursor c;
  select coalesce(array_agg(r.run_id order by r.run_id), '{}')
    into v_runs
    from (select distinct s.run_id
            from jobs.steps s
           where v_after is null or s.run_id > v_after
           order by s.run_id
           limit purge.batch_size) r;
  delete from jobs.steps s
   where s.run_id = any(array(select r from unnest(v_runs) r where not jobs._run_stands(r)));
  get diagnostics v_rows = row_count;
  v_steps := v_steps + v_rows;
  -- a short batch reached the end: the next call starts again from the first run
  update jobs.purge_cursor c
     set steps_after = case when cardinality(v_runs) < purge.batch_size then null
                            else v_runs[cardinality(v_runs)] end;

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$$;
