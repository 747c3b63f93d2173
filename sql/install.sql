-- This script installs the durajobs schema at revision 0019, in one transaction.
-- Generated from the frozen revisions by durajobs (`durajobs sql`); do not edit.
-- Run it with: psql -v ON_ERROR_STOP=1 -f <this file>

begin;

set local search_path = pg_catalog, pg_temp;

do $$
declare
  v_installed text;
begin
  if to_regclass('jobs.alembic_version') is not null then
    execute 'select max(version_num) from jobs.alembic_version' into v_installed;
    raise exception 'durajobs is already installed here (revision %); upgrade it with the '
                    'script `durajobs sql --since %` prints, or `durajobs migrate`',
                    v_installed, v_installed;
  end if;
end;
$$;

-- revision 0001
-- durajobs revision 0001 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

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

-- 010_util: the clock, ids, vocabularies, the error registry and the schema version.
--
-- Tables: jobs.error_codes (read by jobs._raise). Locks nothing.

-- jobs.version: the installed schema version; the Python package refuses an older one.
-- Answers the number of the newest alembic revision installed. Raises nothing.
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
-- Answers a timestamptz. Raises nothing.
create function jobs._now()
returns timestamptz
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(nullif(current_setting('durajobs.now', true), '')::timestamptz, now())
$$;

-- jobs._uuid_v7_many: n time-ordered uuids (RFC 9562 version 7) made by one statement, for a
-- batch: a function call per row cost more than the row's insert.
-- Answers uuid[] of n elements (empty for n < 1). Raises nothing.
create function jobs._uuid_v7_many(n integer)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  -- 48 bits of unix milliseconds over a random v4 uuid, then the version nibble 0100 -> 0111
  select coalesce(array_agg(
    encode(
      set_bit(
        set_bit(
          overlay(
            uuid_send(gen_random_uuid())
            placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
            from 1 for 6),
          52, 1),
        53, 1),
      'hex')::uuid order by g), '{}')
    from generate_series(1, n) g
$$;

-- jobs._uuid_v7: a time-ordered uuid (RFC 9562 version 7), so ids sort by creation and new rows
-- land at the right edge of every id index.
-- Answers a uuid. Raises nothing. One element of jobs._uuid_v7_many, which holds the only copy
-- of the formula. PL/pgSQL, not SQL: a SQL function would re-plan the SQL function it calls on
-- every call, about 50 us of a single enqueue against about 9.
create function jobs._uuid_v7()
returns uuid
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return (jobs._uuid_v7_many(1))[1];
end;
$$;

-- jobs.job_states: every state a job row can be in, in lifecycle order.
-- Answers text[]. Raises nothing.
create function jobs.job_states()
returns text[]
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled']
$$;

-- jobs.live_states: the states that hold an idempotency key and can still run.
-- Answers text[]. Raises nothing.
create function jobs.live_states()
returns text[]
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['ready', 'delayed', 'running', 'suspended']
$$;

-- jobs.step_statuses: every status a step record can have.
-- Answers text[]. Raises nothing.
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
   'only a live job cancels; a finished one stays as it ended (jobs.requeue runs it again)'),
  ('X_JOB_PAGE_INVALID', 'JQ014',
   'pass page_size from 1 to 200, and after or before (not both) with an id a page answered'),
  ('X_JOB_NOT_REMOVABLE', 'JQ015',
   'cancel the running job first (jobs.cancel), then remove it'),
  ('X_JOB_NOT_PROMOTABLE', 'JQ016',
   'only a delayed job, or a ready one backing off, can be made due now');

-- jobs._raise: raise the registered error `code` with its SQLSTATE, a message that starts with
-- the code, structured detail (a JSON object that always carries the code) and the fix as hint.
-- Raises the code itself; an unregistered code raises JQ000 (a bug in durajobs).
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
-- Raises X_ARGUMENT_INVALID.
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
-- Locks nothing. jobs.enqueue_many finds the first request to refuse with the same tests: change
-- both together.
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
-- Raises X_ARGUMENT_INVALID. Locks nothing.
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
-- another transaction created in the same 250 ms slot, due at once and STILL WAITING, already
-- announced it: the workers it woke are claiming and will find this row too. A row of the slot
-- that was already claimed says nothing about this one (its worker may be idle again), so it
-- does not silence the wake: a second job 50 ms after the first would wait for the poll.
-- Rows of the calling transaction share its created_at and are skipped: Postgres folds identical
-- notifications of one transaction anyway. Answers whether it notified. Locks nothing.
-- Reads the slot's rows of the queue by (queue, created_at), whatever the statistics say.
create function jobs._announce(queue text, created_at timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
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
-- A run_id not given is the job's own id, so only a job that continues another's run is in
-- jobs_run_shared_idx.
-- Locks: the unique indexes.
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
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
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
      v_id, enqueue.name, enqueue.queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
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

-- jobs._check_request_shapes: refuse a jobs.enqueue_many requests array (a JSON array) whose
-- shape is wrong, naming the first culprit: an element that is not an object, then a key that is
-- not an argument of jobs.enqueue, then an explicit null where jobs.enqueue refuses NULL (never
-- read as the default), then a JSON object or array where a text argument goes (refused, never
-- stored as its JSON text). Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_request_shapes(requests jsonb)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_arguments constant text[] := array['name', 'input', 'idempotency_key', 'queue', 'tenant_id',
                                       'run_at', 'max_attempts', 'priority', 'id', 'run_id',
                                       'traceparent', 'enqueued_by'];
  v_bad_key text;
begin
  -- one pass over the array tells whether any check below would refuse it; they walk every key
  -- of every request, so they run only then, to name the culprit. The text arguments are
  -- spelled out: a subquery over a list per request cost more than the pass
  if not exists (
       select 1
         from jsonb_array_elements(requests) e
        where case
                when jsonb_typeof(e) <> 'object' then true
                else e - v_arguments <> '{}'::jsonb
                     or e -> 'queue' = 'null'::jsonb
                     or e -> 'max_attempts' = 'null'::jsonb
                     or e -> 'priority' = 'null'::jsonb
                     or jsonb_typeof(e -> 'name') in ('object', 'array')
                     or jsonb_typeof(e -> 'queue') in ('object', 'array')
                     or jsonb_typeof(e -> 'idempotency_key') in ('object', 'array')
                     or jsonb_typeof(e -> 'tenant_id') in ('object', 'array')
                     or jsonb_typeof(e -> 'traceparent') in ('object', 'array')
                     or jsonb_typeof(e -> 'enqueued_by') in ('object', 'array')
              end) then
    return;
  end if;

  if exists (select 1 from jsonb_array_elements(requests) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must hold JSON objects only');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key <> all(v_arguments)
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'is not an argument of jobs.enqueue');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('queue', 'max_attempts', 'priority')
     and jsonb_typeof(k.value) = 'null'
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must not be null (leave it out for the default)');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('name', 'queue', 'idempotency_key', 'tenant_id', 'traceparent', 'enqueued_by')
     and jsonb_typeof(k.value) in ('object', 'array')
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must be a string, not a JSON object or array');
  end if;
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
-- Locks: the unique indexes. One wake per queue per statement. A batch with nothing to refuse and
-- nothing to dedupe is checked in one pass and answered without a lookup, and a deduped request's
-- holder is found by a join: checking each request on its own, and a call per deduped request,
-- cost about as much as the insert. A run_id not given is the job's own id, as in jobs.enqueue.
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
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, 20),
              coalesce(x.priority, 0),
              x.traceparent,
              x.enqueued_by)::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    ord)
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority);
  end if;

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

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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

-- 030_claim: hand waiting jobs to a worker under a lease, re-take the rows of dead workers, and
-- bury the rows whose lease lapsed on their final attempt.
--
-- Tables: jobs.jobs (update), jobs.queue_pauses (read), jobs.counter_buckets (a burial counts).
-- Locks: job rows only, each with `for update skip locked`, so claimers never wait for one
-- another (and the claiming backend's own counter shard).

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
  enqueued_by text,
  has_steps boolean
);

-- jobs._claim: the claim itself, behind jobs.claim_v1. Arguments: the calling function's name
-- (errors name it), then those of jobs.claim_v1, none defaulted. recover_lapsed false skips the
-- burial and the re-take (both read jobs_lease_idx); the waiting rows are handed out as always.
-- Answers has_steps NULL: jobs.claim_v1 fills it in for the rows it answers.
-- Raises what jobs.claim_v1 raises, naming function_name.
create function jobs._claim(
  function_name text,
  queues text[],
  worker_id text,
  batch_size integer,
  visibility interval,
  drop_exhausted text[],
  recover_lapsed boolean
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
-- the statements' plans are kept: re-planning them on every call, as the plan cache would
-- choose to, is most of an idle worker's pickup claim
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      function_name || ': queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', function_name, 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid(function_name, 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid(function_name, 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid(function_name, 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid(function_name, 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid(function_name, 'recover_lapsed', 'must be true or false');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
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
         limit _claim.batch_size
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
             b.last_error, b.traceparent, b.enqueued_by, null::boolean
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
         limit _claim.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs j
           set claimed_by = _claim.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + _claim.visibility,
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
             c.last_error, c.traceparent, c.enqueued_by, null::boolean
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

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
           limit _claim.batch_size - v_taken
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit _claim.batch_size - v_taken
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + _claim.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;


-- jobs.claim_v1: claim up to batch_size jobs of the given queues for worker_id.
-- Arguments: queues (non-empty), worker_id, batch_size (1), visibility (30 s lease),
-- drop_exhausted (job names that end 'failed' instead of 'dead' when their final attempt's lease
-- lapses, because they do not dead-letter) and recover_lapsed (true: this call also buries and
-- re-takes rows whose lease lapsed). A worker passes recover_lapsed true about once a second and
-- false between: the scan for lapsed leases reads every dead entry of jobs_lease_idx that a
-- vacuum has not yet removed, which after a burst of work costs more than the claim itself.
-- Order: first rows whose lease lapsed (a dead worker's, re-taken as a new attempt), then waiting
-- rows due now by priority (lower first), run_at, id. Paused queues are skipped.
-- Answers the claimed rows with state 'running' and their claim token, which every later call on
-- the attempt must present, and has_steps: whether the run may have stored steps, so a worker
-- reads the step history only of runs that may have one. Also answers, with state 'dead' or
-- 'failed', the rows it buried: running rows whose lease lapsed at attempt >= max_attempts,
-- settled in this statement with last_error 'LEASE_LAPSED_FINAL_ATTEMPT' and never handed out;
-- a burial counts as dead (or failed) in the counters. Never more claimed rows than batch_size
-- (the candidates are materialised before the update).
-- Raises X_JOB_CLAIM_QUEUES_EMPTY, X_ARGUMENT_INVALID. Locks: the rows it answers.
create function jobs.claim_v1(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}',
  recover_lapsed boolean default true
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claim, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true
                   from jobs.steps s
                  where s.run_id = c.run_id
                  order by s.run_id, s.name
                  limit 1) is not null
      from jobs._claim('jobs.claim_v1', claim_v1.queues, claim_v1.worker_id,
                       claim_v1.batch_size, claim_v1.visibility, claim_v1.drop_exhausted,
                       claim_v1.recover_lapsed) c;
end;
$$;

-- jobs.worker_running_v1: the rows worker_id holds running, with their claim tokens. A worker
-- whose wait for a claim was cut by a cancel asks it before it stops: the claim may have
-- committed while its answer was thrown away, and the rows it does not know it holds go back
-- uncounted (jobs.nack_v1, fenced on these tokens) instead of lapsing as counted attempts.
-- Reads the running rows only (jobs_lease_idx). Answers (id, claim), in no particular order.
-- Raises X_ARGUMENT_INVALID for a NULL or blank worker_id. Locks nothing.
create function jobs.worker_running_v1(worker_id text)
returns table (id uuid, claim bigint)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.worker_running_v1', 'worker_id', 'must name the worker');
  end if;
  return query
    select j.id, j.claims
      from jobs.jobs j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$$;

-- 040_settle: end or renew an attempt: ack, nack, heartbeat and their batch forms.
--
-- Tables: jobs.jobs (update), jobs.counter_buckets (every ack and counted nack adds to its job
-- name's counters in the settling statement). Locks: the settled row, and the settling backend's
-- own counter shard.
-- Fence: every call matches only a row that is still 'running' under the caller's worker id AND
-- claim token. 'running' lets a cancel stick (the cancelled body's ack matches nothing); the
-- token stops a body whose lease lapsed from settling the attempt that replaced it, even one
-- claimed again by the same worker id. A miss answers false; it never raises.

create type jobs.settle_result as (
  id uuid,
  landed boolean
);

-- jobs._check_fence: refuse a settle call missing its fence.
-- Raises X_ARGUMENT_INVALID. Locks nothing.
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
-- Raises X_ARGUMENT_INVALID. Locks the row.
create function jobs.ack_v1(id uuid, worker_id text, claim bigint)
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

-- jobs.ack_many_v1: ack many claimed jobs of one worker in one statement.
-- Arguments: worker_id, ids and claims (parallel arrays of equal length).
-- Answers (id, landed) per id, in input order. Raises X_ARGUMENT_INVALID. Locks the rows this
-- worker holds under those claims, in id order, each read by primary key.
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
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    settled as (
      update jobs.jobs j
         set state = 'done',
             lease_expires_at = null,
             finished_at = v_now,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
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

-- jobs.nack_v1: end a claimed attempt without success.
-- Arguments: id, worker_id, claim; next_state, the one decision on where the row goes:
-- 'ready' (retry after delay; also a shed), 'suspended' (a park: a sleep, or a job this deploy
-- cannot run, due after delay), 'dead' (dead-lettered) or 'failed' (terminal, not
-- dead-lettered); delay (0, at most 100 years); counts_as_attempt (true; false gives the claim's
-- attempt back, for a shed, a park or an interrupted attempt); error, error_code, error_stack
-- (written only when error is given: a shed writes nothing). A counted 'ready' on the final
-- attempt (attempt >= max_attempts) ends 'dead' instead: the row never runs past its budget.
-- Answers whether it landed. Raises X_ARGUMENT_INVALID. Locks the row.
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

-- jobs.nack_many_v1: nack many claimed jobs of one worker in one call.
-- Arguments: worker_id; nacks, a JSON array of objects with the keys of jobs.nack_v1
-- (id and claim required; next_state, delay as interval text such as '5 seconds' or 'PT5S',
-- counts_as_attempt, error, error_code, error_stack optional).
-- Answers (id, landed) per element, in input order. Raises X_ARGUMENT_INVALID (an unknown key
-- names its element; a value of the wrong type names the value). Locks the rows.
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
-- Raises X_ARGUMENT_INVALID. Locks the row.
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
-- Locks nothing.
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

-- 060_stats: what each queue holds, for dashboards, metrics and autoscalers.
--
-- Tables: jobs.jobs, jobs.queue_pauses (read). Locks nothing.

-- dead rows of a queue, for its dead count: the other counted states have their index already
-- (jobs_claim_idx, jobs_lease_idx), so the stats read no finished row. Rows enter it only as
-- they die, so the hot path never pays for it.
create index jobs_dead_idx
  on jobs.jobs (queue)
  where state = 'dead';

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
-- Arguments: queues (NULL: every queue holding a counted job, and every paused queue; given:
-- exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Each state is read through the partial index that holds it, so the finished rows of a queue,
-- however many, are never read (a metrics scrape calls this). A paused queue is listed even when
-- it holds nothing counted: a pause taken before the jobs come, or one that outlived them, must
-- show.
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
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
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

-- 070_pause: pause and resume a queue. A pause is a row the claim reads, so it takes effect at
-- every worker's next claim; enqueues still land while a queue is paused.
--
-- Tables: jobs.queue_pauses (insert, delete). Locks: the pause row.

-- jobs.pause_queue: stop handing out the jobs of `queue`.
-- Arguments: queue, paused_by (who, for the record). Answers true when this call paused it,
-- false when it was already paused. Raises X_ARGUMENT_INVALID.
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
-- Raises X_ARGUMENT_INVALID.
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
-- Wakes the job's queue.
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

-- 090_cancel: stop a live job. A waiting one is cancelled at once; a running one keeps its
-- claimed_by and claim token, so its worker's next heartbeat answers 'cancelled' and its late
-- ack, nack or step write matches nothing: the row stays cancelled.
--
-- Tables: jobs.jobs (update). Locks: the job row.

-- jobs.cancel: cancel a live job (ready, delayed, running, suspended).
-- Arguments: id; reason (optional, kept in last_error).
-- Answers true. Raises X_JOB_NOT_CANCELLABLE (the job is finished, and is left exactly as it
-- ended, or no job has that id), X_ARGUMENT_INVALID. Locks the row.
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

-- 100_outbox: the transactional outbox, for an application whose business database is not the
-- database that holds the queue. An enqueue inside the application's transaction stages a row
-- here; a relay claims staged rows under a lease, publishes each with jobs.enqueue under the
-- row's own id (so a re-publish after a crash meets the job the first one made, live or
-- finished), and marks it published.
--
-- Tables: jobs.outbox (insert, update). Locks: outbox rows, `for update skip locked` in the claim.
-- Wake: pg_notify('jobs_outbox_wake', '') from a stage, delivered on commit, and only when no
-- committed unclaimed row is already waiting (a relay that has one to do is already busy).
-- Order: rows go out by (staged_at, seq): the transaction's start, then the order the rows were
-- staged in (seq is a sequence: ids are time-ordered only to the millisecond). Claims are
-- serialised (a transaction-scoped advisory lock) and a relay claims only ahead of any row
-- another relay holds, so even with several relays a later row never overtakes an earlier one.

create table jobs.outbox (
  -- the id IS the job's id, and the run id is allocated here: a staged enqueue answers real ids
  id uuid primary key,
  run_id uuid not null,
  staged_at timestamptz not null,
  seq bigint generated always as identity,
  request jsonb not null,
  claimed_by text,
  claim_expires_at timestamptz,
  published_at timestamptz,
  constraint outbox_request_object_check check (jsonb_typeof(request) = 'object')
);

-- what a relay claims: unpublished rows, in publish order
create index outbox_unpublished_idx
  on jobs.outbox (staged_at, seq)
  where published_at is null;

create type jobs.outbox_record as (
  id uuid,
  run_id uuid,
  staged_at timestamptz,
  request jsonb,
  claimed_by text,
  claim_expires_at timestamptz
);

-- jobs.outbox_stage: stage one job in the caller's transaction; it commits or rolls back with
-- the caller's business rows, and a relay publishes it after commit.
-- Arguments: those of jobs.enqueue but id and on_conflict (the staged row's id becomes the
-- job's id; a live holder of the key is found at publish).
-- Answers (id, run_id, false): the ids the job will have. Raises what jobs.enqueue's argument
-- checks raise. Locks nothing but the new row. A run_id not given is the row's (the job's) own
-- id, as in jobs.enqueue.
create function jobs.outbox_stage(
  name text,
  input jsonb,
  idempotency_key text,
  queue text default 'default',
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default 20,
  priority integer default 0,
  run_id uuid default null,
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
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
begin
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key, outbox_stage.queue,
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              outbox_stage.max_attempts, outbox_stage.priority);

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$$;

-- jobs._check_relay: refuse a relay call without a claimant or with an impossible lease.
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_relay(function_name text, relay_id text, ids uuid[])
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if relay_id is null or btrim(relay_id) = '' then
    perform jobs._invalid(function_name, 'relay_id', 'must name the claiming relay');
  end if;
  if ids is null or array_position(ids, null) is not null then
    perform jobs._invalid(function_name, 'ids', 'must be an array of outbox ids without NULL');
  end if;
end;
$$;

-- jobs.outbox_claim: claim up to batch_size staged rows for relay_id under a lease. A claim,
-- not a read: the claimant and the lease are stamped in the locking statement, so a second
-- relay cannot take the same rows until the lease lapses (a dead relay's rows come back then).
-- A relay claims only rows ahead of the first row another relay holds under a live lease, and
-- claims run one at a time: several relays never publish out of order (one works, the others
-- stand by until its rows are published or its lease lapses).
-- Arguments: relay_id, batch_size (100), lease (30 s; positive, at most a day).
-- Answers the claimed rows in (staged_at, seq) order. Raises X_ARGUMENT_INVALID.
-- Locks: an advisory lock for the claiming transaction, then the rows it answers.
create function jobs.outbox_claim(
  relay_id text,
  batch_size integer default 100,
  lease interval default interval '30 seconds'
)
returns setof jobs.outbox_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_held_from jobs.outbox%rowtype;
begin
  perform jobs._check_relay('jobs.outbox_claim', outbox_claim.relay_id, '{}');
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid('jobs.outbox_claim', 'batch_size', 'must be an integer of at least 1');
  end if;
  if lease is null or lease <= interval '0' or lease > interval '1 day' then
    perform jobs._invalid('jobs.outbox_claim', 'lease', 'must be a positive interval of at most a day');
  end if;

  -- one claim at a time (released at commit, so safe behind a pool): the next claim's snapshot
  -- sees this one's stamps, and the prefix rule below holds
  perform pg_advisory_xact_lock(hashtext('jobs.outbox_claim'));

  select o.*
    into v_held_from
    from jobs.outbox o
   where o.published_at is null
     and o.claimed_by is distinct from outbox_claim.relay_id
     and o.claim_expires_at > v_now
   order by o.staged_at, o.seq
   limit 1;

  return query
    with claimable as materialized (
      select o.id
        from jobs.outbox o
       where o.published_at is null
         -- its own held rows too: a relay never claims past rows it still holds
         and (o.claimed_by is null
              or o.claim_expires_at <= v_now
              or o.claimed_by = outbox_claim.relay_id)
         and (v_held_from.id is null
              or (o.staged_at, o.seq) < (v_held_from.staged_at, v_held_from.seq))
       order by o.staged_at, o.seq
       limit outbox_claim.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = outbox_claim.relay_id,
             claim_expires_at = v_now + outbox_claim.lease
        from claimable c
       where o.id = c.id
      returning o.id, o.run_id, o.staged_at, o.seq, o.request, o.claimed_by, o.claim_expires_at
    )
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from claimed c
     order by c.staged_at, c.seq;
end;
$$;

-- jobs.outbox_mark_published: record that relay_id published these rows. Fenced: only rows
-- this relay still holds under a live lease, not yet published (the first writer wins).
-- Arguments: relay_id, ids. Answers the ids it marked. Raises X_ARGUMENT_INVALID.
-- Locks: the rows it marks.
create function jobs.outbox_mark_published(relay_id text, ids uuid[])
returns setof uuid
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_relay('jobs.outbox_mark_published', outbox_mark_published.relay_id,
                            outbox_mark_published.ids);
  return query
    update jobs.outbox o
       set published_at = v_now
     where o.id = any(outbox_mark_published.ids)
       and o.claimed_by = outbox_mark_published.relay_id
       and o.claim_expires_at > v_now
       and o.published_at is null
    returning o.id;
end;
$$;

-- jobs.outbox_release: hand back rows relay_id claimed but did not publish (a failed publish
-- stopped its batch), so the next pass takes them at once instead of after the lease.
-- Fenced like jobs.outbox_mark_published. Arguments: relay_id, ids.
-- Answers how many rows it released. Raises X_ARGUMENT_INVALID. Locks: those rows.
create function jobs.outbox_release(relay_id text, ids uuid[])
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_released integer;
begin
  perform jobs._check_relay('jobs.outbox_release', outbox_release.relay_id, outbox_release.ids);
  update jobs.outbox o
     set claimed_by = null,
         claim_expires_at = null
   where o.id = any(outbox_release.ids)
     and o.claimed_by = outbox_release.relay_id
     and o.claim_expires_at > v_now
     and o.published_at is null;
  get diagnostics v_released = row_count;
  return v_released;
end;
$$;

-- jobs._publish: enqueue one staged request under the outbox row's own ids.
-- Answers jobs.enqueue's answer. Raises what jobs.enqueue raises.
create function jobs._publish(staged jobs.outbox_record)
returns jobs.enqueue_result
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select jobs.enqueue(
    name => staged.request ->> 'name',
    input => staged.request -> 'input',
    idempotency_key => staged.request ->> 'idempotency_key',
    queue => coalesce(staged.request ->> 'queue', 'default'),
    tenant_id => staged.request ->> 'tenant_id',
    run_at => (staged.request ->> 'run_at')::timestamptz,
    max_attempts => coalesce((staged.request ->> 'max_attempts')::integer, 20),
    priority => coalesce((staged.request ->> 'priority')::integer, 0),
    id => staged.id,
    run_id => staged.run_id,
    on_conflict => 'dedupe',
    traceparent => staged.request ->> 'traceparent',
    enqueued_by => staged.request ->> 'enqueued_by')
$$;

-- jobs.outbox_relay: where the outbox and the queue share one database, relay a batch in one
-- transaction: claim, publish each row in order, mark them published. A publish that raises
-- rolls the whole batch back, so nothing overtakes anything.
-- Arguments: relay_id, batch_size (100).
-- Answers one (id, run_id, deduped) per published row, in publish order. Claims are serialised,
-- so a second relay waits for this transaction rather than publish rows behind it.
-- Raises X_ARGUMENT_INVALID and what jobs.enqueue raises. Locks: the claimed outbox rows.
create function jobs.outbox_relay(relay_id text, batch_size integer default 100)
returns setof jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_record jobs.outbox_record;
  v_result jobs.enqueue_result;
  v_published uuid[] := '{}';
begin
  for v_record in
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from jobs.outbox_claim(relay_id => outbox_relay.relay_id,
                             batch_size => outbox_relay.batch_size) c
  loop
    v_result := jobs._publish(v_record);
    v_published := v_published || v_record.id;
    return next v_result;
  end loop;
  perform jobs.outbox_mark_published(outbox_relay.relay_id, v_published);
end;
$$;

-- 110_events: a stored event bus for step.wait_for_event. A run waiting for an event parks
-- 'suspended' with a 'waiting' step; publishing a matching event makes those runs due at once,
-- and the run, resumed, finds the earliest matching event published since its wait began.
-- One clock: events and waits are stamped with the database's time (jobs._now()), so a worker
-- whose clock runs ahead can neither miss an event nor time out early.
--
-- Tables: jobs.events (insert, read), jobs.steps (read), jobs.jobs (update run_at of waiters).
-- Lock order: job rows (the waiters), as everywhere.

create table jobs.events (
  id uuid primary key,
  name text not null,
  payload jsonb not null,
  correlation_key text,
  published_at timestamptz not null,
  expires_at timestamptz not null
);

-- a waiter looks for the earliest event of a name (and key) published since its wait began
create index events_find_idx
  on jobs.events (name, correlation_key, published_at);

create type jobs.event_lookup as (
  found boolean,
  event_id uuid,
  payload jsonb,
  published_at timestamptz,
  now timestamptz
);

-- jobs.publish_event: publish an event and wake the runs waiting for it.
-- Arguments: name; payload (a JSON value, {} by default); correlation_key (ties it to the waits
-- that match on it; a wait without a match takes any event of the name); ttl (7 days).
-- Answers the event's id. Raises X_ARGUMENT_INVALID. Locks: the waiting job rows it wakes.
-- Wakes: pg_notify('jobs_wake', <queue>) once per queue of the runs it made due, on commit.
create function jobs.publish_event(
  name text,
  payload jsonb default '{}',
  correlation_key text default null,
  ttl interval default interval '7 days'
)
returns uuid
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  if name is null or btrim(name) = '' then
    perform jobs._invalid('jobs.publish_event', 'name', 'must be a non-empty event name');
  end if;
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;
  return v_id;
end;
$$;

-- jobs.find_event: the earliest unexpired event of `name` published at or after `after`, with
-- `correlation_key` when one is given; also answers the database's now, the one clock a wait's
-- timeout is judged on.
-- Answers one jobs.event_lookup (found = false and NULL fields when there is none).
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs.find_event(
  name text,
  correlation_key text default null,
  after timestamptz default '-infinity'
)
returns jobs.event_lookup
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_lookup jobs.event_lookup;
begin
  if name is null or btrim(name) = '' then
    perform jobs._invalid('jobs.find_event', 'name', 'must be a non-empty event name');
  end if;
  select true, e.id, e.payload, e.published_at, v_now
    into v_lookup
    from jobs.events e
   where e.name = find_event.name
     and (find_event.correlation_key is null or e.correlation_key = find_event.correlation_key)
     and e.published_at >= coalesce(find_event.after, '-infinity')
     and e.expires_at > v_now
   order by e.published_at, e.id
   limit 1;
  if not found then
    v_lookup := (false, null, null, null, v_now)::jobs.event_lookup;
  end if;
  return v_lookup;
end;
$$;

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
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_state jobs.task_state;
begin
  if task is null or btrim(task) = '' then
    perform jobs._invalid('jobs.scheduler_arm', 'task', 'must be a non-empty task name');
  end if;
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
-- Fenced: only when the watermark has not passed the occurrence. A second fire of the same
-- occurrence, a fire racing it on another node, or a fire of a paused task (which only moves
-- the watermark) enqueues nothing.
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
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_paused boolean;
  v_requests jsonb;
begin
  if task is null or btrim(task) = '' then
    perform jobs._invalid('jobs.scheduler_fire', 'task', 'must be a non-empty task name');
  end if;
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
         last_fired_occurrence = case when t.paused_at is null then scheduler_fire.occurrence
                                      else t.last_fired_occurrence end,
         last_fired_at = case when t.paused_at is null then v_now else t.last_fired_at end
   where t.task = scheduler_fire.task
     and t.watermark < scheduler_fire.occurrence
  returning t.paused_at is not null
    into v_paused;
  if not found or v_paused then
    return;
  end if;

  -- occurrence-scoped keys: a scheduled fire never collides with a manual enqueue of the job
  -- a request without a key is left as it is, so enqueue_many refuses it (X_IDEMPOTENCY_REQUIRED)
  select coalesce(jsonb_agg(
           case
             when nullif(btrim(r.item ->> 'idempotency_key'), '') is null then r.item
             else r.item || jsonb_build_object(
               'idempotency_key',
               format('%s@%s:%s', scheduler_fire.task,
                      to_char(scheduler_fire.occurrence at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      r.item ->> 'idempotency_key'))
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
-- under the skip policy, or a paused task's due occurrence). Never moves it back.
-- Answers whether it moved. Raises X_ARGUMENT_INVALID. Locks the task row.
create function jobs.scheduler_skip(task text, watermark timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if watermark is null or not isfinite(watermark) then
    perform jobs._invalid('jobs.scheduler_skip', 'watermark', 'must be a finite instant');
  end if;
  update jobs.scheduler_tasks t
     set watermark = scheduler_skip.watermark
   where t.task = scheduler_skip.task
     and t.watermark < scheduler_skip.watermark;
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
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  if holder is null or btrim(holder) = '' then
    perform jobs._invalid('jobs.scheduler_lead', 'holder', 'must name the scheduler node');
  end if;
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
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  delete from jobs.scheduler_leases l
   where l.name = scheduler_resign.name
     and l.holder = scheduler_resign.holder;
  return found;
end;
$$;

-- jobs.pause_task / jobs.resume_task: a paused task's due occurrences pass without firing.
-- Answer whether the call changed anything. Raise X_ARGUMENT_INVALID for an unknown task.
create function jobs.pause_task(task text)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
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
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
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
stable
set search_path = pg_catalog, pg_temp
as $$
  select t.task, t.watermark, t.last_fired_occurrence, t.last_fired_at, t.paused_at is not null
    from jobs.scheduler_tasks t
   order by t.task
   limit 1000
$$;

-- 130_operator: what an operator does to jobs: list them a page at a time, remove one, promote a
-- waiting one to now, and the bulk forms of requeue, remove and promote.
--
-- Tables: jobs.jobs (read, update, delete), jobs.steps (delete). Lock order: job rows, then
-- their steps. Bulk calls touch at most 1,000 rows and answer (affected, remaining), so
-- "call until zero" ends.

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

-- jobs._listed_queues: the queues jobs.list_jobs reads: `queue` when given, else every queue
-- name in jobs.jobs, each found with one descent of jobs_queue_created_idx (the next name after
-- the last), not by reading the rows. Answers setof text, in name order. Raises nothing.
create function jobs._listed_queues(queue text)
returns setof text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with recursive names (queue) as (
    select coalesce(_listed_queues.queue,
                    (select j.queue from jobs.jobs j order by j.queue limit 1))
    union all
    select (select j.queue from jobs.jobs j where j.queue > n.queue order by j.queue limit 1)
      from names n
     where _listed_queues.queue is null
       and n.queue is not null
  )
  select n.queue from names n where n.queue is not null
$$;

-- jobs.list_jobs: a page of jobs, newest first by (created_at, id), filtered.
-- Arguments: queue, name, state, tenant_id, id_prefix (the start of the id's text), created_from,
-- created_to (inclusive), page_size (100, at most 200), after (the id of the last row of the
-- previous page: older rows), before (the id of the first row of the page: newer rows, still
-- answered newest first). Never both cursors.
-- The seek reads the cursor row's own created_at, so rows created in the same millisecond are
-- neither skipped nor repeated. A short page is the last one.
-- Reads jobs_queue_created_idx: the asked queue's rows from the cursor on, or, without a queue,
-- each queue's in turn (one index descent finds the next queue name) merged into one page.
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
  before uuid default null
)
returns setof jobs.job_summary
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
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
  if coalesce(list_jobs.after, list_jobs.before) is not null then
    select j.created_at, j.id
      into v_cursor_at, v_cursor_id
      from jobs.jobs j
     where j.id = coalesce(list_jobs.after, list_jobs.before);
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
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$$;

-- jobs.remove: delete a job that is not running, and its run's steps once no row of the run
-- is left. Arguments: id. Answers true.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_REMOVABLE (it is running: cancel it first).
-- Locks: the job row, then its steps. Whether a row of the run is left is two index probes
-- (jobs._run_stands), not a read of the table.
create function jobs.remove(id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job record;
begin
  select j.state, j.run_id into v_job from jobs.jobs j where j.id = remove.id for update;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', remove.id),
                        jsonb_build_object('id', remove.id));
  end if;
  if v_job.state = 'running' then
    perform jobs._raise('X_JOB_NOT_REMOVABLE',
                        format('job %s is running; cancel it first', remove.id),
                        jsonb_build_object('id', remove.id, 'state', v_job.state));
  end if;
  delete from jobs.jobs j where j.id = remove.id;
  if not jobs._run_stands(v_job.run_id) then
    delete from jobs.steps s where s.run_id = v_job.run_id;
  end if;
  return true;
end;
$$;

-- jobs.promote: make a waiting job due now: a delayed one, or a ready one backing off.
-- Arguments: id. Answers true. Wakes its queue.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_PROMOTABLE (it is not waiting on its run_at).
-- Locks the row.
create function jobs.promote(id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_queue text;
  v_state text;
begin
  update jobs.jobs j
     set state = 'ready',
         run_at = v_now,
         updated_at = v_now
   where j.id = promote.id
     and j.state in ('delayed', 'ready')
     and j.run_at > v_now
  returning j.queue into v_queue;
  if found then
    perform pg_notify('jobs_wake', v_queue);
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
  perform jobs._bulk_check('jobs.requeue_many', requeue_many.state,
                           array['done', 'failed', 'dead', 'cancelled']);
  with movable as materialized (
    -- of several finished rows sharing a key, the oldest; none whose key a live job holds
    select distinct on (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id
      from jobs.jobs j
     where j.state = requeue_many.state
       and (requeue_many.queue is null or j.queue = requeue_many.queue)
       and (requeue_many.name is null or j.name = requeue_many.name)
       and (requeue_many.tenant_id is null or j.tenant_id = requeue_many.tenant_id)
       and not exists (
             select 1
               from jobs.jobs live
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
      from jobs.jobs j
      join movable m on m.id = j.id
     where j.state = requeue_many.state
     order by j.created_at, j.id
     limit 1000
       for update of j skip locked
  ),
  moved as (
    update jobs.jobs j
       set state = 'ready', run_at = v_now, attempt = 0, last_error = null,
           last_error_code = null, last_error_stack = null, lease_expires_at = null,
           finished_at = null, updated_at = v_now
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select (select count(*) from movable), count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_movable, v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
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
    -- in no particular order: every row of the state goes, and no index orders the table by age
    -- (an order by age would sort the whole state before the first row is locked)
    select j.id
      from jobs.jobs j
     where j.state = remove_many.state
       and (remove_many.queue is null or j.queue = remove_many.queue)
       and (remove_many.name is null or j.name = remove_many.name)
       and (remove_many.tenant_id is null or j.tenant_id = remove_many.tenant_id)
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
     and not jobs._run_stands(s.run_id);

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
  perform jobs._bulk_check('jobs.promote_many', promote_many.state, array['delayed', 'ready']);
  with batch as materialized (
    select j.id
      from jobs.jobs j
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
    update jobs.jobs j
       set state = 'ready', run_at = v_now, updated_at = v_now
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
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
-- Raises X_ARGUMENT_INVALID. Locks the worker's row.
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

-- 150_counters: per job name, how many attempts ended done, retried, failed or dead, and how
-- long they ran, in time buckets.
--
-- Tables: jobs.counter_buckets. The settling statements (ack, nack, the claim's burial) add to
-- the current minute's bucket through jobs._count_settled, in the statement that moves the row,
-- so a count never disagrees with the rows. Each backend writes one of 64 shards of a minute
-- (its pid modulo 64), so concurrent workers rarely meet on one row, and only briefly when they
-- do. jobs.rollup_counters folds shards and tiers: 1-minute buckets for 24 hours, 5-minute for
-- 7 days, 1-hour for 30 days, then gone. Every settled attempt sits in exactly one row at any
-- time, so readers sum across tiers.

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
-- in UTC whatever the session's time zone.
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

-- 160_progress: how far a running attempt has got, as its body reports it.
--
-- Tables: jobs.jobs (update of progress). Locks: the reported row. Fenced like a heartbeat, so a
-- body whose lease lapsed cannot report on the attempt that replaced it. The worker throttles the
-- calls (at most one a second per run, plus the last before the settle).

-- jobs.progress_v1: record a running attempt's progress.
-- Arguments: id, worker_id, claim (the attempt's fence), done (at least 0), total (NULL when
-- unknown; else at least 0), both finite, note (NULL, at most 1,000 characters).
-- Writes progress = {"done", "total", "note", "at"} on the row. Answers whether it landed.
-- Raises X_ARGUMENT_INVALID. Locks the row.
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

-- 170_inspect: one job in full, and the queue depth an autoscaler scales on.
--
-- Tables: jobs.jobs, jobs.steps, jobs.queue_pauses, jobs.workers (read). Locks nothing.

-- jobs.inspect_job: everything stored about one job, as one JSON document.
-- Arguments: id. Answers {"job": the row (every column, input and progress included),
-- "steps": the run's step trace in the order the steps started, each {name, status, attempts,
-- started_at, updated_at, finished_at, wake_at, duration_ms (NULL until it finished),
-- output_bytes, error}, "queue_paused": whether its queue is paused}.
-- Raises X_JOB_NOT_FOUND. Locks nothing.
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
-- queue with live work, ordered by queue. Locks nothing. Reads the clock once a call, not once a
-- row: a read per row is four fifths of its time at 22,000 live rows.
create function jobs.queue_depth(queues text[] default null)
returns setof jobs.queue_depth_row
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$$;

-- 180_storage: how Postgres keeps the hot table healthy.
--
-- Tables: jobs.jobs, jobs.steps, jobs.outbox (storage parameters only). Every job is inserted,
-- then updated at least twice (claimed, settled), and no update can be HOT (each moves an
-- indexed column or a partial index's predicate), so a busy queue leaves two dead tuples per
-- job. The defaults wait for 20 % of the table to be dead before vacuuming; here a vacuum starts
-- after 1,000 dead tuples plus 2 % of the table, and runs without cost delays, so the claim's
-- index scans stay short.
-- Statistics are taken again after 2,000 changed rows, whatever the table's size, not after the
-- default 5 % of it. A big history of finished rows and a quiet spell can leave the last sample
-- holding no live row; until the next one, the planner takes the partial indexes of live rows
-- for empty and reads a whole backlog through them on a by-id write. At 5 % of a million rows
-- that would last for 50,000 changes. jobs.steps and jobs.outbox grow the same way.

alter table jobs.jobs set (
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_insert_scale_factor = 0.02,
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_vacuum_cost_delay = 0
);

alter table jobs.steps set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);

alter table jobs.outbox set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);

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

-- revision 0002
-- durajobs revision 0002 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
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
  seen_at timestamptz not null
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
  seen_at timestamptz
);

create type jobs.declare_result as (
  name text,
  -- 'added', 'unchanged', 'replaced', or 'conflict' (the stored declaration was kept)
  outcome text,
  -- for 'replaced' and 'conflict': {field: {"stored": ..., "declared": ...}} of what differs
  differences jsonb,
  stored_by text
);

alter type jobs._enqueue_request add attribute tenant_required boolean;

insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_JOB_TENANT_REQUIRED', 'JQ017',
   'declare tenant=lambda input: input.org_id, or tenant=''none'' for a job with no tenant; from SQL pass tenant_id => the tenant the job acts for');

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer);

CREATE OR REPLACE FUNCTION jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  if _check_enqueue.tenant_required and _check_enqueue.tenant_id is null then
    perform jobs._raise(
      'X_JOB_TENANT_REQUIRED',
      format('%s: %stenant_id is required: job %s is declared with a tenant', function_name,
             prefix, _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'tenant_id',
                         'job', _check_enqueue.name),
      'pass tenant_id => the tenant this job acts for (see jobs.job_types())');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._publish(staged jobs.outbox_record)
 RETURNS jobs.enqueue_result
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs.enqueue(
    name => staged.request ->> 'name',
    input => staged.request -> 'input',
    idempotency_key => staged.request ->> 'idempotency_key',
    queue => staged.request ->> 'queue',
    tenant_id => staged.request ->> 'tenant_id',
    run_at => (staged.request ->> 'run_at')::timestamptz,
    max_attempts => (staged.request ->> 'max_attempts')::integer,
    priority => (staged.request ->> 'priority')::integer,
    id => staged.id,
    run_id => staged.run_id,
    on_conflict => 'dedupe',
    traceparent => staged.request ->> 'traceparent',
    enqueued_by => staged.request ->> 'enqueued_by')
$function$;

CREATE OR REPLACE FUNCTION jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb DEFAULT '{}'::jsonb, timeout interval DEFAULT NULL::interval, input_schema jsonb DEFAULT '{}'::jsonb, replace boolean DEFAULT false)
 RETURNS jobs.declare_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_stored jobs.declarations;
  v_differences jsonb;
begin
  if declare_job.name is null or btrim(declare_job.name) = '' then
    perform jobs._invalid('jobs.declare_job', 'name', 'must be a non-empty job name');
  end if;
  if declare_job.queue is null or btrim(declare_job.queue) = '' then
    perform jobs._invalid('jobs.declare_job', 'queue', 'must be a non-empty queue name');
  end if;
  if declare_job.max_attempts is null or declare_job.max_attempts < 1 then
    perform jobs._invalid('jobs.declare_job', 'max_attempts', 'must be an integer of at least 1');
  end if;
  if declare_job.priority is null then
    perform jobs._invalid('jobs.declare_job', 'priority', 'must not be NULL');
  end if;
  if declare_job.tenant_required is null then
    perform jobs._invalid('jobs.declare_job', 'tenant_required', 'must be true or false');
  end if;
  if declare_job.declared_by is null or btrim(declare_job.declared_by) = '' then
    perform jobs._invalid('jobs.declare_job', 'declared_by',
                          'must name who declares (a deploy, worker or host)');
  end if;
  if declare_job.replace is null then
    perform jobs._invalid('jobs.declare_job', 'replace', 'must be true or false');
  end if;

  insert into jobs.declarations as t (
    name, queue, max_attempts, priority, tenant_required, retry, timeout, input_schema,
    declared_by, declared_at, seen_at)
  values (
    declare_job.name, declare_job.queue, declare_job.max_attempts, declare_job.priority,
    declare_job.tenant_required, coalesce(declare_job.retry, '{}'), declare_job.timeout,
    coalesce(declare_job.input_schema, '{}'), declare_job.declared_by, v_now, v_now)
  on conflict on constraint declarations_pkey do nothing;
  if found then
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
                  to_jsonb(declare_job.tenant_required))) as d(field, stored, declared)
   where d.stored <> d.declared;

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
         seen_at = v_now
   where t.name = declare_job.name;
  return (declare_job.name, 'replaced', v_differences, v_stored.declared_by)::jobs.declare_result;
end;
$function$;

drop function if exists jobs.enqueue(name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, id uuid, run_id uuid, on_conflict text, traceparent text, enqueued_by text);

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false));
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by)
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
      or (r.tenant_required and r.tenant_id is null)
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required);
  end if;

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

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.forget_job_type(name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  delete from jobs.declarations t where t.name = forget_job_type.name;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.job_types()
 RETURNS SETOF jobs.job_type
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.name, t.queue, t.max_attempts, t.priority, t.tenant_required, t.retry, t.timeout,
         t.input_schema, t.declared_by, t.declared_at, t.seen_at
    from jobs.declarations t
   order by t.name collate "C"
$function$;

drop function if exists jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, run_id uuid, traceparent text, enqueued_by text);

CREATE OR REPLACE FUNCTION jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, run_id uuid DEFAULT NULL::uuid, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false));

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 2
$function$;

-- revision 0003
-- durajobs revision 0003 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- every existing row is uncapped: no job declared a limit before this revision
alter table jobs.jobs
  add column concurrency_key text,
  add column capped boolean not null default false;

drop index jobs.jobs_claim_idx;
create index jobs_claim_idx
  on jobs.jobs (queue, capped, priority, run_at, id)
  where state in ('ready', 'delayed', 'suspended');
create index jobs_capped_running_idx
  on jobs.jobs (name, concurrency_key)
  where state = 'running' and capped;

alter table jobs.declarations
  add column concurrency integer check (concurrency >= 1),
  add column concurrency_keyed boolean not null default false,
  add check (concurrency is not null or not concurrency_keyed),
  add column when_busy text not null default 'wait' check (when_busy in ('wait', 'fail')),
  add check (when_busy = 'wait' or concurrency_keyed);

alter type jobs.job_type
  add attribute concurrency integer,
  add attribute concurrency_keyed boolean,
  add attribute when_busy text;

create type jobs.limit_row as (
  name text,
  concurrency_key text,
  concurrency integer,
  when_busy text,
  running bigint,
  waiting bigint,
  held_back bigint,
  holders text[]
);

alter type jobs._enqueue_request
  add attribute concurrency_key text,
  add attribute capped boolean,
  add attribute concurrency_keyed boolean;

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean);

drop function if exists jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb, timeout interval, input_schema jsonb, replace boolean);

drop function if exists jobs.enqueue(name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, id uuid, run_id uuid, on_conflict text, traceparent text, enqueued_by text);

drop function if exists jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, run_id uuid, traceparent text, enqueued_by text);

CREATE OR REPLACE FUNCTION jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean DEFAULT false, concurrency_key text DEFAULT NULL::text, concurrency_keyed boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  if _check_enqueue.tenant_required and _check_enqueue.tenant_id is null then
    perform jobs._raise(
      'X_JOB_TENANT_REQUIRED',
      format('%s: %stenant_id is required: job %s is declared with a tenant', function_name,
             prefix, _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'tenant_id',
                         'job', _check_enqueue.name),
      'pass tenant_id => the tenant this job acts for (see jobs.job_types())');
  end if;
  if btrim(_check_enqueue.concurrency_key) = '' or length(_check_enqueue.concurrency_key) > 200 then
    perform jobs._invalid(function_name, prefix || 'concurrency_key',
                          'must be NULL or a non-empty text of at most 200 characters');
  end if;
  if _check_enqueue.concurrency_keyed and _check_enqueue.concurrency_key is null then
    perform jobs._invalid(function_name, prefix || 'concurrency_key',
                          format('is required: job %s limits its concurrency per key',
                                 _check_enqueue.name));
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_request_shapes(requests jsonb)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_arguments constant text[] := array['name', 'input', 'idempotency_key', 'queue', 'tenant_id',
                                       'run_at', 'max_attempts', 'priority', 'id', 'run_id',
                                       'traceparent', 'enqueued_by', 'concurrency_key'];
  v_bad_key text;
begin
  -- one pass over the array tells whether any check below would refuse it; they walk every key
  -- of every request, so they run only then, to name the culprit. The text arguments are
  -- spelled out: a subquery over a list per request cost more than the pass
  if not exists (
       select 1
         from jsonb_array_elements(requests) e
        where case
                when jsonb_typeof(e) <> 'object' then true
                else e - v_arguments <> '{}'::jsonb
                     or e -> 'queue' = 'null'::jsonb
                     or e -> 'max_attempts' = 'null'::jsonb
                     or e -> 'priority' = 'null'::jsonb
                     or jsonb_typeof(e -> 'name') in ('object', 'array')
                     or jsonb_typeof(e -> 'queue') in ('object', 'array')
                     or jsonb_typeof(e -> 'idempotency_key') in ('object', 'array')
                     or jsonb_typeof(e -> 'tenant_id') in ('object', 'array')
                     or jsonb_typeof(e -> 'traceparent') in ('object', 'array')
                     or jsonb_typeof(e -> 'enqueued_by') in ('object', 'array')
                     or jsonb_typeof(e -> 'concurrency_key') in ('object', 'array')
              end) then
    return;
  end if;

  if exists (select 1 from jsonb_array_elements(requests) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must hold JSON objects only');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key <> all(v_arguments)
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'is not an argument of jobs.enqueue');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('queue', 'max_attempts', 'priority')
     and jsonb_typeof(k.value) = 'null'
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must not be null (leave it out for the default)');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('name', 'queue', 'idempotency_key', 'tenant_id', 'traceparent', 'enqueued_by',
                   'concurrency_key')
     and jsonb_typeof(k.value) in ('object', 'array')
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must be a string, not a JSON object or array');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim(function_name text, queues text[], worker_id text, batch_size integer, visibility interval, drop_exhausted text[], recover_lapsed boolean)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      function_name || ': queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', function_name, 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid(function_name, 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid(function_name, 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid(function_name, 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid(function_name, 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid(function_name, 'recover_lapsed', 'must be true or false');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
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
         limit _claim.batch_size
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
             b.last_error, b.traceparent, b.enqueued_by, null::boolean
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
         limit _claim.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs j
           set claimed_by = _claim.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + _claim.visibility,
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
             c.last_error, c.traceparent, c.enqueued_by, null::boolean
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if exists (select 1 from jobs.declarations d where d.concurrency is not null) then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by, l.has_steps
        from jobs._claim_limited(function_name, v_queues, worker_id, v_room, visibility, v_now) l;
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
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + _claim.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_limited(function_name text, queues text[], worker_id text, room integer, visibility interval, now timestamp with time zone)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_free uuid[];
  v_held uuid[];
  v_admitted uuid[];
  v_refused uuid[];
  v_full_jobs text[];
  v_full_keys text[];
  v_lock bigint;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- the groups already at their limit, counted without a lock: only to pass over their rows, so
  -- a backlog of one busy key never hides the other keys' rows behind it
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
  ),
  running as (
    select r.name, r.concurrency_key, count(*) as busy
      from jobs.jobs r
     where r.state = 'running'
       and r.capped
     group by r.name, r.concurrency_key
  )
  select coalesce(array_agg(distinct l.name) filter (
           where not l.concurrency_keyed
             and (select sum(x.busy) from running x where x.name = l.name) >= l.concurrency),
           '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(x.name || E'\x1f' || x.concurrency_key) filter (
           where l.concurrency_keyed and l.when_busy = 'wait' and x.busy >= l.concurrency), '{}')
    into v_full_jobs, v_full_keys
    from limits l
    left join running x on x.name = l.name;

  -- capped candidates in hand-out order, at most what each group has room for now
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
  ),
  waiting as (
    select w.id, w.name, w.concurrency_key, w.priority, w.run_at
      from unnest(_claim_limited.queues) as q(queue)
      cross join lateral (
        select j.id, j.name, j.concurrency_key, j.priority, j.run_at
          from jobs.jobs j
         where j.queue = q.queue
           and j.capped = true
           and j.state in ('ready', 'delayed', 'suspended')
           and j.run_at <= _claim_limited.now
           and not (j.name = any(v_full_jobs))
           and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '') = any(v_full_keys))
         order by j.priority, j.run_at, j.id
         limit _claim_limited.room
      ) w
  ),
  grouped as (
    select w.id, l.concurrency as cap, l.when_busy,
           row_number() over (
             partition by w.name, case when l.concurrency_keyed then w.concurrency_key end
             order by w.priority, w.run_at, w.id) as nth
      from waiting w
      left join limits l on l.name = w.name
  )
  select coalesce(array_agg(g.id), '{}')
    into v_held
    from grouped g
   where g.cap is null or g.when_busy = 'fail' or g.nth <= g.cap;

  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select j.id
        from jobs.jobs j
       where j.id = any(v_held)
         and j.capped = true
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
         for update skip locked
    ) c;

  if cardinality(v_held) > 0 then
    -- by lock key, not by name: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    for v_lock in
      select distinct hashtextextended(
               'durajobs.concurrency:' || j.name || E'\x1f'
               || coalesce(case when d.concurrency_keyed then j.concurrency_key end, ''), 0)
        from jobs.jobs j
        join jobs.declarations d on d.name = j.name and d.concurrency is not null
       where j.id = any(v_held)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, a statement of its own: what each group runs now, committed claims of
    -- the other claimers included
    with held as (
      select j.id, j.name, j.run_id, j.priority, j.run_at, d.concurrency as cap, d.when_busy,
             case when d.concurrency_keyed then j.concurrency_key end as group_key
        from jobs.jobs j
        left join jobs.declarations d on d.name = j.name and d.concurrency is not null
       where j.id = any(v_held)
    ),
    running as (
      select r.name, r.concurrency_key, r.run_id, count(*) as busy
        from jobs.jobs r
       where r.state = 'running'
         and r.capped
         and r.name in (select h.name from held h)
       group by r.name, r.concurrency_key, r.run_id
    ),
    ranked as (
      select h.id, h.cap, h.when_busy,
             row_number() over (partition by h.name, h.group_key
                                order by h.priority, h.run_at, h.id) as nth,
             (select coalesce(sum(x.busy), 0)
                from running x
               where x.name = h.name
                 and (h.group_key is null or x.concurrency_key = h.group_key)) as busy,
             (select coalesce(sum(x.busy), 0)
                from running x
               where x.name = h.name
                 and x.concurrency_key = h.group_key
                 and x.run_id = h.run_id) as busy_own
        from held h
    ),
    decided as (
      select r.id,
             r.cap is null or r.nth <= r.cap - r.busy as admitted,
             -- refused only on evidence that another run holds the key: a running row of
             -- another run, or an earlier candidate this claim admits
             r.when_busy = 'fail'
               and r.busy - r.busy_own + least(r.nth - 1, greatest(r.cap - r.busy, 0)) > 0
               as refused
        from ranked r
    )
    select coalesce(array_agg(d.id) filter (where d.admitted), '{}'),
           coalesce(array_agg(d.id) filter (where not d.admitted and d.refused), '{}')
      into v_admitted, v_refused
      from decided d;

    if cardinality(v_refused) > 0 then
      return query
        with refused as (
          update jobs.jobs j
             set state = 'failed',
                 last_error = format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                     j.concurrency_key, j.name),
                 last_error_code = 'X_JOB_KEY_BUSY',
                 last_error_stack = null,
                 claimed_by = _claim_limited.worker_id,
                 claimed_at = _claim_limited.now,
                 lease_expires_at = null,
                 finished_at = _claim_limited.now,
                 updated_at = _claim_limited.now
           where j.id = any(v_refused)
          returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                    j.max_attempts, j.claims, j.priority, j.run_at, j.created_at,
                    j.lease_expires_at, j.last_error, j.traceparent, j.enqueued_by, j.claimed_at
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at))
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs j
       where j.id = any(v_free || coalesce(v_admitted, '{}'))
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._publish(staged jobs.outbox_record)
 RETURNS jobs.enqueue_result
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs.enqueue(
    name => staged.request ->> 'name',
    input => staged.request -> 'input',
    idempotency_key => staged.request ->> 'idempotency_key',
    queue => staged.request ->> 'queue',
    tenant_id => staged.request ->> 'tenant_id',
    run_at => (staged.request ->> 'run_at')::timestamptz,
    max_attempts => (staged.request ->> 'max_attempts')::integer,
    priority => (staged.request ->> 'priority')::integer,
    id => staged.id,
    run_id => staged.run_id,
    on_conflict => 'dedupe',
    traceparent => staged.request ->> 'traceparent',
    enqueued_by => staged.request ->> 'enqueued_by',
    concurrency_key => staged.request ->> 'concurrency_key')
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped(name text, capped boolean)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  update jobs.jobs j
     set capped = _sync_capped.capped
   where j.name = _sync_capped.name
     and j.state in ('ready', 'delayed', 'running', 'suspended')
     and j.capped <> _sync_capped.capped
