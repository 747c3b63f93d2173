-- Frozen by scripts/freeze-revision from sql/functions/ for revision 0001. Never edit
-- after release: a change ships as a new revision.

-- >>> sql/functions/000_schema.sql
-- 000_schema: the jobs schema, its tables and indexes.
--
-- Tables: jobs.jobs (one row per job, kept after it finishes), jobs.steps (durable step records
-- keyed by run), jobs.queue_pauses (a pause is a row the claim reads), jobs.error_codes (every
-- X_* code with its SQLSTATE and its fix).
-- Lock order everywhere: the job row, then its steps, then anything else.
-- States are plain text, narrowed by list in every reader: a newer schema may add a state, and an
-- older reader must fail loudly on it rather than have the database refuse the newer writer.

create schema if not exists jobs;

create table jobs.jobs (
  id uuid primary key,
  name text not null,
  queue text not null,
  input jsonb not null,
  idempotency_key text not null,
  tenant_id text,
  run_id uuid not null,
  state text not null,
  priority integer not null default 0,
  attempt integer not null default 0,
  max_attempts integer not null,
  run_at timestamptz not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  finished_at timestamptz,
  -- the lease: who holds the row and until when; claims moves on every claim and is never reset,
  -- so it fences every settle, renewal and step write of a superseded attempt
  claimed_by text,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  claims bigint not null default 0,
  last_error text,
  last_error_code text,
  last_error_stack text,
  progress jsonb,
  traceparent text,
  enqueued_by text,
  constraint jobs_attempt_check check (attempt >= 0),
  constraint jobs_max_attempts_check check (max_attempts >= 1),
  constraint jobs_input_object_check check (jsonb_typeof(input) = 'object')
);

-- the dedupe namespace: name, tenant (NULL is its own namespace) and key, over live rows only,
-- so a finished job never blocks the same work tomorrow
create unique index jobs_name_tenant_idempotency_live_idx
  on jobs.jobs (name, (coalesce(tenant_id, '')), idempotency_key)
  where state in ('ready', 'delayed', 'running', 'suspended');

-- the claim reads only waiting rows, in hand-out order; finished rows are not in this index
create index jobs_claim_idx
  on jobs.jobs (queue, priority, run_at, id)
  where state in ('ready', 'delayed', 'suspended');

-- lapsed leases: a dead worker's rows are found without scanning the waiting ones
create index jobs_lease_idx
  on jobs.jobs (lease_expires_at)
  where state = 'running';

-- the enqueue wake throttle looks for a row announced in the same slot; listings by queue
create index jobs_queue_created_idx
  on jobs.jobs (queue, created_at, id);

create table jobs.steps (
  run_id uuid not null,
  name text not null,
  status text not null,
  output jsonb,
  error text,
  attempts integer not null default 1,
  started_at timestamptz not null,
  updated_at timestamptz not null,
  finished_at timestamptz,
  wake_at timestamptz,
  primary key (run_id, name)
);

create table jobs.queue_pauses (
  queue text primary key,
  paused_at timestamptz not null,
  paused_by text
);

create table jobs.error_codes (
  code text primary key,
  sqlstate char(5) not null unique,
  fix text not null
);

-- >>> sql/functions/010_util.sql
-- 010_util: the clock, ids, vocabularies, the error registry and the schema version.
--
-- Tables: jobs.error_codes (read by jobs._raise). Locks nothing.

-- jobs.version: the installed schema version; the Python package refuses any other.
-- Answers an integer. Raises nothing. Introduced in revision 0001.
create function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 1
$$;

-- jobs._now: the one clock every function reads. A test pins it with
-- `set local durajobs.now = '2026-01-01 00:00:00+00'`; unset, it is the transaction's now().
-- Answers a timestamptz. Raises nothing. Introduced in revision 0001.
create function jobs._now()
returns timestamptz
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(nullif(current_setting('durajobs.now', true), '')::timestamptz, now())
$$;

-- jobs._uuid_v7: a time-ordered uuid (RFC 9562 version 7), so ids sort by creation and new rows
-- land at the right edge of every id index.
-- Answers a uuid. Raises nothing. Introduced in revision 0001.
create function jobs._uuid_v7()
returns uuid
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  -- 48 bits of unix milliseconds over a random v4 uuid, then the version nibble 0100 -> 0111
  select encode(
    set_bit(
      set_bit(
        overlay(
          uuid_send(gen_random_uuid())
          placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
          from 1 for 6),
        52, 1),
      53, 1),
    'hex')::uuid
$$;

-- jobs.job_states: every state a job row can be in, in lifecycle order.
-- Answers text[]. Raises nothing. Introduced in revision 0001.
create function jobs.job_states()
returns text[]
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled']
$$;

-- jobs.live_states: the states that hold an idempotency key and can still run.
-- Answers text[]. Raises nothing. Introduced in revision 0001.
create function jobs.live_states()
returns text[]
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['ready', 'delayed', 'running', 'suspended']
$$;

-- jobs.step_statuses: every status a step record can have.
-- Answers text[]. Raises nothing. Introduced in revision 0001.
create function jobs.step_statuses()
returns text[]
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['completed', 'sleeping', 'waiting', 'failed']
$$;

