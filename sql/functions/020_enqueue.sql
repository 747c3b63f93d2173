-- 020_enqueue: put jobs on the queue, one or many, deduped on the live idempotency key, and
-- announce them to idle workers.
--
-- Tables: jobs.jobs_live (insert, read), jobs.jobs_history (read: a given id may name a finished
-- job), jobs.declarations (read: a declared name's defaults and tenant
-- rule; a name with none enqueues with the built-in ones), jobs.limit_rules (read: whether a
-- limit counts the row, its capped flag). Locks: the unique indexes only (an insert that meets an
-- uncommitted twin waits for that transaction, as any unique insert does).
-- Wake: pg_notify('jobs_wake', <the queue's wake token, 013_wake>) at most once per queue per
-- 250 ms slot, for rows due within 1 s, never for a dedupe. The throttle is in the statement
-- because NOTIFY serialises committing transactions; the workers' poll remains the guarantee.

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
  enqueued_by text,
  tenant_required boolean,
  concurrency_key text,
  capped boolean,
  concurrency_keyed boolean
);

-- jobs._check_enqueue: refuse a request a caller could not have meant.
-- Arguments: the calling function's name, a prefix naming the request (e.g. 'requests[3].'), and
-- the request's fields, whether the job's declaration requires a tenant, and whether it limits
-- concurrency per key (then the key is required). Raises X_ARGUMENT_INVALID,
-- X_JOB_INPUT_INVALID, X_IDEMPOTENCY_REQUIRED, X_JOB_TENANT_REQUIRED.
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
  priority integer,
  tenant_required boolean default false,
  concurrency_key text default null,
  concurrency_keyed boolean default false,
  traceparent text default null,
  enqueued_by text default null
)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
    from jobs.jobs_live j
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
  -- each inner query names no waiting state, only `state <> 'running'`, which proves the
  -- predicate of jobs_queue_created_idx but not that of the claim index: the planner cannot
  -- take the claim index and read every waiting row of a backlog to find the slot's few;
  -- offset 0 keeps the state test out. Two ranges, so the index bounds skip the caller's own
  -- rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.state <> 'running'
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
                  and j.state <> 'running'
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
$$;

-- jobs.enqueue: put one job on the queue.
-- Arguments: name, input (a JSON object), idempotency_key; optional queue, max_attempts and
-- priority (lower runs first), each left NULL taking the name's declaration in jobs.declarations,
-- else 'default', 20 and 0; tenant_id (required when the declaration says so), run_at (now), id
-- (the job's id, e.g. an outbox row's), run_id (keeps a resumed run's step history),
-- on_conflict ('dedupe' or 'error'), traceparent, enqueued_by, concurrency_key (the run's key
-- under a declaration that limits concurrency per key: required there, at most 200 characters),
-- parent_id (the job, of the same tenant, whose run waits for this one: its settle wakes it).
-- Answers (id, run_id, deduped): the new job's ids, or with deduped = true the ids of the live job
-- holding (name, tenant_id, idempotency_key), or of the row that already has the given id, live
-- or finished. A run_at more than now makes the row 'delayed', else 'ready'.
-- Raises X_ARGUMENT_INVALID, X_JOB_INPUT_INVALID, X_IDEMPOTENCY_REQUIRED,
-- X_JOB_TENANT_REQUIRED; X_JOB_DUPLICATE under
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
  queue text default null,
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default null,
  priority integer default null,
  id uuid default null,
  run_id uuid default null,
  on_conflict text default 'dedupe',
  traceparent text default null,
  enqueued_by text default null,
  concurrency_key text default null,
  parent_id uuid default null
)
returns jobs.enqueue_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
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
  elsif enqueue.id is not null
        and not exists (select 1 from jobs.jobs j where j.id = enqueue.id)
        and exists (select 1 from jobs.jobs j
                     where j.run_id = enqueue.id
                       and j.run_id <> j.id
                       and j.tenant_id is distinct from enqueue.tenant_id) then
    -- a given id names the run of that id too: a run outlives its first job (the purge frees
    -- that id) while jobs continuing it remain. A job holding the id is refused below instead,
    -- as a taken id that tells nothing of it
    perform jobs._check_run_tenant('jobs.enqueue', 'id', enqueue.id, enqueue.tenant_id);
  end if;
  -- a child is its parent's tenant's: its settle wakes the parent, its result feeds the run
  if enqueue.parent_id is not null
     and not exists (select 1
                       from jobs.jobs p
                      where p.id = enqueue.parent_id
                        and coalesce(p.tenant_id, '') = coalesce(enqueue.tenant_id, '')) then
    perform jobs._invalid('jobs.enqueue', 'parent_id',
                          format('names no job of tenant %s',
                                 coalesce(enqueue.tenant_id, '(none)')));
  end if;

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped, parent_id)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id),
      enqueue.parent_id)
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
$$;

-- jobs.enqueue_many: put many jobs on the queue in one statement, with the rules of
-- jobs.enqueue. Arguments: requests, a JSON array of objects whose keys are jobs.enqueue's
-- argument names (name, input and idempotency_key required; queue, tenant_id, run_at,
-- max_attempts, priority, id, run_id, traceparent, enqueued_by, concurrency_key optional, a
-- left-out queue, max_attempts or priority taking the name's declaration as in jobs.enqueue);
-- on_conflict for all.
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
security definer
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

  -- a run is its tenant's (jobs._check_run_tenant), within the batch too; a given id names
  -- the run of that id, as in jobs.enqueue
  if exists (select 1 from jsonb_array_elements(requests) e
              where e ->> 'run_id' is not null or e ->> 'id' is not null) then
    select format('requests[%s].run_id', r.ord)
      into v_bad_key
      from unnest(v_requests) r
     where (r.run_id <> r.id
            and (exists (select 1 from jobs.jobs j
                          where j.id = r.run_id and j.tenant_id is distinct from r.tenant_id)
                 or exists (select 1 from jobs.jobs j
                             where j.run_id = r.run_id and j.run_id <> j.id
                               and j.tenant_id is distinct from r.tenant_id)))
        -- a given id names the run of that id too, unless a job holds it (a taken id)
        or (r.run_id = r.id
            and not exists (select 1 from jobs.jobs j where j.id = r.id)
            and exists (select 1 from jobs.jobs j
                         where j.run_id = r.run_id and j.run_id <> j.id
                           and j.tenant_id is distinct from r.tenant_id))
        or exists (select 1 from unnest(v_requests) o
                    where o.run_id = r.run_id and o.tenant_id is distinct from r.tenant_id)
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
$$;