$function$;

CREATE OR REPLACE FUNCTION jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb DEFAULT '{}'::jsonb, timeout interval DEFAULT NULL::interval, input_schema jsonb DEFAULT '{}'::jsonb, replace boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, concurrency_keyed boolean DEFAULT false, when_busy text DEFAULT 'wait'::text)
 RETURNS jobs.declare_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_stored jobs.declarations;
  v_differences jsonb;
begin
  if declare_job.name is null or btrim(declare_job.name) = '' then
    perform jobs._invalid('jobs.declare_job', 'name', 'must be a non-empty job name');
  end if;
  if declare_job.queue is null or btrim(declare_job.queue) = '' then
    perform jobs._invalid('jobs.declare_job', 'queue', 'must be a non-empty queue name');
  end if;
  if declare_job.max_attempts is null or declare_job.max_attempts < 1 then
    perform jobs._invalid('jobs.declare_job', 'max_attempts', 'must be an integer of at least 1');
  end if;
  if declare_job.priority is null then
    perform jobs._invalid('jobs.declare_job', 'priority', 'must not be NULL');
  end if;
  if declare_job.tenant_required is null then
    perform jobs._invalid('jobs.declare_job', 'tenant_required', 'must be true or false');
  end if;
  if declare_job.declared_by is null or btrim(declare_job.declared_by) = '' then
    perform jobs._invalid('jobs.declare_job', 'declared_by',
                          'must name who declares (a deploy, worker or host)');
  end if;
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
    perform jobs._sync_capped(declare_job.name, declare_job.concurrency is not null);
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
  perform jobs._sync_capped(declare_job.name, declare_job.concurrency is not null);
  return (declare_job.name, 'replaced', v_differences, v_stored.declared_by)::jobs.declare_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false));
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key, v_declared.concurrency is not null)
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null,
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
      or (r.tenant_required and r.tenant_id is null)
      or btrim(r.concurrency_key) = '' or length(r.concurrency_key) > 200
      or (r.concurrency_keyed and r.concurrency_key is null)
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.forget_job_type(name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  delete from jobs.declarations t where t.name = forget_job_type.name;
  if not found then
    return false;
  end if;
  perform jobs._sync_capped(forget_job_type.name, false);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.job_types()
 RETURNS SETOF jobs.job_type
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select t.name, t.queue, t.max_attempts, t.priority, t.tenant_required, t.retry, t.timeout,
         t.input_schema, t.declared_by, t.declared_at, t.seen_at, t.concurrency,
         t.concurrency_keyed, t.when_busy
    from jobs.declarations t
   order by t.name collate "C"
$function$;

CREATE OR REPLACE FUNCTION jobs.limits(name text DEFAULT NULL::text)
 RETURNS SETOF jobs.limit_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from limits l
      join jobs.jobs j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  grouped as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from limits l
      left join live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  )
  select g.name, g.group_key, g.concurrency, g.when_busy, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end,
         g.holders
    from grouped g
   order by g.name collate "C", g.group_key collate "C" nulls first
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, run_id uuid DEFAULT NULL::uuid, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false),
                              outbox_stage.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false));

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by,
      'concurrency_key', outbox_stage.concurrency_key))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 3
$function$;

-- revision 0004
-- durajobs revision 0004 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- no rule exists yet, so every row keeps its capped flag
create table jobs.limit_rules (
  id bigint generated always as identity primary key,
  queue text,
  tenant_id text,
  every_tenant boolean not null default false,
  concurrency integer check (concurrency >= 0),
  rate integer check (rate >= 0),
  per interval check (per > interval '0'),
  set_by text,
  set_at timestamptz not null,
  check (concurrency is not null or rate is not null),
  check ((rate is null) = (per is null)),
  check (not (every_tenant and tenant_id is not null)),
  constraint limit_rules_selector_key unique nulls not distinct (queue, tenant_id, every_tenant)
);

create table jobs.limit_starts (
  rule_id bigint not null references jobs.limit_rules (id) on delete cascade,
  tenant_id text not null,
  started_at timestamptz not null
);

create index limit_starts_group_idx
  on jobs.limit_starts (rule_id, tenant_id, started_at);

create type jobs.limit_rule as (
  queue text,
  tenant_id text,
  every_tenant boolean,
  concurrency integer,
  rate integer,
  per interval,
  set_by text,
  set_at timestamptz
);

-- cascade: jobs.limits goes with its answer type, and comes back in the generated part
drop type jobs.limit_row cascade;
create type jobs.limit_row as (
  scope text,
  name text,
  concurrency_key text,
  queue text,
  tenant_id text,
  concurrency integer,
  when_busy text,
  rate integer,
  per interval,
  started bigint,
  running bigint,
  waiting bigint,
  held_back bigint,
  holders text[]
);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._sync_capped(name text, capped boolean);