-- One SQLSTATE per code, in the class JQ (classes 0-4, A-H, P, X and Y are taken), and the fix a
-- caller reads in the error's hint.
insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_ARGUMENT_INVALID', 'JQ001',
   'pass the argument the error names with a valid value (see docs/sql.md)'),
  ('X_JOB_INPUT_INVALID', 'JQ002',
   'pass input as a JSON object, e.g. input => ''{"user_id": 1}''::jsonb'),
  ('X_IDEMPOTENCY_REQUIRED', 'JQ003',
   'pass idempotency_key => a string that names this unit of work, e.g. ''invoice:42'''),
  ('X_JOB_DUPLICATE', 'JQ004',
   'use on_conflict => ''dedupe'' to receive the live job, or wait for it to finish'),
  ('X_DRIVER_UNAVAILABLE', 'JQ005',
   'run `durajobs migrate` so the idempotency index exists, then retry'),
  ('X_JOB_CLAIM_QUEUES_EMPTY', 'JQ006',
   'pass queues => array[''default''] naming at least one queue'),
  ('X_JOB_LEASE_LOST', 'JQ007',
   'stop this attempt: another claim owns the job now and will finish it'),
  ('X_JOB_CANCELLED', 'JQ008',
   'stop this attempt: the job was cancelled (jobs.cancel)'),
  ('X_STEP_DUPLICATE', 'JQ009',
   'give every step of one run a distinct name'),
  ('X_JOB_ROW_STATUS_UNKNOWN', 'JQ010',
   'upgrade durajobs to the release that wrote this status, or run `durajobs migrate`'),
  ('X_JOB_NOT_FOUND', 'JQ011',
   'check the id: select id, name, state from jobs.jobs where id = ...'),
  ('X_JOB_NOT_REQUEUEABLE', 'JQ012',
   'only a finished job requeues: wait for it, or jobs.cancel(id => ...) it first'),
  ('X_JOB_NOT_CANCELLABLE', 'JQ013',
   'only a live job cancels; a finished one stays as it ended (jobs.requeue runs it again)');

-- jobs._raise: raise the registered error `code` with its SQLSTATE, a message that starts with
-- the code, structured detail (a JSON object that always carries the code) and the fix as hint.
-- Raises the code itself; an unregistered code raises JQ000 (a bug in durajobs).
-- Introduced in revision 0001.
create function jobs._raise(code text, message text, detail jsonb default '{}', hint text default null)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_sqlstate text;
  v_fix text;
begin
  select e.sqlstate, e.fix
    into v_sqlstate, v_fix
    from jobs.error_codes e
   where e.code = _raise.code;
  if v_sqlstate is null then
    raise exception 'durajobs raised the unregistered error code %', _raise.code
      using errcode = 'JQ000';
  end if;
  raise exception using
    errcode = v_sqlstate,
    message = _raise.code || ': ' || _raise.message,
    detail = (coalesce(_raise.detail, '{}'::jsonb) || jsonb_build_object('code', _raise.code))::text,
    hint = coalesce(_raise.hint, v_fix);
end;
$$;

-- jobs._invalid: raise X_ARGUMENT_INVALID naming the function, the argument and what is wrong.
-- Raises X_ARGUMENT_INVALID. Introduced in revision 0001.
create function jobs._invalid(function_name text, argument text, problem text)
returns void
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._raise(
    'X_ARGUMENT_INVALID',
    format('%s: %s %s', function_name, argument, problem),
    jsonb_build_object('function', function_name, 'argument', argument, 'problem', problem))
$$;

-- >>> sql/functions/020_enqueue.sql
-- 020_enqueue: put jobs on the queue, one or many, deduped on the live idempotency key, and
-- announce them to idle workers.
--
-- Tables: jobs.jobs (insert, read). Locks: the unique indexes only (an insert that meets an
-- uncommitted twin waits for that transaction, as any unique insert does).
-- Wake: pg_notify('jobs_wake', <queue>) at most once per queue per 250 ms slot, for rows due
-- within 1 s, never for a dedupe. The throttle is in the statement because NOTIFY serialises
-- committing transactions; the workers' poll remains the guarantee.

create type jobs.enqueue_result as (
  id uuid,
  run_id uuid,
  deduped boolean
);

-- One validated request of jobs.enqueue_many, in input order.
create type jobs._enqueue_request as (
  ord integer,
  id uuid,
  id_supplied boolean,
  name text,
  queue text,
  input jsonb,
  idempotency_key text,
  tenant_id text,
  run_id uuid,
  run_at timestamptz,
  max_attempts integer,
  priority integer,
  traceparent text,
  enqueued_by text
);

-- jobs._check_enqueue: refuse a request a caller could not have meant.
-- Arguments: the calling function's name, a prefix naming the request (e.g. 'requests[3].'), and
-- the request's fields. Raises X_ARGUMENT_INVALID, X_JOB_INPUT_INVALID, X_IDEMPOTENCY_REQUIRED.
-- Locks nothing. Introduced in revision 0001.
create function jobs._check_enqueue(
  function_name text,
  prefix text,
  name text,
  input jsonb,
  idempotency_key text,
  queue text,
  tenant_id text,
  run_at timestamptz,
  max_attempts integer,
  priority integer
)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if _check_enqueue.name is null or btrim(_check_enqueue.name) = '' then
    perform jobs._invalid(function_name, prefix || 'name', 'must be a non-empty job name');
  end if;
  if _check_enqueue.input is null or jsonb_typeof(_check_enqueue.input) <> 'object' then
    perform jobs._raise(
      'X_JOB_INPUT_INVALID',
      format('%s: %sinput must be a JSON object, got %s', function_name, prefix,
             coalesce(jsonb_typeof(_check_enqueue.input), 'NULL')),
      jsonb_build_object('function', function_name, 'argument', prefix || 'input',
                         'job', _check_enqueue.name));
  end if;
  if _check_enqueue.idempotency_key is null or btrim(_check_enqueue.idempotency_key) = '' then
    perform jobs._raise(
      'X_IDEMPOTENCY_REQUIRED',
      format('%s: %sidempotency_key is required for job %s', function_name, prefix,
             _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'idempotency_key',
                         'job', _check_enqueue.name));
  end if;
  if _check_enqueue.queue is null or btrim(_check_enqueue.queue) = '' then
    perform jobs._invalid(function_name, prefix || 'queue', 'must be a non-empty queue name');
  end if;
  if _check_enqueue.tenant_id = '' then
    perform jobs._invalid(function_name, prefix || 'tenant_id',
                          'must be NULL (no tenant) or a non-empty tenant id');
  end if;
  if not isfinite(_check_enqueue.run_at) then
    perform jobs._invalid(function_name, prefix || 'run_at', 'must be a finite instant');
  end if;
  if _check_enqueue.max_attempts is null or _check_enqueue.max_attempts < 1 then
    perform jobs._invalid(function_name, prefix || 'max_attempts', 'must be an integer of at least 1');
  end if;
  if _check_enqueue.priority is null then
    perform jobs._invalid(function_name, prefix || 'priority', 'must not be NULL (0 is the default)');
  end if;
