-- Revision 0006 up: the workers registry, the per-name counters (moved by the settling
-- statements of claim, ack and nack, which this revision replaces), progress, the job inspector
-- and the queue depth, and schema version 6. Frozen: never edit after release; a change ships
-- as a new revision.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 6
$$;

-- >>> sql/functions/140_workers.sql
-- 140_workers: the registry of live workers: who runs, where, on which queues, holding what.
--
-- Tables: jobs.workers (one row per worker process). Locks: the caller's own row; an announce
-- also deletes rows that expired. A row lives one TTL (the worker's visibility timeout) past its
-- last heartbeat, so a killed worker vanishes from the listing without anyone forgetting it.

create table jobs.workers (
  id text primary key,
  host text not null,
  pid integer not null,
  queues text[] not null,
  slots integer not null,
  -- at most 100 ids are kept (in_flight_count has the true number): a listing stays small
  in_flight uuid[] not null default '{}',
  in_flight_count integer not null default 0,
  started_at timestamptz not null,
  heartbeat_at timestamptz not null,
  expires_at timestamptz not null,
  draining_at timestamptz
);

-- jobs._check_worker: refuse a registry call missing its worker id or with a useless TTL.
-- Raises X_ARGUMENT_INVALID. Locks nothing. Introduced in revision 0006.
create function jobs._check_worker(function_name text, worker_id text, ttl interval)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be a non-empty worker id');
  end if;
  if ttl is null or ttl <= interval '0' then
    perform jobs._invalid(function_name, 'ttl', 'must be a positive interval');
  end if;
end;
$$;

-- jobs.worker_announce: register (or re-register) a worker as live for ttl.
-- Arguments: worker_id, host, pid, queues (non-empty), slots (at least 1), ttl (30 s: the
-- worker's visibility timeout). A re-announce keeps started_at and clears nothing else it
-- is not given. Also deletes every row that expired, so the table holds live workers and the
-- few that died since the last announce.
-- Raises X_ARGUMENT_INVALID. Locks the worker's row and the expired rows.
-- Introduced in revision 0006.
create function jobs.worker_announce(
  worker_id text,
  host text,
  pid integer,
  queues text[],
  slots integer,
  ttl interval default interval '30 seconds'
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_worker('jobs.worker_announce', worker_announce.worker_id,
                             worker_announce.ttl);
  if host is null or btrim(host) = '' then
    perform jobs._invalid('jobs.worker_announce', 'host', 'must be a non-empty host name');
  end if;
  if pid is null or pid < 0 then
    perform jobs._invalid('jobs.worker_announce', 'pid', 'must be a process id of at least 0');
  end if;
  if queues is null or cardinality(queues) = 0
     or exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid('jobs.worker_announce', 'queues',
                          'must be a non-empty array of non-empty queue names');
  end if;
  if slots is null or slots < 1 then
    perform jobs._invalid('jobs.worker_announce', 'slots', 'must be an integer of at least 1');
  end if;

  delete from jobs.workers w
   where w.expires_at <= v_now
     and w.id <> worker_announce.worker_id;

  insert into jobs.workers as w (id, host, pid, queues, slots, started_at, heartbeat_at,
                                 expires_at)
  values (worker_announce.worker_id, worker_announce.host, worker_announce.pid,
          worker_announce.queues, worker_announce.slots, v_now, v_now,
          v_now + worker_announce.ttl)
  on conflict (id) do update
     set host = excluded.host,
         pid = excluded.pid,
         queues = excluded.queues,
         slots = excluded.slots,
         heartbeat_at = excluded.heartbeat_at,
         expires_at = excluded.expires_at;
end;
$$;

-- jobs.worker_heartbeat: keep a worker's row live for another ttl and record what it holds.
-- Arguments: worker_id, in_flight (the job ids it runs; the first 100 are kept), ttl (30 s).
-- Answers false when the row is gone (expired and swept, or forgotten): announce again.
-- Raises X_ARGUMENT_INVALID. Locks the worker's row. Introduced in revision 0006.
create function jobs.worker_heartbeat(
  worker_id text,
  in_flight uuid[] default '{}',
  ttl interval default interval '30 seconds'
)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_worker('jobs.worker_heartbeat', worker_heartbeat.worker_id,
                             worker_heartbeat.ttl);
  if in_flight is null or array_position(in_flight, null) is not null then
    perform jobs._invalid('jobs.worker_heartbeat', 'in_flight',
                          'must be an array of job ids (empty for none)');
  end if;

  update jobs.workers w
     set in_flight = worker_heartbeat.in_flight[1:100],
         in_flight_count = cardinality(worker_heartbeat.in_flight),
         heartbeat_at = v_now,
         expires_at = v_now + worker_heartbeat.ttl
   where w.id = worker_heartbeat.worker_id;
  return found;
end;
$$;

-- jobs.worker_draining: mark a worker as draining (it claims nothing more and hands its work
-- back). The first mark's time is kept.
-- Arguments: worker_id. Answers false when the worker has no row.
-- Raises X_ARGUMENT_INVALID. Locks the worker's row. Introduced in revision 0006.
create function jobs.worker_draining(worker_id text)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._check_worker('jobs.worker_draining', worker_draining.worker_id,
                             interval '1 second');
  update jobs.workers w
     set draining_at = coalesce(w.draining_at, jobs._now())
   where w.id = worker_draining.worker_id;
  return found;
end;
$$;

-- jobs.worker_forget: delete a worker's row, as a worker does when it stops.
-- Arguments: worker_id. Answers whether a row was deleted.
-- Raises X_ARGUMENT_INVALID. Locks the worker's row. Introduced in revision 0006.
create function jobs.worker_forget(worker_id text)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._check_worker('jobs.worker_forget', worker_forget.worker_id, interval '1 second');
  delete from jobs.workers w
   where w.id = worker_forget.worker_id;
  return found;
end;
$$;

-- jobs.workers_live: every worker whose row has not expired, oldest first.
-- Answers one row per worker (the registry's columns) ordered by started_at, id. Locks nothing.
-- Introduced in revision 0006.
create function jobs.workers_live()
returns table (id text, host text, pid integer, queues text[], slots integer, in_flight uuid[],
               in_flight_count integer, started_at timestamptz, heartbeat_at timestamptz,
               expires_at timestamptz, draining_at timestamptz)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select w.id, w.host, w.pid, w.queues, w.slots, w.in_flight, w.in_flight_count, w.started_at,
         w.heartbeat_at, w.expires_at, w.draining_at
    from jobs.workers w
   where w.expires_at > jobs._now()
   order by w.started_at, w.id
$$;

-- >>> sql/functions/150_counters.sql
-- 150_counters: per job name, how many attempts ended done, retried, failed or dead, and how
-- long they ran, in time buckets.
--
-- Tables: jobs.counter_buckets. The settling statements (ack, nack, the claim's burial) add to
-- the current minute's bucket through jobs._count_settled, in the statement that moves the row,
-- so a count never disagrees with the rows. Each backend writes one of 64 shards of a minute
-- (its pid modulo 64), so concurrent workers rarely meet on one row, and only briefly when they
-- do. jobs.rollup_counters folds shards and tiers: 1-minute buckets for 24 hours, 5-minute for
-- 7 days, 1-hour for 30 days, then gone. Every
-- settled attempt sits in exactly one row at any time, so readers sum across tiers.

create table jobs.counter_buckets (
  tier text not null,
  bucket timestamptz not null,
  name text not null,
  shard smallint not null default 0,
  done bigint not null default 0,
  retried bigint not null default 0,
  failed bigint not null default 0,
  dead bigint not null default 0,
  duration_ms bigint not null default 0,
  primary key (tier, bucket, name, shard),
  constraint counter_buckets_tier_check check (tier in ('1m', '5m', '1h'))
);

-- readers ask by name over a time range
create index counter_buckets_name_idx
  on jobs.counter_buckets (name, bucket);

-- jobs._bucket: the start of the bucket of width `width` holding `at`, aligned on the Unix epoch
-- in UTC whatever the session's time zone. Introduced in revision 0006.
create function jobs._bucket(width interval, at timestamptz)
returns timestamptz
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select date_bin(width, at, timestamptz '1970-01-01 00:00:00+00')
$$;

-- jobs._count_settled: add settled attempts to the current minute's counters.
-- Arguments: settled_at (the settle's clock), and parallel arrays of job names, outcomes
-- ('done', 'retried', 'failed', 'dead'; NULL adds nothing) and the attempts' claimed_at (their
-- duration runs from it to settled_at). NULL arrays add nothing.
-- Answers the number of counter rows written. Locks this backend's shard rows of the minute.
-- Introduced in revision 0006.
create function jobs._count_settled(
  settled_at timestamptz,
  names text[],
  outcomes text[],
  claimed_ats timestamptz[]
)
returns integer
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  with tallied as (
    select s.name,
           count(*) filter (where s.outcome = 'done') as done,
           count(*) filter (where s.outcome = 'retried') as retried,
           count(*) filter (where s.outcome = 'failed') as failed,
           count(*) filter (where s.outcome = 'dead') as dead,
           coalesce(sum(greatest(
             (extract(epoch from (settled_at - s.claimed_at)) * 1000)::bigint, 0)), 0)
             as duration_ms
      from unnest(names, outcomes, claimed_ats) as s(name, outcome, claimed_at)
     where s.outcome in ('done', 'retried', 'failed', 'dead')
     group by s.name
  ),
  written as (
    insert into jobs.counter_buckets as c
           (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
    select '1m', jobs._bucket(interval '1 minute', settled_at), t.name,
           (pg_backend_pid() % 64)::smallint, t.done, t.retried, t.failed, t.dead,
           t.duration_ms
      from tallied t
     -- one lock order for every statement: two backends sharing a shard never deadlock
     order by t.name
    on conflict (tier, bucket, name, shard) do update
       set done = c.done + excluded.done,
           retried = c.retried + excluded.retried,
           failed = c.failed + excluded.failed,
           dead = c.dead + excluded.dead,
           duration_ms = c.duration_ms + excluded.duration_ms
    returning 1
  )
  select count(*)::integer from written
$$;

-- jobs._fold_counters: move the rows of `from_tier` older than `older_than` into `to_tier`
-- buckets of `to_width` (shard 0), adding to what is there; to_tier NULL deletes them.
-- Moving deletes, so a second call finds nothing to move: the fold is idempotent.
-- Answers the number of rows moved. Locks the moved rows and their targets.
-- Introduced in revision 0006.
create function jobs._fold_counters(
  from_tier text,
  older_than timestamptz,
  to_tier text,
  to_width interval,
  only_shards boolean default false
)
returns bigint
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  with moved as (
    delete from jobs.counter_buckets c
     where c.tier = from_tier
       and c.bucket < older_than
       and (not only_shards or c.shard <> 0)
    returning c.bucket, c.name, c.done, c.retried, c.failed, c.dead, c.duration_ms
  ),
  folded as (
    insert into jobs.counter_buckets as c
           (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
    select to_tier, jobs._bucket(to_width, m.bucket), m.name, 0, sum(m.done), sum(m.retried),
           sum(m.failed), sum(m.dead), sum(m.duration_ms)
      from moved m
     where to_tier is not null
     group by jobs._bucket(to_width, m.bucket), m.name
    on conflict (tier, bucket, name, shard) do update
       set done = c.done + excluded.done,
           retried = c.retried + excluded.retried,
           failed = c.failed + excluded.failed,
           dead = c.dead + excluded.dead,
           duration_ms = c.duration_ms + excluded.duration_ms
    returning 1
  )
  select count(*) from moved
$$;

-- jobs.rollup_counters: fold the counter tiers. Past minutes' shards become one row per name;
-- 1-minute buckets older than 24 hours fold into 5-minute ones, 5-minute older than 7 days into
-- 1-hour ones, and 1-hour buckets older than 30 days are deleted. The scheduler leader runs it
-- once a minute; running it again, or from two sessions at once, changes no total.
-- Answers (tier, moved): the rows each step moved out of that tier. Locks the moved rows.
-- Introduced in revision 0006.
create function jobs.rollup_counters()
returns table (tier text, moved bigint)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  -- a past minute takes no more settles: its shards can become one row
  tier := '1m shards';
  moved := jobs._fold_counters('1m', jobs._bucket(interval '1 minute', v_now), '1m',
                               interval '1 minute', true);
  return next;
  tier := '1m';
  moved := jobs._fold_counters('1m', v_now - interval '24 hours', '5m', interval '5 minutes');
  return next;
  tier := '5m';
  moved := jobs._fold_counters('5m', v_now - interval '7 days', '1h', interval '1 hour');
  return next;
  tier := '1h';
  moved := jobs._fold_counters('1h', v_now - interval '30 days', null, null);
  return next;
end;
$$;

create type jobs.counter_row as (
  name text,
  tier text,
  bucket timestamptz,
  done bigint,
  retried bigint,
  failed bigint,
  dead bigint,
  duration_ms bigint
);

-- jobs.counters: one job name's counter history since `since`, every tier, oldest first.
-- Arguments: name (NULL: every name), since (NULL: an hour ago).
-- Answers one jobs.counter_row per (name, tier, bucket), shards summed. Locks nothing.
-- Introduced in revision 0006.
create function jobs.counters(name text default null, since timestamptz default null)
returns setof jobs.counter_row
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select c.name, c.tier, c.bucket, sum(c.done)::bigint, sum(c.retried)::bigint,
         sum(c.failed)::bigint, sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where (counters.name is null or c.name = counters.name)
     and c.bucket >= coalesce(counters.since, jobs._now() - interval '1 hour')
   group by c.name, c.tier, c.bucket
   order by c.bucket, c.name, c.tier
$$;

-- jobs.counter_totals: per job name, the totals since `since` (NULL: an hour ago).
-- A bucket is counted whole when it starts at or after `since`.
-- Answers (name, done, retried, failed, dead, duration_ms) ordered by name. Locks nothing.
-- Introduced in revision 0006.
create function jobs.counter_totals(since timestamptz default null)
returns table (name text, done bigint, retried bigint, failed bigint, dead bigint,
               duration_ms bigint)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select c.name, sum(c.done)::bigint, sum(c.retried)::bigint, sum(c.failed)::bigint,
         sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where c.bucket >= coalesce(counter_totals.since, jobs._now() - interval '1 hour')
   group by c.name
   order by c.name
$$;

-- >>> sql/functions/160_progress.sql
-- 160_progress: how far a running attempt has got, as its body reports it.
--
-- Tables: jobs.jobs (update of progress). Locks: the reported row. Fenced like a heartbeat, so a
-- body whose lease lapsed cannot report on the attempt that replaced it. The worker throttles the
-- calls (at most one a second per run, plus the last before the settle).

-- jobs.progress_v1: record a running attempt's progress.
-- Arguments: id, worker_id, claim (the attempt's fence), done (at least 0), total (NULL when
-- unknown; else at least 0), both finite, note (NULL, at most 1,000 characters).
-- Writes progress = {"done", "total", "note", "at"} on the row. Answers whether it landed.
-- Raises X_ARGUMENT_INVALID. Locks the row. Introduced in revision 0006.
create function jobs.progress_v1(
  id uuid,
  worker_id text,
  claim bigint,
  done numeric,
  total numeric default null,
  note text default null
)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_fence('jobs.progress_v1', progress_v1.id, progress_v1.worker_id,
                            progress_v1.claim);
  -- numeric has NaN and Infinity, which compare above every number: refuse them by name
  if done is null or done < 0 or done in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'done', 'must be a finite number of at least 0');
  end if;
  if total < 0 or total in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'total',
                          'must be NULL or a finite number of at least 0');
  end if;
  if length(note) > 1000 then
    perform jobs._invalid('jobs.progress_v1', 'note', 'must be at most 1,000 characters');
  end if;

  update jobs.jobs j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$$;

-- >>> sql/functions/170_inspect.sql
-- 170_inspect: one job in full, and the queue depth an autoscaler scales on.
--
-- Tables: jobs.jobs, jobs.steps, jobs.queue_pauses, jobs.workers (read). Locks nothing.

-- jobs.inspect_job: everything stored about one job, as one JSON document.
-- Arguments: id. Answers {"job": the row (every column, input and progress included),
-- "steps": the run's step trace in the order the steps started, each {name, status, attempts,
-- started_at, updated_at, finished_at, wake_at, duration_ms (NULL until it finished),
-- output_bytes, error}, "queue_paused": whether its queue is paused}.
-- Raises X_JOB_NOT_FOUND. Locks nothing. Introduced in revision 0006.
create function jobs.inspect_job(id uuid)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job jobs.jobs;
begin
  if id is null then
    perform jobs._invalid('jobs.inspect_job', 'id', 'must be a job id');
  end if;
  select j.* into v_job from jobs.jobs j where j.id = inspect_job.id;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND',
                        format('jobs.inspect_job: no job has id %s', inspect_job.id),
                        jsonb_build_object('function', 'jobs.inspect_job', 'id', inspect_job.id));
  end if;

  return jsonb_build_object(
    'job', to_jsonb(v_job),
    'steps', coalesce((
      select jsonb_agg(jsonb_build_object(
               'name', s.name,
               'status', s.status,
               'attempts', s.attempts,
               'started_at', s.started_at,
               'updated_at', s.updated_at,
               'finished_at', s.finished_at,
               'wake_at', s.wake_at,
               'duration_ms', (extract(epoch from (s.finished_at - s.started_at)) * 1000)::bigint,
               'output_bytes', octet_length(s.output::text),
               'error', s.error)
             order by s.started_at, s.name)
        from jobs.steps s
       where s.run_id = v_job.run_id), '[]'::jsonb),
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue));
end;
$$;

create type jobs.queue_depth_row as (
  queue text,
  running bigint,
  due bigint,
  draining_held bigint,
  depth bigint
);

-- jobs.queue_depth: the number an autoscaler scales workers on, per queue: the jobs running
-- plus the jobs due now (ready, delayed or suspended with run_at <= now), minus the running jobs
-- that draining workers hold (they come back as due work once handed back, and are not new
-- demand). A paused queue is left out: more workers would not drain it.
-- Arguments: queues (NULL: every queue holding live work). Answers one jobs.queue_depth_row per
-- queue with live work, ordered by queue. Locks nothing. Introduced in revision 0006.
create function jobs.queue_depth(queues text[] default null)
returns setof jobs.queue_depth_row
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > jobs._now()) as held_by_draining
      from jobs.jobs j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running' and l.run_at <= jobs._now()) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$$;

-- >>> sql/functions/180_storage.sql
-- 180_storage: how Postgres keeps the hot table healthy.
--
-- Tables: jobs.jobs (storage parameters only). Every job is inserted, then updated at least
-- twice (claimed, settled), and no update can be HOT (each moves an indexed column or a partial
-- index's predicate), so a busy queue leaves two dead tuples per job. The defaults wait for 20 %
-- of the table to be dead before vacuuming; here a vacuum starts after 1,000 dead tuples plus
-- 2 % of the table, and runs without cost delays, so the claim's index scans stay short.
-- Introduced in revision 0006.

alter table jobs.jobs set (
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_insert_scale_factor = 0.02,
  autovacuum_analyze_scale_factor = 0.05,
  autovacuum_vacuum_cost_delay = 0
);

-- >>> sql/functions/030_claim.sql: claim_v2
create function jobs.claim_v2(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}'
)
returns table (
  id uuid,
  run_id uuid,
  name text,
  queue text,
  input jsonb,
  tenant_id text,
  state text,
  attempt integer,
  max_attempts integer,
  claim bigint,
  priority integer,
  run_at timestamptz,
  created_at timestamptz,
  lease_expires_at timestamptz,
  last_error text,
  traceparent text,
  enqueued_by text,
  has_steps boolean
)
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
         c.max_attempts, c.claim, c.priority, c.run_at, c.created_at, c.lease_expires_at,
         c.last_error, c.traceparent, c.enqueued_by,
         -- a run past its first attempt always reads its history: a body whose lease lapsed
         -- may have written a step after this statement's snapshot was taken
         c.attempt > 1 or exists (select 1 from jobs.steps s where s.run_id = c.run_id)
    from jobs.claim_v1(queues, worker_id, batch_size, visibility, drop_exhausted) c
$$;

-- >>> the settling statements, now counting

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

create or replace function jobs.claim_v1(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}'
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid('jobs.claim_v1', 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.claim_v1', 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.claim_v1', 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

  -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
  return query
    with lapsed as materialized (
      select j.id
        from jobs.jobs j
       where j.state = 'running'
         and j.lease_expires_at <= v_now
         and j.queue = any(v_queues)
         and j.attempt >= j.max_attempts
       order by j.lease_expires_at, j.id
       limit claim_v1.batch_size
         for update skip locked
    ),
    buried as (
      update jobs.jobs j
         set state = case when j.name = any(drop_exhausted) then 'failed' else 'dead' end,
             last_error = 'LEASE_LAPSED_FINAL_ATTEMPT',
             last_error_code = null,
             last_error_stack = null,
             lease_expires_at = null,
             finished_at = v_now,
             updated_at = v_now
        from lapsed
       where j.id = lapsed.id
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by, j.claimed_at
    ),
    -- a burial ends the row, so it counts where a settle would
    counted as (
      select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                 array_agg(b.claimed_at))
        from buried b
    )
    select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
           b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
           b.last_error, b.traceparent, b.enqueued_by
      from buried b
     cross join counted;

  -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
  return query
    with lapsed as materialized (
      select j.id
        from jobs.jobs j
       where j.state = 'running'
         and j.lease_expires_at <= v_now
         and j.queue = any(v_queues)
         and j.attempt < j.max_attempts
       order by j.lease_expires_at, j.id
       limit claim_v1.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.jobs j
         set claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
        from lapsed
       where j.id = lapsed.id
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by
      from claimed c
     order by c.priority, c.run_at, c.id;
  get diagnostics v_taken = row_count;

  if v_taken >= batch_size then
    return;
  end if;

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order, so the scan stops after the rows it
  -- needs: `queue = any(...)` would read and sort every waiting row of every queue instead.
  return query
    with due as materialized (
      select w.id
        from unnest(v_queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs j
           where j.queue = q.queue
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit claim_v1.batch_size - v_taken
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit claim_v1.batch_size - v_taken
    ),
    claimed as (
      update jobs.jobs j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
        from due
       where j.id = due.id
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;

create or replace function jobs.ack_v1(id uuid, worker_id text, claim bigint)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with settled as (
    update jobs.jobs j
       set state = 'done',
           lease_expires_at = null,
           finished_at = v_now,
           updated_at = v_now
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j.name, j.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$$;

create or replace function jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
returns setof jobs.settle_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.ack_many_v1', 'worker_id', 'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    settled as (
      update jobs.jobs j
         set state = 'done',
             lease_expires_at = null,
             finished_at = v_now,
             updated_at = v_now
        from requested r
       where j.id = r.id
         and j.state = 'running'
         and j.claimed_by = ack_many_v1.worker_id
         and j.claims = r.claim
      returning j.id, j.claims, j.name, j.claimed_at
    ),
    counted as (
      select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                                 array_agg(s.claimed_at)) as rows
        from settled s
    )
    select r.id, s.id is not null
      from requested r
      cross join counted
      left join settled s on s.id = r.id and s.claims = r.claim
     order by r.ord;
end;
$$;

create or replace function jobs.nack_v1(
  id uuid,
  worker_id text,
  claim bigint,
  next_state text default 'ready',
  delay interval default interval '0',
  counts_as_attempt boolean default true,
  error text default null,
  error_code text default null,
  error_stack text default null
)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  perform jobs._check_fence('jobs.nack_v1', nack_v1.id, nack_v1.worker_id, nack_v1.claim);
  if next_state is null or next_state not in ('ready', 'suspended', 'dead', 'failed') then
    perform jobs._invalid('jobs.nack_v1', 'next_state',
                          'must be one of ''ready'', ''suspended'', ''dead'', ''failed''');
  end if;
  if delay is null or delay < interval '0' or delay > interval '100 years' then
    perform jobs._invalid('jobs.nack_v1', 'delay', 'must be an interval from 0 to 100 years');
  end if;
  if counts_as_attempt is null then
    perform jobs._invalid('jobs.nack_v1', 'counts_as_attempt', 'must be true or false');
  end if;

  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  with settled as (
    update jobs.jobs j
       set state = case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                             and j.attempt >= j.max_attempts then 'dead'
                        else nack_v1.next_state end,
           run_at = case when nack_v1.next_state in ('ready', 'suspended')
                         then v_now + nack_v1.delay
                         else j.run_at end,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           finished_at = case when nack_v1.next_state in ('dead', 'failed')
                                or (nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                                    and j.attempt >= j.max_attempts)
                              then v_now end,
           updated_at = v_now
     where j.id = nack_v1.id
       and j.state = 'running'
       and j.claimed_by = nack_v1.worker_id
       and j.claims = nack_v1.claim
    returning j.name, j.state, j.claimed_at
  ),
  -- what the attempt adds to the counters: a shed, a park and an interrupted attempt add nothing
  outcome as (
    select s.name, s.claimed_at,
           case when s.state = 'dead' then 'dead'
                when s.state = 'failed' then 'failed'
                when s.state = 'ready' and nack_v1.counts_as_attempt then 'retried'
           end as counted
      from settled s
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(o.name), array_agg(o.counted),
                               array_agg(o.claimed_at))
      from outcome o
     where o.counted is not null
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$$;