CREATE OR REPLACE FUNCTION jobs._candidate_groups(ids uuid[])
 RETURNS TABLE(id uuid, grp text, cap integer, rate integer, per interval, when_busy text, rule_id bigint, stamp_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with candidates as materialized (
      select j.id, j.name, j.concurrency_key, j.queue, j.tenant_id,
             row_number() over (order by j.id)::integer as ord
        from jobs.jobs j
       where j.id = any(_candidate_groups.ids)
    )
    select c.id,
           case when d.concurrency_keyed
                then 'k:' || d.name || E'\x1f' || coalesce(c.concurrency_key, '')
                else 'j:' || d.name end,
           d.concurrency, null::integer, null::interval, d.when_busy, null::bigint, null::text
      from candidates c
      join jobs.declarations d on d.name = c.name and d.concurrency is not null
    union all
    select c.id, g.grp, g.cap, g.rate, g.per, 'wait', g.rule_id, g.stamp_tenant
      from jobs._rule_groups_of(
             array(select c.queue from candidates c order by c.ord),
             array(select c.tenant_id from candidates c order by c.ord)) g
      join candidates c on c.ord = g.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._capped(name text, queue text, tenant_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1
                   from jobs.declarations d
                  where d.name = _capped.name
                    and d.concurrency is not null)
      or jobs._rules_cap(_capped.queue, _capped.tenant_id)
$function$;

CREATE OR REPLACE FUNCTION jobs._capped_candidates(queues text[], room integer, now timestamp with time zone, full_jobs text[], full_keys text[], blocked_queues text[], blocked_tenants text[], blocked_pairs text[], every_stopped boolean)
 RETURNS uuid[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
declare
  v_held uuid[];
begin
  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select w.id
        from unnest(_capped_candidates.queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs j
           where j.queue = q.queue
             and j.capped = true
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= _capped_candidates.now
             and not (j.name = any(_capped_candidates.full_jobs))
             and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '')
                        = any(_capped_candidates.full_keys))
             and (j.tenant_id is null
                  or not (j.tenant_id = any(_capped_candidates.blocked_tenants)
                          or q.queue || E'\x1f' || j.tenant_id
                               = any(_capped_candidates.blocked_pairs)
                          -- an every_tenant rule at 0 stops tenants that never ran, so no
                          -- count names them: asked of each row, only while such a rule is
                          or (_capped_candidates.every_stopped
                              and jobs._rules_stop(q.queue, j.tenant_id))))
           order by j.priority, j.run_at, j.id
           limit _capped_candidates.room
             for update skip locked
        ) w
       where not (q.queue = any(_capped_candidates.blocked_queues))
       order by w.priority, w.run_at, w.id
       limit _capped_candidates.room
    ) c;
  return v_held;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_selector(function_name text, queue text, tenant_id text, every_tenant boolean)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if queue is not null and (btrim(queue) = '' or length(queue) > 200) then
    perform jobs._invalid(function_name, 'queue',
                          'must be a non-empty queue name of at most 200 characters, or NULL');
  end if;
  if tenant_id is not null and (btrim(tenant_id) = '' or length(tenant_id) > 200) then
    perform jobs._invalid(function_name, 'tenant_id',
                          'must be a non-empty tenant of at most 200 characters, or NULL');
  end if;
  if every_tenant is null then
    perform jobs._invalid(function_name, 'every_tenant', 'must be true or false');
  end if;
  if every_tenant and tenant_id is not null then
    perform jobs._invalid(function_name, 'every_tenant',
                          'cannot be true with a tenant_id: a rule is for one tenant or for each');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim(function_name text, queues text[], worker_id text, batch_size integer, visibility interval, drop_exhausted text[], recover_lapsed boolean)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      function_name || ': queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', function_name, 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid(function_name, 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid(function_name, 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid(function_name, 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid(function_name, 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid(function_name, 'recover_lapsed', 'must be true or false');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
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
         limit _claim.batch_size
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
             b.last_error, b.traceparent, b.enqueued_by, null::boolean
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
         limit _claim.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs j
           set claimed_by = _claim.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + _claim.visibility,
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
             c.last_error, c.traceparent, c.enqueued_by, null::boolean
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if exists (select 1 from jobs.declarations d where d.concurrency is not null)
     or exists (select 1 from jobs.limit_rules) then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by, l.has_steps
        from jobs._claim_limited(function_name, v_queues, worker_id, v_room, visibility, v_now) l;
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
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + _claim.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_limited(function_name text, queues text[], worker_id text, room integer, visibility interval, now timestamp with time zone)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rules boolean := exists (select 1 from jobs.limit_rules);
  v_free uuid[];
  v_stray uuid[];
  v_held uuid[];
  v_admitted uuid[] := '{}';
  v_refused uuid[] := '{}';
  v_full_jobs text[];
  v_full_keys text[];
  v_block_all boolean;
  v_block_queues text[];
  v_block_tenants text[];
  v_block_pairs text[];
  v_every_stopped boolean := exists (select 1
                                       from jobs.limit_rules r
                                      where r.every_tenant
                                        and (r.concurrency = 0 or r.rate = 0));
  v_lock bigint;
  -- group -> attempts it runs, then also the rows this claim admits
  v_used jsonb;
  -- rate group -> starts inside its window, then also the rows this claim admits
  v_started jsonb;
  -- group -> rows this claim admits (evidence that another run holds a 'fail' key)
  v_taken jsonb := '{}';
  v_cand record;
  v_fits boolean;
  v_busy_group text;
  -- the candidates' groups, one element per (candidate, group), from jobs._candidate_groups
  v_cg_ids uuid[];
  v_cg_grps text[];
  v_cg_caps integer[];
  v_cg_rates integer[];
  v_cg_busy text[];
  v_cg_rules bigint[];
  v_cg_tenants text[];
  v_stamp_ids uuid[] := '{}';
  v_stamp_rules bigint[] := '{}';
  v_stamp_tenants text[] := '{}';
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- an enqueue that read the limits before a change committed wrote its row uncapped after the
  -- change marked the live rows: such a row joins the capped ones (it is locked already)
  with stray as (
    update jobs.jobs j
       set capped = true
     where j.id = any(v_free)
       and (exists (select 1
                      from jobs.declarations d
                     where d.name = j.name
                       and d.concurrency is not null)
            or (v_rules and jobs._rules_cap(j.queue, j.tenant_id)))
    returning j.id
  )
  select coalesce(array_agg(stray.id), '{}') into v_stray from stray;
  if cardinality(v_stray) > 0 then
    v_free := array(select f from unnest(v_free) f where not (f = any(v_stray)));
  end if;

  -- the groups already at their limit, counted without a lock: only to pass over their rows
  with at_limit as (
    select g.cap as lim, g.busy, g.when_busy, g.scope_job, g.scope_key, g.scope_queue,
           g.scope_tenant
      from jobs._running_groups() g
     where g.busy >= g.cap
    union all
    select s.rate, s.started, 'wait', null, null, s.scope_queue, s.scope_tenant
      from jobs._started_groups(_claim_limited.now) s
     where v_rules
       and s.started >= s.rate
    -- a rule of one group at 0 stops its scope before anything runs in it
    union all
    select 0, 0, 'wait', null, null, r.queue, r.tenant_id
      from jobs.limit_rules r
     where not r.every_tenant
       and (r.concurrency = 0 or r.rate = 0)
  )
  select coalesce(array_agg(f.scope_job) filter (where f.scope_job is not null
                                                   and f.scope_key is null), '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(f.scope_job || E'\x1f' || f.scope_key)
                    filter (where f.scope_key is not null and f.when_busy = 'wait'), '{}'),
         coalesce(bool_or(f.scope_job is null and f.scope_queue is null
                          and f.scope_tenant is null), false),
         -- no NULL may reach these arrays: `= any` of an array holding one answers NULL, and
         -- the filter would then pass over every row
         coalesce(array_agg(f.scope_queue)
                    filter (where f.scope_job is null and f.scope_tenant is null
                              and f.scope_queue is not null), '{}'),
         coalesce(array_agg(f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is null
                              and f.scope_tenant is not null), '{}'),
         coalesce(array_agg(f.scope_queue || E'\x1f' || f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is not null
                              and f.scope_tenant is not null), '{}')
    into v_full_jobs, v_full_keys, v_block_all, v_block_queues, v_block_tenants, v_block_pairs
    from at_limit f;

  if v_block_all then
    v_held := '{}';
  else
    v_held := jobs._capped_candidates(_claim_limited.queues, _claim_limited.room,
                                      _claim_limited.now, v_full_jobs, v_full_keys,
                                      v_block_queues, v_block_tenants, v_block_pairs,
                                      v_every_stopped);
  end if;

  if cardinality(v_held) > 0 then
    -- by lock key, not by group: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.grp), '{}'),
           coalesce(array_agg(g.cap), '{}'), coalesce(array_agg(g.rate), '{}'),
           coalesce(array_agg(g.when_busy), '{}'), coalesce(array_agg(g.rule_id), '{}'),
           coalesce(array_agg(g.stamp_tenant), '{}')
      into v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules, v_cg_tenants
      from jobs._candidate_groups(v_held) g;

    for v_lock in
      select distinct hashtextextended('durajobs.limit:' || g.grp, 0)
        from unnest(v_cg_grps) as g(grp)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, statements of their own: what each group runs and has started now,
    -- committed claims of the other claimers included
    select coalesce(jsonb_object_agg(g.grp, g.busy), '{}')
      into v_used
      from jobs._running_groups() g;
    if v_rules then
      delete from jobs.limit_starts s
       using jobs.limit_rules r
       where r.id = s.rule_id
         and s.started_at <= _claim_limited.now - r.per
         and (s.rule_id, s.tenant_id) in (
               select g.rule_id, g.stamp_tenant
                 from unnest(v_cg_rules, v_cg_tenants, v_cg_rates) as g(rule_id, stamp_tenant, rate)
                where g.rate is not null);
      select coalesce(jsonb_object_agg(s.grp, s.started), '{}')
        into v_started
        from jobs._started_groups(_claim_limited.now) s;
    else
      v_started := '{}';
    end if;

    -- in hand-out order, each row takes a place in every group it counts in, or none
    for v_cand in
      select j.id, j.run_id, j.name, j.concurrency_key,
             array_agg(g.grp order by g.grp) filter (where g.grp is not null) as grps,
             array_agg(g.cap order by g.grp) filter (where g.grp is not null) as caps,
             array_agg(g.rate order by g.grp) filter (where g.grp is not null) as rates,
             array_agg(g.rule_id order by g.grp) filter (where g.grp is not null) as rule_ids,
             array_agg(g.stamp_tenant order by g.grp) filter (where g.grp is not null)
               as stamp_tenants,
             (array_agg(g.grp) filter (where g.when_busy = 'fail'))[1] as fail_group
        from jobs.jobs j
        left join unnest(v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules,
                         v_cg_tenants)
               as g(id, grp, cap, rate, when_busy, rule_id, stamp_tenant)
          on g.id = j.id
       where j.id = any(v_held)
       group by j.id, j.run_id, j.name, j.concurrency_key, j.priority, j.run_at
       order by j.priority, j.run_at, j.id
    loop
      v_fits := true;
      v_busy_group := null;
      for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
        if v_cand.caps[i] is not null
           and coalesce((v_used ->> v_cand.grps[i])::bigint, 0) >= v_cand.caps[i] then
          v_fits := false;
          v_busy_group := coalesce(v_busy_group, v_cand.grps[i]);
        end if;
        if v_cand.rates[i] is not null
           and coalesce((v_started ->> v_cand.grps[i])::bigint, 0) >= v_cand.rates[i] then
          v_fits := false;
        end if;
      end loop;

      if v_fits then
        v_admitted := v_admitted || v_cand.id;
        for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
          if v_cand.caps[i] is not null then
            v_used := v_used || jsonb_build_object(
              v_cand.grps[i], coalesce((v_used ->> v_cand.grps[i])::bigint, 0) + 1);
            v_taken := v_taken || jsonb_build_object(
              v_cand.grps[i], coalesce((v_taken ->> v_cand.grps[i])::bigint, 0) + 1);
          end if;
          if v_cand.rates[i] is not null then
            v_started := v_started || jsonb_build_object(
              v_cand.grps[i], coalesce((v_started ->> v_cand.grps[i])::bigint, 0) + 1);
            v_stamp_ids := v_stamp_ids || v_cand.id;
            v_stamp_rules := v_stamp_rules || v_cand.rule_ids[i];
            v_stamp_tenants := v_stamp_tenants || v_cand.stamp_tenants[i];
          end if;
        end loop;
      elsif v_cand.fail_group is not null and v_busy_group = v_cand.fail_group
            -- refused only on evidence that another run holds the key: a running row of
            -- another run, or an earlier candidate this claim admits
            and (coalesce((v_taken ->> v_cand.fail_group)::bigint, 0) > 0
                 or exists (select 1
                              from jobs.jobs r
                             where r.state = 'running'
                               and r.capped
                               and r.name = v_cand.name
                               and r.concurrency_key = v_cand.concurrency_key
                               and r.run_id <> v_cand.run_id)) then
        v_refused := v_refused || v_cand.id;
      end if;
    end loop;

    if cardinality(v_refused) > 0 then
      return query
        with refused as (
          update jobs.jobs j
             set state = 'failed',
                 last_error = format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                     j.concurrency_key, j.name),
                 last_error_code = 'X_JOB_KEY_BUSY',
                 last_error_stack = null,
                 claimed_by = _claim_limited.worker_id,
                 claimed_at = _claim_limited.now,
                 lease_expires_at = null,
                 finished_at = _claim_limited.now,
                 updated_at = _claim_limited.now
           where j.id = any(v_refused)
          returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                    j.max_attempts, j.claims, j.priority, j.run_at, j.created_at,
                    j.lease_expires_at, j.last_error, j.traceparent, j.enqueued_by, j.claimed_at
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at))
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs j
       where j.id = any(v_free || v_admitted)
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    ),
    -- a start under a rate is stamped only for a row this statement hands out
    stamped as (
      insert into jobs.limit_starts (rule_id, tenant_id, started_at)
      select s.rule_id, s.tenant_id, _claim_limited.now
        from unnest(v_stamp_ids, v_stamp_rules, v_stamp_tenants) as s(id, rule_id, tenant_id)
       where s.id in (select c.id from claimed c)
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._rule_groups(queue text, tenant_id text)
 RETURNS TABLE(grp text, rule_id bigint, stamp_tenant text, cap integer, rate integer, per interval, scope_queue text, scope_tenant text)
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select g.grp, g.rule_id, g.stamp_tenant, g.cap, g.rate, g.per, g.scope_queue, g.scope_tenant
    from jobs._rule_groups_of(array[_rule_groups.queue], array[_rule_groups.tenant_id]) g
$function$;

CREATE OR REPLACE FUNCTION jobs._rule_groups_of(queues text[], tenant_ids text[])
 RETURNS TABLE(ord integer, grp text, rule_id bigint, stamp_tenant text, cap integer, rate integer, per interval, scope_queue text, scope_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    select g.ord, g.grp, g.rule_id, g.stamp_tenant, g.cap, g.rate, g.per, g.scope_queue,
           g.scope_tenant
      from (
        select x.ord::integer as ord,
               'r:' || r.id || case when r.every_tenant then E'\x1f' || x.tenant_id else '' end
                 as grp,
               r.id as rule_id,
               case when r.every_tenant then x.tenant_id else '' end as stamp_tenant,
               case when own_cap.id is not null then null else r.concurrency end as cap,
               case when own_rate.id is not null then null else r.rate end as rate,
               r.per,
               r.queue as scope_queue,
               case when r.every_tenant then x.tenant_id else r.tenant_id end as scope_tenant
          from unnest(_rule_groups_of.queues, _rule_groups_of.tenant_ids)
                 with ordinality as x(queue, tenant_id, ord)
          join jobs.limit_rules r
            on (r.queue is null or r.queue = x.queue)
           and (r.tenant_id = x.tenant_id
                or (r.tenant_id is null and not r.every_tenant)
                or (r.every_tenant and x.tenant_id is not null))
          -- the tenant's own rule with the same queue scope, per kind
          left join jobs.limit_rules own_cap
            on r.every_tenant
           and own_cap.tenant_id = x.tenant_id
           and own_cap.queue is not distinct from r.queue
           and own_cap.concurrency is not null
          left join jobs.limit_rules own_rate
            on r.every_tenant
           and own_rate.tenant_id = x.tenant_id
           and own_rate.queue is not distinct from r.queue
           and own_rate.rate is not null
      ) g
     where g.cap is not null
        or g.rate is not null;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._rules_cap(queue text, tenant_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (
    select 1
      from jobs.limit_rules r
     where (r.queue is null or r.queue = _rules_cap.queue)
       and (r.tenant_id = _rules_cap.tenant_id
            or (r.tenant_id is null and not r.every_tenant)
            or (r.every_tenant and _rules_cap.tenant_id is not null)))
$function$;

CREATE OR REPLACE FUNCTION jobs._rules_stop(queue text, tenant_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1
                   from jobs._rule_groups(_rules_stop.queue, _rules_stop.tenant_id) g
                  where g.cap = 0
                     or g.rate = 0)
$function$;

CREATE OR REPLACE FUNCTION jobs._running_groups()
 RETURNS TABLE(grp text, cap integer, busy bigint, when_busy text, scope_job text, scope_key text, scope_queue text, scope_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with running as materialized (
      select r.name, r.concurrency_key, r.queue, r.tenant_id, count(*) as n
        from jobs.jobs r
       where r.state = 'running'
         and r.capped
       group by r.name, r.concurrency_key, r.queue, r.tenant_id
    ),
    scopes as materialized (
      select x.queue, x.tenant_id, sum(x.n) as n,
             row_number() over (order by x.queue, x.tenant_id)::integer as ord
        from running x
       group by x.queue, x.tenant_id
    ),
    counted as (
      select case when d.concurrency_keyed
                  then 'k:' || d.name || E'\x1f' || coalesce(x.concurrency_key, '')
                  else 'j:' || d.name end as grp,
             d.concurrency as cap, x.n, d.when_busy, d.name as scope_job,
             case when d.concurrency_keyed then x.concurrency_key end as scope_key,
             null::text as scope_queue, null::text as scope_tenant
        from running x
        join jobs.declarations d on d.name = x.name and d.concurrency is not null
      union all
      select g.grp, g.cap, x.n, 'wait', null, null, g.scope_queue, g.scope_tenant
        from jobs._rule_groups_of(array(select x.queue from scopes x order by x.ord),
                                  array(select x.tenant_id from scopes x order by x.ord)) g
        join scopes x on x.ord = g.ord
       where g.cap is not null
    )
    select c.grp, c.cap, sum(c.n)::bigint, c.when_busy, c.scope_job, c.scope_key, c.scope_queue,
           c.scope_tenant
      from counted c
     group by c.grp, c.cap, c.when_busy, c.scope_job, c.scope_key, c.scope_queue, c.scope_tenant;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._started_groups(now timestamp with time zone)
 RETURNS TABLE(grp text, rate integer, started bigint, scope_queue text, scope_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    select 'r:' || r.id || case when r.every_tenant then E'\x1f' || s.tenant_id else '' end,
           r.rate, count(*), r.queue,
           case when r.every_tenant then s.tenant_id else r.tenant_id end
      from jobs.limit_rules r
      join jobs.limit_starts s
        on s.rule_id = r.id
       and s.started_at > _started_groups.now - r.per
     where r.rate is not null
       -- a tenant whose own rule sets a rate no longer counts under an every_tenant one
       and not (r.every_tenant
                and exists (select 1
                              from jobs.limit_rules o
                             where o.tenant_id = s.tenant_id
                               and o.queue is not distinct from r.queue
                               and o.rate is not null))
     group by r.id, r.rate, r.queue, r.every_tenant, r.tenant_id, s.tenant_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped(name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if exists (select 1
               from jobs.declarations d
              where d.name = _sync_capped.name
                and d.concurrency is not null) then
    update jobs.jobs j
       set capped = true
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and not j.capped;
  else
    update jobs.jobs j
       set capped = false
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and j.capped
       and not jobs._rules_cap(j.queue, j.tenant_id);
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped_scope(queue text, tenant_id text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  update jobs.jobs j
     set capped = not j.capped
   where j.state in ('ready', 'delayed', 'running', 'suspended')
     and (_sync_capped_scope.queue is null or j.queue = _sync_capped_scope.queue)
     and (_sync_capped_scope.tenant_id is null or j.tenant_id = _sync_capped_scope.tenant_id)
     and j.capped <> (exists (select 1
                                from jobs.declarations d
                               where d.name = j.name
                                 and d.concurrency is not null)
                      or jobs._rules_cap(j.queue, j.tenant_id))
$function$;

CREATE OR REPLACE FUNCTION jobs.clear_limit(queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, every_tenant boolean DEFAULT false, kind text DEFAULT 'all'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_id bigint;
begin
  perform jobs._check_selector('jobs.clear_limit', clear_limit.queue, clear_limit.tenant_id,
                               clear_limit.every_tenant);
  if kind is null or kind not in ('concurrency', 'rate', 'all') then
    perform jobs._invalid('jobs.clear_limit', 'kind', 'must be ''concurrency'', ''rate'' or ''all''');
  end if;

  select r.id
    into v_id
    from jobs.limit_rules r
   where r.queue is not distinct from clear_limit.queue
     and r.tenant_id is not distinct from clear_limit.tenant_id
     and r.every_tenant = clear_limit.every_tenant
     and case clear_limit.kind
           when 'concurrency' then r.concurrency is not null
           when 'rate' then r.rate is not null
           else true
         end
     for update;
  if v_id is null then
    return false;
  end if;

  if kind = 'all'
     or (kind = 'concurrency' and (select r.rate is null from jobs.limit_rules r where r.id = v_id))
     or (kind = 'rate' and (select r.concurrency is null from jobs.limit_rules r where r.id = v_id))
  then
    delete from jobs.limit_rules r where r.id = v_id;
  elsif kind = 'concurrency' then
    update jobs.limit_rules r set concurrency = null where r.id = v_id;
  else
    update jobs.limit_rules r set rate = null, per = null where r.id = v_id;
    delete from jobs.limit_starts s where s.rule_id = v_id;
  end if;

  perform jobs._sync_capped_scope(clear_limit.queue, clear_limit.tenant_id);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb DEFAULT '{}'::jsonb, timeout interval DEFAULT NULL::interval, input_schema jsonb DEFAULT '{}'::jsonb, replace boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, concurrency_keyed boolean DEFAULT false, when_busy text DEFAULT 'wait'::text)
 RETURNS jobs.declare_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_stored jobs.declarations;
  v_differences jsonb;
begin
  if declare_job.name is null or btrim(declare_job.name) = '' then
    perform jobs._invalid('jobs.declare_job', 'name', 'must be a non-empty job name');
  end if;
  if declare_job.queue is null or btrim(declare_job.queue) = '' then
    perform jobs._invalid('jobs.declare_job', 'queue', 'must be a non-empty queue name');
  end if;
  if declare_job.max_attempts is null or declare_job.max_attempts < 1 then
    perform jobs._invalid('jobs.declare_job', 'max_attempts', 'must be an integer of at least 1');
  end if;
  if declare_job.priority is null then
    perform jobs._invalid('jobs.declare_job', 'priority', 'must not be NULL');
  end if;
  if declare_job.tenant_required is null then
    perform jobs._invalid('jobs.declare_job', 'tenant_required', 'must be true or false');
  end if;
  if declare_job.declared_by is null or btrim(declare_job.declared_by) = '' then
    perform jobs._invalid('jobs.declare_job', 'declared_by',
                          'must name who declares (a deploy, worker or host)');
  end if;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false));
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
      or (r.tenant_required and r.tenant_id is null)
      or btrim(r.concurrency_key) = '' or length(r.concurrency_key) > 200
      or (r.concurrency_keyed and r.concurrency_key is null)
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.forget_job_type(name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  delete from jobs.declarations t where t.name = forget_job_type.name;
  if not found then
    return false;
  end if;
  perform jobs._sync_capped(forget_job_type.name);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.limits(name text DEFAULT NULL::text)
 RETURNS SETOF jobs.limit_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with declared as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  declared_live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from declared l
      join jobs.jobs j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  declared_rows as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from declared l
      left join declared_live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  ),
  -- the live rows a rule may count, grouped before any rule is asked
  live as materialized (
    select j.queue, j.tenant_id, j.state, j.run_at <= jobs._now() as due, j.claimed_by,
           count(*) as n,
           row_number() over (order by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(),
                                       j.claimed_by)::integer as ord
      from jobs.jobs j
     where limits.name is null
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
     group by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(), j.claimed_by
  ),
  ruled as (
    select g.grp, g.rule_id, g.scope_tenant, l.state, l.due, l.claimed_by, l.n
      from jobs._rule_groups_of(array(select l.queue from live l order by l.ord),
                                array(select l.tenant_id from live l order by l.ord)) g
      join live l on l.ord = g.ord
  ),
  rule_rows as (
    select r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per,
           case when r.every_tenant then x.scope_tenant else r.tenant_id end as tenant_id,
           coalesce('r:' || r.id
                      || case when r.every_tenant then E'\x1f' || x.scope_tenant else '' end,
                    '') as grp,
           coalesce(sum(x.n) filter (where x.state = 'running'), 0) as running,
           coalesce(sum(x.n) filter (where x.state <> 'running'), 0) as waiting,
           coalesce(sum(x.n) filter (where x.state <> 'running' and x.due), 0) as due,
           coalesce(array_agg(distinct x.claimed_by order by x.claimed_by)
                      filter (where x.state = 'running'), '{}') as holders
      from jobs.limit_rules r
      left join ruled x on x.rule_id = r.id
     where limits.name is null
     group by r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per, r.tenant_id,
              x.scope_tenant
  ),
  started as (
    select s.grp, s.started
      from jobs._started_groups(jobs._now()) s
     where limits.name is null
  )
  select u.scope, u.name, u.concurrency_key, u.queue, u.tenant_id, u.concurrency, u.when_busy,
         u.rate, u.per, u.started, u.running, u.waiting, u.held_back, u.holders
    from (
  select 'job' as scope, g.name, g.group_key as concurrency_key, null as queue,
         null as tenant_id, g.concurrency, g.when_busy, null::integer as rate,
         null::interval as per, null::bigint as started, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end as held_back,
         g.holders
    from declared_rows g
  union all
  select case when r.every_tenant then 'every tenant'
              when r.tenant_id is not null then 'tenant'
              when r.queue is not null then 'queue'
              else 'fleet' end,
         null, null, r.queue, r.tenant_id, r.concurrency, null, r.rate, r.per,
         case when r.rate is not null then coalesce(s.started, 0) end,
         r.running, r.waiting,
         case when r.running >= r.concurrency or coalesce(s.started, 0) >= r.rate then r.due
              else 0 end,
         r.holders
    from rule_rows r
    left join started s on s.grp = r.grp
    ) u
   order by u.scope collate "C", u.name collate "C", u.queue collate "C" nulls first,
            u.tenant_id collate "C" nulls first, u.concurrency_key collate "C" nulls first
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
           -- the limits may have changed since the row was live
           capped = jobs._capped(j.name, j.queue, j.tenant_id),
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
  perform jobs._bulk_check('jobs.requeue_many', requeue_many.state,
                           array['done', 'failed', 'dead', 'cancelled']);
  with movable as materialized (
    -- of several finished rows sharing a key, the oldest; none whose key a live job holds
    select distinct on (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id
      from jobs.jobs j
     where j.state = requeue_many.state
       and (requeue_many.queue is null or j.queue = requeue_many.queue)
       and (requeue_many.name is null or j.name = requeue_many.name)
       and (requeue_many.tenant_id is null or j.tenant_id = requeue_many.tenant_id)
       and not exists (
             select 1
               from jobs.jobs live
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
      from jobs.jobs j
      join movable m on m.id = j.id
     where j.state = requeue_many.state
     order by j.created_at, j.id
     limit 1000
       for update of j skip locked
  ),
  moved as (
    update jobs.jobs j
       set state = 'ready', run_at = v_now, attempt = 0, last_error = null,
           last_error_code = null, last_error_stack = null, lease_expires_at = null,
           finished_at = null, updated_at = v_now,
           -- the limits may have changed since the row was live
           capped = jobs._capped(j.name, j.queue, j.tenant_id)
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select (select count(*) from movable), count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_movable, v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;

  -- each moved row was its key's only movable row, and its key is live now
  return (v_affected, v_movable - v_affected)::jobs.bulk_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.set_limit(queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, every_tenant boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, rate integer DEFAULT NULL::integer, per interval DEFAULT NULL::interval, set_by text DEFAULT NULL::text)
 RETURNS jobs.limit_rule
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rule jobs.limit_rules;
begin
  perform jobs._check_selector('jobs.set_limit', set_limit.queue, set_limit.tenant_id,
                               set_limit.every_tenant);
  if set_limit.concurrency is null and set_limit.rate is null then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'or rate must be given (jobs.clear_limit removes a limit)');
  end if;
  if set_limit.concurrency < 0 then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if set_limit.rate < 0 then
    perform jobs._invalid('jobs.set_limit', 'rate',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if (set_limit.rate is null) <> (set_limit.per is null) then
    perform jobs._invalid('jobs.set_limit', 'per',
                          'must be given with rate, and only with it (e.g. rate => 100, per => ''1 minute'')');
  end if;
  if set_limit.per <= interval '0' or set_limit.per > interval '1 day' then
    perform jobs._invalid('jobs.set_limit', 'per', 'must be a positive interval of at most 1 day');
  end if;

  insert into jobs.limit_rules as r (queue, tenant_id, every_tenant, concurrency, rate, per,
                                     set_by, set_at)
  values (set_limit.queue, set_limit.tenant_id, set_limit.every_tenant, set_limit.concurrency,
          set_limit.rate, set_limit.per, set_limit.set_by, jobs._now())
  on conflict on constraint limit_rules_selector_key do update
     set concurrency = coalesce(excluded.concurrency, r.concurrency),
         rate = coalesce(excluded.rate, r.rate),
         per = coalesce(excluded.per, r.per),
         set_by = excluded.set_by,
         set_at = excluded.set_at
  returning r.* into v_rule;

  perform jobs._sync_capped_scope(set_limit.queue, set_limit.tenant_id);
  return (v_rule.queue, v_rule.tenant_id, v_rule.every_tenant, v_rule.concurrency, v_rule.rate,
          v_rule.per, v_rule.set_by, v_rule.set_at)::jobs.limit_rule;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 4
$function$;

-- revision 0005
-- durajobs revision 0005 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create type jobs.heartbeat_answer as (
  id uuid,
  answer text
);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'worker_id',
                          'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility', 'must be a positive interval');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 5
$function$;

-- revision 0006
-- durajobs revision 0006 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- (none)

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._claim(function_name text, queues text[], worker_id text, batch_size integer, visibility interval, drop_exhausted text[], recover_lapsed boolean);

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or btrim(q.name) = ''), false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
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
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
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
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
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
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 6
$function$;

-- revision 0007
-- durajobs revision 0007 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- the live table is today's table, renamed: its rows, indexes and storage parameters stay
alter table jobs.jobs rename to jobs_live;
alter index jobs.jobs_pkey rename to jobs_live_pkey;

create table jobs.jobs_history (
  id uuid not null,
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
  finished_at timestamptz not null,
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
  concurrency_key text,
  capped boolean not null default false
) partition by list (state);

create table jobs.jobs_history_done
  partition of jobs.jobs_history for values in ('done')
  partition by range (finished_at);

create table jobs.jobs_history_done_default
  partition of jobs.jobs_history_done default;

create table jobs.jobs_history_ended
  partition of jobs.jobs_history for values in ('failed', 'dead', 'cancelled');

-- every finished row moves, in this transaction: nothing stored is lost, and no finished row is
-- left where the claim reads
with gone as (
  delete from jobs.jobs_live j
   where j.state not in ('ready', 'delayed', 'running', 'suspended')
  returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id, j.state,
            j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.updated_at,
            j.finished_at, j.claimed_by, j.claimed_at, j.lease_expires_at, j.claims, j.last_error,
            j.last_error_code, j.last_error_stack, j.progress, j.traceparent, j.enqueued_by,
            j.concurrency_key, j.capped
)
insert into jobs.jobs_history (
  id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
  max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
  lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress, traceparent,
  enqueued_by, concurrency_key, capped)
select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, g.state,
       g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, g.updated_at,
       coalesce(g.finished_at, g.updated_at), g.claimed_by, g.claimed_at, g.lease_expires_at,
       g.claims, g.last_error, g.last_error_code, g.last_error_stack, g.progress, g.traceparent,
       g.enqueued_by, g.concurrency_key, g.capped
  from gone g;

alter table jobs.jobs_live
  add constraint jobs_live_state_check
  check (state in ('ready', 'delayed', 'running', 'suspended'));

-- the indexes of finished rows leave the live table for the history's
drop index jobs.jobs_done_idx;
drop index jobs.jobs_ended_idx;
drop index jobs.jobs_dead_idx;

create index jobs_history_id_idx
  on jobs.jobs_history (id);

create index jobs_history_queue_created_idx
  on jobs.jobs_history (queue, created_at, id);

create index jobs_dead_idx
  on jobs.jobs_history_ended (queue)
  where state = 'dead';

create index jobs_done_idx
  on jobs.jobs_history_done_default (finished_at);

create index jobs_ended_idx
  on jobs.jobs_history_ended (finished_at);

create index jobs_history_run_shared_idx
  on jobs.jobs_history (run_id)
  where run_id <> id;

create view jobs.jobs as
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped
    from jobs.jobs_live
  union all
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped
    from jobs.jobs_history;

alter view jobs.jobs alter column priority set default 0;
alter view jobs.jobs alter column attempt set default 0;
alter view jobs.jobs alter column claims set default 0;
alter view jobs.jobs alter column capped set default false;

-- the trigger needs its function now; the functions below replace this placeholder's body
create function jobs._write_through()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$ begin return null; end; $$;

create trigger jobs_write_through
  instead of insert or update or delete on jobs.jobs
  for each row execute function jobs._write_through();

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._announce(queue text, created_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._candidate_groups(ids uuid[])
 RETURNS TABLE(id uuid, grp text, cap integer, rate integer, per interval, when_busy text, rule_id bigint, stamp_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with candidates as materialized (
      select j.id, j.name, j.concurrency_key, j.queue, j.tenant_id,
             row_number() over (order by j.id)::integer as ord
        from jobs.jobs_live j
       where j.id = any(_candidate_groups.ids)
    )
    select c.id,
           case when d.concurrency_keyed
                then 'k:' || d.name || E'\x1f' || coalesce(c.concurrency_key, '')
                else 'j:' || d.name end,
           d.concurrency, null::integer, null::interval, d.when_busy, null::bigint, null::text
      from candidates c
      join jobs.declarations d on d.name = c.name and d.concurrency is not null
    union all
    select c.id, g.grp, g.cap, g.rate, g.per, 'wait', g.rule_id, g.stamp_tenant
      from jobs._rule_groups_of(
             array(select c.queue from candidates c order by c.ord),
             array(select c.tenant_id from candidates c order by c.ord)) g
      join candidates c on c.ord = g.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._capped_candidates(queues text[], room integer, now timestamp with time zone, full_jobs text[], full_keys text[], blocked_queues text[], blocked_tenants text[], blocked_pairs text[], every_stopped boolean)
 RETURNS uuid[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
declare
  v_held uuid[];
begin
  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select w.id
        from unnest(_capped_candidates.queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = true
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= _capped_candidates.now
             and not (j.name = any(_capped_candidates.full_jobs))
             and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '')
                        = any(_capped_candidates.full_keys))
             and (j.tenant_id is null
                  or not (j.tenant_id = any(_capped_candidates.blocked_tenants)
                          or q.queue || E'\x1f' || j.tenant_id
                               = any(_capped_candidates.blocked_pairs)
                          -- an every_tenant rule at 0 stops tenants that never ran, so no
                          -- count names them: asked of each row, only while such a rule is
                          or (_capped_candidates.every_stopped
                              and jobs._rules_stop(q.queue, j.tenant_id))))
           order by j.priority, j.run_at, j.id
           limit _capped_candidates.room
             for update skip locked
        ) w
       where not (q.queue = any(_capped_candidates.blocked_queues))
       order by w.priority, w.run_at, w.id
       limit _capped_candidates.room
    ) c;
  return v_held;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_limited(function_name text, queues text[], worker_id text, room integer, visibility interval, now timestamp with time zone)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rules boolean := exists (select 1 from jobs.limit_rules);
  v_free uuid[];
  v_stray uuid[];
  v_held uuid[];
  v_admitted uuid[] := '{}';
  v_refused uuid[] := '{}';
  v_full_jobs text[];
  v_full_keys text[];
  v_block_all boolean;
  v_block_queues text[];
  v_block_tenants text[];
  v_block_pairs text[];
  v_every_stopped boolean := exists (select 1
                                       from jobs.limit_rules r
                                      where r.every_tenant
                                        and (r.concurrency = 0 or r.rate = 0));
  v_lock bigint;
  -- group -> attempts it runs, then also the rows this claim admits
  v_used jsonb;
  -- rate group -> starts inside its window, then also the rows this claim admits
  v_started jsonb;
  -- group -> rows this claim admits (evidence that another run holds a 'fail' key)
  v_taken jsonb := '{}';
  v_cand record;
  v_fits boolean;
  v_busy_group text;
  -- the candidates' groups, one element per (candidate, group), from jobs._candidate_groups
  v_cg_ids uuid[];
  v_cg_grps text[];
  v_cg_caps integer[];
  v_cg_rates integer[];
  v_cg_busy text[];
  v_cg_rules bigint[];
  v_cg_tenants text[];
  v_stamp_ids uuid[] := '{}';
  v_stamp_rules bigint[] := '{}';
  v_stamp_tenants text[] := '{}';
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs_live j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- an enqueue that read the limits before a change committed wrote its row uncapped after the
  -- change marked the live rows: such a row joins the capped ones (it is locked already)
  with stray as (
    update jobs.jobs_live j
       set capped = true
     where j.id = any(v_free)
       and (exists (select 1
                      from jobs.declarations d
                     where d.name = j.name
                       and d.concurrency is not null)
            or (v_rules and jobs._rules_cap(j.queue, j.tenant_id)))
    returning j.id
  )
  select coalesce(array_agg(stray.id), '{}') into v_stray from stray;
  if cardinality(v_stray) > 0 then
    v_free := array(select f from unnest(v_free) f where not (f = any(v_stray)));
  end if;

  -- the groups already at their limit, counted without a lock: only to pass over their rows
  with at_limit as (
    select g.cap as lim, g.busy, g.when_busy, g.scope_job, g.scope_key, g.scope_queue,
           g.scope_tenant
      from jobs._running_groups() g
     where g.busy >= g.cap
    union all
    select s.rate, s.started, 'wait', null, null, s.scope_queue, s.scope_tenant
      from jobs._started_groups(_claim_limited.now) s
     where v_rules
       and s.started >= s.rate
    -- a rule of one group at 0 stops its scope before anything runs in it
    union all
    select 0, 0, 'wait', null, null, r.queue, r.tenant_id
      from jobs.limit_rules r
     where not r.every_tenant
       and (r.concurrency = 0 or r.rate = 0)
  )
  select coalesce(array_agg(f.scope_job) filter (where f.scope_job is not null
                                                   and f.scope_key is null), '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(f.scope_job || E'\x1f' || f.scope_key)
                    filter (where f.scope_key is not null and f.when_busy = 'wait'), '{}'),
         coalesce(bool_or(f.scope_job is null and f.scope_queue is null
                          and f.scope_tenant is null), false),
         -- no NULL may reach these arrays: `= any` of an array holding one answers NULL, and
         -- the filter would then pass over every row
         coalesce(array_agg(f.scope_queue)
                    filter (where f.scope_job is null and f.scope_tenant is null
                              and f.scope_queue is not null), '{}'),
         coalesce(array_agg(f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is null
                              and f.scope_tenant is not null), '{}'),
         coalesce(array_agg(f.scope_queue || E'\x1f' || f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is not null
                              and f.scope_tenant is not null), '{}')
    into v_full_jobs, v_full_keys, v_block_all, v_block_queues, v_block_tenants, v_block_pairs
    from at_limit f;

  if v_block_all then
    v_held := '{}';
  else
    v_held := jobs._capped_candidates(_claim_limited.queues, _claim_limited.room,
                                      _claim_limited.now, v_full_jobs, v_full_keys,
                                      v_block_queues, v_block_tenants, v_block_pairs,
                                      v_every_stopped);
  end if;

  if cardinality(v_held) > 0 then
    -- by lock key, not by group: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.grp), '{}'),
           coalesce(array_agg(g.cap), '{}'), coalesce(array_agg(g.rate), '{}'),
           coalesce(array_agg(g.when_busy), '{}'), coalesce(array_agg(g.rule_id), '{}'),
           coalesce(array_agg(g.stamp_tenant), '{}')
      into v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules, v_cg_tenants
      from jobs._candidate_groups(v_held) g;

    for v_lock in
      select distinct hashtextextended('durajobs.limit:' || g.grp, 0)
        from unnest(v_cg_grps) as g(grp)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, statements of their own: what each group runs and has started now,
    -- committed claims of the other claimers included
    select coalesce(jsonb_object_agg(g.grp, g.busy), '{}')
      into v_used
      from jobs._running_groups() g;
    if v_rules then
      delete from jobs.limit_starts s
       using jobs.limit_rules r
       where r.id = s.rule_id
         and s.started_at <= _claim_limited.now - r.per
         and (s.rule_id, s.tenant_id) in (
               select g.rule_id, g.stamp_tenant
                 from unnest(v_cg_rules, v_cg_tenants, v_cg_rates) as g(rule_id, stamp_tenant, rate)
                where g.rate is not null);
      select coalesce(jsonb_object_agg(s.grp, s.started), '{}')
        into v_started
        from jobs._started_groups(_claim_limited.now) s;
    else
      v_started := '{}';
    end if;

    -- in hand-out order, each row takes a place in every group it counts in, or none
    for v_cand in
      select j.id, j.run_id, j.name, j.concurrency_key,
             array_agg(g.grp order by g.grp) filter (where g.grp is not null) as grps,
             array_agg(g.cap order by g.grp) filter (where g.grp is not null) as caps,
             array_agg(g.rate order by g.grp) filter (where g.grp is not null) as rates,
             array_agg(g.rule_id order by g.grp) filter (where g.grp is not null) as rule_ids,
             array_agg(g.stamp_tenant order by g.grp) filter (where g.grp is not null)
               as stamp_tenants,
             (array_agg(g.grp) filter (where g.when_busy = 'fail'))[1] as fail_group
        from jobs.jobs_live j
        left join unnest(v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules,
                         v_cg_tenants)
               as g(id, grp, cap, rate, when_busy, rule_id, stamp_tenant)
          on g.id = j.id
       where j.id = any(v_held)
       group by j.id, j.run_id, j.name, j.concurrency_key, j.priority, j.run_at
       order by j.priority, j.run_at, j.id
    loop
      v_fits := true;
      v_busy_group := null;
      for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
        if v_cand.caps[i] is not null
           and coalesce((v_used ->> v_cand.grps[i])::bigint, 0) >= v_cand.caps[i] then
          v_fits := false;
          v_busy_group := coalesce(v_busy_group, v_cand.grps[i]);
        end if;
        if v_cand.rates[i] is not null
           and coalesce((v_started ->> v_cand.grps[i])::bigint, 0) >= v_cand.rates[i] then
          v_fits := false;
        end if;
      end loop;

      if v_fits then
        v_admitted := v_admitted || v_cand.id;
        for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
          if v_cand.caps[i] is not null then
            v_used := v_used || jsonb_build_object(
              v_cand.grps[i], coalesce((v_used ->> v_cand.grps[i])::bigint, 0) + 1);
            v_taken := v_taken || jsonb_build_object(
              v_cand.grps[i], coalesce((v_taken ->> v_cand.grps[i])::bigint, 0) + 1);
          end if;
          if v_cand.rates[i] is not null then
            v_started := v_started || jsonb_build_object(
              v_cand.grps[i], coalesce((v_started ->> v_cand.grps[i])::bigint, 0) + 1);
            v_stamp_ids := v_stamp_ids || v_cand.id;
            v_stamp_rules := v_stamp_rules || v_cand.rule_ids[i];
            v_stamp_tenants := v_stamp_tenants || v_cand.stamp_tenants[i];
          end if;
        end loop;
      elsif v_cand.fail_group is not null and v_busy_group = v_cand.fail_group
            -- refused only on evidence that another run holds the key: a running row of
            -- another run, or an earlier candidate this claim admits
            and (coalesce((v_taken ->> v_cand.fail_group)::bigint, 0) > 0
                 or exists (select 1
                              from jobs.jobs_live r
                             where r.state = 'running'
                               and r.capped
                               and r.name = v_cand.name
                               and r.concurrency_key = v_cand.concurrency_key
                               and r.run_id <> v_cand.run_id)) then
        v_refused := v_refused || v_cand.id;
      end if;
    end loop;

    if cardinality(v_refused) > 0 then
      return query
        with gone as (
          delete from jobs.jobs_live j
           where j.id = any(v_refused)
          returning j
        ),
        refused as (
          insert into jobs.jobs_history as h
          select e.*
            from gone g
           cross join lateral jobs._ended(
                   g.j, 'failed', _claim_limited.now,
                   error => format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                   (g.j).concurrency_key, (g.j).name),
                   error_code => 'X_JOB_KEY_BUSY',
                   claimed_by => _claim_limited.worker_id) e
          returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                    h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                    h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at))
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs_live j
       where j.id = any(v_free || v_admitted)
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    ),
    -- a start under a rate is stamped only for a row this statement hands out
    stamped as (
      insert into jobs.limit_starts (rule_id, tenant_id, started_at)
      select s.rule_id, s.tenant_id, _claim_limited.now
        from unnest(v_stamp_ids, v_stamp_rules, v_stamp_tenants) as s(id, rule_id, tenant_id)
       where s.id in (select c.id from claimed c)
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._drop_day(partition_name text, batch_size integer, OUT dropped_jobs integer, OUT dropped_steps integer)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs._ended(j jobs.jobs_live, state text, now timestamp with time zone, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text, give_back_attempt boolean DEFAULT false, claimed_by text DEFAULT NULL::text)
 RETURNS jobs.jobs_history
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select row(
    j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
    _ended.state, j.priority,
    case when _ended.give_back_attempt then greatest(j.attempt - 1, 0) else j.attempt end,
    j.max_attempts, j.run_at, j.created_at,
    _ended.now,  -- updated_at
    _ended.now,  -- finished_at
    coalesce(_ended.claimed_by, j.claimed_by),
    case when _ended.claimed_by is null then j.claimed_at else _ended.now end,
    null,        -- lease_expires_at
    j.claims,
    case when _ended.error is null then j.last_error else _ended.error end,
    case when _ended.error is null then j.last_error_code else _ended.error_code end,
    case when _ended.error is null then j.last_error_stack else _ended.error_stack end,
    j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
  )::jobs.jobs_history
$function$;

CREATE OR REPLACE FUNCTION jobs._find_live(name text, tenant_id text, idempotency_key text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_result jobs.enqueue_result;
begin
  select j.id, j.run_id, true
    into v_result
    from jobs.jobs_live j
   where j.name = _find_live.name
     and coalesce(j.tenant_id, '') = coalesce(_find_live.tenant_id, '')
     and j.idempotency_key = _find_live.idempotency_key
     and j.state in ('ready', 'delayed', 'running', 'suspended')
   limit 1;
  return v_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._history_day(day date)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 'jobs_history_done_p' || to_char(_history_day.day, 'YYYYMMDD')
$function$;

CREATE OR REPLACE FUNCTION jobs._revived(h jobs.jobs_history, now timestamp with time zone)
 RETURNS jobs.jobs_live
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select row(
    h.id, h.name, h.queue, h.input, h.idempotency_key, h.tenant_id, h.run_id,
    'ready', h.priority,
    0,           -- attempt
    h.max_attempts,
    _revived.now,  -- run_at
    h.created_at,
    _revived.now,  -- updated_at
    null,        -- finished_at
    h.claimed_by, h.claimed_at,
    null,        -- lease_expires_at
    h.claims,
    null, null, null,  -- last_error, last_error_code, last_error_stack
    h.progress, h.traceparent, h.enqueued_by, h.concurrency_key,
    -- the limits may have changed since the row was live
    jobs._capped(h.name, h.queue, h.tenant_id)
  )::jobs.jobs_live
$function$;

CREATE OR REPLACE FUNCTION jobs._run_stands(run_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs._running_groups()
 RETURNS TABLE(grp text, cap integer, busy bigint, when_busy text, scope_job text, scope_key text, scope_queue text, scope_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with running as materialized (
      select r.name, r.concurrency_key, r.queue, r.tenant_id, count(*) as n
        from jobs.jobs_live r
       where r.state = 'running'
         and r.capped
       group by r.name, r.concurrency_key, r.queue, r.tenant_id
    ),
    scopes as materialized (
      select x.queue, x.tenant_id, sum(x.n) as n,
             row_number() over (order by x.queue, x.tenant_id)::integer as ord
        from running x
       group by x.queue, x.tenant_id
    ),
    counted as (
      select case when d.concurrency_keyed
                  then 'k:' || d.name || E'\x1f' || coalesce(x.concurrency_key, '')
                  else 'j:' || d.name end as grp,
             d.concurrency as cap, x.n, d.when_busy, d.name as scope_job,
             case when d.concurrency_keyed then x.concurrency_key end as scope_key,
             null::text as scope_queue, null::text as scope_tenant
        from running x
        join jobs.declarations d on d.name = x.name and d.concurrency is not null
      union all
      select g.grp, g.cap, x.n, 'wait', null, null, g.scope_queue, g.scope_tenant
        from jobs._rule_groups_of(array(select x.queue from scopes x order by x.ord),
                                  array(select x.tenant_id from scopes x order by x.ord)) g
        join scopes x on x.ord = g.ord
       where g.cap is not null
    )
    select c.grp, c.cap, sum(c.n)::bigint, c.when_busy, c.scope_job, c.scope_key, c.scope_queue,
           c.scope_tenant
      from counted c
     group by c.grp, c.cap, c.when_busy, c.scope_job, c.scope_key, c.scope_queue, c.scope_tenant;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped(name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if exists (select 1
               from jobs.declarations d
              where d.name = _sync_capped.name
                and d.concurrency is not null) then
    update jobs.jobs_live j
       set capped = true
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and not j.capped;
  else
    update jobs.jobs_live j
       set capped = false
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and j.capped
       and not jobs._rules_cap(j.queue, j.tenant_id);
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped_scope(queue text, tenant_id text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  update jobs.jobs_live j
     set capped = not j.capped
   where j.state in ('ready', 'delayed', 'running', 'suspended')
     and (_sync_capped_scope.queue is null or j.queue = _sync_capped_scope.queue)
     and (_sync_capped_scope.tenant_id is null or j.tenant_id = _sync_capped_scope.tenant_id)
     and j.capped <> (exists (select 1
                                from jobs.declarations d
                               where d.name = j.name
                                 and d.concurrency is not null)
                      or jobs._rules_cap(j.queue, j.tenant_id))
$function$;

CREATE OR REPLACE FUNCTION jobs._write_through()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if tg_op in ('UPDATE', 'DELETE') then
    delete from jobs.jobs_live j where j.id = old.id;
    if not found then
      delete from jobs.jobs_history j where j.id = old.id;
    end if;
  end if;
  if tg_op = 'DELETE' then
    return old;
  end if;
  if new.state in ('ready', 'delayed', 'running', 'suspended') then
    insert into jobs.jobs_live values (new.*);
  else
    new.finished_at := coalesce(new.finished_at, jobs._now());
    insert into jobs.jobs_history values (new.*);
  end if;
  return new;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
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
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_v1(id uuid, worker_id text, claim bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with gone as (
    delete from jobs.jobs_live j
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j
  ),
  settled as (
    insert into jobs.jobs_history as h
    select e.* from gone g cross join lateral jobs._ended(g.j, 'done', v_now) e
    returning h.name, h.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.cancel(id uuid, reason text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;

  with gone as (
    delete from jobs.jobs_live j
     where j.id = cancel.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                  error => 'cancelled' || coalesce(': ' || cancel.reason, ''),
                                  error_code => 'X_JOB_CANCELLED') e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or btrim(q.name) = ''), false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
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
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
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
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false));
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
      or (r.tenant_required and r.tenant_id is null)
      or btrim(r.concurrency_key) = '' or length(r.concurrency_key) > 200
      or (r.concurrency_keyed and r.concurrency_key is null)
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'worker_id',
                          'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility', 'must be a positive interval');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility', 'must be a positive interval');
  end if;

  update jobs.jobs_live j
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
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.limits(name text DEFAULT NULL::text)
 RETURNS SETOF jobs.limit_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with declared as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  declared_live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from declared l
      join jobs.jobs_live j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  declared_rows as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from declared l
      left join declared_live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  ),
  -- the live rows a rule may count, grouped before any rule is asked
  live as materialized (
    select j.queue, j.tenant_id, j.state, j.run_at <= jobs._now() as due, j.claimed_by,
           count(*) as n,
           row_number() over (order by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(),
                                       j.claimed_by)::integer as ord
      from jobs.jobs_live j
     where limits.name is null
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
     group by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(), j.claimed_by
  ),
  ruled as (
    select g.grp, g.rule_id, g.scope_tenant, l.state, l.due, l.claimed_by, l.n
      from jobs._rule_groups_of(array(select l.queue from live l order by l.ord),
                                array(select l.tenant_id from live l order by l.ord)) g
      join live l on l.ord = g.ord
  ),
  rule_rows as (
    select r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per,
           case when r.every_tenant then x.scope_tenant else r.tenant_id end as tenant_id,
           coalesce('r:' || r.id
                      || case when r.every_tenant then E'\x1f' || x.scope_tenant else '' end,
                    '') as grp,
           coalesce(sum(x.n) filter (where x.state = 'running'), 0) as running,
           coalesce(sum(x.n) filter (where x.state <> 'running'), 0) as waiting,
           coalesce(sum(x.n) filter (where x.state <> 'running' and x.due), 0) as due,
           coalesce(array_agg(distinct x.claimed_by order by x.claimed_by)
                      filter (where x.state = 'running'), '{}') as holders
      from jobs.limit_rules r
      left join ruled x on x.rule_id = r.id
     where limits.name is null
     group by r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per, r.tenant_id,
              x.scope_tenant
  ),
  started as (
    select s.grp, s.started
      from jobs._started_groups(jobs._now()) s
     where limits.name is null
  )
  select u.scope, u.name, u.concurrency_key, u.queue, u.tenant_id, u.concurrency, u.when_busy,
         u.rate, u.per, u.started, u.running, u.waiting, u.held_back, u.holders
    from (
  select 'job' as scope, g.name, g.group_key as concurrency_key, null as queue,
         null as tenant_id, g.concurrency, g.when_busy, null::integer as rate,
         null::interval as per, null::bigint as started, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end as held_back,
         g.holders
    from declared_rows g
  union all
  select case when r.every_tenant then 'every tenant'
              when r.tenant_id is not null then 'tenant'
              when r.queue is not null then 'queue'
              else 'fleet' end,
         null, null, r.queue, r.tenant_id, r.concurrency, null, r.rate, r.per,
         case when r.rate is not null then coalesce(s.started, 0) end,
         r.running, r.waiting,
         case when r.running >= r.concurrency or coalesce(s.started, 0) >= r.rate then r.due
              else 0 end,
         r.holders
    from rule_rows r
    left join started s on s.grp = r.grp
    ) u
   order by u.scope collate "C", u.name collate "C", u.queue collate "C" nulls first,
            u.tenant_id collate "C" nulls first, u.concurrency_key collate "C" nulls first
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
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

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.prepare_history(days integer DEFAULT 2)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_today date := (jobs._now() at time zone 'UTC')::date;
  v_day date;
  v_from timestamptz;
  v_made integer := 0;
begin
  if days is null or days < 0 or days > 31 then
    perform jobs._invalid('jobs.prepare_history', 'days', 'must be between 0 and 31');
  end if;
  for v_day in select v_today + g from generate_series(0, prepare_history.days) g loop
    continue when to_regclass('jobs.' || jobs._history_day(v_day)) is not null;
    v_from := v_day::timestamp at time zone 'UTC';
    continue when exists (select 1
                            from jobs.jobs_history_done_default d
                           where d.finished_at >= v_from
                             and d.finished_at < v_from + interval '1 day');
    execute format('create table jobs.%I partition of jobs.jobs_history_done '
                   'for values from (%L) to (%L)',
                   jobs._history_day(v_day), v_from, v_from + interval '1 day');
    v_made := v_made + 1;
  end loop;
  return v_made;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.progress_v1(id uuid, worker_id text, claim bigint, done numeric, total numeric DEFAULT NULL::numeric, note text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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

  update jobs.jobs_live j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.promote(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queue text;
  v_state text;
begin
  update jobs.jobs_live j
     set state = 'ready',
         run_at = v_now,
         updated_at = v_now
   where j.id = promote.id
     and j.state in ('delayed', 'ready')
     and j.run_at > v_now
  returning j.queue into v_queue;
  if found then
    perform pg_notify('jobs_wake', v_queue);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.promote_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_affected integer;
  v_remaining bigint;
  v_queues text[];
  v_queue text;
begin
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
    perform pg_notify('jobs_wake', v_queue);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval)
 RETURNS uuid
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  if name is null or btrim(name) = '' then
    perform jobs._invalid('jobs.publish_event', 'name', 'must be a non-empty event name');
  end if;
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer := 0;
  v_rows integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
  v_day text;
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

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_depth(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_depth_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs_live j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_stats(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_stat
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_history_ended j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
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
$function$;

CREATE OR REPLACE FUNCTION jobs.record_step_v1(id uuid, worker_id text, claim bigint, name text, status text, output jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, wake_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jobs.step_record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job record;
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_table text;
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
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
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
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
    perform pg_notify('jobs_wake', v_queue);
  end loop;

  -- each moved row was its key's only movable row, and its key is live now
  return (v_affected, v_movable - v_affected)::jobs.bulk_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 7
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_running_v1(worker_id text)
 RETURNS TABLE(id uuid, claim bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.worker_running_v1', 'worker_id', 'must name the worker');
  end if;
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$function$;

-- revision 0008
-- durajobs revision 0008 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_PERMISSION_DENIED', 'JQ018',
   'run it as the role that owns the schema jobs (the role that ran durajobs migrate)');

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._now()
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select now()
$function$;

CREATE OR REPLACE FUNCTION jobs.list_jobs(queue text DEFAULT NULL::text, name text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, id_prefix text DEFAULT NULL::text, created_from timestamp with time zone DEFAULT NULL::timestamp with time zone, created_to timestamp with time zone DEFAULT NULL::timestamp with time zone, page_size integer DEFAULT 100, after uuid DEFAULT NULL::uuid, before uuid DEFAULT NULL::uuid)
 RETURNS SETOF jobs.job_summary
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_sort TO 'off'
AS $function$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
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
  if coalesce(list_jobs.after, list_jobs.before) is not null then
    select j.created_at, j.id
      into v_cursor_at, v_cursor_id
      from jobs.jobs j
     where j.id = coalesce(list_jobs.after, list_jobs.before);
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
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.use_test_clock(enabled boolean DEFAULT true)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if enabled is null then
    perform jobs._invalid('jobs.use_test_clock', 'enabled', 'must be true or false');
  end if;
  begin
    execute format(
      'create or replace function jobs._now() returns timestamptz language sql stable '
      'set search_path = pg_catalog, pg_temp as %L',
      case when enabled
           then 'select coalesce(nullif(current_setting(''durajobs.now'', true), '''')'
                '::timestamptz, now())'
           else 'select now()' end);
  exception
    when insufficient_privilege then
      perform jobs._raise(
        'X_PERMISSION_DENIED',
        'jobs.use_test_clock: only the owner of jobs._now may switch the test clock',
        jsonb_build_object('function', 'jobs.use_test_clock'));
  end;
  return enabled;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 8
$function$;

-- revision 0009
-- durajobs revision 0009 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.size_limits (
  name text primary key check (name in ('input', 'step_output', 'error_text')),
  max_bytes integer not null check (max_bytes between 1024 and 104857600)
);

insert into jobs.size_limits (name, max_bytes) values
  ('input', 1048576),
  ('step_output', 1048576),
  ('error_text', 65536);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean, concurrency_key text, concurrency_keyed boolean);

CREATE OR REPLACE FUNCTION jobs._bad_label(value text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select value !~ '[^[:space:]]' or length(value) > 200
$function$;

CREATE OR REPLACE FUNCTION jobs._check_bytes(function_name text, argument text, size integer, limit_name text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_max integer := jobs._max_bytes(limit_name);
begin
  if size > v_max then
    perform jobs._raise(
      'X_ARGUMENT_INVALID',
      format('%s: %s is %s bytes, over the %s limit of %s bytes', function_name, argument, size,
             limit_name, v_max),
      jsonb_build_object('function', function_name, 'argument', argument, 'bytes', size,
                         'limit', limit_name, 'max_bytes', v_max),
      format('store less (keep large data elsewhere and pass its address), or have the schema''s '
             'owner raise the limit: select jobs.set_size_limit(''%s'', <bytes>)', limit_name));
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean DEFAULT false, concurrency_key text DEFAULT NULL::text, concurrency_keyed boolean DEFAULT false, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- the usual request passes every test below at once; only a refused one walks them to find
  -- which argument to name. jobs.enqueue_many's pass is this same expression: change both.
  if (_check_enqueue.name ~ '[^[:space:]]' and length(_check_enqueue.name) <= 200
      and jsonb_typeof(_check_enqueue.input) = 'object'
      -- no limit is under 1 KiB, so only a larger input reads the limit
      and ((pg_column_size(_check_enqueue.input) <= 1024
            and pg_column_compression(_check_enqueue.input) is null)
           or jobs._json_bytes(_check_enqueue.input) <= jobs._max_bytes('input'))
      and _check_enqueue.idempotency_key ~ '[^[:space:]]'
      and length(_check_enqueue.idempotency_key) <= 200
      and _check_enqueue.queue ~ '[^[:space:]]' and length(_check_enqueue.queue) <= 200
      and (_check_enqueue.tenant_id is null
           or (_check_enqueue.tenant_id ~ '[^[:space:]]'
               and length(_check_enqueue.tenant_id) <= 200))
      and _check_enqueue.run_at between jobs._now() - interval '100 years'
                                    and jobs._now() + interval '100 years'
      and _check_enqueue.max_attempts between 1 and 1000
      and _check_enqueue.priority between -1000 and 1000
      and not (_check_enqueue.tenant_required and _check_enqueue.tenant_id is null)
      and (_check_enqueue.concurrency_key is null
           or (_check_enqueue.concurrency_key ~ '[^[:space:]]'
               and length(_check_enqueue.concurrency_key) <= 200))
      and not (_check_enqueue.concurrency_keyed and _check_enqueue.concurrency_key is null)
      and (_check_enqueue.traceparent is null
           or jobs._valid_traceparent(_check_enqueue.traceparent))
      and (_check_enqueue.enqueued_by is null
           or (_check_enqueue.enqueued_by ~ '[^[:space:]]'
               and length(_check_enqueue.enqueued_by) <= 200))) is true then
    return;
  end if;

  perform jobs._check_label(function_name, prefix || 'name', _check_enqueue.name);
  if _check_enqueue.input is null or jsonb_typeof(_check_enqueue.input) <> 'object' then
    perform jobs._raise(
      'X_JOB_INPUT_INVALID',
      format('%s: %sinput must be a JSON object, got %s', function_name, prefix,
             coalesce(jsonb_typeof(_check_enqueue.input), 'NULL')),
      jsonb_build_object('function', function_name, 'argument', prefix || 'input',
                         'job', _check_enqueue.name));
  end if;
  perform jobs._check_bytes(function_name, prefix || 'input',
                            jobs._json_bytes(_check_enqueue.input), 'input');
  if _check_enqueue.idempotency_key is null
     or _check_enqueue.idempotency_key !~ '[^[:space:]]' then
    perform jobs._raise(
      'X_IDEMPOTENCY_REQUIRED',
      format('%s: %sidempotency_key is required for job %s', function_name, prefix,
             _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'idempotency_key',
                         'job', _check_enqueue.name));
  end if;
  perform jobs._check_label(function_name, prefix || 'idempotency_key',
                            _check_enqueue.idempotency_key);
  perform jobs._check_label(function_name, prefix || 'queue', _check_enqueue.queue);
  perform jobs._check_label(function_name, prefix || 'tenant_id', _check_enqueue.tenant_id,
                            required => false);
  if _check_enqueue.run_at is null
     or not (_check_enqueue.run_at between jobs._now() - interval '100 years'
                                       and jobs._now() + interval '100 years') then
    perform jobs._invalid(function_name, prefix || 'run_at',
                          'must be an instant within 100 years of now');
  end if;
  if _check_enqueue.max_attempts is null or _check_enqueue.max_attempts not between 1 and 1000 then
    perform jobs._invalid(function_name, prefix || 'max_attempts',
                          'must be an integer from 1 to 1000');
  end if;
  if _check_enqueue.priority is null or _check_enqueue.priority not between -1000 and 1000 then
    perform jobs._invalid(function_name, prefix || 'priority',
                          'must be an integer from -1000 to 1000 (0 is the default)');
  end if;
  if _check_enqueue.tenant_required and _check_enqueue.tenant_id is null then
    perform jobs._raise(
      'X_JOB_TENANT_REQUIRED',
      format('%s: %stenant_id is required: job %s is declared with a tenant', function_name,
             prefix, _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'tenant_id',
                         'job', _check_enqueue.name),
      'pass tenant_id => the tenant this job acts for (see jobs.job_types())');
  end if;
  perform jobs._check_label(function_name, prefix || 'concurrency_key',
                            _check_enqueue.concurrency_key, required => false);
  if _check_enqueue.concurrency_keyed and _check_enqueue.concurrency_key is null then
    perform jobs._invalid(function_name, prefix || 'concurrency_key',
                          format('is required: job %s limits its concurrency per key',
                                 _check_enqueue.name));
  end if;
  perform jobs._check_traceparent(function_name, prefix || 'traceparent',
                                  _check_enqueue.traceparent);
  perform jobs._check_label(function_name, prefix || 'enqueued_by', _check_enqueue.enqueued_by,
                            required => false);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_fence(function_name text, id uuid, worker_id text, claim bigint)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if id is null then
    perform jobs._invalid(function_name, 'id', 'must be a job id');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label(function_name, 'worker_id', worker_id);
  end if;
  if claim is null then
    perform jobs._invalid(function_name, 'claim', 'must be the claim token jobs.claim_v1 answered');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_interval(function_name text, argument text, value interval, low interval, high interval)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if value is null or value < low or value > high then
    perform jobs._invalid(function_name, argument,
                          format('must be an interval from %s to %s, got %s', low, high,
                                 coalesce(value::text, 'NULL')));
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_label(function_name text, argument text, value text, required boolean DEFAULT true)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if value is null then
    if required then
      perform jobs._invalid(function_name, argument,
                            'must not be NULL: pass a name of 1 to 200 characters');
    end if;
  elsif value !~ '[^[:space:]]' then
    perform jobs._invalid(function_name, argument,
                          'must not be blank (empty or only whitespace)');
  elsif length(value) > 200 then
    perform jobs._invalid(function_name, argument,
                          format('must be at most 200 characters, got %s', length(value)));
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_labels(function_name text, argument text, labels text[])
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_at integer;
begin
  if labels is null or coalesce(array_ndims(labels), 1) <> 1 or cardinality(labels) > 1000 then
    perform jobs._invalid(function_name, argument,
                          'must be a one-dimensional array of at most 1000 names');
  end if;
  select u.ord
    into v_at
    from unnest(labels) with ordinality u (label, ord)
   where u.label is null or jobs._bad_label(u.label)
   order by u.ord
   limit 1;
  if v_at is not null then
    perform jobs._check_label(function_name, format('%s[%s]', argument, v_at), labels[v_at]);
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_relay(function_name text, relay_id text, ids uuid[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label(function_name, 'relay_id', relay_id);
  if ids is null or array_position(ids, null) is not null then
    perform jobs._invalid(function_name, 'ids', 'must be an array of outbox ids without NULL');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_selector(function_name text, queue text, tenant_id text, every_tenant boolean)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label(function_name, 'queue', queue, required => false);
  perform jobs._check_label(function_name, 'tenant_id', tenant_id, required => false);
  if every_tenant is null then
    perform jobs._invalid(function_name, 'every_tenant', 'must be true or false');
  end if;
  if every_tenant and tenant_id is not null then
    perform jobs._invalid(function_name, 'every_tenant',
                          'cannot be true with a tenant_id: a rule is for one tenant or for each');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_traceparent(function_name text, argument text, value text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if value is not null and not jobs._valid_traceparent(value) then
    perform jobs._invalid(
      function_name, argument,
      'must be a W3C traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, '
      'ids not all zero');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._check_worker(function_name text, worker_id text, ttl interval)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label(function_name, 'worker_id', worker_id);
  if ttl is null or ttl <= interval '0' or ttl > interval '1 day' then
    perform jobs._invalid(function_name, 'ttl', 'must be a positive interval of at most 1 day');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._cut(value text, max_bytes integer)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_note text;
  v_budget integer;
  v_low integer := 0;  -- this many characters fit
  v_high integer;      -- this many may not
  v_mid integer;
begin
  if value is null or octet_length(value) <= max_bytes then
    return value;
  end if;
  v_note := format(' [cut: %s bytes in all]', octet_length(value));
  v_budget := max_bytes - octet_length(v_note);
  v_high := least(length(value), v_budget + 1);
  -- the longest prefix of whole characters within the budget, by halving
  while v_low + 1 < v_high loop
    v_mid := (v_low + v_high) / 2;
    if octet_length(left(value, v_mid)) <= v_budget then
      v_low := v_mid;
    else
      v_high := v_mid;
    end if;
  end loop;
  return left(value, v_low) || v_note;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._json_bytes(value jsonb)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  -- a compressed datum (read from a table) is expanded by the concatenation, which answers the
  -- value itself
  select case when pg_column_compression(value) is null then pg_column_size(value)
              else pg_column_size(value || '{}'::jsonb) end
$function$;

CREATE OR REPLACE FUNCTION jobs._max_bytes(name text)
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select l.max_bytes from jobs.size_limits l where l.name = _max_bytes.name
$function$;

CREATE OR REPLACE FUNCTION jobs._valid_traceparent(value text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select value ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
     and left(value, 2) <> 'ff'
     and substr(value, 4, 32) <> repeat('0', 32)
     and substr(value, 37, 16) <> repeat('0', 16)
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.ack_many_v1', 'worker_id', ack_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
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
$function$;

CREATE OR REPLACE FUNCTION jobs.cancel(id uuid, reason text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;
  if length(reason) > 1000 then
    perform jobs._invalid('jobs.cancel', 'reason',
                          format('must be at most 1000 characters, got %s', length(reason)));
  end if;

  with gone as (
    delete from jobs.jobs_live j
     where j.id = cancel.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                  error => 'cancelled' || coalesce(': ' || cancel.reason, ''),
                                  error_code => 'X_JOB_CANCELLED') e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  if queues is null or cardinality(queues) = 0 or array_ndims(queues) <> 1
     or cardinality(queues) > 1000 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or q.name !~ '[^[:space:]]' or length(q.name) > 200),
                  false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
  end if;
  if batch_size is null or batch_size not between 1 and 1000 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.claim_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
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
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb DEFAULT '{}'::jsonb, timeout interval DEFAULT NULL::interval, input_schema jsonb DEFAULT '{}'::jsonb, replace boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, concurrency_keyed boolean DEFAULT false, when_busy text DEFAULT 'wait'::text)
 RETURNS jobs.declare_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_stored jobs.declarations;
  v_differences jsonb;
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              enqueue.traceparent, enqueue.enqueued_by);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
  v_max_input integer := jobs._max_bytes('input');
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where (r.name ~ '[^[:space:]]' and length(r.name) <= 200
          and jsonb_typeof(r.input) = 'object'
          and ((pg_column_size(r.input) <= 1024 and pg_column_compression(r.input) is null)
               or jobs._json_bytes(r.input) <= v_max_input)
          and r.idempotency_key ~ '[^[:space:]]' and length(r.idempotency_key) <= 200
          and r.queue ~ '[^[:space:]]' and length(r.queue) <= 200
          and (r.tenant_id is null
               or (r.tenant_id ~ '[^[:space:]]' and length(r.tenant_id) <= 200))
          and r.run_at between v_now - interval '100 years' and v_now + interval '100 years'
          and r.max_attempts between 1 and 1000
          and r.priority between -1000 and 1000
          and not (r.tenant_required and r.tenant_id is null)
          and (r.concurrency_key is null
               or (r.concurrency_key ~ '[^[:space:]]' and length(r.concurrency_key) <= 200))
          and not (r.concurrency_keyed and r.concurrency_key is null)
          and (r.traceparent is null
               or (r.traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and left(r.traceparent, 2) <> 'ff'
                   and substr(r.traceparent, 4, 32) <> repeat('0', 32)
                   and substr(r.traceparent, 37, 16) <> repeat('0', 16)))
          and (r.enqueued_by is null
               or (r.enqueued_by ~ '[^[:space:]]' and length(r.enqueued_by) <= 200))) is not true
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed, v_request.traceparent,
                                v_request.enqueued_by);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.find_event(name text, correlation_key text DEFAULT NULL::text, after timestamp with time zone DEFAULT '-infinity'::timestamp with time zone)
 RETURNS jobs.event_lookup
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_lookup jobs.event_lookup;
begin
  perform jobs._check_label('jobs.find_event', 'name', find_event.name);
  select true, e.id, e.payload, e.published_at, v_now
    into v_lookup
    from jobs.events e
   where e.name = find_event.name
     and (find_event.correlation_key is null or e.correlation_key = find_event.correlation_key)
     and e.published_at >= coalesce(find_event.after, '-infinity')
     and e.expires_at > v_now
   order by e.published_at, e.id
   limit 1;
  if not found then
    v_lookup := (false, null, null, null, v_now)::jobs.event_lookup;
  end if;
  return v_lookup;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.forget_job_type(name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label('jobs.forget_job_type', 'name', forget_job_type.name);
  delete from jobs.declarations t where t.name = forget_job_type.name;
  if not found then
    return false;
  end if;
  perform jobs._sync_capped(forget_job_type.name);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.heartbeat_many_v1', 'worker_id',
                              heartbeat_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  update jobs.jobs_live j
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
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
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
  -- a failure report is cut to the limit, never refused: a refused nack would leave the attempt
  -- running until its lease lapsed. No limit is under 1 KiB, so a short report reads none
  if octet_length(nack_v1.error) > 1024 or octet_length(nack_v1.error_stack) > 1024 then
    nack_v1.error := jobs._cut(nack_v1.error, jobs._max_bytes('error_text'));
    nack_v1.error_stack := jobs._cut(nack_v1.error_stack, jobs._max_bytes('error_text'));
  end if;
  if length(nack_v1.error_code) > 200 then
    nack_v1.error_code := left(nack_v1.error_code, 200);
  end if;

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_claim(relay_id text, batch_size integer DEFAULT 100, lease interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.outbox_record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held_from jobs.outbox%rowtype;
begin
  perform jobs._check_relay('jobs.outbox_claim', outbox_claim.relay_id, '{}');
  if batch_size is null or batch_size not between 1 and 10000 then
    perform jobs._invalid('jobs.outbox_claim', 'batch_size', 'must be an integer from 1 to 10000');
  end if;
  if lease is null or lease <= interval '0' or lease > interval '1 day' then
    perform jobs._invalid('jobs.outbox_claim', 'lease', 'must be a positive interval of at most a day');
  end if;

  -- one claim at a time (released at commit, so safe behind a pool): the next claim's snapshot
  -- sees this one's stamps, and the prefix rule below holds
  perform pg_advisory_xact_lock(hashtext('jobs.outbox_claim'));

  select o.*
    into v_held_from
    from jobs.outbox o
   where o.published_at is null
     and o.claimed_by is distinct from outbox_claim.relay_id
     and o.claim_expires_at > v_now
   order by o.staged_at, o.seq
   limit 1;

  return query
    with claimable as materialized (
      select o.id
        from jobs.outbox o
       where o.published_at is null
         -- its own held rows too: a relay never claims past rows it still holds
         and (o.claimed_by is null
              or o.claim_expires_at <= v_now
              or o.claimed_by = outbox_claim.relay_id)
         and (v_held_from.id is null
              or (o.staged_at, o.seq) < (v_held_from.staged_at, v_held_from.seq))
       order by o.staged_at, o.seq
       limit outbox_claim.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = outbox_claim.relay_id,
             claim_expires_at = v_now + outbox_claim.lease
        from claimable c
       where o.id = c.id
      returning o.id, o.run_id, o.staged_at, o.seq, o.request, o.claimed_by, o.claim_expires_at
    )
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from claimed c
     order by c.staged_at, c.seq;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, run_id uuid DEFAULT NULL::uuid, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false),
                              outbox_stage.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              outbox_stage.traceparent, outbox_stage.enqueued_by);

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by,
      'concurrency_key', outbox_stage.concurrency_key))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.pause_queue(queue text, paused_by text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label('jobs.pause_queue', 'queue', pause_queue.queue);
  perform jobs._check_label('jobs.pause_queue', 'paused_by', pause_queue.paused_by,
                            required => false);
  insert into jobs.queue_pauses as p (queue, paused_at, paused_by)
  values (pause_queue.queue, jobs._now(), pause_queue.paused_by)
  on conflict on constraint queue_pauses_pkey do nothing;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval)
 RETURNS uuid
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  perform jobs._check_label('jobs.publish_event', 'name', publish_event.name);
  perform jobs._check_label('jobs.publish_event', 'correlation_key', publish_event.correlation_key,
                            required => false);
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  perform jobs._check_bytes('jobs.publish_event', 'payload', jobs._json_bytes(publish_event.payload),
                            'input');
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer := 0;
  v_rows integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
  v_day text;
begin
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

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.record_step_v1(id uuid, worker_id text, claim bigint, name text, status text, output jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, wake_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jobs.step_record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name !~ '[^[:space:]]' or length(name) > 200 then
    perform jobs._check_label('jobs.record_step_v1', 'name', record_step_v1.name);
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;
  -- no limit is under 1 KiB, so a small output reads none
  if pg_column_size(record_step_v1.output) > 1024
     or pg_column_compression(record_step_v1.output) is not null then
    perform jobs._check_bytes('jobs.record_step_v1', 'output',
                              jobs._json_bytes(record_step_v1.output), 'step_output');
  end if;
  -- a step's failure is a report, cut to the limit as jobs.nack_v1 cuts one
  if octet_length(record_step_v1.error) > 1024 then
    record_step_v1.error := jobs._cut(record_step_v1.error, jobs._max_bytes('error_text'));
  end if;
  if wake_at is not null
     and not (wake_at between v_now - interval '100 years' and v_now + interval '100 years') then
    perform jobs._invalid('jobs.record_step_v1', 'wake_at',
                          'must be NULL or an instant within 100 years of now');
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;
  perform jobs._check_label('jobs.requeue', 'from_step', requeue.from_step, required => false);

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
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
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.resume_queue(queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if queue is null or queue !~ '[^[:space:]]' then
    perform jobs._check_label('jobs.resume_queue', 'queue', resume_queue.queue);
  end if;
  delete from jobs.queue_pauses p
   where p.queue = resume_queue.queue;
  if found then
    if length(resume_queue.queue) <= 200 then
      perform pg_notify('jobs_wake', resume_queue.queue);
    end if;
    return true;
  end if;
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_arm(task text, watermark timestamp with time zone)
 RETURNS jobs.task_state
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_state jobs.task_state;
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_fire(task text, occurrence timestamp with time zone, requests jsonb DEFAULT '[]'::jsonb, watermark timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_paused boolean;
  v_requests jsonb;
begin
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
         last_fired_occurrence = case when t.paused_at is null then scheduler_fire.occurrence
                                      else t.last_fired_occurrence end,
         last_fired_at = case when t.paused_at is null then v_now else t.last_fired_at end
   where t.task = scheduler_fire.task
     and t.watermark < scheduler_fire.occurrence
  returning t.paused_at is not null
    into v_paused;
  if not found or v_paused then
    return;
  end if;

  -- occurrence-scoped keys: a scheduled fire never collides with a manual enqueue of the job
  -- a request without a key is left as it is, so enqueue_many refuses it (X_IDEMPOTENCY_REQUIRED)
  select coalesce(jsonb_agg(
           case
             when nullif(btrim(r.item ->> 'idempotency_key'), '') is null then r.item
             else r.item || jsonb_build_object(
               'idempotency_key',
               format('%s@%s:%s', scheduler_fire.task,
                      to_char(scheduler_fire.occurrence at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      r.item ->> 'idempotency_key'))
           end
           order by r.ord), '[]')
    into v_requests
    from jsonb_array_elements(scheduler_fire.requests) with ordinality as r(item, ord);

  return query
    select e.id, e.run_id, e.deduped
      from jobs.enqueue_many(requests => v_requests) e;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_lead(holder text, ttl interval DEFAULT '00:00:30'::interval, name text DEFAULT 'scheduler'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.set_limit(queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, every_tenant boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, rate integer DEFAULT NULL::integer, per interval DEFAULT NULL::interval, set_by text DEFAULT NULL::text)
 RETURNS jobs.limit_rule
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rule jobs.limit_rules;
begin
  perform jobs._check_selector('jobs.set_limit', set_limit.queue, set_limit.tenant_id,
                               set_limit.every_tenant);
  if set_limit.concurrency is null and set_limit.rate is null then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'or rate must be given (jobs.clear_limit removes a limit)');
  end if;
  if set_limit.concurrency < 0 then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if set_limit.rate < 0 then
    perform jobs._invalid('jobs.set_limit', 'rate',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if (set_limit.rate is null) <> (set_limit.per is null) then
    perform jobs._invalid('jobs.set_limit', 'per',
                          'must be given with rate, and only with it (e.g. rate => 100, per => ''1 minute'')');
  end if;
  if set_limit.per <= interval '0' or set_limit.per > interval '1 day' then
    perform jobs._invalid('jobs.set_limit', 'per', 'must be a positive interval of at most 1 day');
  end if;
  perform jobs._check_label('jobs.set_limit', 'set_by', set_limit.set_by, required => false);

  insert into jobs.limit_rules as r (queue, tenant_id, every_tenant, concurrency, rate, per,
                                     set_by, set_at)
  values (set_limit.queue, set_limit.tenant_id, set_limit.every_tenant, set_limit.concurrency,
          set_limit.rate, set_limit.per, set_limit.set_by, jobs._now())
  on conflict on constraint limit_rules_selector_key do update
     set concurrency = coalesce(excluded.concurrency, r.concurrency),
         rate = coalesce(excluded.rate, r.rate),
         per = coalesce(excluded.per, r.per),
         set_by = excluded.set_by,
         set_at = excluded.set_at
  returning r.* into v_rule;

  perform jobs._sync_capped_scope(set_limit.queue, set_limit.tenant_id);
  return (v_rule.queue, v_rule.tenant_id, v_rule.every_tenant, v_rule.concurrency, v_rule.rate,
          v_rule.per, v_rule.set_by, v_rule.set_at)::jobs.limit_rule;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.set_size_limit(name text, max_bytes integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_previous integer;
begin
  if name is null or name not in ('input', 'step_output', 'error_text') then
    perform jobs._invalid('jobs.set_size_limit', 'name',
                          'must be ''input'', ''step_output'' or ''error_text''');
  end if;
  if max_bytes is null or max_bytes < 1024 or max_bytes > 104857600 then
    perform jobs._invalid('jobs.set_size_limit', 'max_bytes',
                          'must be from 1024 (1 KiB) to 104857600 (100 MiB)');
  end if;
  if not has_table_privilege('jobs.size_limits', 'update') then
    perform jobs._raise(
      'X_PERMISSION_DENIED',
      'jobs.set_size_limit: only the owner of jobs.size_limits may change a size limit',
      jsonb_build_object('function', 'jobs.set_size_limit'));
  end if;
  select l.max_bytes into v_previous from jobs.size_limits l where l.name = set_size_limit.name;
  update jobs.size_limits l
     set max_bytes = set_size_limit.max_bytes
   where l.name = set_size_limit.name;
  return v_previous;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 9
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_announce(worker_id text, host text, pid integer, queues text[], slots integer, ttl interval DEFAULT '00:00:30'::interval)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_heartbeat(worker_id text, in_flight uuid[] DEFAULT '{}'::uuid[], ttl interval DEFAULT '00:00:30'::interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
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
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_running_v1(worker_id text)
 RETURNS TABLE(id uuid, claim bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._check_label('jobs.worker_running_v1', 'worker_id', worker_running_v1.worker_id);
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$function$;

-- revision 0010
-- durajobs revision 0010 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.roles (
  kind text primary key check (kind in ('enqueuer', 'worker', 'operator')),
  role_name name not null unique
);

create table jobs.wake_secret (
  only_row boolean primary key default true check (only_row),
  secret text not null
);

insert into jobs.wake_secret (secret)
values (encode(sha256(convert_to(gen_random_uuid()::text || clock_timestamp()::text, 'UTF8')),
               'hex'));

update jobs.error_codes
   set fix = 'call it as a login granted the role the message names (jobs.grant_roles, docs/operations.md), or as the owner of schema jobs'
 where code = 'X_PERMISSION_DENIED';

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._announce(queue text, created_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', jobs._wake_token(_announce.queue));
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._caller()
 RETURNS name
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select coalesce(nullif(current_setting('role'), 'none'), session_user)::name
$function$;

CREATE OR REPLACE FUNCTION jobs._denied(kinds text[], function_name text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_roles text := array_to_string(array(select jobs._role_name(k) from unnest(kinds) k), ' or ');
begin
  perform jobs._raise(
    'X_PERMISSION_DENIED',
    format('%s: role %s may not call it; it is for members of %s', function_name, jobs._caller(),
           v_roles),
    jsonb_build_object('function', function_name, 'role', jobs._caller(), 'kinds', kinds),
    format('grant %s to %s (as the owner of schema jobs), or call it as a role that has it',
           jobs._role_name(kinds[1]), jobs._caller()));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._require(kinds text[], function_name text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_caller name := jobs._caller();
  v_kind text;
begin
  foreach v_kind in array kinds loop
    if jobs._role_name(v_kind) is null or pg_has_role(v_caller, jobs._role_name(v_kind), 'usage') then
      return;
    end if;
  end loop;
  perform jobs._denied(kinds, function_name);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._require_owner(function_name text, action text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_owner name := (select n.nspowner::regrole::name from pg_namespace n where n.nspname = 'jobs');
begin
  if not pg_has_role(jobs._caller(), v_owner, 'usage') then
    perform jobs._raise(
      'X_PERMISSION_DENIED',
      format('%s: only the owner of schema jobs (%s) may %s, not %s', function_name, v_owner,
             action, jobs._caller()),
      jsonb_build_object('function', function_name, 'role', jobs._caller()),
      format('run it as %s, the role that ran durajobs migrate', v_owner));
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._role_name(kind text)
 RETURNS name
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select null::name
$function$;

CREATE OR REPLACE FUNCTION jobs._wake_token(queue text)
 RETURNS text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select left(encode(sha256(convert_to(s.secret || ':' || queue, 'UTF8')), 'hex'), 32)
    from jobs.wake_secret s
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.ack_many_v1', 'worker_id', ack_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
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
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_v1(id uuid, worker_id text, claim bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_v1');
  end if;
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with gone as (
    delete from jobs.jobs_live j
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j
  ),
  settled as (
    insert into jobs.jobs_history as h
    select e.* from gone g cross join lateral jobs._ended(g.j, 'done', v_now) e
    returning h.name, h.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.cancel(id uuid, reason text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._require(array['operator'], 'jobs.cancel');
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;
  if length(reason) > 1000 then
    perform jobs._invalid('jobs.cancel', 'reason',
                          format('must be at most 1000 characters, got %s', length(reason)));
  end if;

  with gone as (
    delete from jobs.jobs_live j
     where j.id = cancel.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                  error => 'cancelled' || coalesce(': ' || cancel.reason, ''),
                                  error_code => 'X_JOB_CANCELLED') e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.claim_v1');
  end if;
  if queues is null or cardinality(queues) = 0 or array_ndims(queues) <> 1
     or cardinality(queues) > 1000 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or q.name !~ '[^[:space:]]' or length(q.name) > 200),
                  false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
  end if;
  if batch_size is null or batch_size not between 1 and 1000 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.claim_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
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
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.clear_limit(queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, every_tenant boolean DEFAULT false, kind text DEFAULT 'all'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_id bigint;
begin
  perform jobs._require(array['operator'], 'jobs.clear_limit');
  perform jobs._check_selector('jobs.clear_limit', clear_limit.queue, clear_limit.tenant_id,
                               clear_limit.every_tenant);
  if kind is null or kind not in ('concurrency', 'rate', 'all') then
    perform jobs._invalid('jobs.clear_limit', 'kind', 'must be ''concurrency'', ''rate'' or ''all''');
  end if;

  select r.id
    into v_id
    from jobs.limit_rules r
   where r.queue is not distinct from clear_limit.queue
     and r.tenant_id is not distinct from clear_limit.tenant_id
     and r.every_tenant = clear_limit.every_tenant
     and case clear_limit.kind
           when 'concurrency' then r.concurrency is not null
           when 'rate' then r.rate is not null
           else true
         end
     for update;
  if v_id is null then
    return false;
  end if;

  if kind = 'all'
     or (kind = 'concurrency' and (select r.rate is null from jobs.limit_rules r where r.id = v_id))
     or (kind = 'rate' and (select r.concurrency is null from jobs.limit_rules r where r.id = v_id))
  then
    delete from jobs.limit_rules r where r.id = v_id;
  elsif kind = 'concurrency' then
    update jobs.limit_rules r set concurrency = null where r.id = v_id;
  else
    update jobs.limit_rules r set rate = null, per = null where r.id = v_id;
    delete from jobs.limit_starts s where s.rule_id = v_id;
  end if;

  perform jobs._sync_capped_scope(clear_limit.queue, clear_limit.tenant_id);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.counter_totals(since timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS TABLE(name text, done bigint, retried bigint, failed bigint, dead bigint, duration_ms bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.counter_totals');
  select c.name, sum(c.done)::bigint, sum(c.retried)::bigint, sum(c.failed)::bigint,
         sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where c.bucket >= coalesce(counter_totals.since, jobs._now() - interval '1 hour')
   group by c.name
   order by c.name
$function$;

CREATE OR REPLACE FUNCTION jobs.counters(name text DEFAULT NULL::text, since timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF jobs.counter_row
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.counters');
  select c.name, c.tier, c.bucket, sum(c.done)::bigint, sum(c.retried)::bigint,
         sum(c.failed)::bigint, sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where (counters.name is null or c.name = counters.name)
     and c.bucket >= coalesce(counters.since, jobs._now() - interval '1 hour')
   group by c.name, c.tier, c.bucket
   order by c.bucket, c.name, c.tier
$function$;

CREATE OR REPLACE FUNCTION jobs.declare_job(name text, queue text, max_attempts integer, priority integer, tenant_required boolean, declared_by text, retry jsonb DEFAULT '{}'::jsonb, timeout interval DEFAULT NULL::interval, input_schema jsonb DEFAULT '{}'::jsonb, replace boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, concurrency_keyed boolean DEFAULT false, when_busy text DEFAULT 'wait'::text)
 RETURNS jobs.declare_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue');
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              enqueue.traceparent, enqueue.enqueued_by);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
  v_max_input integer := jobs._max_bytes('input');
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue_many');
  end if;
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where (r.name ~ '[^[:space:]]' and length(r.name) <= 200
          and jsonb_typeof(r.input) = 'object'
          and ((pg_column_size(r.input) <= 1024 and pg_column_compression(r.input) is null)
               or jobs._json_bytes(r.input) <= v_max_input)
          and r.idempotency_key ~ '[^[:space:]]' and length(r.idempotency_key) <= 200
          and r.queue ~ '[^[:space:]]' and length(r.queue) <= 200
          and (r.tenant_id is null
               or (r.tenant_id ~ '[^[:space:]]' and length(r.tenant_id) <= 200))
          and r.run_at between v_now - interval '100 years' and v_now + interval '100 years'
          and r.max_attempts between 1 and 1000
          and r.priority between -1000 and 1000
          and not (r.tenant_required and r.tenant_id is null)
          and (r.concurrency_key is null
               or (r.concurrency_key ~ '[^[:space:]]' and length(r.concurrency_key) <= 200))
          and not (r.concurrency_keyed and r.concurrency_key is null)
          and (r.traceparent is null
               or (r.traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and left(r.traceparent, 2) <> 'ff'
                   and substr(r.traceparent, 4, 32) <> repeat('0', 32)
                   and substr(r.traceparent, 37, 16) <> repeat('0', 16)))
          and (r.enqueued_by is null
               or (r.enqueued_by ~ '[^[:space:]]' and length(r.enqueued_by) <= 200))) is not true
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed, v_request.traceparent,
                                v_request.enqueued_by);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
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
$function$;

CREATE OR REPLACE FUNCTION jobs.find_event(name text, correlation_key text DEFAULT NULL::text, after timestamp with time zone DEFAULT '-infinity'::timestamp with time zone)
 RETURNS jobs.event_lookup
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_lookup jobs.event_lookup;
begin
  perform jobs._require(array['worker'], 'jobs.find_event');
  perform jobs._check_label('jobs.find_event', 'name', find_event.name);
  select true, e.id, e.payload, e.published_at, v_now
    into v_lookup
    from jobs.events e
   where e.name = find_event.name
     and (find_event.correlation_key is null or e.correlation_key = find_event.correlation_key)
     and e.published_at >= coalesce(find_event.after, '-infinity')
     and e.expires_at > v_now
   order by e.published_at, e.id
   limit 1;
  if not found then
    v_lookup := (false, null, null, null, v_now)::jobs.event_lookup;
  end if;
  return v_lookup;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.forget_job_type(name text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.grant_roles(enqueuer name DEFAULT 'durajobs_enqueuer'::name, worker name DEFAULT 'durajobs_worker'::name, operator name DEFAULT 'durajobs_operator'::name)
 RETURNS TABLE(kind text, role_name name, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_owner name := (select n.nspowner::regrole::name from pg_namespace n where n.nspname = 'jobs');
  v_names jsonb := jsonb_build_object('enqueuer', grant_roles.enqueuer,
                                      'worker', grant_roles.worker,
                                      'operator', grant_roles.operator);
  v_kind text;
  v_role name;
  v_created boolean;
  v_function regprocedure;
  v_old record;
begin
  foreach v_kind in array array['enqueuer', 'worker', 'operator'] loop
    v_role := v_names ->> v_kind;
    if v_role is null or v_role !~ '^[a-z_][a-z0-9_$]*$' then
      perform jobs._invalid('jobs.grant_roles', v_kind,
                            'must be a role name of lower-case letters, digits and _');
    end if;
  end loop;
  if grant_roles.enqueuer in (grant_roles.worker, grant_roles.operator)
     or grant_roles.worker = grant_roles.operator then
    perform jobs._invalid('jobs.grant_roles', 'enqueuer, worker, operator',
                          'must be three different roles');
  end if;
  perform jobs._require_owner('jobs.grant_roles', 'grant its roles');

  -- roles recorded under other names lose what an earlier call gave them
  for v_old in
    select r.kind, r.role_name
      from jobs.roles r
     where r.role_name <> (v_names ->> r.kind)
       and exists (select 1 from pg_roles p where p.rolname = r.role_name)
  loop
    execute format('revoke all on all functions in schema jobs from %I', v_old.role_name);
    execute format('revoke all on all tables in schema jobs from %I', v_old.role_name);
    execute format('revoke usage on schema jobs from %I', v_old.role_name);
  end loop;

  foreach v_kind in array array['enqueuer', 'worker', 'operator'] loop
    v_role := v_names ->> v_kind;
    v_created := not exists (select 1 from pg_roles p where p.rolname = v_role);
    if v_created then
      begin
        execute format('create role %I nologin', v_role);
      exception
        when insufficient_privilege then
          perform jobs._raise(
            'X_PERMISSION_DENIED',
            format('jobs.grant_roles: role %s does not exist and %s, the owner of schema jobs, '
                   'may not create roles', v_role, current_user),
            jsonb_build_object('function', 'jobs.grant_roles', 'role', v_role),
            format('create role %s nologin as a role that may, then run it again', v_role));
      end;
    end if;
    execute format('grant usage on schema jobs to %I', v_role);
    for v_function in
      select p.oid::regprocedure
        from pg_proc p
       where p.pronamespace = 'jobs'::regnamespace
         and p.proname !~ '^_'
    loop
      execute format('grant execute on function %s to %I', v_function, v_role);
    end loop;
    insert into jobs.roles as r (kind, role_name)
    values (v_kind, v_role)
    on conflict on constraint roles_pkey do update set role_name = excluded.role_name;
    kind := v_kind;
    role_name := v_role;
    created := v_created;
    return next;
  end loop;

  -- memberships not held yet (a grant held already only says so)
  for v_old in
    select m.role_name, m.member
      from (values (grant_roles.enqueuer, grant_roles.worker),
                   (grant_roles.enqueuer, grant_roles.operator),
                   (grant_roles.enqueuer, v_owner),
                   (grant_roles.worker, v_owner),
                   (grant_roles.operator, v_owner)) m (role_name, member)
     where m.member <> m.role_name
  loop
    continue when exists (select 1
                            from pg_auth_members a
                           where a.roleid = v_old.role_name::regrole
                             and a.member = v_old.member::regrole);
    execute format('grant %I to %I', v_old.role_name, v_old.member);
  end loop;
  -- what an operator reads in psql; no role may write a table but through the functions
  execute format('grant select on jobs.jobs, jobs.jobs_live, jobs.jobs_history, jobs.steps, '
                 'jobs.queue_pauses, jobs.outbox, jobs.events, jobs.workers, '
                 'jobs.counter_buckets, jobs.declarations, jobs.limit_rules, '
                 'jobs.scheduler_tasks, jobs.scheduler_leases, jobs.error_codes, '
                 'jobs.size_limits, jobs.roles to %I', grant_roles.operator);

  -- the checks read the names as constants of this function
  execute format(
    'create or replace function jobs._role_name(kind text) returns name language sql immutable '
    'set search_path = pg_catalog, pg_temp as %L',
    format('select case kind when ''enqueuer'' then %L when ''worker'' then %L '
           'when ''operator'' then %L end::name',
           grant_roles.enqueuer, grant_roles.worker, grant_roles.operator));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.heartbeat_many_v1', 'worker_id',
                              heartbeat_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_v1');
  end if;
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  update jobs.jobs_live j
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
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job jobs.jobs;
begin
  perform jobs._require(array['enqueuer'], 'jobs.inspect_job');
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.job_states()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select array['ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled']
$function$;

CREATE OR REPLACE FUNCTION jobs.job_types()
 RETURNS SETOF jobs.job_type
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['enqueuer'], 'jobs.job_types');
  select t.name, t.queue, t.max_attempts, t.priority, t.tenant_required, t.retry, t.timeout,
         t.input_schema, t.declared_by, t.declared_at, t.seen_at, t.concurrency,
         t.concurrency_keyed, t.when_busy
    from jobs.declarations t
   order by t.name collate "C"
$function$;

CREATE OR REPLACE FUNCTION jobs.limits(name text DEFAULT NULL::text)
 RETURNS SETOF jobs.limit_row
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.limits');
  with declared as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  declared_live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from declared l
      join jobs.jobs_live j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  declared_rows as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from declared l
      left join declared_live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  ),
  -- the live rows a rule may count, grouped before any rule is asked
  live as materialized (
    select j.queue, j.tenant_id, j.state, j.run_at <= jobs._now() as due, j.claimed_by,
           count(*) as n,
           row_number() over (order by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(),
                                       j.claimed_by)::integer as ord
      from jobs.jobs_live j
     where limits.name is null
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
     group by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(), j.claimed_by
  ),
  ruled as (
    select g.grp, g.rule_id, g.scope_tenant, l.state, l.due, l.claimed_by, l.n
      from jobs._rule_groups_of(array(select l.queue from live l order by l.ord),
                                array(select l.tenant_id from live l order by l.ord)) g
      join live l on l.ord = g.ord
  ),
  rule_rows as (
    select r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per,
           case when r.every_tenant then x.scope_tenant else r.tenant_id end as tenant_id,
           coalesce('r:' || r.id
                      || case when r.every_tenant then E'\x1f' || x.scope_tenant else '' end,
                    '') as grp,
           coalesce(sum(x.n) filter (where x.state = 'running'), 0) as running,
           coalesce(sum(x.n) filter (where x.state <> 'running'), 0) as waiting,
           coalesce(sum(x.n) filter (where x.state <> 'running' and x.due), 0) as due,
           coalesce(array_agg(distinct x.claimed_by order by x.claimed_by)
                      filter (where x.state = 'running'), '{}') as holders
      from jobs.limit_rules r
      left join ruled x on x.rule_id = r.id
     where limits.name is null
     group by r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per, r.tenant_id,
              x.scope_tenant
  ),
  started as (
    select s.grp, s.started
      from jobs._started_groups(jobs._now()) s
     where limits.name is null
  )
  select u.scope, u.name, u.concurrency_key, u.queue, u.tenant_id, u.concurrency, u.when_busy,
         u.rate, u.per, u.started, u.running, u.waiting, u.held_back, u.holders
    from (
  select 'job' as scope, g.name, g.group_key as concurrency_key, null as queue,
         null as tenant_id, g.concurrency, g.when_busy, null::integer as rate,
         null::interval as per, null::bigint as started, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end as held_back,
         g.holders
    from declared_rows g
  union all
  select case when r.every_tenant then 'every tenant'
              when r.tenant_id is not null then 'tenant'
              when r.queue is not null then 'queue'
              else 'fleet' end,
         null, null, r.queue, r.tenant_id, r.concurrency, null, r.rate, r.per,
         case when r.rate is not null then coalesce(s.started, 0) end,
         r.running, r.waiting,
         case when r.running >= r.concurrency or coalesce(s.started, 0) >= r.rate then r.due
              else 0 end,
         r.holders
    from rule_rows r
    left join started s on s.grp = r.grp
    ) u
   order by u.scope collate "C", u.name collate "C", u.queue collate "C" nulls first,
            u.tenant_id collate "C" nulls first, u.concurrency_key collate "C" nulls first
$function$;

CREATE OR REPLACE FUNCTION jobs.list_jobs(queue text DEFAULT NULL::text, name text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, id_prefix text DEFAULT NULL::text, created_from timestamp with time zone DEFAULT NULL::timestamp with time zone, created_to timestamp with time zone DEFAULT NULL::timestamp with time zone, page_size integer DEFAULT 100, after uuid DEFAULT NULL::uuid, before uuid DEFAULT NULL::uuid)
 RETURNS SETOF jobs.job_summary
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_sort TO 'off'
AS $function$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
begin
  perform jobs._require(array['operator'], 'jobs.list_jobs');
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
     where j.id = coalesce(list_jobs.after, list_jobs.before);
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
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.live_states()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select array['ready', 'delayed', 'running', 'suspended']
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_many_v1(worker_id text, nacks jsonb)
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_ids uuid[];
  v_claims bigint[];
  v_next_states text[];
  v_delays interval[];
  v_counts boolean[];
  v_ord integer;
  v_bad_key text;
begin
  perform jobs._require(array['worker'], 'jobs.nack_many_v1');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.nack_v1');
  end if;
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
  -- a failure report is cut to the limit, never refused: a refused nack would leave the attempt
  -- running until its lease lapsed. No limit is under 1 KiB, so a short report reads none
  if octet_length(nack_v1.error) > 1024 or octet_length(nack_v1.error_stack) > 1024 then
    nack_v1.error := jobs._cut(nack_v1.error, jobs._max_bytes('error_text'));
    nack_v1.error_stack := jobs._cut(nack_v1.error_stack, jobs._max_bytes('error_text'));
  end if;
  if length(nack_v1.error_code) > 200 then
    nack_v1.error_code := left(nack_v1.error_code, 200);
  end if;

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_claim(relay_id text, batch_size integer DEFAULT 100, lease interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.outbox_record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held_from jobs.outbox%rowtype;
begin
  perform jobs._require(array['worker'], 'jobs.outbox_claim');
  perform jobs._check_relay('jobs.outbox_claim', outbox_claim.relay_id, '{}');
  if batch_size is null or batch_size not between 1 and 10000 then
    perform jobs._invalid('jobs.outbox_claim', 'batch_size', 'must be an integer from 1 to 10000');
  end if;
  if lease is null or lease <= interval '0' or lease > interval '1 day' then
    perform jobs._invalid('jobs.outbox_claim', 'lease', 'must be a positive interval of at most a day');
  end if;

  -- one claim at a time (released at commit, so safe behind a pool): the next claim's snapshot
  -- sees this one's stamps, and the prefix rule below holds
  perform pg_advisory_xact_lock(hashtext('jobs.outbox_claim'));

  select o.*
    into v_held_from
    from jobs.outbox o
   where o.published_at is null
     and o.claimed_by is distinct from outbox_claim.relay_id
     and o.claim_expires_at > v_now
   order by o.staged_at, o.seq
   limit 1;

  return query
    with claimable as materialized (
      select o.id
        from jobs.outbox o
       where o.published_at is null
         -- its own held rows too: a relay never claims past rows it still holds
         and (o.claimed_by is null
              or o.claim_expires_at <= v_now
              or o.claimed_by = outbox_claim.relay_id)
         and (v_held_from.id is null
              or (o.staged_at, o.seq) < (v_held_from.staged_at, v_held_from.seq))
       order by o.staged_at, o.seq
       limit outbox_claim.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = outbox_claim.relay_id,
             claim_expires_at = v_now + outbox_claim.lease
        from claimable c
       where o.id = c.id
      returning o.id, o.run_id, o.staged_at, o.seq, o.request, o.claimed_by, o.claim_expires_at
    )
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from claimed c
     order by c.staged_at, c.seq;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_mark_published(relay_id text, ids uuid[])
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.outbox_mark_published');
  perform jobs._check_relay('jobs.outbox_mark_published', outbox_mark_published.relay_id,
                            outbox_mark_published.ids);
  return query
    update jobs.outbox o
       set published_at = v_now
     where o.id = any(outbox_mark_published.ids)
       and o.claimed_by = outbox_mark_published.relay_id
       and o.claim_expires_at > v_now
       and o.published_at is null
    returning o.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_relay(relay_id text, batch_size integer DEFAULT 100)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_record jobs.outbox_record;
  v_result jobs.enqueue_result;
  v_published uuid[] := '{}';
begin
  perform jobs._require(array['worker'], 'jobs.outbox_relay');
  for v_record in
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from jobs.outbox_claim(relay_id => outbox_relay.relay_id,
                             batch_size => outbox_relay.batch_size) c
  loop
    v_result := jobs._publish(v_record);
    v_published := v_published || v_record.id;
    return next v_result;
  end loop;
  perform jobs.outbox_mark_published(outbox_relay.relay_id, v_published);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_release(relay_id text, ids uuid[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_released integer;
begin
  perform jobs._require(array['worker'], 'jobs.outbox_release');
  perform jobs._check_relay('jobs.outbox_release', outbox_release.relay_id, outbox_release.ids);
  update jobs.outbox o
     set claimed_by = null,
         claim_expires_at = null
   where o.id = any(outbox_release.ids)
     and o.claimed_by = outbox_release.relay_id
     and o.claim_expires_at > v_now
     and o.published_at is null;
  get diagnostics v_released = row_count;
  return v_released;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, run_id uuid DEFAULT NULL::uuid, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.outbox_stage');
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false),
                              outbox_stage.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              outbox_stage.traceparent, outbox_stage.enqueued_by);

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by,
      'concurrency_key', outbox_stage.concurrency_key))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.pause_queue(queue text, paused_by text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['operator'], 'jobs.pause_queue');
  perform jobs._check_label('jobs.pause_queue', 'queue', pause_queue.queue);
  perform jobs._check_label('jobs.pause_queue', 'paused_by', pause_queue.paused_by,
                            required => false);
  insert into jobs.queue_pauses as p (queue, paused_at, paused_by)
  values (pause_queue.queue, jobs._now(), pause_queue.paused_by)
  on conflict on constraint queue_pauses_pkey do nothing;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.pause_task(task text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.prepare_history(days integer DEFAULT 2)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_today date := (jobs._now() at time zone 'UTC')::date;
  v_day date;
  v_from timestamptz;
  v_made integer := 0;
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.prepare_history');
  if days is null or days < 0 or days > 31 then
    perform jobs._invalid('jobs.prepare_history', 'days', 'must be between 0 and 31');
  end if;
  for v_day in select v_today + g from generate_series(0, prepare_history.days) g loop
    continue when to_regclass('jobs.' || jobs._history_day(v_day)) is not null;
    v_from := v_day::timestamp at time zone 'UTC';
    continue when exists (select 1
                            from jobs.jobs_history_done_default d
                           where d.finished_at >= v_from
                             and d.finished_at < v_from + interval '1 day');
    execute format('create table jobs.%I partition of jobs.jobs_history_done '
                   'for values from (%L) to (%L)',
                   jobs._history_day(v_day), v_from, v_from + interval '1 day');
    v_made := v_made + 1;
  end loop;
  return v_made;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.progress_v1(id uuid, worker_id text, claim bigint, done numeric, total numeric DEFAULT NULL::numeric, note text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.progress_v1');
  end if;
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

  update jobs.jobs_live j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.promote(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queue text;
  v_state text;
begin
  perform jobs._require(array['operator'], 'jobs.promote');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.promote_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_affected integer;
  v_remaining bigint;
  v_queues text[];
  v_queue text;
begin
  perform jobs._require(array['operator'], 'jobs.promote_many');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  perform jobs._require(array['enqueuer'], 'jobs.publish_event');
  perform jobs._check_label('jobs.publish_event', 'name', publish_event.name);
  perform jobs._check_label('jobs.publish_event', 'correlation_key', publish_event.correlation_key,
                            required => false);
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  perform jobs._check_bytes('jobs.publish_event', 'payload', jobs._json_bytes(publish_event.payload),
                            'input');
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer := 0;
  v_rows integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
  v_day text;
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

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_depth(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_depth_row
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.queue_depth');
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs_live j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_stats(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_stat
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.queue_stats');
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_history_ended j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
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
$function$;

CREATE OR REPLACE FUNCTION jobs.record_step_v1(id uuid, worker_id text, claim bigint, name text, status text, output jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, wake_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jobs.step_record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.record_step_v1');
  end if;
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name !~ '[^[:space:]]' or length(name) > 200 then
    perform jobs._check_label('jobs.record_step_v1', 'name', record_step_v1.name);
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;
  -- no limit is under 1 KiB, so a small output reads none
  if pg_column_size(record_step_v1.output) > 1024
     or pg_column_compression(record_step_v1.output) is not null then
    perform jobs._check_bytes('jobs.record_step_v1', 'output',
                              jobs._json_bytes(record_step_v1.output), 'step_output');
  end if;
  -- a step's failure is a report, cut to the limit as jobs.nack_v1 cuts one
  if octet_length(record_step_v1.error) > 1024 then
    record_step_v1.error := jobs._cut(record_step_v1.error, jobs._max_bytes('error_text'));
  end if;
  if wake_at is not null
     and not (wake_at between v_now - interval '100 years' and v_now + interval '100 years') then
    perform jobs._invalid('jobs.record_step_v1', 'wake_at',
                          'must be NULL or an instant within 100 years of now');
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job record;
begin
  perform jobs._require(array['operator'], 'jobs.remove');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_table text;
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
  perform jobs._require(array['operator'], 'jobs.remove_many');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  perform jobs._require(array['operator'], 'jobs.requeue');
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;
  perform jobs._check_label('jobs.requeue', 'from_step', requeue.from_step, required => false);

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
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
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
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

  perform pg_notify('jobs_wake', jobs._wake_token(v_job.queue));
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
  perform jobs._require(array['operator'], 'jobs.requeue_many');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.resume_queue(queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['operator'], 'jobs.resume_queue');
  if queue is null or queue !~ '[^[:space:]]' then
    perform jobs._check_label('jobs.resume_queue', 'queue', resume_queue.queue);
  end if;
  delete from jobs.queue_pauses p
   where p.queue = resume_queue.queue;
  if found then
    if length(resume_queue.queue) <= 200 then
      perform pg_notify('jobs_wake', jobs._wake_token(resume_queue.queue));
    end if;
    return true;
  end if;
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.resume_task(task text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.rollup_counters()
 RETURNS TABLE(tier text, moved bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.rollup_counters');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_arm(task text, watermark timestamp with time zone)
 RETURNS jobs.task_state
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_fire(task text, occurrence timestamp with time zone, requests jsonb DEFAULT '[]'::jsonb, watermark timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_paused boolean;
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
         last_fired_occurrence = case when t.paused_at is null then scheduler_fire.occurrence
                                      else t.last_fired_occurrence end,
         last_fired_at = case when t.paused_at is null then v_now else t.last_fired_at end
   where t.task = scheduler_fire.task
     and t.watermark < scheduler_fire.occurrence
  returning t.paused_at is not null
    into v_paused;
  if not found or v_paused then
    return;
  end if;

  -- occurrence-scoped keys: a scheduled fire never collides with a manual enqueue of the job
  -- a request without a key is left as it is, so enqueue_many refuses it (X_IDEMPOTENCY_REQUIRED)
  select coalesce(jsonb_agg(
           case
             when nullif(btrim(r.item ->> 'idempotency_key'), '') is null then r.item
             else r.item || jsonb_build_object(
               'idempotency_key',
               format('%s@%s:%s', scheduler_fire.task,
                      to_char(scheduler_fire.occurrence at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      r.item ->> 'idempotency_key'))
           end
           order by r.ord), '[]')
    into v_requests
    from jsonb_array_elements(scheduler_fire.requests) with ordinality as r(item, ord);

  return query
    select e.id, e.run_id, e.deduped
      from jobs.enqueue_many(requests => v_requests) e;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_lead(holder text, ttl interval DEFAULT '00:00:30'::interval, name text DEFAULT 'scheduler'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_resign(holder text, name text DEFAULT 'scheduler'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_resign');
  delete from jobs.scheduler_leases l
   where l.name = scheduler_resign.name
     and l.holder = scheduler_resign.holder;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_skip(task text, watermark timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.scheduler_skip');
  if watermark is null or not isfinite(watermark) then
    perform jobs._invalid('jobs.scheduler_skip', 'watermark', 'must be a finite instant');
  end if;
  update jobs.scheduler_tasks t
     set watermark = scheduler_skip.watermark
   where t.task = scheduler_skip.task
     and t.watermark < scheduler_skip.watermark;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.set_limit(queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, every_tenant boolean DEFAULT false, concurrency integer DEFAULT NULL::integer, rate integer DEFAULT NULL::integer, per interval DEFAULT NULL::interval, set_by text DEFAULT NULL::text)
 RETURNS jobs.limit_rule
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rule jobs.limit_rules;
begin
  perform jobs._require(array['operator'], 'jobs.set_limit');
  perform jobs._check_selector('jobs.set_limit', set_limit.queue, set_limit.tenant_id,
                               set_limit.every_tenant);
  if set_limit.concurrency is null and set_limit.rate is null then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'or rate must be given (jobs.clear_limit removes a limit)');
  end if;
  if set_limit.concurrency < 0 then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if set_limit.rate < 0 then
    perform jobs._invalid('jobs.set_limit', 'rate',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if (set_limit.rate is null) <> (set_limit.per is null) then
    perform jobs._invalid('jobs.set_limit', 'per',
                          'must be given with rate, and only with it (e.g. rate => 100, per => ''1 minute'')');
  end if;
  if set_limit.per <= interval '0' or set_limit.per > interval '1 day' then
    perform jobs._invalid('jobs.set_limit', 'per', 'must be a positive interval of at most 1 day');
  end if;
  perform jobs._check_label('jobs.set_limit', 'set_by', set_limit.set_by, required => false);

  insert into jobs.limit_rules as r (queue, tenant_id, every_tenant, concurrency, rate, per,
                                     set_by, set_at)
  values (set_limit.queue, set_limit.tenant_id, set_limit.every_tenant, set_limit.concurrency,
          set_limit.rate, set_limit.per, set_limit.set_by, jobs._now())
  on conflict on constraint limit_rules_selector_key do update
     set concurrency = coalesce(excluded.concurrency, r.concurrency),
         rate = coalesce(excluded.rate, r.rate),
         per = coalesce(excluded.per, r.per),
         set_by = excluded.set_by,
         set_at = excluded.set_at
  returning r.* into v_rule;

  perform jobs._sync_capped_scope(set_limit.queue, set_limit.tenant_id);
  return (v_rule.queue, v_rule.tenant_id, v_rule.every_tenant, v_rule.concurrency, v_rule.rate,
          v_rule.per, v_rule.set_by, v_rule.set_at)::jobs.limit_rule;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.set_size_limit(name text, max_bytes integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_previous integer;
begin
  perform jobs._require_owner('jobs.set_size_limit', 'change a size limit');
  if name is null or name not in ('input', 'step_output', 'error_text') then
    perform jobs._invalid('jobs.set_size_limit', 'name',
                          'must be ''input'', ''step_output'' or ''error_text''');
  end if;
  if max_bytes is null or max_bytes < 1024 or max_bytes > 104857600 then
    perform jobs._invalid('jobs.set_size_limit', 'max_bytes',
                          'must be from 1024 (1 KiB) to 104857600 (100 MiB)');
  end if;
  select l.max_bytes into v_previous from jobs.size_limits l where l.name = set_size_limit.name;
  update jobs.size_limits l
     set max_bytes = set_size_limit.max_bytes
   where l.name = set_size_limit.name;
  return v_previous;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.step_statuses()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select array['completed', 'sleeping', 'waiting', 'failed']
$function$;

CREATE OR REPLACE FUNCTION jobs.steps_v1(run_id uuid)
 RETURNS SETOF jobs.step_record
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage') or pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('operator'), 'usage')) then
    perform jobs._denied(array['worker', 'operator'], 'jobs.steps_v1');
  end if;
  if run_id is null then
    perform jobs._invalid('jobs.steps_v1', 'run_id', 'must be a run id');
  end if;
  return query
    select s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
      from jobs.steps s
     where s.run_id = steps_v1.run_id
     order by s.started_at, s.name;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.task_fires()
 RETURNS SETOF jobs.task_state
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.task_fires');
  select t.task, t.watermark, t.last_fired_occurrence, t.last_fired_at, t.paused_at is not null
    from jobs.scheduler_tasks t
   order by t.task
   limit 1000
$function$;

CREATE OR REPLACE FUNCTION jobs.use_test_clock(enabled boolean DEFAULT true)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require_owner('jobs.use_test_clock', 'switch the test clock');
  if enabled is null then
    perform jobs._invalid('jobs.use_test_clock', 'enabled', 'must be true or false');
  end if;
  execute format(
    'create or replace function jobs._now() returns timestamptz language sql stable '
    'set search_path = pg_catalog, pg_temp as %L',
    case when enabled
         then 'select coalesce(nullif(current_setting(''durajobs.now'', true), '''')'
              '::timestamptz, now())'
         else 'select now()' end);
  return enabled;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 10
$function$;

CREATE OR REPLACE FUNCTION jobs.wake_tokens(queues text[])
 RETURNS TABLE(queue text, token text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.wake_tokens');
  perform jobs._check_labels('jobs.wake_tokens', 'queues', wake_tokens.queues);
  return query
    select q.name, jobs._wake_token(q.name)
      from (select distinct u.name from unnest(wake_tokens.queues) u (name)) q
     order by q.name;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_announce(worker_id text, host text, pid integer, queues text[], slots integer, ttl interval DEFAULT '00:00:30'::interval)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_draining(worker_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.worker_draining');
  perform jobs._check_worker('jobs.worker_draining', worker_draining.worker_id,
                             interval '1 second');
  update jobs.workers w
     set draining_at = coalesce(w.draining_at, jobs._now())
   where w.id = worker_draining.worker_id;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_forget(worker_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.worker_forget');
  perform jobs._check_worker('jobs.worker_forget', worker_forget.worker_id, interval '1 second');
  delete from jobs.workers w
   where w.id = worker_forget.worker_id;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_heartbeat(worker_id text, in_flight uuid[] DEFAULT '{}'::uuid[], ttl interval DEFAULT '00:00:30'::interval)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_running_v1(worker_id text)
 RETURNS TABLE(id uuid, claim bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.worker_running_v1');
  perform jobs._check_label('jobs.worker_running_v1', 'worker_id', worker_running_v1.worker_id);
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.workers_live()
 RETURNS TABLE(id text, host text, pid integer, queues text[], slots integer, in_flight uuid[], in_flight_count integer, started_at timestamp with time zone, heartbeat_at timestamp with time zone, expires_at timestamp with time zone, draining_at timestamp with time zone)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['worker', 'operator'], 'jobs.workers_live');
  select w.id, w.host, w.pid, w.queues, w.slots, w.in_flight, w.in_flight_count, w.started_at,
         w.heartbeat_at, w.expires_at, w.draining_at
    from jobs.workers w
   where w.expires_at > jobs._now()
   order by w.started_at, w.id
$function$;

-- revision 0011
-- durajobs revision 0011 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.tenant_bindings (
  role_name name primary key,
  tenant_id text not null
);

-- the tenant whose runs an event is for; NULL: any run's (every event published before)
alter table jobs.events add column tenant_id text;

insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_JOB_TENANT_MISMATCH', 'JQ019',
   'act for one tenant: a job''s tenant is the one its input names (as_ an actor of that org), a bound session''s is its own, and a run_id must name a run of that tenant');

-- the policies read jobs.bound_tenant(), which must exist before them: a stand-in, which the
-- function below replaces
create function jobs.bound_tenant() returns text language sql stable
  set search_path = pg_catalog, pg_temp as 'select null::text';

-- the view reads the tables as its reader, so their policies hold there too
alter view jobs.jobs set (security_invoker = true);

alter table jobs.jobs_live enable row level security;
create policy tenant_rows on jobs.jobs_live
  using ((select jobs.bound_tenant()) is null or tenant_id = (select jobs.bound_tenant()));

alter table jobs.jobs_history enable row level security;
create policy tenant_rows on jobs.jobs_history
  using ((select jobs.bound_tenant()) is null or tenant_id = (select jobs.bound_tenant()));

alter table jobs.steps enable row level security;
create policy tenant_rows on jobs.steps
  using ((select jobs.bound_tenant()) is null
         or exists (select 1 from jobs.jobs j
                     where j.run_id = steps.run_id and j.tenant_id = (select jobs.bound_tenant())));

alter table jobs.outbox enable row level security;
create policy tenant_rows on jobs.outbox
  using ((select jobs.bound_tenant()) is null
         or request ->> 'tenant_id' = (select jobs.bound_tenant()));

alter table jobs.events enable row level security;
create policy tenant_rows on jobs.events
  using ((select jobs.bound_tenant()) is null or tenant_id is null
         or tenant_id = (select jobs.bound_tenant()));

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs._require(kinds text[], function_name text);

drop function if exists jobs.cancel(id uuid, reason text);

drop function if exists jobs.find_event(name text, correlation_key text, after timestamp with time zone);

drop function if exists jobs.inspect_job(id uuid);

drop function if exists jobs.promote(id uuid);

drop function if exists jobs.publish_event(name text, payload jsonb, correlation_key text, ttl interval);

drop function if exists jobs.remove(id uuid);

drop function if exists jobs.requeue(id uuid, from_step text);

drop function if exists jobs.steps_v1(run_id uuid);

CREATE OR REPLACE FUNCTION jobs._any_binding()
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select false
$function$;

CREATE OR REPLACE FUNCTION jobs._check_run_tenant(function_name text, argument text, run_id uuid, tenant_id text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- the run's first job has the run's id; a job continuing it is in jobs_run_shared_idx
  if exists (select 1 from jobs.jobs j
              where j.id = _check_run_tenant.run_id
                and j.tenant_id is distinct from _check_run_tenant.tenant_id)
     or exists (select 1 from jobs.jobs j
                 where j.run_id = _check_run_tenant.run_id
                   and j.run_id <> j.id
                   and j.tenant_id is distinct from _check_run_tenant.tenant_id) then
    perform jobs._raise(
      'X_JOB_TENANT_MISMATCH',
      format('%s: %s names a run of another tenant', function_name, argument),
      jsonb_build_object('function', function_name, 'argument', argument),
      'continue only a run of the job''s own tenant, or leave run_id out for a fresh run');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._foreign_job(id uuid, tenant_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select _foreign_job.tenant_id is not null
     and exists (select 1 from jobs.jobs j
                  where j.id = _foreign_job.id
                    and j.tenant_id is distinct from _foreign_job.tenant_id)
$function$;

CREATE OR REPLACE FUNCTION jobs._refuse_bound(function_name text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if jobs._any_binding() and jobs.bound_tenant() is not null then
    perform jobs._raise(
      'X_PERMISSION_DENIED',
      format('%s: role %s acts for one tenant, and %s works across every tenant', function_name,
             jobs._caller(), function_name),
      jsonb_build_object('function', function_name, 'role', jobs._caller()),
      'call it as a login bound to no tenant (a worker''s, or an operator of the whole fleet)');
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._require(kinds text[], function_name text, scoped boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_caller name := jobs._caller();
  v_kind text;
begin
  foreach v_kind in array kinds loop
    if jobs._role_name(v_kind) is null or pg_has_role(v_caller, jobs._role_name(v_kind), 'usage') then
      if not scoped then
        perform jobs._refuse_bound(function_name);
      end if;
      return;
    end if;
  end loop;
  perform jobs._denied(kinds, function_name);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._scoped_tenant(function_name text, argument text, given text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_bound text;
begin
  if not jobs._any_binding() then
    return given;
  end if;
  v_bound := jobs.bound_tenant();
  if v_bound is not null and given is not null and given <> v_bound then
    perform jobs._raise(
      'X_JOB_TENANT_MISMATCH',
      format('%s: %s names a tenant other than the one this session is bound to', function_name,
             argument),
      jsonb_build_object('function', function_name, 'argument', argument),
      'leave the tenant out (the bound one is taken), or pass the tenant this session acts for');
  end if;
  return coalesce(v_bound, given);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.ack_many_v1', 'worker_id', ack_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
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
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_v1(id uuid, worker_id text, claim bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_v1');
  end if;
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with gone as (
    delete from jobs.jobs_live j
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j
  ),
  settled as (
    insert into jobs.jobs_history as h
    select e.* from gone g cross join lateral jobs._ended(g.j, 'done', v_now) e
    returning h.name, h.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.bind_tenant(role name, tenant_id text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_previous text;
begin
  perform jobs._require_owner('jobs.bind_tenant', 'bind a role to a tenant');
  if bind_tenant.role is null
     or not exists (select 1 from pg_roles r where r.rolname = bind_tenant.role) then
    perform jobs._invalid('jobs.bind_tenant', 'role', 'must name an existing role');
  end if;
  if bind_tenant.role in (select r.role_name from jobs.roles r)
     or exists (select 1 from pg_roles r where r.rolname = bind_tenant.role and r.rolsuper) then
    perform jobs._invalid('jobs.bind_tenant', 'role',
                          'must not be one of the three durajobs roles, nor a superuser: bind '
                          'a role of the tenant''s own');
  end if;
  perform jobs._check_label('jobs.bind_tenant', 'tenant_id', bind_tenant.tenant_id);
  select b.tenant_id into v_previous from jobs.tenant_bindings b where b.role_name = bind_tenant.role;
  insert into jobs.tenant_bindings as b (role_name, tenant_id)
  values (bind_tenant.role, bind_tenant.tenant_id)
  on conflict on constraint tenant_bindings_pkey do update set tenant_id = excluded.tenant_id;
  execute 'create or replace function jobs._any_binding() returns boolean language sql '
          'immutable set search_path = pg_catalog, pg_temp as ''select true''';
  return v_previous;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.bound_tenant()
 RETURNS text
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_caller name;
  v_tenants text[];
begin
  if not jobs._any_binding() then
    return null;
  end if;
  v_caller := jobs._caller();
  -- a superuser is a member of every role, and the owner runs the installation
  if exists (select 1 from pg_roles r where r.rolname = v_caller and r.rolsuper)
     or pg_has_role(v_caller,
                    (select n.nspowner from pg_namespace n where n.nspname = 'jobs'), 'usage') then
    return null;
  end if;
  select array_agg(distinct b.tenant_id)
    into v_tenants
    from jobs.tenant_bindings b
   where pg_has_role(v_caller, b.role_name, 'member');
  if cardinality(v_tenants) > 1 then
    perform jobs._raise(
      'X_PERMISSION_DENIED',
      format('role %s is a member of roles bound to %s tenants; a session acts for one',
             v_caller, cardinality(v_tenants)),
      jsonb_build_object('role', v_caller),
      'grant each login the bound role of one tenant only');
  end if;
  return v_tenants[1];
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.cancel(id uuid, reason text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._require(array['operator'], 'jobs.cancel', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;
  if length(reason) > 1000 then
    perform jobs._invalid('jobs.cancel', 'reason',
                          format('must be at most 1000 characters, got %s', length(reason)));
  end if;

  if jobs._foreign_job(cancel.id,
                       jobs._scoped_tenant('jobs.cancel', 'tenant_id', cancel.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_CANCELLABLE', format('no job has id %s', cancel.id),
                        jsonb_build_object('id', cancel.id, 'state', null));
  end if;

  with gone as (
    delete from jobs.jobs_live j
     where j.id = cancel.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                  error => 'cancelled' || coalesce(': ' || cancel.reason, ''),
                                  error_code => 'X_JOB_CANCELLED') e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.claim_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.claim_v1');
  end if;
  if queues is null or cardinality(queues) = 0 or array_ndims(queues) <> 1
     or cardinality(queues) > 1000 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or q.name !~ '[^[:space:]]' or length(q.name) > 200),
                  false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
  end if;
  if batch_size is null or batch_size not between 1 and 1000 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.claim_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
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
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue');
  end if;
  -- a session bound to a tenant enqueues for it alone (014_tenants)
  if jobs._any_binding() then
    enqueue.tenant_id := jobs._scoped_tenant('jobs.enqueue', 'tenant_id', enqueue.tenant_id);
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              enqueue.traceparent, enqueue.enqueued_by);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);
  -- a run is its tenant's: another tenant's job would read and write its steps
  if enqueue.run_id is not null and enqueue.run_id is distinct from enqueue.id then
    perform jobs._check_run_tenant('jobs.enqueue', 'run_id', enqueue.run_id, enqueue.tenant_id);
  end if;

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
          -- the other job may be another tenant's: its name and key are not told
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('id %s already names another job; an id is never reused', enqueue.id),
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_bound text;  -- the tenant a bound session acts for
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
  v_max_input integer := jobs._max_bytes('input');
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue_many');
  end if;
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);
  -- a session bound to a tenant enqueues for it alone (014_tenants): a request naming another
  -- tenant is refused, and one naming none takes the bound tenant
  if jobs._any_binding() then
    v_bound := jobs._scoped_tenant('jobs.enqueue_many', 'tenant_id', null);
    if v_bound is not null then
      select e.ord
        into v_bad_ord
        from jsonb_array_elements(requests) with ordinality as e(item, ord)
       where e.item ->> 'tenant_id' <> v_bound
       order by e.ord
       limit 1;
      if v_bad_ord is not null then
        perform jobs._scoped_tenant('jobs.enqueue_many', format('requests[%s].tenant_id', v_bad_ord),
                                    requests -> (v_bad_ord - 1) ->> 'tenant_id');
      end if;
      requests := (select jsonb_agg(e.item || jsonb_build_object('tenant_id', v_bound)
                                    order by e.ord)
                     from jsonb_array_elements(requests) with ordinality as e(item, ord));
    end if;
  end if;

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where (r.name ~ '[^[:space:]]' and length(r.name) <= 200
          and jsonb_typeof(r.input) = 'object'
          and ((pg_column_size(r.input) <= 1024 and pg_column_compression(r.input) is null)
               or jobs._json_bytes(r.input) <= v_max_input)
          and r.idempotency_key ~ '[^[:space:]]' and length(r.idempotency_key) <= 200
          and r.queue ~ '[^[:space:]]' and length(r.queue) <= 200
          and (r.tenant_id is null
               or (r.tenant_id ~ '[^[:space:]]' and length(r.tenant_id) <= 200))
          and r.run_at between v_now - interval '100 years' and v_now + interval '100 years'
          and r.max_attempts between 1 and 1000
          and r.priority between -1000 and 1000
          and not (r.tenant_required and r.tenant_id is null)
          and (r.concurrency_key is null
               or (r.concurrency_key ~ '[^[:space:]]' and length(r.concurrency_key) <= 200))
          and not (r.concurrency_keyed and r.concurrency_key is null)
          and (r.traceparent is null
               or (r.traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and left(r.traceparent, 2) <> 'ff'
                   and substr(r.traceparent, 4, 32) <> repeat('0', 32)
                   and substr(r.traceparent, 37, 16) <> repeat('0', 16)))
          and (r.enqueued_by is null
               or (r.enqueued_by ~ '[^[:space:]]' and length(r.enqueued_by) <= 200))) is not true
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed, v_request.traceparent,
                                v_request.enqueued_by);
  end if;

  -- a run is its tenant's (jobs._check_run_tenant), within the batch too
  if exists (select 1 from jsonb_array_elements(requests) e where e ->> 'run_id' is not null) then
    select format('requests[%s].run_id', r.ord)
      into v_bad_key
      from unnest(v_requests) r
     where r.run_id <> r.id
       and (exists (select 1 from jobs.jobs j
                     where j.id = r.run_id and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from jobs.jobs j
                        where j.run_id = r.run_id and j.run_id <> j.id
                          and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from unnest(v_requests) o
                        where o.run_id = r.run_id and o.tenant_id is distinct from r.tenant_id))
     order by r.ord
     limit 1;
    if v_bad_key is not null then
      perform jobs._raise(
        'X_JOB_TENANT_MISMATCH',
        format('jobs.enqueue_many: %s names a run of another tenant', v_bad_key),
        jsonb_build_object('function', 'jobs.enqueue_many', 'argument', v_bad_key),
        'continue only a run of the job''s own tenant, or leave run_id out for a fresh run');
    end if;
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names another job; an id is never reused',
             v_duplicate.ord, v_duplicate.id),
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
$function$;

CREATE OR REPLACE FUNCTION jobs.find_event(name text, correlation_key text DEFAULT NULL::text, after timestamp with time zone DEFAULT '-infinity'::timestamp with time zone, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.event_lookup
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_lookup jobs.event_lookup;
begin
  perform jobs._require(array['worker'], 'jobs.find_event');
  perform jobs._check_label('jobs.find_event', 'name', find_event.name);
  select true, e.id, e.payload, e.published_at, v_now
    into v_lookup
    from jobs.events e
   where e.name = find_event.name
     and (find_event.correlation_key is null or e.correlation_key = find_event.correlation_key)
     and e.published_at >= coalesce(find_event.after, '-infinity')
     and (e.tenant_id is null or e.tenant_id = find_event.tenant_id)
     and e.expires_at > v_now
   order by e.published_at, e.id
   limit 1;
  if not found then
    v_lookup := (false, null, null, null, v_now)::jobs.event_lookup;
  end if;
  return v_lookup;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.heartbeat_many_v1', 'worker_id',
                              heartbeat_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_v1');
  end if;
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  update jobs.jobs_live j
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
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job jobs.jobs;
begin
  perform jobs._require(array['enqueuer'], 'jobs.inspect_job', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.inspect_job', 'id', 'must be a job id');
  end if;
  select j.* into v_job from jobs.jobs j where j.id = inspect_job.id;
  -- another tenant's job is answered as no job (014_tenants)
  if not found
     or jobs._foreign_job(inspect_job.id,
                          jobs._scoped_tenant('jobs.inspect_job', 'tenant_id',
                                              inspect_job.tenant_id)) then
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.job_types()
 RETURNS SETOF jobs.job_type
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select jobs._require(array['enqueuer'], 'jobs.job_types', scoped => true);
  select t.name, t.queue, t.max_attempts, t.priority, t.tenant_required, t.retry, t.timeout,
         t.input_schema, t.declared_by, t.declared_at, t.seen_at, t.concurrency,
         t.concurrency_keyed, t.when_busy
    from jobs.declarations t
   order by t.name collate "C"
$function$;

CREATE OR REPLACE FUNCTION jobs.list_jobs(queue text DEFAULT NULL::text, name text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, id_prefix text DEFAULT NULL::text, created_from timestamp with time zone DEFAULT NULL::timestamp with time zone, created_to timestamp with time zone DEFAULT NULL::timestamp with time zone, page_size integer DEFAULT 100, after uuid DEFAULT NULL::uuid, before uuid DEFAULT NULL::uuid)
 RETURNS SETOF jobs.job_summary
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_sort TO 'off'
AS $function$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
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

  if list_jobs.before is not null then
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.nack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.nack_v1');
  end if;
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
  -- a failure report is cut to the limit, never refused: a refused nack would leave the attempt
  -- running until its lease lapsed. No limit is under 1 KiB, so a short report reads none
  if octet_length(nack_v1.error) > 1024 or octet_length(nack_v1.error_stack) > 1024 then
    nack_v1.error := jobs._cut(nack_v1.error, jobs._max_bytes('error_text'));
    nack_v1.error_stack := jobs._cut(nack_v1.error_stack, jobs._max_bytes('error_text'));
  end if;
  if length(nack_v1.error_code) > 200 then
    nack_v1.error_code := left(nack_v1.error_code, 200);
  end if;

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.outbox_stage(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, run_id uuid DEFAULT NULL::uuid, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.outbox_stage');
  end if;
  -- a session bound to a tenant stages for it alone (014_tenants)
  if jobs._any_binding() then
    outbox_stage.tenant_id := jobs._scoped_tenant('jobs.outbox_stage', 'tenant_id',
                                                  outbox_stage.tenant_id);
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false),
                              outbox_stage.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              outbox_stage.traceparent, outbox_stage.enqueued_by);
  -- refused now, as the publish would refuse it: a publish that raises holds up every row
  -- staged after it
  if outbox_stage.run_id is not null then
    perform jobs._check_run_tenant('jobs.outbox_stage', 'run_id', outbox_stage.run_id,
                                   outbox_stage.tenant_id);
  end if;

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by,
      'concurrency_key', outbox_stage.concurrency_key))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.progress_v1(id uuid, worker_id text, claim bigint, done numeric, total numeric DEFAULT NULL::numeric, note text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.progress_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.progress_v1');
  end if;
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

  update jobs.jobs_live j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.promote(id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.promote_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval, tenant_id text DEFAULT NULL::text)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  perform jobs._require(array['enqueuer'], 'jobs.publish_event', scoped => true);
  publish_event.tenant_id := jobs._scoped_tenant('jobs.publish_event', 'tenant_id',
                                                 publish_event.tenant_id);
  perform jobs._check_label('jobs.publish_event', 'tenant_id', publish_event.tenant_id,
                            required => false);
  perform jobs._check_label('jobs.publish_event', 'name', publish_event.name);
  perform jobs._check_label('jobs.publish_event', 'correlation_key', publish_event.correlation_key,
                            required => false);
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  perform jobs._check_bytes('jobs.publish_event', 'payload', jobs._json_bytes(publish_event.payload),
                            'input');
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at,
                                tenant_id)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl, publish_event.tenant_id);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and (publish_event.tenant_id is null or j.tenant_id = publish_event.tenant_id)
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.record_step_v1(id uuid, worker_id text, claim bigint, name text, status text, output jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, wake_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jobs.step_record
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.record_step_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.record_step_v1');
  end if;
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name !~ '[^[:space:]]' or length(name) > 200 then
    perform jobs._check_label('jobs.record_step_v1', 'name', record_step_v1.name);
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;
  -- no limit is under 1 KiB, so a small output reads none
  if pg_column_size(record_step_v1.output) > 1024
     or pg_column_compression(record_step_v1.output) is not null then
    perform jobs._check_bytes('jobs.record_step_v1', 'output',
                              jobs._json_bytes(record_step_v1.output), 'step_output');
  end if;
  -- a step's failure is a report, cut to the limit as jobs.nack_v1 cuts one
  if octet_length(record_step_v1.error) > 1024 then
    record_step_v1.error := jobs._cut(record_step_v1.error, jobs._max_bytes('error_text'));
  end if;
  if wake_at is not null
     and not (wake_at between v_now - interval '100 years' and v_now + interval '100 years') then
    perform jobs._invalid('jobs.record_step_v1', 'wake_at',
                          'must be NULL or an instant within 100 years of now');
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove(id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.remove_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  perform jobs._require(array['operator'], 'jobs.requeue', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;
  perform jobs._check_label('jobs.requeue', 'from_step', requeue.from_step, required => false);
  if jobs._foreign_job(requeue.id,
                       jobs._scoped_tenant('jobs.requeue', 'tenant_id', requeue.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                        jsonb_build_object('id', requeue.id));
  end if;

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
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
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
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

  perform pg_notify('jobs_wake', jobs._wake_token(v_job.queue));
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.steps_v1(run_id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS SETOF jobs.step_record
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_tenant text := steps_v1.tenant_id;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                      jobs._role_name('worker'), 'usage')
          or pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                         jobs._role_name('operator'), 'usage')) then
    perform jobs._denied(array['worker', 'operator'], 'jobs.steps_v1');
  end if;
  if run_id is null then
    perform jobs._invalid('jobs.steps_v1', 'run_id', 'must be a run id');
  end if;
  if jobs._any_binding() then
    v_tenant := jobs._scoped_tenant('jobs.steps_v1', 'tenant_id', steps_v1.tenant_id);
  end if;
  -- another tenant's run answers as a run with no steps
  if v_tenant is not null
     and (exists (select 1 from jobs.jobs j
                   where j.id = steps_v1.run_id and j.tenant_id is distinct from v_tenant)
          or exists (select 1 from jobs.jobs j
                      where j.run_id = steps_v1.run_id and j.run_id <> j.id
                        and j.tenant_id is distinct from v_tenant)) then
    return;
  end if;
  return query
    select s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
      from jobs.steps s
     where s.run_id = steps_v1.run_id
     order by s.started_at, s.name;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.unbind_tenant(role name)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_found boolean;
begin
  perform jobs._require_owner('jobs.unbind_tenant', 'unbind a role');
  delete from jobs.tenant_bindings b where b.role_name = unbind_tenant.role;
  v_found := found;
  if not exists (select 1 from jobs.tenant_bindings) then
    execute 'create or replace function jobs._any_binding() returns boolean language sql '
            'immutable set search_path = pg_catalog, pg_temp as ''select false''';
  end if;
  return v_found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 11
$function$;

-- revision 0012
-- durajobs revision 0012 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.redacted_keys (
  fragment text primary key check (fragment ~ '^[a-z0-9_]{1,100}$')
);

insert into jobs.redacted_keys (fragment) values
  ('password'), ('passwd'), ('secret'), ('token'), ('authorization'), ('api_key'), ('apikey'),
  ('private_key'), ('credential');

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._redacted(value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  case jsonb_typeof(value)
    when 'object' then
      return (select coalesce(jsonb_object_agg(
                                e.key,
                                case when jobs._secret_key(e.key) then to_jsonb('[redacted]'::text)
                                     else jobs._redacted(e.value) end),
                              '{}'::jsonb)
                from jsonb_each(value) e);
    when 'array' then
      return (select coalesce(jsonb_agg(jobs._redacted(e.value) order by e.ord), '[]'::jsonb)
                from jsonb_array_elements(value) with ordinality e(value, ord));
    else
      return value;
  end case;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._require(kinds text[], function_name text, scoped boolean DEFAULT false)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_caller name := jobs._caller();
  v_kind text;
begin
  foreach v_kind in array kinds loop
    if jobs._role_name(v_kind) is null
       or pg_has_role(v_caller, jobs._role_name(v_kind), 'usage') then
      if not scoped then
        perform jobs._refuse_bound(function_name);
      end if;
      return;
    end if;
  end loop;
  perform jobs._denied(kinds, function_name);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._secret_key(name text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select exists (select 1
                   from jobs.redacted_keys r
                  where strpos(replace(lower(name), '-', '_'), r.fragment) > 0)
$function$;

CREATE OR REPLACE FUNCTION jobs.bind_tenant(role name, tenant_id text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_previous text;
begin
  perform jobs._require_owner('jobs.bind_tenant', 'bind a role to a tenant');
  if bind_tenant.role is null
     or not exists (select 1 from pg_roles r where r.rolname = bind_tenant.role) then
    perform jobs._invalid('jobs.bind_tenant', 'role', 'must name an existing role');
  end if;
  if bind_tenant.role in (select r.role_name from jobs.roles r)
     or exists (select 1 from pg_roles r where r.rolname = bind_tenant.role and r.rolsuper) then
    perform jobs._invalid('jobs.bind_tenant', 'role',
                          'must not be one of the three durajobs roles, nor a superuser: bind '
                          'a role of the tenant''s own');
  end if;
  perform jobs._check_label('jobs.bind_tenant', 'tenant_id', bind_tenant.tenant_id);
  select b.tenant_id
    into v_previous
    from jobs.tenant_bindings b
   where b.role_name = bind_tenant.role;
  insert into jobs.tenant_bindings as b (role_name, tenant_id)
  values (bind_tenant.role, bind_tenant.tenant_id)
  on conflict on constraint tenant_bindings_pkey do update set tenant_id = excluded.tenant_id;
  execute 'create or replace function jobs._any_binding() returns boolean language sql '
          'immutable set search_path = pg_catalog, pg_temp as ''select true''';
  return v_previous;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_bound text;  -- the tenant a bound session acts for
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
  v_max_input integer := jobs._max_bytes('input');
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue_many');
  end if;
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);
  -- a session bound to a tenant enqueues for it alone (014_tenants): a request naming another
  -- tenant is refused, and one naming none takes the bound tenant
  if jobs._any_binding() then
    v_bound := jobs._scoped_tenant('jobs.enqueue_many', 'tenant_id', null);
    if v_bound is not null then
      select e.ord
        into v_bad_ord
        from jsonb_array_elements(requests) with ordinality as e(item, ord)
       where e.item ->> 'tenant_id' <> v_bound
       order by e.ord
       limit 1;
      if v_bad_ord is not null then
        perform jobs._scoped_tenant('jobs.enqueue_many',
                                    format('requests[%s].tenant_id', v_bad_ord),
                                    requests -> (v_bad_ord - 1) ->> 'tenant_id');
      end if;
      requests := (select jsonb_agg(e.item || jsonb_build_object('tenant_id', v_bound)
                                    order by e.ord)
                     from jsonb_array_elements(requests) with ordinality as e(item, ord));
    end if;
  end if;

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where (r.name ~ '[^[:space:]]' and length(r.name) <= 200
          and jsonb_typeof(r.input) = 'object'
          and ((pg_column_size(r.input) <= 1024 and pg_column_compression(r.input) is null)
               or jobs._json_bytes(r.input) <= v_max_input)
          and r.idempotency_key ~ '[^[:space:]]' and length(r.idempotency_key) <= 200
          and r.queue ~ '[^[:space:]]' and length(r.queue) <= 200
          and (r.tenant_id is null
               or (r.tenant_id ~ '[^[:space:]]' and length(r.tenant_id) <= 200))
          and r.run_at between v_now - interval '100 years' and v_now + interval '100 years'
          and r.max_attempts between 1 and 1000
          and r.priority between -1000 and 1000
          and not (r.tenant_required and r.tenant_id is null)
          and (r.concurrency_key is null
               or (r.concurrency_key ~ '[^[:space:]]' and length(r.concurrency_key) <= 200))
          and not (r.concurrency_keyed and r.concurrency_key is null)
          and (r.traceparent is null
               or (r.traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and left(r.traceparent, 2) <> 'ff'
                   and substr(r.traceparent, 4, 32) <> repeat('0', 32)
                   and substr(r.traceparent, 37, 16) <> repeat('0', 16)))
          and (r.enqueued_by is null
               or (r.enqueued_by ~ '[^[:space:]]' and length(r.enqueued_by) <= 200))) is not true
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed, v_request.traceparent,
                                v_request.enqueued_by);
  end if;

  -- a run is its tenant's (jobs._check_run_tenant), within the batch too
  if exists (select 1 from jsonb_array_elements(requests) e where e ->> 'run_id' is not null) then
    select format('requests[%s].run_id', r.ord)
      into v_bad_key
      from unnest(v_requests) r
     where r.run_id <> r.id
       and (exists (select 1 from jobs.jobs j
                     where j.id = r.run_id and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from jobs.jobs j
                        where j.run_id = r.run_id and j.run_id <> j.id
                          and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from unnest(v_requests) o
                        where o.run_id = r.run_id and o.tenant_id is distinct from r.tenant_id))
     order by r.ord
     limit 1;
    if v_bad_key is not null then
      perform jobs._raise(
        'X_JOB_TENANT_MISMATCH',
        format('jobs.enqueue_many: %s names a run of another tenant', v_bad_key),
        jsonb_build_object('function', 'jobs.enqueue_many', 'argument', v_bad_key),
        'continue only a run of the job''s own tenant, or leave run_id out for a fresh run');
    end if;
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names another job; an id is never reused',
             v_duplicate.ord, v_duplicate.id),
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
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job jobs.jobs;
begin
  perform jobs._require(array['enqueuer'], 'jobs.inspect_job', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.inspect_job', 'id', 'must be a job id');
  end if;
  select j.* into v_job from jobs.jobs j where j.id = inspect_job.id;
  -- another tenant's job is answered as no job (014_tenants)
  if not found
     or jobs._foreign_job(inspect_job.id,
                          jobs._scoped_tenant('jobs.inspect_job', 'tenant_id',
                                              inspect_job.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND',
                        format('jobs.inspect_job: no job has id %s', inspect_job.id),
                        jsonb_build_object('function', 'jobs.inspect_job', 'id', inspect_job.id));
  end if;

  return jsonb_build_object(
    -- the input as an operator may see it: secrets' values hidden (017_redaction)
    'job', jsonb_set(to_jsonb(v_job), '{input}', jobs._redacted(v_job.input)),
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
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval, tenant_id text DEFAULT NULL::text)
 RETURNS uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  perform jobs._require(array['enqueuer'], 'jobs.publish_event', scoped => true);
  publish_event.tenant_id := jobs._scoped_tenant('jobs.publish_event', 'tenant_id',
                                                 publish_event.tenant_id);
  perform jobs._check_label('jobs.publish_event', 'tenant_id', publish_event.tenant_id,
                            required => false);
  perform jobs._check_label('jobs.publish_event', 'name', publish_event.name);
  perform jobs._check_label('jobs.publish_event', 'correlation_key', publish_event.correlation_key,
                            required => false);
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  perform jobs._check_bytes('jobs.publish_event', 'payload',
                            jobs._json_bytes(publish_event.payload), 'input');
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at,
                                tenant_id)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl, publish_event.tenant_id);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and (publish_event.tenant_id is null or j.tenant_id = publish_event.tenant_id)
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.redact(value jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return jobs._redacted(value);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.redact_keys(fragments text[])
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_added integer;
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.redact_keys');
  if fragments is null or coalesce(array_ndims(fragments), 1) <> 1
     or cardinality(fragments) > 1000
     or exists (select 1 from unnest(fragments) f
                 where f is null or replace(lower(f), '-', '_') !~ '^[a-z0-9_]{1,100}$') then
    perform jobs._invalid('jobs.redact_keys', 'fragments',
                          'must be an array of at most 1000 key fragments of 1 to 100 letters, '
                          'digits, - or _');
  end if;
  insert into jobs.redacted_keys (fragment)
  select distinct replace(lower(f), '-', '_') from unnest(fragments) f
  on conflict on constraint redacted_keys_pkey do nothing;
  get diagnostics v_added = row_count;
  return v_added;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 12
$function$;

-- revision 0013
-- durajobs revision 0013 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.purge_cursor (
  only_row boolean primary key default true check (only_row),
  steps_after uuid
);

insert into jobs.purge_cursor (steps_after) values (null);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 13
$function$;

-- revision 0014
-- durajobs revision 0014 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_JOB_NOT_DRAINABLE', 'JQ020',
   'only a live job drains: a finished one stays as it ended (select jobs.requeue(id => ''<job id>'') runs it again)');

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs.drain(id uuid, tenant_id text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._require(array['operator'], 'jobs.drain', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.drain', 'id', 'must be a job id');
  end if;
  if jobs._foreign_job(drain.id,
                       jobs._scoped_tenant('jobs.drain', 'tenant_id', drain.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', drain.id),
                        jsonb_build_object('id', drain.id));
  end if;

  -- no counter moves: the settle functions count in their statement, this one does not
  with gone as (
    delete from jobs.jobs_live j
     where j.id = drain.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'done', v_now) e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = drain.id;
  if v_state is null then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', drain.id),
                        jsonb_build_object('id', drain.id));
  end if;
  perform jobs._raise(
    'X_JOB_NOT_DRAINABLE',
    format('job %s is %s; only a live job can be drained', drain.id, v_state),
    jsonb_build_object('id', drain.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 14
$function$;

-- revision 0015
-- durajobs revision 0015 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
alter table jobs.jobs_live set (vacuum_truncate = false);
create type jobs.horizon_holder as (
  holder text,
  pid integer,
  user_name text,
  name text,
  state text,
  since timestamptz,
  age_seconds double precision,
  xid_age integer
);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._claim_marks_keep(marks jsonb, head_queues text[], heavy boolean, until timestamp with time zone, taken_queues text[], taken_priorities integer[], taken_run_ats timestamp with time zone[], taken_ids uuid[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_marks jsonb := coalesce(_claim_marks_keep.marks, '{}');
begin
  if heavy then
    select v_marks || coalesce(jsonb_object_agg(
             h.queue,
             coalesce(v_marks -> h.queue, '{}')
               || jsonb_build_object('until', _claim_marks_keep.until)),
             '{}')
      into v_marks
      from unnest(_claim_marks_keep.head_queues) as h(queue);
  else
    v_marks := v_marks - _claim_marks_keep.head_queues;
  end if;
  select v_marks || coalesce(jsonb_object_agg(
           l.queue,
           v_marks -> l.queue || jsonb_build_object('p', l.priority, 'r', l.run_at, 'i', l.id)),
           '{}')
    into v_marks
    from (
      select distinct on (t.queue) t.queue, t.priority, t.run_at, t.id
        from unnest(_claim_marks_keep.taken_queues, _claim_marks_keep.taken_priorities,
                    _claim_marks_keep.taken_run_ats, _claim_marks_keep.taken_ids)
               with ordinality as t(queue, priority, run_at, id, ord)
       order by t.queue, t.ord desc
    ) l
   where v_marks ? l.queue;
  perform set_config('jobs.claim_marks',
                     case when v_marks = '{}' then '' else v_marks::text end, false);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_marks_of(queues text[], marks jsonb, clock timestamp with time zone, OUT priorities integer[], OUT run_ats timestamp with time zone[], OUT ids uuid[])
 RETURNS record
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  select array_agg(coalesce((m.mark ->> 'p')::integer, -2147483648) order by q.ord),
         array_agg(coalesce((m.mark ->> 'r')::timestamptz, '-infinity') order by q.ord),
         array_agg(coalesce((m.mark ->> 'i')::uuid, '00000000-0000-0000-0000-000000000000')
                   order by q.ord)
    into priorities, run_ats, ids
    from unnest(_claim_marks_of.queues) with ordinality as q(queue, ord)
    left join lateral (
      select _claim_marks_of.marks -> q.queue as mark
       where (_claim_marks_of.marks -> q.queue ->> 'until')::timestamptz
               > _claim_marks_of.clock
    ) m on true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_rescan()
 RETURNS interval
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select interval '1 second' $function$;

CREATE OR REPLACE FUNCTION jobs._claim_walk_limit()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ select 1000 $function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
  v_setting text;
  v_marks jsonb;
  v_head text[];
  v_starts_p integer[];
  v_starts_r timestamptz[];
  v_starts_i uuid[];
  v_walked bigint;
  v_ids uuid[];
  v_taken_q text[];
  v_taken_p integer[];
  v_taken_r timestamptz[];
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.claim_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.claim_v1');
  end if;
  if queues is null or cardinality(queues) = 0 or array_ndims(queues) <> 1
     or cardinality(queues) > 1000 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or q.name !~ '[^[:space:]]' or length(q.name) > 200),
                  false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
  end if;
  if batch_size is null or batch_size not between 1 and 1000 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.claim_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
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
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
    return;
  end if;

  -- where each queue's scan starts: at the head of jobs_claim_idx, or after this session's
  -- standing mark while a held horizon leaves the head full of dead entries (031_claim_marks)
  v_setting := current_setting('jobs.claim_marks', true);
  if v_setting is null or v_setting = '' then
    v_starts_p := array_fill(-2147483648, array[cardinality(v_queues)]);
    v_starts_r := array_fill('-infinity'::timestamptz, array[cardinality(v_queues)]);
    v_starts_i := array_fill('00000000-0000-0000-0000-000000000000'::uuid,
                             array[cardinality(v_queues)]);
    v_head := v_queues;
  else
    v_marks := v_setting::jsonb;
    select m.priorities, m.run_ats, m.ids
      into v_starts_p, v_starts_r, v_starts_i
      from jobs._claim_marks_of(v_queues, v_marks, clock_timestamp()) m;
    select coalesce(array_agg(q.queue), '{}')
      into v_head
      from unnest(v_queues, v_starts_p) as q(queue, start)
     where q.start = -2147483648;
  end if;
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass);

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order from its start, so the scan stops
  -- after the rows it needs: `queue = any(...)` would read and sort every waiting row of every
  -- queue instead.
  -- the arrays keep the hand-out order the subquery sorted in (one sort, not four)
  select array_agg(d.id), array_agg(d.queue), array_agg(d.priority), array_agg(d.run_at)
    into v_ids, v_taken_q, v_taken_p, v_taken_r
    from (
      select w.id, q.queue, w.priority, w.run_at
        from unnest(v_queues, v_starts_p, v_starts_r, v_starts_i) as q(queue, p, r, i)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and (j.priority, j.run_at, j.id) > (q.p, q.r, q.i)
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ) d;

  -- the entries the scans walked beyond the rows they took: dead ones a held horizon keeps
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass) - v_walked
              - coalesce(cardinality(v_ids), 0);
  if v_marks is not null or v_walked > jobs._claim_walk_limit() then
    perform jobs._claim_marks_keep(v_marks, v_head, v_walked > jobs._claim_walk_limit(),
                                   clock_timestamp() + jobs._claim_rescan(),
                                   v_taken_q, v_taken_p, v_taken_r, v_ids);
  end if;
  if v_ids is null then
    return;
  end if;

  return query
    with claimed as (
      -- by primary key
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(v_ids)
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.horizon()
 RETURNS SETOF jobs.horizon_holder
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.horizon');
  return query
    with holders as (
      select 'session'::text as holder, a.pid, a.usename::text as user_name,
             a.application_name::text as name, a.state, a.xact_start as since,
             age(coalesce(a.backend_xmin, a.backend_xid)) as xid_age
        from pg_stat_activity a
       where a.datname = current_database()
         and a.pid <> pg_backend_pid()
         -- sessions alone: autovacuum's own brief snapshots are not what an operator can end
         and a.backend_type = 'client backend'
         and coalesce(a.backend_xmin, a.backend_xid) is not null
      union all
      select 'prepared', null::integer, p.owner::text, p.gid, 'prepared', p.prepared,
             age(p.transaction)
        from pg_prepared_xacts p
       where p.database = current_database()
      union all
      select 'slot', null::integer, null::text, s.slot_name::text,
             case when s.active then 'active' else 'inactive' end, null::timestamptz,
             age(s.xmin)
        from pg_replication_slots s
       where s.xmin is not null
         and (s.database is null or s.database = current_database())
    )
    select h.holder, h.pid, h.user_name, h.name, h.state, h.since,
           extract(epoch from clock_timestamp() - h.since)::double precision, h.xid_age
      from holders h
     order by h.xid_age desc, h.since
     limit 1;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 15
$function$;

-- revision 0016
-- durajobs revision 0016 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- three indexes of jobs.jobs_live that a lookup by id read whole when the statistics called
-- the table empty: now only a statement naming their columns can read them (000_schema)
drop index jobs.jobs_queue_created_idx;
create index jobs_queue_created_idx
  on jobs.jobs_live (queue, created_at, id)
  where queue is not null;
drop index jobs.jobs_lease_idx;
create index jobs_lease_idx
  on jobs.jobs_live (lease_expires_at)
  where state = 'running' and lease_expires_at is not null;
drop index jobs.jobs_name_tenant_idempotency_live_idx;
create unique index jobs_name_tenant_idempotency_live_idx
  on jobs.jobs_live (name, (coalesce(tenant_id, '')), idempotency_key);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._listed_queues(queue text)
 RETURNS SETOF text
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with recursive names (queue) as (
    -- `is not null` for the live table's index, partial on it (000_schema)
    select coalesce(_listed_queues.queue,
                    (select j.queue from jobs.jobs j where j.queue is not null
                      order by j.queue limit 1))
    union all
    select (select j.queue from jobs.jobs j where j.queue > n.queue order by j.queue limit 1)
      from names n
     where _listed_queues.queue is null
       and n.queue is not null
  )
  select n.queue from names n where n.queue is not null
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.ack_many_v1', 'worker_id', ack_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
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
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_v1(id uuid, worker_id text, claim bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_v1');
  end if;
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with gone as (
    delete from jobs.jobs_live j
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j
  ),
  settled as (
    insert into jobs.jobs_history as h
    select e.* from gone g cross join lateral jobs._ended(g.j, 'done', v_now) e
    returning h.name, h.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
  v_setting text;
  v_marks jsonb;
  v_head text[];
  v_starts_p integer[];
  v_starts_r timestamptz[];
  v_starts_i uuid[];
  v_walked bigint;
  v_ids uuid[];
  v_taken_q text[];
  v_taken_p integer[];
  v_taken_r timestamptz[];
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.claim_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.claim_v1');
  end if;
  if queues is null or cardinality(queues) = 0 or array_ndims(queues) <> 1
     or cardinality(queues) > 1000 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or q.name !~ '[^[:space:]]' or length(q.name) > 200),
                  false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
  end if;
  if batch_size is null or batch_size not between 1 and 1000 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.claim_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      -- by primary key: as a join, statistics that call the table empty could have it read
      -- whole, each lapsed row looked up in it
      gone as (
        delete from jobs.jobs_live j
         where j.id = any(array(select l.id from lapsed l))
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
           set claimed_by = claim_v1.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + claim_v1.visibility,
               claims = j.claims + 1,
               attempt = j.attempt + 1,
               updated_at = v_now
         where j.id = any(array(select l.id from lapsed l))
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                  j.last_error, j.traceparent, j.enqueued_by
      )
      select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
             c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
    return;
  end if;

  -- where each queue's scan starts: at the head of jobs_claim_idx, or after this session's
  -- standing mark while a held horizon leaves the head full of dead entries (031_claim_marks)
  v_setting := current_setting('jobs.claim_marks', true);
  if v_setting is null or v_setting = '' then
    v_starts_p := array_fill(-2147483648, array[cardinality(v_queues)]);
    v_starts_r := array_fill('-infinity'::timestamptz, array[cardinality(v_queues)]);
    v_starts_i := array_fill('00000000-0000-0000-0000-000000000000'::uuid,
                             array[cardinality(v_queues)]);
    v_head := v_queues;
  else
    v_marks := v_setting::jsonb;
    select m.priorities, m.run_ats, m.ids
      into v_starts_p, v_starts_r, v_starts_i
      from jobs._claim_marks_of(v_queues, v_marks, clock_timestamp()) m;
    select coalesce(array_agg(q.queue), '{}')
      into v_head
      from unnest(v_queues, v_starts_p) as q(queue, start)
     where q.start = -2147483648;
  end if;
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass);

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order from its start, so the scan stops
  -- after the rows it needs: `queue = any(...)` would read and sort every waiting row of every
  -- queue instead.
  -- the arrays keep the hand-out order the subquery sorted in (one sort, not four)
  select array_agg(d.id), array_agg(d.queue), array_agg(d.priority), array_agg(d.run_at)
    into v_ids, v_taken_q, v_taken_p, v_taken_r
    from (
      select w.id, q.queue, w.priority, w.run_at
        from unnest(v_queues, v_starts_p, v_starts_r, v_starts_i) as q(queue, p, r, i)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and (j.priority, j.run_at, j.id) > (q.p, q.r, q.i)
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ) d;

  -- the entries the scans walked beyond the rows they took: dead ones a held horizon keeps
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass) - v_walked
              - coalesce(cardinality(v_ids), 0);
  if v_marks is not null or v_walked > jobs._claim_walk_limit() then
    perform jobs._claim_marks_keep(v_marks, v_head, v_walked > jobs._claim_walk_limit(),
                                   clock_timestamp() + jobs._claim_rescan(),
                                   v_taken_q, v_taken_p, v_taken_r, v_ids);
  end if;
  if v_ids is null then
    return;
  end if;

  return query
    with claimed as (
      -- by primary key
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(v_ids)
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.heartbeat_many_v1', 'worker_id',
                              heartbeat_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_v1');
  end if;
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  update jobs.jobs_live j
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
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.list_jobs(queue text DEFAULT NULL::text, name text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, id_prefix text DEFAULT NULL::text, created_from timestamp with time zone DEFAULT NULL::timestamp with time zone, created_to timestamp with time zone DEFAULT NULL::timestamp with time zone, page_size integer DEFAULT 100, after uuid DEFAULT NULL::uuid, before uuid DEFAULT NULL::uuid)
 RETURNS SETOF jobs.job_summary
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $function$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
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

  if list_jobs.before is not null then
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_many_v1(worker_id text, nacks jsonb)
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_ids uuid[];
  v_claims bigint[];
  v_next_states text[];
  v_delays interval[];
  v_counts boolean[];
  v_ord integer;
  v_bad_key text;
begin
  perform jobs._require(array['worker'], 'jobs.nack_many_v1');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET jit TO 'off'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.nack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.nack_v1');
  end if;
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
  -- a failure report is cut to the limit, never refused: a refused nack would leave the attempt
  -- running until its lease lapsed. No limit is under 1 KiB, so a short report reads none
  if octet_length(nack_v1.error) > 1024 or octet_length(nack_v1.error_stack) > 1024 then
    nack_v1.error := jobs._cut(nack_v1.error, jobs._max_bytes('error_text'));
    nack_v1.error_stack := jobs._cut(nack_v1.error_stack, jobs._max_bytes('error_text'));
  end if;
  if length(nack_v1.error_code) > 200 then
    nack_v1.error_code := left(nack_v1.error_code, 200);
  end if;

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_stats(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_stat
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.queue_stats');
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state = 'running'
         and j.lease_expires_at is not null  -- every running row: for jobs_lease_idx
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_history_ended j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
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
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 16
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_running_v1(worker_id text)
 RETURNS TABLE(id uuid, claim bigint)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.worker_running_v1');
  perform jobs._check_label('jobs.worker_running_v1', 'worker_id', worker_running_v1.worker_id);
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.lease_expires_at is not null
       and j.claimed_by = worker_running_v1.worker_id;
end;
$function$;

-- revision 0017
-- durajobs revision 0017 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- (none)

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs.scheduler_fire(task text, occurrence timestamp with time zone, requests jsonb DEFAULT '[]'::jsonb, watermark timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
               format('%s@%s:%s', scheduler_fire.task,
                      to_char(scheduler_fire.occurrence at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      r.item ->> 'idempotency_key'))
           end
           order by r.ord), '[]')
    into v_requests
    from jsonb_array_elements(scheduler_fire.requests) with ordinality as r(item, ord);

  return query
    select e.id, e.run_id, e.deduped
      from jobs.enqueue_many(requests => v_requests) e;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.scheduler_skip(task text, watermark timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 17
$function$;

-- revision 0018
-- durajobs revision 0018 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
update jobs.error_codes e
   set fix = v.fix
  from (values
  ('X_ARGUMENT_INVALID',
   'select pg_get_function_arguments(''jobs.<function>''::regproc)'),
  ('X_JOB_INPUT_INVALID',
   'select jobs.enqueue(name => ''<job>'', input => ''{"user_id": 1}''::jsonb, idempotency_key => ''<key>'')'),
  ('X_IDEMPOTENCY_REQUIRED',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''invoice:42'')'),
  ('X_JOB_DUPLICATE',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''<key>'', on_conflict => ''dedupe'')'),
  ('X_DRIVER_UNAVAILABLE',
   'durajobs migrate --database-url "$DATABASE_URL"'),
  ('X_JOB_CLAIM_QUEUES_EMPTY',
   'select id, name, claim from jobs.claim_v1(queues => array[''default''], worker_id => ''<worker>'')'),
  ('X_JOB_LEASE_LOST',
   'select jobs.inspect_job(id => ''<id>'')'),
  ('X_JOB_CANCELLED',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_STEP_DUPLICATE',
   'await ctx.step.run("<a name no other step of the run has>", <function>)'),
  ('X_JOB_ROW_STATUS_UNKNOWN',
   'pip install --upgrade durajobs'),
  ('X_JOB_NOT_FOUND',
   'select id, name, state from jobs.list_jobs(id_prefix => ''<first characters of the id>'')'),
  ('X_JOB_NOT_REQUEUEABLE',
   'select jobs.cancel(id => ''<id>'')'),
  ('X_JOB_NOT_CANCELLABLE',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_JOB_PAGE_INVALID',
   'select id, name, state from jobs.list_jobs(page_size => 100, after => ''<last id of the page before>'')'),
  ('X_JOB_NOT_REMOVABLE',
   'select jobs.cancel(id => ''<id>'')'),
  ('X_JOB_NOT_PROMOTABLE',
   'select jobs.inspect_job(id => ''<id>'')'),
  ('X_JOB_TENANT_REQUIRED',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''<key>'', tenant_id => ''<tenant>'')'),
  ('X_PERMISSION_DENIED',
   'grant durajobs_operator to <login>'),
  ('X_JOB_NOT_DRAINABLE',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_JOB_TENANT_MISMATCH',
   'select jobs.bound_tenant()')
  ) v (code, fix)
 where e.code = v.code;

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._check_enqueue(function_name text, prefix text, name text, input jsonb, idempotency_key text, queue text, tenant_id text, run_at timestamp with time zone, max_attempts integer, priority integer, tenant_required boolean DEFAULT false, concurrency_key text DEFAULT NULL::text, concurrency_keyed boolean DEFAULT false, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- the usual request passes every test below at once; only a refused one walks them to find
  -- which argument to name. jobs.enqueue_many's pass is this same expression: change both.
  if (_check_enqueue.name ~ '[^[:space:]]' and length(_check_enqueue.name) <= 200
      and jsonb_typeof(_check_enqueue.input) = 'object'
      -- no limit is under 1 KiB, so only a larger input reads the limit
      and ((pg_column_size(_check_enqueue.input) <= 1024
            and pg_column_compression(_check_enqueue.input) is null)
           or jobs._json_bytes(_check_enqueue.input) <= jobs._max_bytes('input'))
      and _check_enqueue.idempotency_key ~ '[^[:space:]]'
      and length(_check_enqueue.idempotency_key) <= 200
      and _check_enqueue.queue ~ '[^[:space:]]' and length(_check_enqueue.queue) <= 200
      and (_check_enqueue.tenant_id is null
           or (_check_enqueue.tenant_id ~ '[^[:space:]]'
               and length(_check_enqueue.tenant_id) <= 200))
      and _check_enqueue.run_at between jobs._now() - interval '100 years'
                                    and jobs._now() + interval '100 years'
      and _check_enqueue.max_attempts between 1 and 1000
      and _check_enqueue.priority between -1000 and 1000
      and not (_check_enqueue.tenant_required and _check_enqueue.tenant_id is null)
      and (_check_enqueue.concurrency_key is null
           or (_check_enqueue.concurrency_key ~ '[^[:space:]]'
               and length(_check_enqueue.concurrency_key) <= 200))
      and not (_check_enqueue.concurrency_keyed and _check_enqueue.concurrency_key is null)
      and (_check_enqueue.traceparent is null
           or jobs._valid_traceparent(_check_enqueue.traceparent))
      and (_check_enqueue.enqueued_by is null
           or (_check_enqueue.enqueued_by ~ '[^[:space:]]'
               and length(_check_enqueue.enqueued_by) <= 200))) is true then
    return;
  end if;

  perform jobs._check_label(function_name, prefix || 'name', _check_enqueue.name);
  if _check_enqueue.input is null or jsonb_typeof(_check_enqueue.input) <> 'object' then
    perform jobs._raise(
      'X_JOB_INPUT_INVALID',
      format('%s: %sinput must be a JSON object, got %s', function_name, prefix,
             coalesce(jsonb_typeof(_check_enqueue.input), 'NULL')),
      jsonb_build_object('function', function_name, 'argument', prefix || 'input',
                         'job', _check_enqueue.name));
  end if;
  perform jobs._check_bytes(function_name, prefix || 'input',
                            jobs._json_bytes(_check_enqueue.input), 'input');
  if _check_enqueue.idempotency_key is null
     or _check_enqueue.idempotency_key !~ '[^[:space:]]' then
    perform jobs._raise(
      'X_IDEMPOTENCY_REQUIRED',
      format('%s: %sidempotency_key is required for job %s', function_name, prefix,
             _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'idempotency_key',
                         'job', _check_enqueue.name));
  end if;
  perform jobs._check_label(function_name, prefix || 'idempotency_key',
                            _check_enqueue.idempotency_key);
  perform jobs._check_label(function_name, prefix || 'queue', _check_enqueue.queue);
  perform jobs._check_label(function_name, prefix || 'tenant_id', _check_enqueue.tenant_id,
                            required => false);
  if _check_enqueue.run_at is null
     or not (_check_enqueue.run_at between jobs._now() - interval '100 years'
                                       and jobs._now() + interval '100 years') then
    perform jobs._invalid(function_name, prefix || 'run_at',
                          'must be an instant within 100 years of now');
  end if;
  if _check_enqueue.max_attempts is null or _check_enqueue.max_attempts not between 1 and 1000 then
    perform jobs._invalid(function_name, prefix || 'max_attempts',
                          'must be an integer from 1 to 1000');
  end if;
  if _check_enqueue.priority is null or _check_enqueue.priority not between -1000 and 1000 then
    perform jobs._invalid(function_name, prefix || 'priority',
                          'must be an integer from -1000 to 1000 (0 is the default)');
  end if;
  if _check_enqueue.tenant_required and _check_enqueue.tenant_id is null then
    perform jobs._raise(
      'X_JOB_TENANT_REQUIRED',
      format('%s: %stenant_id is required: job %s is declared with a tenant', function_name,
             prefix, _check_enqueue.name),
      jsonb_build_object('function', function_name, 'argument', prefix || 'tenant_id',
                         'job', _check_enqueue.name));
  end if;
  perform jobs._check_label(function_name, prefix || 'concurrency_key',
                            _check_enqueue.concurrency_key, required => false);
  if _check_enqueue.concurrency_keyed and _check_enqueue.concurrency_key is null then
    perform jobs._invalid(function_name, prefix || 'concurrency_key',
                          format('is required: job %s limits its concurrency per key',
                                 _check_enqueue.name));
  end if;
  perform jobs._check_traceparent(function_name, prefix || 'traceparent',
                                  _check_enqueue.traceparent);
  perform jobs._check_label(function_name, prefix || 'enqueued_by', _check_enqueue.enqueued_by,
                            required => false);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue');
  end if;
  -- a session bound to a tenant enqueues for it alone (014_tenants)
  if jobs._any_binding() then
    enqueue.tenant_id := jobs._scoped_tenant('jobs.enqueue', 'tenant_id', enqueue.tenant_id);
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              enqueue.traceparent, enqueue.enqueued_by);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);
  -- a run is its tenant's: another tenant's job would read and write its steps
  if enqueue.run_id is not null and enqueue.run_id is distinct from enqueue.id then
    perform jobs._check_run_tenant('jobs.enqueue', 'run_id', enqueue.run_id, enqueue.tenant_id);
  end if;

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
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
          -- the other job may be another tenant's: its name and key are not told
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('id %s already names another job; an id is never reused', enqueue.id),
            jsonb_build_object('reason', 'id_taken', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key),
            -- the HINT a caller runs: a fresh id (leaving it out makes one too)
            'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, '
            'idempotency_key => ''<key>'', id => gen_random_uuid())');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_bound text;  -- the tenant a bound session acts for
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
  v_max_input integer := jobs._max_bytes('input');
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.enqueue_many');
  end if;
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);
  -- a session bound to a tenant enqueues for it alone (014_tenants): a request naming another
  -- tenant is refused, and one naming none takes the bound tenant
  if jobs._any_binding() then
    v_bound := jobs._scoped_tenant('jobs.enqueue_many', 'tenant_id', null);
    if v_bound is not null then
      select e.ord
        into v_bad_ord
        from jsonb_array_elements(requests) with ordinality as e(item, ord)
       where e.item ->> 'tenant_id' <> v_bound
       order by e.ord
       limit 1;
      if v_bad_ord is not null then
        perform jobs._scoped_tenant('jobs.enqueue_many',
                                    format('requests[%s].tenant_id', v_bad_ord),
                                    requests -> (v_bad_ord - 1) ->> 'tenant_id');
      end if;
      requests := (select jsonb_agg(e.item || jsonb_build_object('tenant_id', v_bound)
                                    order by e.ord)
                     from jsonb_array_elements(requests) with ordinality as e(item, ord));
    end if;
  end if;

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
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

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where (r.name ~ '[^[:space:]]' and length(r.name) <= 200
          and jsonb_typeof(r.input) = 'object'
          and ((pg_column_size(r.input) <= 1024 and pg_column_compression(r.input) is null)
               or jobs._json_bytes(r.input) <= v_max_input)
          and r.idempotency_key ~ '[^[:space:]]' and length(r.idempotency_key) <= 200
          and r.queue ~ '[^[:space:]]' and length(r.queue) <= 200
          and (r.tenant_id is null
               or (r.tenant_id ~ '[^[:space:]]' and length(r.tenant_id) <= 200))
          and r.run_at between v_now - interval '100 years' and v_now + interval '100 years'
          and r.max_attempts between 1 and 1000
          and r.priority between -1000 and 1000
          and not (r.tenant_required and r.tenant_id is null)
          and (r.concurrency_key is null
               or (r.concurrency_key ~ '[^[:space:]]' and length(r.concurrency_key) <= 200))
          and not (r.concurrency_keyed and r.concurrency_key is null)
          and (r.traceparent is null
               or (r.traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
                   and left(r.traceparent, 2) <> 'ff'
                   and substr(r.traceparent, 4, 32) <> repeat('0', 32)
                   and substr(r.traceparent, 37, 16) <> repeat('0', 16)))
          and (r.enqueued_by is null
               or (r.enqueued_by ~ '[^[:space:]]' and length(r.enqueued_by) <= 200))) is not true
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed, v_request.traceparent,
                                v_request.enqueued_by);
  end if;

  -- a run is its tenant's (jobs._check_run_tenant), within the batch too
  if exists (select 1 from jsonb_array_elements(requests) e where e ->> 'run_id' is not null) then
    select format('requests[%s].run_id', r.ord)
      into v_bad_key
      from unnest(v_requests) r
     where r.run_id <> r.id
       and (exists (select 1 from jobs.jobs j
                     where j.id = r.run_id and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from jobs.jobs j
                        where j.run_id = r.run_id and j.run_id <> j.id
                          and j.tenant_id is distinct from r.tenant_id)
            or exists (select 1 from unnest(v_requests) o
                        where o.run_id = r.run_id and o.tenant_id is distinct from r.tenant_id))
     order by r.ord
     limit 1;
    if v_bad_key is not null then
      perform jobs._raise(
        'X_JOB_TENANT_MISMATCH',
        format('jobs.enqueue_many: %s names a run of another tenant', v_bad_key),
        jsonb_build_object('function', 'jobs.enqueue_many', 'argument', v_bad_key),
        'continue only a run of the job''s own tenant, or leave run_id out for a fresh run');
    end if;
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
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
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names another job; an id is never reused',
             v_duplicate.ord, v_duplicate.id),
      jsonb_build_object('reason', 'id_taken', 'existing_id', v_duplicate.id,
                         'request', v_duplicate.ord),
      -- the HINT a caller runs: the request again without its id, so one is made
      'select id, deduped from jobs.enqueue_many(''[{"name": "<job>", "input": {}, '
      '"idempotency_key": "<key>"}]''::jsonb)');
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
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 18
$function$;

-- revision 0019
-- durajobs revision 0019 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
create table jobs.backfills (
  id bigint generated always as identity primary key,
  name text not null check (length(name) between 1 and 200),
  run_id uuid not null unique,
  job_id uuid not null,
  tenant_id text,
  status text not null check (status in ('running', 'completed', 'failed')),
  -- the declaration's fingerprint (its source, handle and count, not its rate or batch): a
  -- completed pass whose checksum moved is reported, never re-run by itself
  checksum text not null check (length(checksum) between 1 and 200),
  environment text not null check (length(environment) between 1 and 200),
  forced boolean not null default false,
  batches integer not null default 0 check (batches >= 0),
  rows_processed bigint not null default 0 check (rows_processed >= 0),
  started_at timestamptz not null,
  updated_at timestamptz not null,
  completed_at timestamptz,
  failed_at timestamptz,
  error text check (length(error) <= 2000)
);

create index backfills_name_idx on jobs.backfills (name, started_at desc, id desc);

create table jobs.webhook_endpoints (
  webhook text not null,
  tenant_key text not null,
  endpoint_id text not null check (length(endpoint_id) between 1 and 200),
  consecutive_failures integer not null default 0 check (consecutive_failures >= 0),
  disabled_at timestamptz,
  disabled_reason text,
  last_attempt_at timestamptz,
  last_delivered_at timestamptz,
  primary key (webhook, tenant_key, endpoint_id)
);

create table jobs.webhook_attempts (
  id bigint generated always as identity primary key,
  webhook text not null,
  tenant_key text not null,
  endpoint_id text not null,
  event_id text not null,
  topic text not null,
  job_id uuid not null,
  attempt integer not null,
  -- delivered (2xx), rejected (other 4xx, 3xx: terminal), throttled (429 or 503 with a
  -- Retry-After), failed (5xx, a network failure, a timeout of the request itself)
  outcome text not null check (outcome in ('delivered', 'rejected', 'throttled', 'failed')),
  status_code integer,
  error text check (length(error) <= 2000),
  retry_after_seconds double precision check (retry_after_seconds >= 0),
  duration_ms integer,
  at timestamptz not null
);

create index webhook_attempts_delivered_idx
  on jobs.webhook_attempts (webhook, tenant_key, endpoint_id, event_id)
  where outcome = 'delivered';

create index webhook_attempts_job_idx on jobs.webhook_attempts (job_id, attempt);

create index webhook_attempts_endpoint_idx on jobs.webhook_attempts (endpoint_id, at desc, id desc);

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

drop function if exists jobs.list_jobs(queue text, name text, state text, tenant_id text, id_prefix text, created_from timestamp with time zone, created_to timestamp with time zone, page_size integer, after uuid, before uuid);

CREATE OR REPLACE FUNCTION jobs.backfill_finish_v1(run_id uuid, status text, error text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.backfill_finish_v1');
  if status is null or status not in ('completed', 'failed') then
    perform jobs._invalid('jobs.backfill_finish_v1', 'status', 'must be completed or failed');
  end if;
  update jobs.backfills b
     set status = backfill_finish_v1.status,
         completed_at = case when backfill_finish_v1.status = 'completed' then v_now end,
         failed_at = case when backfill_finish_v1.status = 'failed' then v_now end,
         error = left(backfill_finish_v1.error, 2000),
         updated_at = v_now
   where b.run_id = backfill_finish_v1.run_id
     and b.status = 'running';
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.backfill_progress_v1(run_id uuid, batches integer, rows_processed bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker'], 'jobs.backfill_progress_v1');
  if batches is null or batches < 0 or rows_processed is null or rows_processed < 0 then
    perform jobs._invalid('jobs.backfill_progress_v1', 'batches, rows_processed',
                          'must be counts of at least 0');
  end if;
  update jobs.backfills b
     set batches = greatest(b.batches, backfill_progress_v1.batches),
         rows_processed = greatest(b.rows_processed, backfill_progress_v1.rows_processed),
         updated_at = jobs._now()
   where b.run_id = backfill_progress_v1.run_id
     and b.status = 'running';
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.backfill_start_v1(name text, run_id uuid, job_id uuid, checksum text, environment text, force boolean DEFAULT false, tenant_id text DEFAULT NULL::text)
 RETURNS TABLE(outcome text, previous_run_id uuid, previous_checksum text, batches integer, rows_processed bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_batches integer;
  v_rows bigint;
  v_done_run uuid;
  v_done_checksum text;
begin
  perform jobs._require(array['worker'], 'jobs.backfill_start_v1');
  perform jobs._check_label('jobs.backfill_start_v1', 'name', backfill_start_v1.name);
  perform jobs._check_label('jobs.backfill_start_v1', 'checksum', backfill_start_v1.checksum);
  perform jobs._check_label('jobs.backfill_start_v1', 'environment',
                            backfill_start_v1.environment);
  if run_id is null or job_id is null then
    perform jobs._invalid('jobs.backfill_start_v1', 'run_id, job_id', 'must not be NULL');
  end if;
  if force is null then
    perform jobs._invalid('jobs.backfill_start_v1', 'force', 'must be true or false');
  end if;
  update jobs.backfills b
     set status = 'running', completed_at = null, failed_at = null, error = null,
         updated_at = v_now
   where b.run_id = backfill_start_v1.run_id
  returning b.batches, b.rows_processed into v_batches, v_rows;
  if found then
    return query select 'adopted'::text, null::uuid, null::text, v_batches, v_rows;
    return;
  end if;

  if not backfill_start_v1.force then
    select b.run_id, b.checksum into v_done_run, v_done_checksum
      from jobs.backfills b
     where b.name = backfill_start_v1.name
       and b.status = 'completed'
     order by b.completed_at desc, b.id desc
     limit 1;
    if found then
      return query select 'skipped'::text, v_done_run, v_done_checksum, 0, 0::bigint;
      return;
    end if;
  end if;

  insert into jobs.backfills (name, run_id, job_id, tenant_id, status, checksum, environment,
                              forced, started_at, updated_at)
  values (backfill_start_v1.name, backfill_start_v1.run_id, backfill_start_v1.job_id,
          backfill_start_v1.tenant_id, 'running', backfill_start_v1.checksum,
          backfill_start_v1.environment, backfill_start_v1.force, v_now, v_now);
  return query select 'started'::text, null::uuid, null::text, 0, 0::bigint;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.backfills_v1(backfill text DEFAULT NULL::text, max_rows integer DEFAULT 1000)
 RETURNS TABLE(id bigint, name text, run_id uuid, job_id uuid, tenant_id text, status text, job_state text, checksum text, environment text, forced boolean, batches integer, rows_processed bigint, started_at timestamp with time zone, updated_at timestamp with time zone, completed_at timestamp with time zone, failed_at timestamp with time zone, error text)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.backfills_v1');
  perform jobs._check_label('jobs.backfills_v1', 'backfill', backfills_v1.backfill, false);
  if max_rows is null or max_rows not between 1 and 10000 then
    perform jobs._invalid('jobs.backfills_v1', 'max_rows', 'must be from 1 to 10,000');
  end if;
  return query
    select b.id, b.name, b.run_id, b.job_id, b.tenant_id, b.status,
           (select j.state::text from jobs.jobs j where j.id = b.job_id), b.checksum,
           b.environment, b.forced, b.batches, b.rows_processed, b.started_at, b.updated_at,
           b.completed_at, b.failed_at, b.error
      from jobs.backfills b
     where backfills_v1.backfill is null or b.name = backfills_v1.backfill
     order by b.started_at desc, b.id desc
     limit backfills_v1.max_rows;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enable_webhook_endpoint_v1(endpoint_id text, webhook text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_was integer;
begin
  perform jobs._require(array['operator'], 'jobs.enable_webhook_endpoint_v1');
  perform jobs._check_label('jobs.enable_webhook_endpoint_v1', 'endpoint_id',
                            enable_webhook_endpoint_v1.endpoint_id);
  with enabled as (
    update jobs.webhook_endpoints e
       set disabled_at = null, disabled_reason = null, consecutive_failures = 0
      from jobs.webhook_endpoints old
     where old.webhook = e.webhook
       and old.tenant_key = e.tenant_key
       and old.endpoint_id = e.endpoint_id
       and e.endpoint_id = enable_webhook_endpoint_v1.endpoint_id
       and (enable_webhook_endpoint_v1.webhook is null
            or e.webhook = enable_webhook_endpoint_v1.webhook)
       and (enable_webhook_endpoint_v1.tenant_id is null
            or e.tenant_key = enable_webhook_endpoint_v1.tenant_id)
    returning old.disabled_at
  )
  select count(*) filter (where d.disabled_at is not null) into v_was from enabled d;
  return v_was;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.grant_roles(enqueuer name DEFAULT 'durajobs_enqueuer'::name, worker name DEFAULT 'durajobs_worker'::name, operator name DEFAULT 'durajobs_operator'::name)
 RETURNS TABLE(kind text, role_name name, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_owner name := (select n.nspowner::regrole::name from pg_namespace n where n.nspname = 'jobs');
  v_names jsonb := jsonb_build_object('enqueuer', grant_roles.enqueuer,
                                      'worker', grant_roles.worker,
                                      'operator', grant_roles.operator);
  v_kind text;
  v_role name;
  v_created boolean;
  v_function regprocedure;
  v_old record;
begin
  foreach v_kind in array array['enqueuer', 'worker', 'operator'] loop
    v_role := v_names ->> v_kind;
    if v_role is null or v_role !~ '^[a-z_][a-z0-9_$]*$' then
      perform jobs._invalid('jobs.grant_roles', v_kind,
                            'must be a role name of lower-case letters, digits and _');
    end if;
  end loop;
  if grant_roles.enqueuer in (grant_roles.worker, grant_roles.operator)
     or grant_roles.worker = grant_roles.operator then
    perform jobs._invalid('jobs.grant_roles', 'enqueuer, worker, operator',
                          'must be three different roles');
  end if;
  perform jobs._require_owner('jobs.grant_roles', 'grant its roles');

  -- roles recorded under other names lose what an earlier call gave them
  for v_old in
    select r.kind, r.role_name
      from jobs.roles r
     where r.role_name <> (v_names ->> r.kind)
       and exists (select 1 from pg_roles p where p.rolname = r.role_name)
  loop
    execute format('revoke all on all functions in schema jobs from %I', v_old.role_name);
    execute format('revoke all on all tables in schema jobs from %I', v_old.role_name);
    execute format('revoke usage on schema jobs from %I', v_old.role_name);
  end loop;

  foreach v_kind in array array['enqueuer', 'worker', 'operator'] loop
    v_role := v_names ->> v_kind;
    v_created := not exists (select 1 from pg_roles p where p.rolname = v_role);
    if v_created then
      begin
        execute format('create role %I nologin', v_role);
      exception
        when insufficient_privilege then
          perform jobs._raise(
            'X_PERMISSION_DENIED',
            format('jobs.grant_roles: role %s does not exist and %s, the owner of schema jobs, '
                   'may not create roles', v_role, current_user),
            jsonb_build_object('function', 'jobs.grant_roles', 'role', v_role),
            format('create role %s nologin as a role that may, then run it again', v_role));
      end;
    end if;
    execute format('grant usage on schema jobs to %I', v_role);
    for v_function in
      select p.oid::regprocedure
        from pg_proc p
       where p.pronamespace = 'jobs'::regnamespace
         and p.proname !~ '^_'
    loop
      execute format('grant execute on function %s to %I', v_function, v_role);
    end loop;
    insert into jobs.roles as r (kind, role_name)
    values (v_kind, v_role)
    on conflict on constraint roles_pkey do update set role_name = excluded.role_name;
    kind := v_kind;
    role_name := v_role;
    created := v_created;
    return next;
  end loop;

  -- memberships not held yet (a grant held already only says so)
  for v_old in
    select m.role_name, m.member
      from (values (grant_roles.enqueuer, grant_roles.worker),
                   (grant_roles.enqueuer, grant_roles.operator),
                   (grant_roles.enqueuer, v_owner),
                   (grant_roles.worker, v_owner),
                   (grant_roles.operator, v_owner)) m (role_name, member)
     where m.member <> m.role_name
  loop
    continue when exists (select 1
                            from pg_auth_members a
                           where a.roleid = v_old.role_name::regrole
                             and a.member = v_old.member::regrole);
    execute format('grant %I to %I', v_old.role_name, v_old.member);
  end loop;
  -- what an operator reads in psql; no role may write a table but through the functions
  execute format('grant select on jobs.jobs, jobs.jobs_live, jobs.jobs_history, jobs.steps, '
                 'jobs.queue_pauses, jobs.outbox, jobs.events, jobs.workers, '
                 'jobs.counter_buckets, jobs.declarations, jobs.limit_rules, '
                 'jobs.scheduler_tasks, jobs.scheduler_leases, jobs.error_codes, '
                 'jobs.size_limits, jobs.roles, jobs.backfills, jobs.webhook_endpoints, '
                 'jobs.webhook_attempts to %I', grant_roles.operator);

  -- the checks read the names as constants of this function
  execute format(
    'create or replace function jobs._role_name(kind text) returns name language sql immutable '
    'set search_path = pg_catalog, pg_temp as %L',
    format('select case kind when ''enqueuer'' then %L when ''worker'' then %L '
           'when ''operator'' then %L end::name',
           grant_roles.enqueuer, grant_roles.worker, grant_roles.operator));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.list_jobs(queue text DEFAULT NULL::text, name text DEFAULT NULL::text, state text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, id_prefix text DEFAULT NULL::text, created_from timestamp with time zone DEFAULT NULL::timestamp with time zone, created_to timestamp with time zone DEFAULT NULL::timestamp with time zone, page_size integer DEFAULT 100, after uuid DEFAULT NULL::uuid, before uuid DEFAULT NULL::uuid, idempotency_key text DEFAULT NULL::text, run_id uuid DEFAULT NULL::uuid)
 RETURNS SETOF jobs.job_summary
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_sort TO 'off'
 SET jit TO 'off'
AS $function$
declare
  -- no cursor seeks from the greatest key there can be, inclusive, so the seek is always an
  -- index bound (a row may hold that very key: a caller's id, a pinned clock)
  v_cursor_at timestamptz := 'infinity';
  v_cursor_id uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
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

  if list_jobs.before is not null then
    -- each queue's rows just newer than the cursor, the oldest of them first, then answered
    -- newest first
    return query
      select p.id, p.run_id, p.name, p.queue, p.state, p.tenant_id, p.attempt, p.max_attempts,
             p.priority, p.run_at, p.created_at, p.updated_at, p.finished_at, p.last_error,
             p.last_error_code
        from (
          select n.*
            from jobs._listed_queues(list_jobs.queue) q (queue)
           cross join lateral (
             select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt,
                    j.max_attempts, j.priority, j.run_at, j.created_at, j.updated_at,
                    j.finished_at, j.last_error, j.last_error_code
               from jobs.jobs j
              where j.queue = q.queue
                and (j.created_at, j.id) > (v_cursor_at, v_cursor_id)
                and (list_jobs.name is null or j.name = list_jobs.name)
                and (list_jobs.state is null or j.state = list_jobs.state)
                and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
                and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
                     or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
                and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
                and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
                and (list_jobs.idempotency_key is null
                     or j.idempotency_key = list_jobs.idempotency_key)
                and (list_jobs.run_id is null or j.run_id = list_jobs.run_id)
              order by j.created_at, j.id
              limit list_jobs.page_size
           ) n
           order by n.created_at, n.id
           limit list_jobs.page_size
        ) p
       order by p.created_at desc, p.id desc;
    return;
  end if;

  return query
    select o.id, o.run_id, o.name, o.queue, o.state, o.tenant_id, o.attempt, o.max_attempts,
           o.priority, o.run_at, o.created_at, o.updated_at, o.finished_at, o.last_error,
           o.last_error_code
      from jobs._listed_queues(list_jobs.queue) q (queue)
     cross join lateral (
       select j.id, j.run_id, j.name, j.queue, j.state, j.tenant_id, j.attempt, j.max_attempts,
              j.priority, j.run_at, j.created_at, j.updated_at, j.finished_at, j.last_error,
              j.last_error_code
         from jobs.jobs j
        where j.queue = q.queue
          and (j.created_at, j.id) <= (v_cursor_at, v_cursor_id)
          and (list_jobs.after is null or j.id <> list_jobs.after)
          and (list_jobs.name is null or j.name = list_jobs.name)
          and (list_jobs.state is null or j.state = list_jobs.state)
          and (list_jobs.tenant_id is null or j.tenant_id = list_jobs.tenant_id)
          and (list_jobs.id_prefix is null  -- a plain prefix: no wildcards, any case
               or left(j.id::text, length(list_jobs.id_prefix)) = lower(list_jobs.id_prefix))
          and (list_jobs.created_from is null or j.created_at >= list_jobs.created_from)
          and (list_jobs.created_to is null or j.created_at <= list_jobs.created_to)
          and (list_jobs.idempotency_key is null
               or j.idempotency_key = list_jobs.idempotency_key)
          and (list_jobs.run_id is null or j.run_id = list_jobs.run_id)
        order by j.created_at desc, j.id desc
        limit list_jobs.page_size
     ) o
     order by o.created_at desc, o.id desc
     limit list_jobs.page_size;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 19
$function$;

CREATE OR REPLACE FUNCTION jobs.webhook_attempts_v1(endpoint text DEFAULT NULL::text, event text DEFAULT NULL::text, max_rows integer DEFAULT 100)
 RETURNS TABLE(id bigint, webhook text, tenant_id text, endpoint_id text, event_id text, topic text, job_id uuid, attempt integer, outcome text, status_code integer, error text, retry_after_seconds double precision, duration_ms integer, at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.webhook_attempts_v1');
  if max_rows is null or max_rows not between 1 and 10000 then
    perform jobs._invalid('jobs.webhook_attempts_v1', 'max_rows', 'must be from 1 to 10,000');
  end if;
  return query
    select a.id, a.webhook, nullif(a.tenant_key, ''), a.endpoint_id, a.event_id, a.topic,
           a.job_id, a.attempt, a.outcome, a.status_code, a.error, a.retry_after_seconds,
           a.duration_ms, a.at
      from jobs.webhook_attempts a
     where (webhook_attempts_v1.endpoint is null or a.endpoint_id = webhook_attempts_v1.endpoint)
       and (webhook_attempts_v1.event is null or a.event_id = webhook_attempts_v1.event)
     order by a.at desc, a.id desc
     limit webhook_attempts_v1.max_rows;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.webhook_check_v1(webhook text, endpoint_id text, event_id text, tenant_id text DEFAULT NULL::text, job_id uuid DEFAULT NULL::uuid, attempt integer DEFAULT NULL::integer)
 RETURNS TABLE(disabled_at timestamp with time zone, delivered_at timestamp with time zone, consecutive_failures integer, this_outcome text, this_status_code integer, this_error text, this_retry_after_seconds double precision, this_age_seconds double precision)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_tenant text := coalesce(webhook_check_v1.tenant_id, '');
begin
  perform jobs._require(array['worker'], 'jobs.webhook_check_v1');
  perform jobs._check_label('jobs.webhook_check_v1', 'webhook', webhook_check_v1.webhook);
  perform jobs._check_label('jobs.webhook_check_v1', 'endpoint_id', webhook_check_v1.endpoint_id);
  perform jobs._check_label('jobs.webhook_check_v1', 'event_id', webhook_check_v1.event_id);
  perform jobs._check_label('jobs.webhook_check_v1', 'tenant_id', webhook_check_v1.tenant_id,
                            false);
  return query
    select e.disabled_at,
           (select max(a.at)
              from jobs.webhook_attempts a
             where a.webhook = webhook_check_v1.webhook
               and a.tenant_key = v_tenant
               and a.endpoint_id = webhook_check_v1.endpoint_id
               and a.event_id = webhook_check_v1.event_id
               and a.outcome = 'delivered'),
           coalesce(e.consecutive_failures, 0),
           t.outcome, t.status_code, t.error, t.retry_after_seconds,
           extract(epoch from jobs._now() - t.at)::double precision
      from (select 1) one
      left join jobs.webhook_endpoints e
        on e.webhook = webhook_check_v1.webhook
       and e.tenant_key = v_tenant
       and e.endpoint_id = webhook_check_v1.endpoint_id
      left join lateral (
        select a.outcome, a.status_code, a.error, a.retry_after_seconds, a.at
          from jobs.webhook_attempts a
         where a.job_id = webhook_check_v1.job_id
           and a.attempt = webhook_check_v1.attempt
         order by a.id desc
         limit 1) t on true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.webhook_endpoints_v1()
 RETURNS TABLE(webhook text, tenant_id text, endpoint_id text, consecutive_failures integer, disabled_at timestamp with time zone, disabled_reason text, last_attempt_at timestamp with time zone, last_delivered_at timestamp with time zone)
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.webhook_endpoints_v1');
  return query
    select e.webhook, nullif(e.tenant_key, ''), e.endpoint_id, e.consecutive_failures,
           e.disabled_at, e.disabled_reason, e.last_attempt_at, e.last_delivered_at
      from jobs.webhook_endpoints e
     order by e.disabled_at is null, e.endpoint_id, e.webhook, e.tenant_key;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.webhook_record_v1(webhook text, endpoint_id text, event_id text, topic text, job_id uuid, attempt integer, outcome text, status_code integer DEFAULT NULL::integer, error text DEFAULT NULL::text, duration_ms integer DEFAULT NULL::integer, disable_after integer DEFAULT NULL::integer, tenant_id text DEFAULT NULL::text, retry_after_seconds double precision DEFAULT NULL::double precision)
 RETURNS TABLE(consecutive_failures integer, disabled boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_tenant text := coalesce(webhook_record_v1.tenant_id, '');
  v_failed boolean := webhook_record_v1.outcome in ('rejected', 'failed');
  v_failures integer;
  v_disabled_at timestamptz;
begin
  perform jobs._require(array['worker'], 'jobs.webhook_record_v1');
  perform jobs._check_label('jobs.webhook_record_v1', 'webhook', webhook_record_v1.webhook);
  perform jobs._check_label('jobs.webhook_record_v1', 'endpoint_id',
                            webhook_record_v1.endpoint_id);
  perform jobs._check_label('jobs.webhook_record_v1', 'event_id', webhook_record_v1.event_id);
  perform jobs._check_label('jobs.webhook_record_v1', 'topic', webhook_record_v1.topic);
  perform jobs._check_label('jobs.webhook_record_v1', 'tenant_id', webhook_record_v1.tenant_id,
                            false);
  if outcome is null or outcome not in ('delivered', 'rejected', 'throttled', 'failed') then
    perform jobs._invalid('jobs.webhook_record_v1', 'outcome',
                          'must be delivered, rejected, throttled or failed');
  end if;
  if job_id is null or attempt is null or attempt < 1 then
    perform jobs._invalid('jobs.webhook_record_v1', 'job_id, attempt',
                          'must name the job and its attempt (from 1)');
  end if;
  if disable_after is not null and disable_after < 1 then
    perform jobs._invalid('jobs.webhook_record_v1', 'disable_after', 'must be NULL or at least 1');
  end if;
  if retry_after_seconds < 0 or retry_after_seconds in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.webhook_record_v1', 'retry_after_seconds',
                          'must be NULL or a finite number of seconds of at least 0');
  end if;

  insert into jobs.webhook_attempts (webhook, tenant_key, endpoint_id, event_id, topic, job_id,
                                     attempt, outcome, status_code, error, retry_after_seconds,
                                     duration_ms, at)
  values (webhook_record_v1.webhook, v_tenant, webhook_record_v1.endpoint_id,
          webhook_record_v1.event_id, webhook_record_v1.topic, webhook_record_v1.job_id,
          webhook_record_v1.attempt, webhook_record_v1.outcome, webhook_record_v1.status_code,
          left(webhook_record_v1.error, 2000), webhook_record_v1.retry_after_seconds,
          webhook_record_v1.duration_ms, v_now);

  insert into jobs.webhook_endpoints as e (webhook, tenant_key, endpoint_id, consecutive_failures,
                                           last_attempt_at, last_delivered_at)
  values (webhook_record_v1.webhook, v_tenant, webhook_record_v1.endpoint_id,
          case when v_failed then 1 else 0 end, v_now,
          case when webhook_record_v1.outcome = 'delivered' then v_now end)
  on conflict on constraint webhook_endpoints_pkey do update
     set consecutive_failures = case
           when webhook_record_v1.outcome = 'delivered' then 0
           when v_failed then e.consecutive_failures + 1
           else e.consecutive_failures end,
         last_attempt_at = v_now,
         last_delivered_at = case when webhook_record_v1.outcome = 'delivered' then v_now
                                  else e.last_delivered_at end
  returning e.consecutive_failures, e.disabled_at into v_failures, v_disabled_at;

  if v_failed and v_disabled_at is null and webhook_record_v1.disable_after is not null
     and v_failures >= webhook_record_v1.disable_after then
    update jobs.webhook_endpoints e
       set disabled_at = v_now,
           disabled_reason = format('%s consecutive failed deliveries, the last %s',
                                    v_failures, coalesce(webhook_record_v1.status_code::text,
                                                         left(webhook_record_v1.error, 200)))
     where e.webhook = webhook_record_v1.webhook
       and e.tenant_key = v_tenant
       and e.endpoint_id = webhook_record_v1.endpoint_id;
    return query select v_failures, true;
    return;
  end if;
  return query select v_failures, false;
end;
$function$;

revoke execute on all functions in schema jobs from public;

create table jobs.alembic_version (
  version_num varchar(32) not null,
  constraint alembic_version_pkc primary key (version_num)
);
insert into jobs.alembic_version values ('0019');

commit;
