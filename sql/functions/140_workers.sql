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
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_worker(function_name text, worker_id text, ttl interval)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._check_label(function_name, 'worker_id', worker_id);
  if ttl is null or ttl <= interval '0' or ttl > interval '1 day' then
    perform jobs._invalid(function_name, 'ttl', 'must be a positive interval of at most 1 day');
  end if;
end;
$$;

-- jobs.worker_announce: register (or re-register) a worker as live for ttl.
-- Arguments: worker_id, host, pid, queues (non-empty), slots (at least 1), ttl (30 s: the
-- worker's visibility timeout). A re-announce keeps started_at and clears nothing else it
-- is not given. Also deletes every row that expired, so the table holds live workers and the
-- few that died since the last announce.
-- Raises X_ARGUMENT_INVALID. Locks the worker's row and the expired rows.
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
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.worker_announce');
  perform jobs._check_worker('jobs.worker_announce', worker_announce.worker_id,
                             worker_announce.ttl);
  perform jobs._check_label('jobs.worker_announce', 'host', worker_announce.host);
  if pid is null or pid < 0 then
    perform jobs._invalid('jobs.worker_announce', 'pid', 'must be a process id of at least 0');
  end if;
  perform jobs._check_labels('jobs.worker_announce', 'queues', worker_announce.queues);
  if cardinality(queues) = 0 then
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
create function jobs.worker_heartbeat(
  worker_id text,
  in_flight uuid[] default '{}',
  ttl interval default interval '30 seconds'
)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.worker_heartbeat');
  perform jobs._check_worker('jobs.worker_heartbeat', worker_heartbeat.worker_id,
                             worker_heartbeat.ttl);
  if in_flight is null or array_position(in_flight, null) is not null
     or coalesce(array_ndims(in_flight), 1) <> 1 then
    perform jobs._invalid('jobs.worker_heartbeat', 'in_flight',
                          'must be a one-dimensional array of job ids (empty for none)');
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
create function jobs.worker_draining(worker_id text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.worker_draining');
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
create function jobs.worker_forget(worker_id text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.worker_forget');
  perform jobs._check_worker('jobs.worker_forget', worker_forget.worker_id, interval '1 second');
  delete from jobs.workers w
   where w.id = worker_forget.worker_id;
  return found;
end;
$$;

-- jobs.workers_live: every worker whose row has not expired, oldest first.
-- Answers one row per worker (the registry's columns) ordered by started_at, id. Locks nothing.
create function jobs.workers_live()
returns table (id text, host text, pid integer, queues text[], slots integer, in_flight uuid[],
               in_flight_count integer, started_at timestamptz, heartbeat_at timestamptz,
               expires_at timestamptz, draining_at timestamptz)
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.workers_live');
  select w.id, w.host, w.pid, w.queues, w.slots, w.in_flight, w.in_flight_count, w.started_at,
         w.heartbeat_at, w.expires_at, w.draining_at
    from jobs.workers w
   where w.expires_at > jobs._now()
   order by w.started_at, w.id
$$;