end;
$$;

-- jobs._check_on_conflict: refuse an on_conflict policy other than 'dedupe' or 'error'.
-- Raises X_ARGUMENT_INVALID. Locks nothing. Introduced in revision 0001.
create function jobs._check_on_conflict(function_name text, on_conflict text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if on_conflict is null or on_conflict not in ('dedupe', 'error') then
    perform jobs._invalid(function_name, 'on_conflict', 'must be ''dedupe'' or ''error''');
  end if;
end;
$$;

-- jobs._find_live: the live job holding (name, tenant, key), exactly as wide as the unique index
-- (coalesce on both sides, so tenantless rows match each other and never a tenant's row).
-- Answers (id, run_id, true), or NULL when no live row holds the key. Locks nothing.
-- Introduced in revision 0001.
create function jobs._find_live(name text, tenant_id text, idempotency_key text)
returns jobs.enqueue_result
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_result jobs.enqueue_result;
begin
  select j.id, j.run_id, true
    into v_result
    from jobs.jobs j
   where j.name = _find_live.name
     and coalesce(j.tenant_id, '') = coalesce(_find_live.tenant_id, '')
     and j.idempotency_key = _find_live.idempotency_key
     and j.state in ('ready', 'delayed', 'running', 'suspended')
   limit 1;
  return v_result;
end;
$$;

-- jobs._announce: wake idle workers of `queue` for rows created at `created_at`, unless a row
-- another transaction created in the same 250 ms slot, due at once, already announced it.
-- Rows of the calling transaction share its created_at and are skipped: Postgres folds identical
-- notifications of one transaction anyway. Answers whether it notified. Locks nothing.
-- Introduced in revision 0001.
create function jobs._announce(queue text, created_at timestamptz)
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
          and j.run_at <= j.created_at + interval '1 second')
     or exists (
       select 1
         from jobs.jobs j
        where j.queue = _announce.queue
          and j.created_at > _announce.created_at
          and j.created_at < v_slot + interval '250 milliseconds'
          and j.run_at <= j.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$$;

-- jobs.enqueue: put one job on the queue.
-- Arguments: name, input (a JSON object), idempotency_key; optional queue ('default'),
-- tenant_id, run_at (now), max_attempts (20), priority (0, lower runs first), id (the job's id,
-- e.g. an outbox row's), run_id (keeps a resumed run's step history), on_conflict ('dedupe' or
-- 'error'), traceparent, enqueued_by.
-- Answers (id, run_id, deduped): the new job's ids, or with deduped = true the ids of the live job
-- holding (name, tenant_id, idempotency_key), or of the row that already has the given id, live
-- or finished. A run_at more than now makes the row 'delayed', else 'ready'.
-- Raises X_ARGUMENT_INVALID, X_JOB_INPUT_INVALID, X_IDEMPOTENCY_REQUIRED; X_JOB_DUPLICATE under
-- on_conflict => 'error' (detail.reason 'key_held' or 'id_exists'), and always when the given id
-- already names a different job (name, tenant or key differ: 'id_taken'); X_DRIVER_UNAVAILABLE
-- when two inserts conflict and no row explains why (the unique index is missing).
-- Locks: the unique indexes. Introduced in revision 0001.
create function jobs.enqueue(
  name text,
  input jsonb,
  idempotency_key text,
  queue text default 'default',
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default 20,
  priority integer default 0,
  id uuid default null,
  run_id uuid default null,
  on_conflict text default 'dedupe',
  traceparent text default null,
  enqueued_by text default null
)
returns jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_result jobs.enqueue_result;
  v_by_id record;
begin
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, enqueue.queue, enqueue.tenant_id,
                              v_run_at, enqueue.max_attempts, enqueue.priority);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by)
    values (
      coalesce(enqueue.id, jobs._uuid_v7()), enqueue.name, enqueue.queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, gen_random_uuid()),
      case when v_run_at > v_now then 'delayed' else 'ready' end, enqueue.priority,
      enqueue.max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by)
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(enqueue.queue, v_now);
      end if;
      return v_result;
    end if;

    if enqueue.id is not null then
      select j.id, j.run_id, j.name, j.tenant_id, j.idempotency_key
        into v_by_id
        from jobs.jobs j
       where j.id = enqueue.id;
      if found then
        -- the same job published again (an outbox relay after a crash) answers the row it
        -- made, live or finished; an id naming a different job is never reused
        if v_by_id.name <> enqueue.name
           or coalesce(v_by_id.tenant_id, '') <> coalesce(enqueue.tenant_id, '')
           or v_by_id.idempotency_key <> enqueue.idempotency_key then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('id %s already names job %s with idempotency key %s; an id is never reused',
                   enqueue.id, v_by_id.name, v_by_id.idempotency_key),
            jsonb_build_object('reason', 'id_taken', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key),
            'pass a fresh id, or none and one is made');
        end if;
        if enqueue.on_conflict = 'error' then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('job %s already exists', enqueue.id),
            jsonb_build_object('reason', 'id_exists', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
        end if;
        return (v_by_id.id, v_by_id.run_id, true)::jobs.enqueue_result;
      end if;
    end if;

    v_result := jobs._find_live(enqueue.name, enqueue.tenant_id, enqueue.idempotency_key);
    if v_result.id is not null then
      if enqueue.on_conflict = 'error' then
        perform jobs._raise(
          'X_JOB_DUPLICATE',
          format('job %s with idempotency key %s is already held by live job %s',
                 enqueue.name, enqueue.idempotency_key, v_result.id),
          jsonb_build_object('reason', 'key_held', 'job', enqueue.name,
                             'idempotency_key', enqueue.idempotency_key,
                             'tenant_id', enqueue.tenant_id, 'existing_id', v_result.id));
      end if;
      return v_result;
    end if;
  end loop;

  perform jobs._raise(
    'X_DRIVER_UNAVAILABLE',
    format('enqueue of %s was rejected but no live row holds its idempotency key', enqueue.name),
    jsonb_build_object('job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
  return null;
end;
$$;

-- jobs.enqueue_many: put many jobs on the queue in one statement, with the rules of
-- jobs.enqueue. Arguments: requests, a JSON array of objects whose keys are jobs.enqueue's
-- argument names (name, input and idempotency_key required; queue, tenant_id, run_at,
-- max_attempts, priority, id, run_id, traceparent, enqueued_by optional); on_conflict for all.
-- A key repeated inside the batch dedupes to its first occurrence.
-- Answers one (id, run_id, deduped) per request, in input order.
-- Raises what jobs.enqueue raises, naming the request (requests[3].name); under
-- on_conflict => 'error' the first duplicate raises (detail.reason 'key_held', 'id_exists', or
-- 'key_repeated' for a key repeated inside the batch) and nothing is inserted.
-- Locks: the unique indexes. One wake per queue per statement. Introduced in revision 0001.
create function jobs.enqueue_many(requests jsonb, on_conflict text default 'dedupe')
returns setof jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_requests jobs._enqueue_request[];
  v_pending jobs._enqueue_request[];
  -- the answers so far, as parallel arrays (request ordinal, id, run_id, deduped)
  v_answered integer[] := '{}';
  v_answer_ids uuid[] := '{}';
  v_answer_run_ids uuid[] := '{}';
  v_answer_deduped boolean[] := '{}';
  v_inserted uuid[];
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_duplicate record;
  v_queue text;
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  if exists (select 1 from jsonb_array_elements(requests) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must hold JSON objects only');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key not in ('name', 'input', 'idempotency_key', 'queue', 'tenant_id', 'run_at',
                       'max_attempts', 'priority', 'id', 'run_id', 'traceparent', 'enqueued_by')
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'is not an argument of jobs.enqueue');
  end if;
  -- an explicit null is refused where jobs.enqueue refuses it: never read as the default
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('queue', 'max_attempts', 'priority')
     and jsonb_typeof(k.value) = 'null'
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'must not be null (leave it out for the default)');
  end if;

  begin
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (e.ord::integer,
              coalesce((e.item ->> 'id')::uuid, jobs._uuid_v7()),
              e.item ? 'id' and e.item ->> 'id' is not null,
              e.item ->> 'name',
              coalesce(e.item ->> 'queue', 'default'),
              e.item -> 'input',
              e.item ->> 'idempotency_key',
              e.item ->> 'tenant_id',
              coalesce((e.item ->> 'run_id')::uuid, gen_random_uuid()),
              coalesce((e.item ->> 'run_at')::timestamptz, v_now),
              coalesce((e.item ->> 'max_attempts')::integer, 20),
              coalesce((e.item ->> 'priority')::integer, 0),
              e.item ->> 'traceparent',
              e.item ->> 'enqueued_by')::jobs._enqueue_request as r
        from jsonb_array_elements(requests) with ordinality as e(item, ord)
    ) parsed;
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range or invalid_parameter_value then
      perform jobs._invalid('jobs.enqueue_many', 'requests',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  select format('requests[%s].id', later.ord)
    into v_bad_key
    from unnest(v_requests) later
    join unnest(v_requests) earlier
      on earlier.id = later.id and earlier.ord < later.ord and later.id_supplied
   order by later.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'repeats the id of an earlier request');
  end if;

  foreach v_request in array v_requests loop
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority);
  end loop;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               else jobs._find_live(r.name, r.tenant_id, r.idempotency_key)
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        left join jobs.jobs by_id on r.id_supplied and ins.id is null and by_id.id = r.id
    ),
    found_answers as (
      select a.ord, (a.answer).id, (a.answer).run_id, (a.answer).deduped
        from answered a
       where (a.answer).id is not null
    )
    select v_answered || coalesce(array_agg(f.ord order by f.ord), '{}'),
           v_answer_ids || coalesce(array_agg(f.id order by f.ord), '{}'),
           v_answer_run_ids || coalesce(array_agg(f.run_id order by f.ord), '{}'),
           v_answer_deduped || coalesce(array_agg(f.deduped order by f.ord), '{}')
      into v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped
      from found_answers f;

    select coalesce(array_agg((r.*)::jobs._enqueue_request order by r.ord), '{}')
      into v_pending
      from unnest(v_pending) r
      left join unnest(v_answered) as done(ord) on done.ord = r.ord
     where done.ord is null;
    exit when cardinality(v_pending) = 0;
  end loop;

  -- after the inserts, so an id another transaction took meanwhile is caught too: a supplied
  -- id answers only the same job (name, tenant, key), never a stranger
  select r.ord, r.id, j.name, j.idempotency_key
    into v_duplicate
    from unnest(v_requests) r
    join jobs.jobs j on r.id_supplied and j.id = r.id
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names job %s with idempotency key %s; an id is never '
             'reused', v_duplicate.ord, v_duplicate.id, v_duplicate.name,
             v_duplicate.idempotency_key),
      jsonb_build_object('reason', 'id_taken', 'existing_id', v_duplicate.id,
                         'request', v_duplicate.ord),
      'pass a fresh id, or none and one is made');
  end if;

  if cardinality(v_pending) > 0 then
    perform jobs._raise(
      'X_DRIVER_UNAVAILABLE',
      format('enqueue of %s was rejected but no live row holds its idempotency key',
             v_pending[1].name),
      jsonb_build_object('job', v_pending[1].name, 'idempotency_key', v_pending[1].idempotency_key));
  end if;

  if enqueue_many.on_conflict = 'error' then
    select r.ord, r.name, r.idempotency_key, r.tenant_id, a.id, r.id_supplied,
           earlier.ord as earlier_ord
      into v_duplicate
      from unnest(v_answered, v_answer_ids, v_answer_deduped) as a(ord, id, deduped)
      join unnest(v_requests) r on r.ord = a.ord
      left join unnest(v_requests) earlier on earlier.id = a.id and earlier.ord < r.ord
     where a.deduped
     order by r.ord
     limit 1;
    if found and v_duplicate.earlier_ord is not null then
      -- the holder is a row of this very batch, rolled back with it: name the request instead
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s repeats the idempotency key %s of requests[%s]',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.earlier_ord),
        jsonb_build_object('reason', 'key_repeated', 'job', v_duplicate.name,
                           'idempotency_key', v_duplicate.idempotency_key,
                           'request', v_duplicate.ord, 'earlier_request', v_duplicate.earlier_ord));
    elsif found then
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s with idempotency key %s is already held by job %s',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.id),
        jsonb_build_object('reason', case when v_duplicate.id_supplied
                                          and v_duplicate.id = (v_requests[v_duplicate.ord]).id
                                          then 'id_exists' else 'key_held' end,
                           'job', v_duplicate.name, 'idempotency_key', v_duplicate.idempotency_key,
                           'tenant_id', v_duplicate.tenant_id,
                           'existing_id', v_duplicate.id, 'request', v_duplicate.ord));
    end if;
  end if;

  -- one wake per queue that received a row due now
  for v_queue in
    select distinct r.queue
      from unnest(v_answered, v_answer_deduped) as a(ord, deduped)
      join unnest(v_requests) r on r.ord = a.ord
     where not a.deduped
       and r.run_at <= v_now + interval '1 second'
  loop
    perform jobs._announce(v_queue, v_now);
  end loop;

  return query
    select a.id, a.run_id, a.deduped
      from unnest(v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped)
             as a(ord, id, run_id, deduped)
     order by a.ord;
