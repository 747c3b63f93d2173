-- 010_util: the clock, ids, vocabularies, the error registry and the schema version.
--
-- Tables: jobs.error_codes (read by jobs._raise). Locks nothing.

-- jobs.version: the installed schema version; the Python package refuses an older one.
-- Answers the number of the newest alembic revision installed. Raises nothing.
create function jobs.version()
returns integer
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select 26
$$;

-- jobs._now: the one clock every function reads: the transaction's now(). A database whose
-- owner switched the test clock on (jobs.use_test_clock) reads `durajobs.now` first, so a test
-- pins it with `set local durajobs.now = '2026-01-01 00:00:00+00'`; nowhere else does a session
-- variable move it (any role may set one). Answers a timestamptz. Raises nothing.
-- Its body is SQL-standard (begin atomic): parsed when it is created, so no caller's search_path
-- can redirect it, and with no `set` clause the planner inlines it into each caller. As an
-- ordinary function it cost 20 us a call, a fifth of an idle worker's claim in the database.
create function jobs._now()
returns timestamptz
language sql
stable
begin atomic
  select now();
end;

-- jobs.use_test_clock: switch the test clock on (enabled true) or off for this database: on,
-- jobs._now answers the session's `durajobs.now` when it is set. It replaces jobs._now, so only
-- its owner (the role that ran the migration) can: for a test database, never a production one,
-- where a worker that set the variable an hour ahead would re-take rows other workers still
-- hold. Off on install.
-- Answers enabled. Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED. Locks jobs._now's catalogue
-- row.
create function jobs.use_test_clock(enabled boolean default true)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require_owner('jobs.use_test_clock', 'switch the test clock');
  if enabled is null then
    perform jobs._invalid('jobs.use_test_clock', 'enabled', 'must be true or false');
  end if;
  -- the same form as jobs._now above: a body bound when created, inlined by the planner
  execute format(
    'create or replace function jobs._now() returns timestamptz language sql stable '
    'begin atomic %s; end',
    case when enabled
         then 'select coalesce(nullif(current_setting(''durajobs.now'', true), '''')'
              '::timestamptz, now())'
         else 'select now()' end);
  return enabled;
end;
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
security definer
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
security definer
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
security definer
immutable
set search_path = pg_catalog, pg_temp
as $$
  select array['completed', 'sleeping', 'waiting', 'failed']
$$;

-- One SQLSTATE per code, in the class JQ (classes 0-4, A-H, P, X and Y are taken), and the fix a
-- caller reads in the error's hint.
insert into jobs.error_codes (code, sqlstate, fix) values
  ('X_ARGUMENT_INVALID', 'JQ001',
   'select pg_get_function_arguments(''jobs.<function>''::regproc)'),
  ('X_JOB_INPUT_INVALID', 'JQ002',
   'select jobs.enqueue(name => ''<job>'', input => ''{"user_id": 1}''::jsonb, idempotency_key => ''<key>'')'),
  ('X_IDEMPOTENCY_REQUIRED', 'JQ003',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''invoice:42'')'),
  ('X_JOB_DUPLICATE', 'JQ004',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''<key>'', on_conflict => ''dedupe'')'),
  ('X_DRIVER_UNAVAILABLE', 'JQ005',
   'durajobs migrate --database-url "$DATABASE_URL"'),
  ('X_JOB_CLAIM_QUEUES_EMPTY', 'JQ006',
   'select id, name, claim from jobs.claim_v1(queues => array[''default''], worker_id => ''<worker>'')'),
  ('X_JOB_LEASE_LOST', 'JQ007',
   'select jobs.inspect_job(id => ''<id>'')'),
  ('X_JOB_CANCELLED', 'JQ008',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_STEP_DUPLICATE', 'JQ009',
   'await ctx.step.run("<a name no other step of the run has>", <function>)'),
  ('X_JOB_ROW_STATUS_UNKNOWN', 'JQ010',
   'pip install --upgrade durajobs'),
  ('X_JOB_NOT_FOUND', 'JQ011',
   'select id, name, state from jobs.list_jobs(id_prefix => ''<first characters of the id>'')'),
  ('X_JOB_NOT_REQUEUEABLE', 'JQ012',
   'select jobs.cancel(id => ''<id>'')'),
  ('X_JOB_NOT_CANCELLABLE', 'JQ013',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_JOB_PAGE_INVALID', 'JQ014',
   'select id, name, state from jobs.list_jobs(page_size => 100, after => ''<last id of the page before>'')'),
  ('X_JOB_NOT_REMOVABLE', 'JQ015',
   'select jobs.cancel(id => ''<id>'')'),
  ('X_JOB_NOT_PROMOTABLE', 'JQ016',
   'select jobs.inspect_job(id => ''<id>'')'),
  ('X_JOB_TENANT_REQUIRED', 'JQ017',
   'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''<key>'', tenant_id => ''<tenant>'')'),
  ('X_PERMISSION_DENIED', 'JQ018',
   'grant durajobs_operator to <login>'),
  ('X_JOB_NOT_DRAINABLE', 'JQ020',
   'select jobs.requeue(id => ''<id>'')'),
  ('X_JOB_TENANT_MISMATCH', 'JQ019',
   'select jobs.bound_tenant()');

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
