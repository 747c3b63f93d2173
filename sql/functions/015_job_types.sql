-- 015_job_types: the job catalogue, what each deploy declared about a job name, so an enqueue
-- from psql, Go or Node gets the declared queue, attempts and priority, and a tenant-scoped job
-- refuses a call without a tenant, exactly as the Python call does; and its concurrency limit,
-- which the claim enforces for every client.
--
-- Tables: jobs.declarations (one row per declared name; read by jobs.enqueue, jobs.enqueue_many,
-- the publish of an outbox row and the claim, written by jobs.declare_job), jobs.jobs_live (its
-- capped flag, kept in step with the declarations). A name with no row enqueues with the
-- built-in defaults and no limit. Locks: jobs.declare_job takes the name's row (or its insert
-- slot), then its live job rows when its capped flag changes.

create table jobs.declarations (
  name text primary key,
  queue text not null,
  max_attempts integer not null check (max_attempts >= 1),
  priority integer not null,
  tenant_required boolean not null,
  -- shown, not enforced by the SQL: the retry schedule, the timeouts, the input's JSON schema
  retry jsonb not null default '{}',
  timeout interval,
  input_schema jsonb not null default '{}',
  declared_by text not null,
  declared_at timestamptz not null,
  -- the last time a deploy declared this name the same way (a name no deploy has declared for a
  -- while may be gone from the code)
  seen_at timestamptz not null,
  -- at most this many of its attempts running across the fleet, per concurrency_key when keyed
  concurrency integer check (concurrency >= 1),
  concurrency_keyed boolean not null default false,
  check (concurrency is not null or not concurrency_keyed),
  -- a keyed limit's busy rule: 'wait' holds a run back while its key is busy, 'fail' settles it
  -- failed (X_JOB_KEY_BUSY) when another run holds the key
  when_busy text not null default 'wait' check (when_busy in ('wait', 'fail')),
  check (when_busy = 'wait' or concurrency_keyed)
);

create type jobs.job_type as (
  name text,
  queue text,
  max_attempts integer,
  priority integer,
  tenant_required boolean,
  retry jsonb,
  timeout interval,
  input_schema jsonb,
  declared_by text,
  declared_at timestamptz,
  seen_at timestamptz,
  concurrency integer,
  concurrency_keyed boolean,
  when_busy text
);

create type jobs.declare_result as (
  name text,
  -- 'added', 'unchanged', 'replaced', or 'conflict' (the stored declaration was kept)
  outcome text,
  -- for 'replaced' and 'conflict': {field: {"stored": ..., "declared": ...}} of what differs
  differences jsonb,
  stored_by text
);