end;
$$;

-- >>> sql/functions/030_claim.sql
-- 030_claim: hand waiting jobs to a worker under a lease, re-take the rows of dead workers, and
-- bury the rows whose lease lapsed on their final attempt.
--
-- Tables: jobs.jobs (update), jobs.queue_pauses (read). Locks: job rows only, each with
-- `for update skip locked`, so claimers never wait for one another.

create type jobs.claimed_job as (
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
  enqueued_by text
);

-- jobs.claim_v1: claim up to batch_size jobs of the given queues for worker_id.
-- Arguments: queues (non-empty), worker_id, batch_size (1), visibility (30 s lease), and
-- drop_exhausted (job names that end 'failed' instead of 'dead' when their final attempt's lease
-- lapses, because they do not dead-letter).
-- Order: first rows whose lease lapsed (a dead worker's, re-taken as a new attempt), then waiting
-- rows due now by priority (lower first), run_at, id. Paused queues are skipped.
-- Answers the claimed rows with state 'running' and their claim token, which every later call on
-- the attempt must present. Also answers, with state 'dead' or 'failed', the rows it buried:
-- running rows whose lease lapsed at attempt >= max_attempts, settled in this statement with
-- last_error 'LEASE_LAPSED_FINAL_ATTEMPT' and never handed out. Never more claimed rows than
-- batch_size (the candidates are materialised before the update).
-- Raises X_JOB_CLAIM_QUEUES_EMPTY, X_ARGUMENT_INVALID. Locks: the rows it answers.
-- Introduced in revision 0001.
create function jobs.claim_v1(
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
    )
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
              j.last_error, j.traceparent, j.enqueued_by;

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

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one
  return query
    with due as materialized (
      select j.id
        from jobs.jobs j
       where j.queue = any(v_queues)
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= v_now
       order by j.priority, j.run_at, j.id
       limit claim_v1.batch_size - v_taken
         for update skip locked
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

-- >>> sql/functions/040_settle.sql
-- 040_settle: end or renew an attempt: ack, nack, heartbeat and their batch forms.
--
-- Tables: jobs.jobs (update). Locks: the settled row.
-- Fence: every call matches only a row that is still 'running' under the caller's worker id AND
-- claim token. 'running' lets a cancel stick (the cancelled body's ack matches nothing); the
-- token stops a body whose lease lapsed from settling the attempt that replaced it, even one
-- claimed again by the same worker id. A miss answers false; it never raises.

create type jobs.settle_result as (
  id uuid,
  landed boolean
);

-- jobs._check_fence: refuse a settle call missing its fence.
-- Raises X_ARGUMENT_INVALID. Locks nothing. Introduced in revision 0001.
create function jobs._check_fence(function_name text, id uuid, worker_id text, claim bigint)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if id is null then
    perform jobs._invalid(function_name, 'id', 'must be a job id');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be the claiming worker''s id');
  end if;
  if claim is null then
    perform jobs._invalid(function_name, 'claim', 'must be the claim token jobs.claim_v1 answered');
  end if;
end;
$$;

-- jobs.ack_v1: mark a claimed job done.
-- Arguments: id, worker_id, claim (the token from jobs.claim_v1).
-- Answers whether it landed (false: the attempt no longer owns the row).
-- Raises X_ARGUMENT_INVALID. Locks the row. Introduced in revision 0001.
create function jobs.ack_v1(id uuid, worker_id text, claim bigint)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  update jobs.jobs j
     set state = 'done',
         lease_expires_at = null,
         finished_at = v_now,
         updated_at = v_now
   where j.id = ack_v1.id
     and j.state = 'running'
     and j.claimed_by = ack_v1.worker_id
     and j.claims = ack_v1.claim;
  return found;
end;
$$;

-- jobs.ack_many_v1: ack many claimed jobs of one worker in one statement.
-- Arguments: worker_id, ids and claims (parallel arrays of equal length).
-- Answers (id, landed) per id, in input order. Raises X_ARGUMENT_INVALID. Locks the rows.
-- Introduced in revision 0001.
create function jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
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
      returning j.id, j.claims
    )
    select r.id, s.id is not null
      from requested r
      left join settled s on s.id = r.id and s.claims = r.claim
     order by r.ord;
end;
$$;

-- jobs.nack_v1: end a claimed attempt without success.
-- Arguments: id, worker_id, claim; next_state, the one decision on where the row goes:
-- 'ready' (retry after delay; also a shed), 'suspended' (a park: a sleep, or a job this deploy
-- cannot run, due after delay), 'dead' (dead-lettered) or 'failed' (terminal, not
-- dead-lettered); delay (0, at most 100 years); counts_as_attempt (true; false gives the claim's
-- attempt back, for a shed, a park or an interrupted attempt); error, error_code, error_stack
-- (written only when error is given: a shed writes nothing). A counted 'ready' on the final
-- attempt (attempt >= max_attempts) ends 'dead' instead: the row never runs past its budget.
-- Answers whether it landed. Raises X_ARGUMENT_INVALID. Locks the row.
-- Introduced in revision 0001.
create function jobs.nack_v1(
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
     and j.claims = nack_v1.claim;
  return found;
end;
$$;

-- jobs.nack_many_v1: nack many claimed jobs of one worker in one call.
-- Arguments: worker_id; nacks, a JSON array of objects with the keys of jobs.nack_v1
-- (id and claim required; next_state, delay as interval text such as '5 seconds' or 'PT5S',
-- counts_as_attempt, error, error_code, error_stack optional).
-- Answers (id, landed) per element, in input order. Raises X_ARGUMENT_INVALID (an unknown key
-- names its element; a value of the wrong type names the value). Locks the rows.
-- Introduced in revision 0001.
create function jobs.nack_many_v1(worker_id text, nacks jsonb)
returns setof jobs.settle_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_ids uuid[];
  v_claims bigint[];
  v_next_states text[];
  v_delays interval[];
  v_counts boolean[];
  v_ord integer;
  v_bad_key text;
begin
  if nacks is null or jsonb_typeof(nacks) <> 'array' then
    perform jobs._invalid('jobs.nack_many_v1', 'nacks', 'must be a JSON array of objects');
  end if;
  if exists (select 1 from jsonb_array_elements(nacks) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.nack_many_v1', 'nacks', 'must hold JSON objects only');
  end if;
  select format('nacks[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(nacks) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key not in ('id', 'claim', 'next_state', 'delay', 'counts_as_attempt', 'error',
                       'error_code', 'error_stack')
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.nack_many_v1', v_bad_key, 'is not an argument of jobs.nack_v1');
  end if;

  -- parse every element first, in one block: a value of the wrong type is an argument error
  begin
    select coalesce(array_agg((e.item ->> 'id')::uuid order by e.ord), '{}'),
           coalesce(array_agg((e.item ->> 'claim')::bigint order by e.ord), '{}'),
           coalesce(array_agg(coalesce(e.item ->> 'next_state', 'ready') order by e.ord), '{}'),
           coalesce(array_agg(coalesce((e.item ->> 'delay')::interval, interval '0')
                              order by e.ord), '{}'),
           coalesce(array_agg(coalesce((e.item ->> 'counts_as_attempt')::boolean, true)
                              order by e.ord), '{}')
      into v_ids, v_claims, v_next_states, v_delays, v_counts
      from jsonb_array_elements(nacks) with ordinality as e(item, ord);
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range or invalid_parameter_value or interval_field_overflow then
      perform jobs._invalid('jobs.nack_many_v1', 'nacks',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  for v_ord in 1..cardinality(v_ids) loop
    return query
      select v_ids[v_ord],
             jobs.nack_v1(
               id => v_ids[v_ord],
               worker_id => nack_many_v1.worker_id,
               claim => v_claims[v_ord],
               next_state => v_next_states[v_ord],
               delay => v_delays[v_ord],
               counts_as_attempt => v_counts[v_ord],
               error => nacks -> (v_ord - 1) ->> 'error',
               error_code => nacks -> (v_ord - 1) ->> 'error_code',
               error_stack => nacks -> (v_ord - 1) ->> 'error_stack');
  end loop;
end;
$$;

-- jobs.heartbeat_v1: renew a claimed attempt's lease.
-- Arguments: id, worker_id, claim, visibility (30 s from now).
-- Answers 'ok' (renewed), 'cancelled' (an operator cancelled the row this attempt held: stop,
-- it is not a loss) or 'lost' (another claim owns the row, it finished, or it is gone).
-- Raises X_ARGUMENT_INVALID. Locks the row. Introduced in revision 0001.
create function jobs.heartbeat_v1(
  id uuid,
  worker_id text,
  claim bigint,
  visibility interval default interval '30 seconds'
)
returns text
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility', 'must be a positive interval');
  end if;

  update jobs.jobs j
     set lease_expires_at = v_now + heartbeat_v1.visibility,
         updated_at = v_now
   where j.id = heartbeat_v1.id
     and j.state = 'running'
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if found then
    return 'ok';
  end if;

  -- a cancel keeps the token, so only the attempt that was running sees 'cancelled'
  select j.state
    into v_state
    from jobs.jobs j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$$;

-- >>> sql/functions/050_steps.sql
-- 050_steps: durable step checkpoints, keyed by run, so a later attempt replays a step's stored
-- result instead of running it again.
--
-- Tables: jobs.steps (insert, update, read), jobs.jobs (read, share lock).
-- Lock order: the job row (for share, so no cancel or settle slips between the fence and the
-- write), then the step row.

create type jobs.step_record as (
  name text,
  status text,
  output jsonb,
  error text,
  attempts integer,
  started_at timestamptz,
  finished_at timestamptz,
  wake_at timestamptz
);

-- jobs.steps_v1: a run's step records, in the order they started.
-- Arguments: run_id. Answers one jobs.step_record per step. Raises X_ARGUMENT_INVALID.
-- Locks nothing. Introduced in revision 0001.
create function jobs.steps_v1(run_id uuid)
returns setof jobs.step_record
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if run_id is null then
    perform jobs._invalid('jobs.steps_v1', 'run_id', 'must be a run id');
  end if;
  return query
    select s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
      from jobs.steps s
     where s.run_id = steps_v1.run_id
     order by s.started_at, s.name;
end;
$$;

-- jobs.record_step_v1: store a step's outcome for the run of a claimed job, fenced on the claim
-- like jobs.ack_v1.
-- Arguments: id, worker_id, claim (the attempt's fence); name; status ('completed', 'sleeping',
-- 'waiting', 'failed'); output (the step's JSON result); error; wake_at (when a sleeping or
-- waiting step is due). A completed step is never overwritten: it ran once, ever.
-- Answers the stored jobs.step_record.
-- Raises X_JOB_CANCELLED (the job was cancelled), X_JOB_LEASE_LOST (another claim owns the job,
-- it finished, or it is gone), X_STEP_DUPLICATE (the step already completed in this run),
-- X_ARGUMENT_INVALID. Locks: the job row (share), then the step row.
-- Introduced in revision 0001.
create function jobs.record_step_v1(
  id uuid,
  worker_id text,
  claim bigint,
  name text,
  status text,
  output jsonb default null,
  error text default null,
  wake_at timestamptz default null
)
returns jobs.step_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name = '' then
    perform jobs._invalid('jobs.record_step_v1', 'name', 'must be a non-empty step name');
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs j
   where j.id = record_step_v1.id
     for share;
  if found
     and v_job.state = 'cancelled'
     and v_job.claimed_by = record_step_v1.worker_id
     and v_job.claims = record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_CANCELLED',
      format('job %s was cancelled; step %s was not recorded', record_step_v1.id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'step', record_step_v1.name));
  end if;
  if not found
     or v_job.state <> 'running'
     or v_job.claimed_by is distinct from record_step_v1.worker_id
     or v_job.claims <> record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_LEASE_LOST',
      format('job %s is no longer held by claim %s of worker %s; step %s was not recorded',
             record_step_v1.id, record_step_v1.claim, record_step_v1.worker_id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'worker_id', record_step_v1.worker_id,
                         'claim', record_step_v1.claim, 'step', record_step_v1.name));
  end if;

  insert into jobs.steps as s (
    run_id, name, status, output, error, attempts, started_at, updated_at, finished_at, wake_at)
  values (
    v_job.run_id, record_step_v1.name, record_step_v1.status, record_step_v1.output,
    record_step_v1.error, 1, v_now, v_now,
    case when record_step_v1.status in ('completed', 'failed') then v_now end,
    record_step_v1.wake_at)
  on conflict on constraint steps_pkey do update
     set status = excluded.status,
         output = excluded.output,
         error = excluded.error,
         -- a step that failed and is tried again counts one more attempt
         attempts = s.attempts + case when s.status = 'failed' then 1 else 0 end,
         updated_at = excluded.updated_at,
         finished_at = excluded.finished_at,
         wake_at = excluded.wake_at
   where s.status <> 'completed'
  returning s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
    into v_step;

  if v_step.name is null then
    perform jobs._raise(
      'X_STEP_DUPLICATE',
      format('step %s of run %s already completed; a step runs once', record_step_v1.name,
             v_job.run_id),
      jsonb_build_object('id', record_step_v1.id, 'run_id', v_job.run_id,
                         'step', record_step_v1.name));
  end if;
  return v_step;
end;
$$;

-- >>> sql/functions/060_stats.sql
-- 060_stats: what each queue holds, for dashboards, metrics and autoscalers.
--
-- Tables: jobs.jobs, jobs.queue_pauses (read). Locks nothing.

create type jobs.queue_stat as (
  queue text,
  ready bigint,
  delayed bigint,
  running bigint,
  suspended bigint,
  dead bigint,
  oldest_ready_age interval,
  paused boolean
);

-- jobs.queue_stats: per queue, how many jobs are ready, delayed, running, suspended and dead,
-- and how long the oldest ready-and-due job has waited past its run_at.
-- Each row counts in exactly one bucket. ready: state 'ready' (a shed row included, even while
-- its short delay runs) and 'delayed' rows that came due; delayed: 'delayed' rows not yet due.
-- A suspended row (a sleep, a park) is excluded from oldest_ready_age even when due, on purpose.
-- Arguments: queues (NULL: every queue holding a job; given: exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Introduced in revision 0001.
create function jobs.queue_stats(queues text[] default null)
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

-- >>> sql/functions/070_pause.sql
-- 070_pause: pause and resume a queue. A pause is a row the claim reads, so it takes effect at
-- every worker's next claim; enqueues still land while a queue is paused.
--
-- Tables: jobs.queue_pauses (insert, delete). Locks: the pause row.

-- jobs.pause_queue: stop handing out the jobs of `queue`.
-- Arguments: queue, paused_by (who, for the record). Answers true when this call paused it,
-- false when it was already paused. Raises X_ARGUMENT_INVALID. Introduced in revision 0001.
create function jobs.pause_queue(queue text, paused_by text default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if queue is null or btrim(queue) = '' then
    perform jobs._invalid('jobs.pause_queue', 'queue', 'must be a non-empty queue name');
  end if;
  insert into jobs.queue_pauses as p (queue, paused_at, paused_by)
  values (pause_queue.queue, jobs._now(), pause_queue.paused_by)
  on conflict on constraint queue_pauses_pkey do nothing;
  return found;
end;
$$;

-- jobs.resume_queue: hand out the jobs of `queue` again, and wake its workers.
-- Arguments: queue. Answers true when this call resumed it, false when it was not paused.
-- Raises X_ARGUMENT_INVALID. Introduced in revision 0001.
create function jobs.resume_queue(queue text)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if queue is null or btrim(queue) = '' then
    perform jobs._invalid('jobs.resume_queue', 'queue', 'must be a non-empty queue name');
  end if;
  delete from jobs.queue_pauses p
   where p.queue = resume_queue.queue;
  if found then
    perform pg_notify('jobs_wake', resume_queue.queue);
    return true;
  end if;
  return false;
end;
$$;

-- >>> sql/functions/080_requeue.sql
-- 080_requeue: run a finished job again, keeping its run, so completed steps replay.
--
-- Tables: jobs.jobs (update), jobs.steps (delete). Lock order: the job row, then its steps.

-- jobs.requeue: move a finished job (done, failed, dead, cancelled) back to 'ready', due now,
-- with attempt 0 and no last error. Its claim token is kept, never reset, so a token from
-- before the requeue cannot settle the new attempt.
-- Arguments: id; from_step (optional): that step and every step that started at or after its
-- start are dropped in the same statement, so they run again.
-- Answers true. Raises X_JOB_NOT_FOUND (no such id), X_JOB_NOT_REQUEUEABLE (the job is live:
-- requeueing it would run it twice), X_JOB_DUPLICATE (a live job holds its idempotency key),
-- X_ARGUMENT_INVALID (from_step names no step of the run). Locks: the job row, then its steps.
-- Wakes the job's queue. Introduced in revision 0001.
create function jobs.requeue(id uuid, from_step text default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;

  select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
    into v_job
    from jobs.jobs j
   where j.id = requeue.id
     for update;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                        jsonb_build_object('id', requeue.id));
  end if;
  if v_job.state not in ('done', 'failed', 'dead', 'cancelled') then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_job.state),
      jsonb_build_object('id', requeue.id, 'state', v_job.state));
  end if;

  v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
  if v_holder.id is not null then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('job %s cannot be requeued: live job %s holds idempotency key %s', requeue.id,
             v_holder.id, v_job.idempotency_key),
      jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                         'idempotency_key', v_job.idempotency_key, 'tenant_id', v_job.tenant_id));
  end if;

  if from_step is not null then
    select s.started_at
      into v_from
      from jobs.steps s
     where s.run_id = v_job.run_id
       and s.name = requeue.from_step;
    if not found then
      perform jobs._invalid('jobs.requeue', 'from_step',
                            format('names no step of run %s', v_job.run_id));
    end if;
  end if;

  begin
    with dropped as (
      delete from jobs.steps s
       where requeue.from_step is not null
         and s.run_id = v_job.run_id
         and (s.name = requeue.from_step or s.started_at >= v_from)
    )
    update jobs.jobs j
       set state = 'ready',
           run_at = v_now,
           attempt = 0,
           last_error = null,
           last_error_code = null,
           last_error_stack = null,
           lease_expires_at = null,
           finished_at = null,
           updated_at = v_now
     where j.id = requeue.id;
  exception
    when unique_violation then
      -- a live twin committed between the check and the update
      v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('job %s cannot be requeued: a live job holds idempotency key %s', requeue.id,
               v_job.idempotency_key),
        jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                           'idempotency_key', v_job.idempotency_key));
  end;

  perform pg_notify('jobs_wake', v_job.queue);
  return true;
end;
$$;

-- >>> sql/functions/090_cancel.sql
-- 090_cancel: stop a live job. A waiting one is cancelled at once; a running one keeps its
-- claimed_by and claim token, so its worker's next heartbeat answers 'cancelled' and its late
-- ack, nack or step write matches nothing: the row stays cancelled.
--
-- Tables: jobs.jobs (update). Locks: the job row.

-- jobs.cancel: cancel a live job (ready, delayed, running, suspended).
-- Arguments: id; reason (optional, kept in last_error).
-- Answers true. Raises X_JOB_NOT_CANCELLABLE (the job is finished, and is left exactly as it
-- ended, or no job has that id), X_ARGUMENT_INVALID. Locks the row.
-- Introduced in revision 0001.
create function jobs.cancel(id uuid, reason text default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;

  update jobs.jobs j
     set state = 'cancelled',
         last_error = 'cancelled' || coalesce(': ' || cancel.reason, ''),
         last_error_code = 'X_JOB_CANCELLED',
         last_error_stack = null,
         lease_expires_at = null,
         finished_at = v_now,
         updated_at = v_now
   where j.id = cancel.id
     and j.state in ('ready', 'delayed', 'running', 'suspended');
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$$;
