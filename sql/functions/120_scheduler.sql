-- 120_scheduler: cron tasks that fire exactly once per occurrence, across restarts and replicas.
--
-- A task's watermark is the last occurrence the scheduler has passed (fired, armed or skipped).
-- jobs.scheduler_fire moves it, enqueues the occurrence's jobs and records the fire in one call:
-- the task row is locked and the watermark is the fence, so a second fire of the same
-- occurrence, by any node, enqueues nothing. Leadership is a lease row with an expiry (never a
-- session advisory lock, which a connection pool silently breaks).
--
-- Tables: jobs.scheduler_tasks, jobs.scheduler_leases. Lock order: the task row, then the job
-- rows the fire inserts.

create table jobs.scheduler_tasks (
  task text primary key,
  watermark timestamptz not null,
  last_fired_occurrence timestamptz,
  last_fired_at timestamptz,
  paused_at timestamptz
);

create table jobs.scheduler_leases (
  name text primary key,
  holder text not null,
  expires_at timestamptz not null
);

create type jobs.task_state as (
  task text,
  watermark timestamptz,
  last_fired_occurrence timestamptz,
  last_fired_at timestamptz,
  paused boolean
);

-- jobs.scheduler_arm: register a task, or read it back. A new task's watermark is `watermark`
-- (the scheduler passes now, so a new task does not catch up on its past); an existing task
-- keeps its own, so a restarted scheduler catches up on what it missed.
-- Answers the task's jobs.task_state. Raises X_ARGUMENT_INVALID.
create function jobs.scheduler_arm(task text, watermark timestamptz)
returns jobs.task_state
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_state jobs.task_state;
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_arm');
  perform jobs._check_label('jobs.scheduler_arm', 'task', scheduler_arm.task);
  if watermark is null or not isfinite(watermark) then
    perform jobs._invalid('jobs.scheduler_arm', 'watermark', 'must be a finite instant');
  end if;
  insert into jobs.scheduler_tasks as t (task, watermark)
  values (scheduler_arm.task, scheduler_arm.watermark)
  on conflict on constraint scheduler_tasks_pkey do nothing;
  select t.task, t.watermark, t.last_fired_occurrence, t.last_fired_at, t.paused_at is not null
    into v_state
    from jobs.scheduler_tasks t
   where t.task = scheduler_arm.task;
  return v_state;
end;
$$;