-- jobs.declare_job: record what a deploy declares about job `name`.
-- Arguments: name, queue, max_attempts, priority, tenant_required, concurrency (at most this
-- many attempts running across the fleet; NULL: no limit), concurrency_keyed (the limit is per
-- concurrency_key, which every enqueue of the job must then give) and when_busy ('wait', or
-- 'fail' for a keyed limit: refuse a run whose key another run holds): the enforced fields;
-- retry, timeout and input_schema (shown only); declared_by (who declares: a deploy, worker or
-- host label); replace (the operator's word that this declaration wins over a different one).
-- Answers (name, outcome, differences, stored_by). A declaration equal in its enforced fields
-- refreshes the shown ones and seen_at ('unchanged'); one that differs is kept out ('conflict')
-- unless replace => true ('replaced'): during a rolling deploy the old and the new code both
-- declare, and which one SQL callers follow is the operator's choice, not the last to start.
-- A limit that starts or stops applying marks the name's live rows (jobs._sync_capped).
-- Raises X_ARGUMENT_INVALID. Locks: the name's row, then its live rows when the limit changes.
create function jobs.declare_job(
  name text,
  queue text,
  max_attempts integer,
  priority integer,
  tenant_required boolean,
  declared_by text,
  retry jsonb default '{}',
  timeout interval default null,
  input_schema jsonb default '{}',
  replace boolean default false,
  concurrency integer default null,
  concurrency_keyed boolean default false,
  when_busy text default 'wait'
)
returns jobs.declare_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_stored jobs.declarations;
  v_differences jsonb;
begin
  perform jobs._require(array['worker'], 'jobs.declare_job');
  perform jobs._check_label('jobs.declare_job', 'name', declare_job.name);
  perform jobs._check_label('jobs.declare_job', 'queue', declare_job.queue);
  if declare_job.max_attempts is null or declare_job.max_attempts not between 1 and 1000 then
    perform jobs._invalid('jobs.declare_job', 'max_attempts', 'must be an integer from 1 to 1000');
  end if;
  if declare_job.priority is null or declare_job.priority not between -1000 and 1000 then
    perform jobs._invalid('jobs.declare_job', 'priority', 'must be an integer from -1000 to 1000');
  end if;
  if declare_job.tenant_required is null then
    perform jobs._invalid('jobs.declare_job', 'tenant_required', 'must be true or false');
  end if;
  perform jobs._check_label('jobs.declare_job', 'declared_by', declare_job.declared_by);
  if declare_job.timeout is not null then
    perform jobs._check_interval('jobs.declare_job', 'timeout', declare_job.timeout,
                                 interval '1 millisecond', interval '7 days');
  end if;
  perform jobs._check_bytes('jobs.declare_job', 'retry', jobs._json_bytes(declare_job.retry),
                            'input');
  perform jobs._check_bytes('jobs.declare_job', 'input_schema',
                            jobs._json_bytes(declare_job.input_schema), 'input');
  if declare_job.replace is null then
    perform jobs._invalid('jobs.declare_job', 'replace', 'must be true or false');
  end if;
  if declare_job.concurrency < 1 then
    perform jobs._invalid('jobs.declare_job', 'concurrency',
                          'must be NULL (no limit) or an integer of at least 1');
  end if;
  if declare_job.concurrency_keyed is null
     or (declare_job.concurrency_keyed and declare_job.concurrency is null) then
    perform jobs._invalid('jobs.declare_job', 'concurrency_keyed',
                          'must be true or false, and true only with a concurrency');
  end if;
  if declare_job.when_busy is null or declare_job.when_busy not in ('wait', 'fail')
     or (declare_job.when_busy = 'fail' and not declare_job.concurrency_keyed) then
    perform jobs._invalid('jobs.declare_job', 'when_busy',
                          'must be ''wait'', or ''fail'' with a keyed concurrency');
  end if;

  insert into jobs.declarations as t (
    name, queue, max_attempts, priority, tenant_required, retry, timeout, input_schema,
    declared_by, declared_at, seen_at, concurrency, concurrency_keyed, when_busy)
  values (
    declare_job.name, declare_job.queue, declare_job.max_attempts, declare_job.priority,
    declare_job.tenant_required, coalesce(declare_job.retry, '{}'), declare_job.timeout,
    coalesce(declare_job.input_schema, '{}'), declare_job.declared_by, v_now, v_now,
    declare_job.concurrency, declare_job.concurrency_keyed, declare_job.when_busy)
  on conflict on constraint declarations_pkey do nothing;
  if found then
    -- rows enqueued before any declaration were not capped
    perform jobs._sync_capped(declare_job.name);
    return (declare_job.name, 'added', null, declare_job.declared_by)::jobs.declare_result;
  end if;

  select t.*
    into v_stored
    from jobs.declarations t
   where t.name = declare_job.name
     for update;

  select coalesce(jsonb_object_agg(d.field, jsonb_build_object('stored', d.stored,
                                                               'declared', d.declared)),
                  '{}')
    into v_differences
    from (values ('queue', to_jsonb(v_stored.queue), to_jsonb(declare_job.queue)),
                 ('max_attempts', to_jsonb(v_stored.max_attempts),
                  to_jsonb(declare_job.max_attempts)),
                 ('priority', to_jsonb(v_stored.priority), to_jsonb(declare_job.priority)),
                 ('tenant_required', to_jsonb(v_stored.tenant_required),
                  to_jsonb(declare_job.tenant_required)),
                 ('concurrency', to_jsonb(v_stored.concurrency), to_jsonb(declare_job.concurrency)),
                 ('concurrency_keyed', to_jsonb(v_stored.concurrency_keyed),
                  to_jsonb(declare_job.concurrency_keyed)),
                 ('when_busy', to_jsonb(v_stored.when_busy), to_jsonb(declare_job.when_busy)))
         as d(field, stored, declared)
   where d.stored is distinct from d.declared;

  if v_differences = '{}' then
    update jobs.declarations t
       set retry = coalesce(declare_job.retry, '{}'),
           timeout = declare_job.timeout,
           input_schema = coalesce(declare_job.input_schema, '{}'),
           seen_at = v_now
     where t.name = declare_job.name;
    return (declare_job.name, 'unchanged', null, v_stored.declared_by)::jobs.declare_result;
  end if;

  if not declare_job.replace then
    return (declare_job.name, 'conflict', v_differences, v_stored.declared_by)::jobs.declare_result;
  end if;

  update jobs.declarations t
     set queue = declare_job.queue,
         max_attempts = declare_job.max_attempts,
         priority = declare_job.priority,
         tenant_required = declare_job.tenant_required,
         retry = coalesce(declare_job.retry, '{}'),
         timeout = declare_job.timeout,
         input_schema = coalesce(declare_job.input_schema, '{}'),
         declared_by = declare_job.declared_by,
         declared_at = v_now,
         seen_at = v_now,
         concurrency = declare_job.concurrency,
         concurrency_keyed = declare_job.concurrency_keyed,
         when_busy = declare_job.when_busy
   where t.name = declare_job.name;
  perform jobs._sync_capped(declare_job.name);
  return (declare_job.name, 'replaced', v_differences, v_stored.declared_by)::jobs.declare_result;
end;
$$;

-- jobs.job_types: the catalogue, one row per declared name in code-point order of the name.
-- Raises nothing. Locks nothing.
create function jobs.job_types()
returns setof jobs.job_type
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['enqueuer'], 'jobs.job_types', scoped => true);
  select t.name, t.queue, t.max_attempts, t.priority, t.tenant_required, t.retry, t.timeout,
         t.input_schema, t.declared_by, t.declared_at, t.seen_at, t.concurrency,
         t.concurrency_keyed, t.when_busy
    from jobs.declarations t
   order by t.name collate "C"
$$;

-- jobs.forget_job_type: remove a name no deploy declares any more from the catalogue; its jobs
-- stay (capped only where a limit rule still counts them) and later enqueues of it take the built-in defaults. Answers whether
-- a row went. Raises nothing. Locks: the name's row, then its live rows if it was capped.
create function jobs.forget_job_type(name text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.forget_job_type');
  perform jobs._check_label('jobs.forget_job_type', 'name', forget_job_type.name);
  delete from jobs.declarations t where t.name = forget_job_type.name;
  if not found then
    return false;
  end if;
  perform jobs._sync_capped(forget_job_type.name);
  return true;
end;
$$;
