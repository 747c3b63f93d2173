-- Revision 0006 down: remove the registry, counters, progress, inspector and depth, put back
-- the settling statements of revision 0001 (which count nothing), and go back to schema
-- version 5.

alter table jobs.jobs reset (autovacuum_vacuum_threshold, autovacuum_vacuum_scale_factor,
  autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor,
  autovacuum_vacuum_cost_delay);
drop function jobs.claim_v2(text[], text, integer, interval, text[]);
drop function jobs.queue_depth(text[]);
drop type jobs.queue_depth_row;
drop function jobs.inspect_job(uuid);
drop function jobs.progress_v1(uuid, text, bigint, numeric, numeric, text);
drop function jobs.counter_totals(timestamptz);
drop function jobs.counters(text, timestamptz);
drop type jobs.counter_row;
drop function jobs.rollup_counters();
drop function jobs._fold_counters(text, timestamptz, text, interval, boolean);
drop function jobs.workers_live();
drop function jobs.worker_forget(text);
drop function jobs.worker_draining(text);
drop function jobs.worker_heartbeat(text, uuid[], interval);
drop function jobs.worker_announce(text, text, integer, text[], integer, interval);
drop function jobs._check_worker(text, text, interval);
drop table jobs.workers;

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

create or replace function jobs.ack_v1(id uuid, worker_id text, claim bigint)
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
      returning j.id, j.claims
    )
    select r.id, s.id is not null
      from requested r
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

drop function jobs._count_settled(timestamptz, text[], text[], timestamptz[]);
drop function jobs._bucket(interval, timestamptz);
drop table jobs.counter_buckets;

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 5
$$;