-- jobs.scheduler_fire: fire one occurrence of a task: move its watermark to `watermark` (the
-- occurrence itself by default; run-once passes the latest missed occurrence, so the dropped
-- ones are passed in the same call), enqueue `requests` (a jobs.enqueue_many array) with
-- occurrence-scoped idempotency keys ('<task>@<occurrence>:<key>', distinct from a manual
-- fire's), record the fire, and wake each queue it filled once.
-- Fenced: only when the watermark has not passed the occurrence and the task is not paused. A
-- second fire of the same occurrence, a fire racing it on another node, or a fire of a paused
-- task enqueues nothing. A paused task keeps its watermark: on resume the occurrences it missed
-- are owed, and the task's catch-up policy decides which fire, as after an outage.
-- Answers the jobs' (id, run_id, deduped), in request order; nothing when fenced or paused.
-- Raises X_ARGUMENT_INVALID and what jobs.enqueue_many raises. Locks: the task row, then the
-- jobs it inserts.
create function jobs.scheduler_fire(
  task text,
  occurrence timestamptz,
  requests jsonb default '[]',
  watermark timestamptz default null
)
returns setof jobs.enqueue_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_requests jsonb;
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_fire');
  perform jobs._check_label('jobs.scheduler_fire', 'task', scheduler_fire.task);
  if occurrence is null or not isfinite(occurrence) then
    perform jobs._invalid('jobs.scheduler_fire', 'occurrence', 'must be a finite instant');
  end if;
  if scheduler_fire.requests is null or jsonb_typeof(scheduler_fire.requests) <> 'array' then
    perform jobs._invalid('jobs.scheduler_fire', 'requests', 'must be a JSON array of job requests');
  end if;
  if scheduler_fire.watermark is not null and scheduler_fire.watermark < occurrence then
    perform jobs._invalid('jobs.scheduler_fire', 'watermark', 'must not be before the occurrence');
  end if;

  -- the fence: the task row is locked and moved only if its watermark is before the occurrence
  update jobs.scheduler_tasks t
     set watermark = coalesce(scheduler_fire.watermark, scheduler_fire.occurrence),
         last_fired_occurrence = scheduler_fire.occurrence,
         last_fired_at = v_now
   where t.task = scheduler_fire.task
     and t.watermark < scheduler_fire.occurrence
     and t.paused_at is null;
  if not found then
    return;
  end if;

  -- occurrence-scoped keys: a scheduled fire never collides with a manual enqueue of the job
  -- a request without a key is left as it is, so enqueue_many refuses it (X_IDEMPOTENCY_REQUIRED)
  select coalesce(jsonb_agg(
           case
             when nullif(btrim(r.item ->> 'idempotency_key'), '') is null then r.item
             else r.item || jsonb_build_object(
               'idempotency_key',
               -- over the 200 characters of a key, the scoped key goes as its digest: written
               -- out it would be refused at every tick, and the task would never fire again
               (select case when length(k.scoped) > 200
                            then 'sha256:' || encode(sha256(convert_to(k.scoped, 'UTF8')), 'hex')
                            else k.scoped end
                  from (select format('%s@%s:%s', scheduler_fire.task,
                                      to_char(scheduler_fire.occurrence at time zone 'UTC',
                                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                                      r.item ->> 'idempotency_key') as scoped) k))
           end
           order by r.ord), '[]')
    into v_requests
    from jsonb_array_elements(scheduler_fire.requests) with ordinality as r(item, ord);

  return query
    select e.id, e.run_id, e.deduped
      from jobs.enqueue_many(requests => v_requests) e;
end;
$$;

-- jobs.scheduler_skip: move a task's watermark forward without firing (arming past an outage
-- under the skip policy). Never moves it back, nor a paused task's (jobs.scheduler_fire).
-- Answers whether it moved. Raises X_ARGUMENT_INVALID. Locks the task row.
create function jobs.scheduler_skip(task text, watermark timestamptz)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_skip');
  if watermark is null or not isfinite(watermark) then
    perform jobs._invalid('jobs.scheduler_skip', 'watermark', 'must be a finite instant');
  end if;
  update jobs.scheduler_tasks t
     set watermark = scheduler_skip.watermark
   where t.task = scheduler_skip.task
     and t.watermark < scheduler_skip.watermark
     and t.paused_at is null;
  return found;
end;
$$;

-- jobs.scheduler_lead: take or renew the scheduler lease for `holder`: granted when nobody
-- holds it, the holder's lease lapsed, or `holder` already holds it. Renewal and acquisition
-- are the same call, made every renewal interval by leader and standbys alike.
-- Arguments: holder, ttl (30 s), name ('scheduler').
-- Answers whether `holder` leads until now + ttl. Raises X_ARGUMENT_INVALID.
-- Locks the lease row.
create function jobs.scheduler_lead(
  holder text,
  ttl interval default interval '30 seconds',
  name text default 'scheduler'
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
  perform jobs._require(array['worker'], 'jobs.scheduler_lead');
  perform jobs._check_label('jobs.scheduler_lead', 'holder', scheduler_lead.holder);
  perform jobs._check_label('jobs.scheduler_lead', 'name', scheduler_lead.name);
  if ttl is null or ttl <= interval '0' or ttl > interval '1 hour' then
    perform jobs._invalid('jobs.scheduler_lead', 'ttl', 'must be a positive interval of at most an hour');
  end if;
  insert into jobs.scheduler_leases as l (name, holder, expires_at)
  values (scheduler_lead.name, scheduler_lead.holder, v_now + scheduler_lead.ttl)
  on conflict on constraint scheduler_leases_pkey do update
     set holder = excluded.holder,
         expires_at = excluded.expires_at
   where l.holder = excluded.holder
      or l.expires_at <= v_now;
  return found;
end;
$$;

-- jobs.scheduler_resign: give the lease up at once, if `holder` holds it (a clean stop; an
-- abandoned round never calls it, so the lease runs out on its own).
-- Answers whether it was held.
create function jobs.scheduler_resign(holder text, name text default 'scheduler')
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_resign');
  delete from jobs.scheduler_leases l
   where l.name = scheduler_resign.name
     and l.holder = scheduler_resign.holder;
  return found;
end;
$$;

-- jobs.pause_task / jobs.resume_task: a paused task fires nothing and keeps its watermark; on
-- resume, what it missed is owed under its catch-up policy (jobs.scheduler_fire).
-- Answer whether the call changed anything. Raise X_ARGUMENT_INVALID for an unknown task.
create function jobs.pause_task(task text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['operator'], 'jobs.pause_task');
  update jobs.scheduler_tasks t
     set paused_at = jobs._now()
   where t.task = pause_task.task
     and t.paused_at is null;
  if not found and not exists (select 1 from jobs.scheduler_tasks t where t.task = pause_task.task) then
    perform jobs._invalid('jobs.pause_task', 'task', 'names no task a scheduler has armed');
  end if;
  return found;
end;
$$;

create function jobs.resume_task(task text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['operator'], 'jobs.resume_task');
  update jobs.scheduler_tasks t
     set paused_at = null
   where t.task = resume_task.task
     and t.paused_at is not null;
  if not found and not exists (select 1 from jobs.scheduler_tasks t where t.task = resume_task.task) then
    perform jobs._invalid('jobs.resume_task', 'task', 'names no task a scheduler has armed');
  end if;
  return found;
end;
$$;

-- jobs.task_fires: every task's watermark, last fire and pause state (at most 1,000 tasks).
-- Answers jobs.task_state rows ordered by task. Locks nothing.
create function jobs.task_fires()
returns setof jobs.task_state
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.task_fires');
  select t.task, t.watermark, t.last_fired_occurrence, t.last_fired_at, t.paused_at is not null
    from jobs.scheduler_tasks t
   order by t.task
   limit 1000
$$;
