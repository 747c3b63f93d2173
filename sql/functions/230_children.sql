-- 230_children: a run that enqueues child jobs and waits for them without holding a process.
--
-- Tables: jobs.jobs_live (the parent row: locked, parked, woken; the children: read),
-- jobs.jobs_history (the settled children's outcomes), jobs.steps (the parent's 'waiting' step
-- names the children it waits for; its 'completed' record holds their outcomes).
-- A child names its parent in parent_id (jobs.enqueue's argument, of the same tenant).
-- No lost wake-up: a parent's wait takes the parent's advisory lock before it reads its
-- children, and a settling child takes it after its own row left, before it judges whether the
-- parent may go on. Whichever comes second sees what the first committed: the wait sees the
-- child settled, or the child sees the parent parked. The lock is the parent's id, not its row,
-- so no row lock ever waits on it; the settles take it after their own rows, in id order.
-- The parent's poll (jobs.wait_children_v1's poll) is the guarantee behind the wake.

create type jobs.children_wait as (
  settled boolean,
  outcomes jsonb
);

-- jobs._parent_lock: the key of the advisory lock that a parent's wait and its children's
-- settles take to see each other (never the parent's row: see jobs._wake_parents).
-- Answers bigint. Raises nothing. Locks nothing.
create function jobs._parent_lock(parent_id uuid)
returns bigint
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select hashtextextended('durajobs.parent:' || _parent_lock.parent_id::text, 0)
$$;

-- jobs._wake_parents: make due now each parked parent none of whose live children it waits for
-- is left, and wake its queue's workers. Called by every statement that ends a child (the
-- acks, a nack to failed or dead, cancel, drain, the claim's burials and refusals), after the
-- child rows left.
-- Arguments: children (the rows that just ended: not counted as live, whatever this statement
-- can see of its own deletes) and parents (their parent_id, NULLs skipped).
-- The handshake with jobs.wait_children_v1 is the parent's advisory lock, taken here in id
-- order after the statement's own rows: a row lock on the parent would close cycles with a
-- batch that acks a parent and another's child, a heartbeat of both, or a cancel's cascade.
-- The parent row itself is updated only when no other statement holds it (skip locked): one
-- that does is cancelling, claiming or promoting it, and the poll stays the guarantee.
-- Answers how many parents it woke. Locks: the parents' advisory locks; the parent rows it
-- wakes, skip locked.
create function jobs._wake_parents(children uuid[], parents uuid[])
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_parent uuid;
  v_queue text;
  v_woken integer := 0;
begin
  for v_parent in
    select distinct p.id from unnest(_wake_parents.parents) as p(id) where p.id is not null
     order by p.id
  loop
    perform pg_advisory_xact_lock(jobs._parent_lock(v_parent));
  end loop;
  -- a statement of its own, after the locks: its snapshot sees a wait that held one and
  -- parked. Only the parent's live children are read (its index): as they settle, fewer
  for v_queue in
    with due as (
      select p.id
        from jobs.jobs_live p
       where p.id = any(_wake_parents.parents)
         and p.state = 'suspended'
         and p.run_at > v_now
         and exists (
           select 1
             from jobs.steps s
            where s.run_id = p.run_id
              and s.status = 'waiting'
              and s.output ? 'children'
              and not exists (
                select 1
                  from jobs.jobs_live c
                 where c.parent_id = p.id
                   and c.id <> all(_wake_parents.children)
                   and s.output -> 'children' ? c.id::text))
         for update of p skip locked
    ),
    woken as (
      update jobs.jobs_live p
         set run_at = v_now,
             updated_at = v_now
        from due
       where p.id = due.id
      returning p.queue
    )
    select w.queue from woken w
  loop
    v_woken := v_woken + 1;
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;
  return v_woken;
end;
$$;

-- jobs.enqueue_children_v1: in a claimed attempt of the parent, enqueue children (their
-- parent_id the parent's id) and record step `name` 'completed' with their ids, in one
-- transaction, fenced on the claim like jobs.record_step_v1: a replay reads the step and
-- enqueues nothing, and a crash before the commit leaves neither.
-- Arguments: id, worker_id, claim (the parent's attempt); name (the step); requests, a JSON
-- array of 1 to 10,000 objects with jobs.enqueue's argument names (name, input and
-- idempotency_key required; queue, tenant_id, run_at, max_attempts, priority, on_conflict,
-- traceparent, enqueued_by, concurrency_key optional).
-- Answers (id, run_id, deduped) per request, in input order, as jobs.enqueue answers each; the
-- step's output is {"enqueued": [id, ...], "deduped": [bool, ...], "run_ids": {id: run_id}} in
-- the same order (a run id only where it is not the job's own).
-- Raises what jobs.enqueue raises for a request (its tenant must be the parent's), and
-- X_JOB_CANCELLED, X_JOB_LEASE_LOST, X_STEP_DUPLICATE, X_ARGUMENT_INVALID.
-- Locks: the unique indexes (as jobs.enqueue), then the parent row (share) and its step row.
create function jobs.enqueue_children_v1(
  id uuid,
  worker_id text,
  claim bigint,
  name text,
  requests jsonb
)
returns setof jobs.enqueue_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_request jsonb;
  v_ord integer := 0;
  v_bad_key text;
  v_answer jobs.enqueue_result;
  v_answers jobs.enqueue_result[] := '{}';
  v_run_ats timestamptz[];
  v_max_attempts integer[];
  v_priorities integer[];
begin
  perform jobs._require(array['worker'], 'jobs.enqueue_children_v1');
  perform jobs._check_fence('jobs.enqueue_children_v1', enqueue_children_v1.id,
                            enqueue_children_v1.worker_id, enqueue_children_v1.claim);
  if requests is null or jsonb_typeof(requests) <> 'array'
     or jsonb_array_length(requests) not between 1 and 10000
     or exists (select 1 from jsonb_array_elements(requests) e where jsonb_typeof(e) <> 'object')
  then
    perform jobs._invalid('jobs.enqueue_children_v1', 'requests',
                          'must be a JSON array of 1 to 10000 objects');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key not in ('name', 'input', 'idempotency_key', 'queue', 'tenant_id', 'run_at',
                       'max_attempts', 'priority', 'on_conflict', 'traceparent',
                       'enqueued_by', 'concurrency_key')
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_children_v1', v_bad_key,
                          'is not an argument of jobs.enqueue a child takes');
  end if;

  -- the typed values parsed at once, in one block: a savepoint a child would overflow the
  -- backend's subtransaction cache past 64 children, slowing every session's snapshots
  begin
    select coalesce(array_agg((e.item ->> 'run_at')::timestamptz order by e.ord), '{}'),
           coalesce(array_agg((e.item ->> 'max_attempts')::integer order by e.ord), '{}'),
           coalesce(array_agg((e.item ->> 'priority')::integer order by e.ord), '{}')
      into v_run_ats, v_max_attempts, v_priorities
      from jsonb_array_elements(requests) with ordinality as e(item, ord);
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range then
      perform jobs._invalid('jobs.enqueue_children_v1', 'requests',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  for v_request in select e.item from jsonb_array_elements(requests) as e(item) loop
    v_ord := v_ord + 1;
    v_answer := jobs.enqueue(
      name => v_request ->> 'name',
      input => v_request -> 'input',
      idempotency_key => v_request ->> 'idempotency_key',
      queue => v_request ->> 'queue',
      tenant_id => v_request ->> 'tenant_id',
      run_at => v_run_ats[v_ord],
      max_attempts => v_max_attempts[v_ord],
      priority => v_priorities[v_ord],
      on_conflict => coalesce(v_request ->> 'on_conflict', 'dedupe'),
      traceparent => v_request ->> 'traceparent',
      enqueued_by => v_request ->> 'enqueued_by',
      concurrency_key => v_request ->> 'concurrency_key',
      parent_id => enqueue_children_v1.id);
    v_answers := v_answers || v_answer;
  end loop;

  -- the step last: it checks the fence, and its failure takes the children back with it
  perform jobs.record_step_v1(
    enqueue_children_v1.id, enqueue_children_v1.worker_id, enqueue_children_v1.claim,
    enqueue_children_v1.name, 'completed',
    -- compact, so 10,000 children fit the step_output limit: ids and dedupe flags in order,
    -- and a run id only where it is not the job's own (a dedupe onto a job of another run)
    (select jsonb_build_object(
              'enqueued', jsonb_agg(a.id order by a.ord),
              'deduped', jsonb_agg(a.deduped order by a.ord),
              'run_ids', coalesce(jsonb_object_agg(a.id, a.run_id)
                                    filter (where a.run_id <> a.id), '{}'::jsonb))
       from unnest(v_answers) with ordinality as a(id, run_id, deduped, ord)));
  return query
    select a.id, a.run_id, a.deduped
      from unnest(v_answers) with ordinality as a(id, run_id, deduped, ord)
     order by a.ord;
end;
$$;

-- jobs.wait_children_v1: in a claimed attempt of the parent, answer the outcomes of the named
-- children when every one has settled, else park the parent until they have, fenced on the
-- claim like jobs.record_step_v1.
-- Arguments: id, worker_id, claim (the parent's attempt); name (the step); children (their ids,
-- 1 to 10,000, in the order the outcomes answer); poll (how long the parent stays parked when no
-- wake comes: 1 s to 1 day, default 5 minutes; at most 2 s while a named job that is still live
-- is not this parent's child, since no settle of it wakes this parent).
-- Answers (true, outcomes) with the step recorded 'completed' and outcomes a JSON array, one
-- object per child in the given order ({id, state, result, error, error_code}; state NULL for
-- an id that names no job of the parent's tenant); or (false, NULL) with the step recorded
-- 'waiting' and the parent 'suspended', its attempt given back: the caller's attempt is over
-- and it must not settle it. Raises X_JOB_CANCELLED, X_JOB_LEASE_LOST, X_STEP_DUPLICATE,
-- X_ARGUMENT_INVALID. Locks: the parent row (for update), its advisory lock, its step row.
create function jobs.wait_children_v1(
  id uuid,
  worker_id text,
  claim bigint,
  name text,
  children uuid[],
  poll interval default interval '5 minutes'
)
returns jobs.children_wait
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_pending bigint;
  v_outcomes jsonb;
begin
  perform jobs._require(array['worker'], 'jobs.wait_children_v1');
  perform jobs._check_fence('jobs.wait_children_v1', wait_children_v1.id,
                            wait_children_v1.worker_id, wait_children_v1.claim);
  if children is null or cardinality(children) not between 1 and 10000
     or array_ndims(children) <> 1 or array_position(children, null) is not null then
    perform jobs._invalid('jobs.wait_children_v1', 'children',
                          'must be an array of 1 to 10000 job ids, none NULL');
  end if;
  if poll is null or poll < interval '1 second' or poll > interval '1 day' then
    perform jobs._invalid('jobs.wait_children_v1', 'poll',
                          'must be an interval from 1 second to 1 day');
  end if;

  -- the parent first: a settling child locks it too, so one of the two sees the other
  select j.tenant_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = wait_children_v1.id
     for update;
  if not found
     or v_job.state <> 'running'
     or v_job.claimed_by is distinct from wait_children_v1.worker_id
     or v_job.claims <> wait_children_v1.claim then
    -- the step write tells a cancel of this attempt from a lost lease, and raises either
    perform jobs.record_step_v1(wait_children_v1.id, wait_children_v1.worker_id,
                                wait_children_v1.claim, wait_children_v1.name, 'waiting');
    perform jobs._raise(
      'X_JOB_LEASE_LOST',
      format('job %s is no longer held by claim %s of worker %s', wait_children_v1.id,
             wait_children_v1.claim, wait_children_v1.worker_id),
      jsonb_build_object('id', wait_children_v1.id, 'claim', wait_children_v1.claim));
  end if;

  -- the handshake with the children's settles (jobs._wake_parents): whichever takes the
  -- parent's advisory lock second sees what the first committed
  perform pg_advisory_xact_lock(jobs._parent_lock(wait_children_v1.id));
  -- a statement of its own, after the lock: its snapshot sees every child that settled first
  select count(*)
    into v_pending
    from jobs.jobs_live c
   where c.id = any(wait_children_v1.children)
     and coalesce(c.tenant_id, '') = coalesce(v_job.tenant_id, '');

  if v_pending = 0 then
    select jsonb_agg(jsonb_build_object(
             'id', u.id,
             'state', h.state,
             'result', h.result,
             -- cut, so the outcomes of many failed children fit the step_output limit
             'error', case when h.state <> 'done' then left(h.last_error, 1000) end,
             'error_code', case when h.state <> 'done' then h.last_error_code end)
           order by u.ord)
      into v_outcomes
      from unnest(wait_children_v1.children) with ordinality as u(id, ord)
      left join lateral (
        select f.state, f.result, f.last_error, f.last_error_code
          from jobs.jobs_history f
         where f.id = u.id
           and coalesce(f.tenant_id, '') = coalesce(v_job.tenant_id, '')
         limit 1
      ) h on true;
    perform jobs.record_step_v1(wait_children_v1.id, wait_children_v1.worker_id,
                                wait_children_v1.claim, wait_children_v1.name, 'completed',
                                jsonb_build_object('outcomes', v_outcomes));
    return (true, v_outcomes)::jobs.children_wait;
  end if;

  -- a settle wakes only the parent its row names: a wait that names another's job (an enqueue
  -- deduped onto it) is woken by nothing, so it looks again within seconds
  if exists (select 1
               from jobs.jobs_live c
              where c.id = any(wait_children_v1.children)
                and c.parent_id is distinct from wait_children_v1.id) then
    wait_children_v1.poll := least(wait_children_v1.poll, interval '2 seconds');
  end if;
  perform jobs.record_step_v1(wait_children_v1.id, wait_children_v1.worker_id,
                              wait_children_v1.claim, wait_children_v1.name, 'waiting',
                              jsonb_build_object('children', to_jsonb(wait_children_v1.children)),
                              wake_at => v_now + wait_children_v1.poll);
  -- parked as jobs.nack_v1 parks a sleep: uncounted, due at the poll unless a child wakes it
  update jobs.jobs_live j
     set state = 'suspended',
         run_at = v_now + wait_children_v1.poll,
         attempt = greatest(j.attempt - 1, 0),
         lease_expires_at = null,
         updated_at = v_now
   where j.id = wait_children_v1.id;
  return (false, null)::jobs.children_wait;
end;
$$;

-- jobs.children: the jobs a job's steps enqueued as its children, live or finished, oldest
-- first, with their outcomes as jobs.results answers them.
-- Arguments: parent_id (the parent's id); tenant_id (optional: answer nothing unless the parent is this
-- tenant's; a session bound to a tenant always reads as its tenant, 014_tenants); max_rows
-- (1 to 10,000, default 1,000).
-- Raises X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH. Locks nothing.
create function jobs.children(
  parent_id uuid,
  tenant_id text default null,
  max_rows integer default 1000
)
returns table (
  id uuid,
  name text,
  state text,
  result jsonb,
  error text,
  error_code text,
  created_at timestamptz,
  finished_at timestamptz
)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_tenant text;
begin
  perform jobs._require(array['enqueuer', 'operator', 'worker'], 'jobs.children', scoped => true);
  if children.parent_id is null then
    perform jobs._invalid('jobs.children', 'parent_id', 'must be a job id');
  end if;
  if max_rows is null or max_rows not between 1 and 10000 then
    perform jobs._invalid('jobs.children', 'max_rows', 'must be an integer from 1 to 10000');
  end if;
  v_tenant := jobs._scoped_tenant('jobs.children', 'tenant_id', children.tenant_id);
  return query
    select c.id, c.name, c.state, c.result,
           case when c.state in ('failed', 'dead', 'cancelled') then c.last_error end,
           case when c.state in ('failed', 'dead', 'cancelled') then c.last_error_code end,
           c.created_at, c.finished_at
      from jobs.jobs c
     where c.parent_id = children.parent_id
       and (v_tenant is null or c.tenant_id = v_tenant)
     order by c.created_at, c.id
     limit children.max_rows;
end;
$$;
