-- 045_results: what a finished job returned, or why it did not, read by id.
--
-- Tables: jobs.jobs_live and jobs.jobs_history (read, through the view jobs.jobs),
-- jobs.result_waits (the callers waiting, made here). The result
-- is stored by the ack that ends the row (jobs.ack_results_v1, 040_settle) in the same
-- statement, and leaves with the row when the purge drops or deletes it.
-- Wake: every statement that ends rows (ack, nack to failed or dead, cancel, drain, the claim's
-- burials and refusals) calls jobs._settled, which sends pg_notify('jobs_settled', '') once
-- while any caller is registered in jobs.result_waits; such a caller listens there and reads its
-- jobs again, and polls as the guarantee. A transaction that notifies takes a cluster-wide lock
-- through its commit, so no settle notifies when nobody waits. The notice says nothing of the
-- job, so a listener of another tenant learns nothing but that something settled.

-- the callers waiting for a result now, each until its expiry (a caller that died leaves its
-- row until then, and jobs.purge deletes it after)
create table jobs.result_waits (
  id bigint generated always as identity primary key,
  expires_at timestamptz not null
);

create index result_waits_expires_idx on jobs.result_waits (expires_at);

-- jobs._settled: notify jobs_settled once, if any caller waits for a result.
-- Answers whether it notified. Raises nothing. Locks nothing.
create function jobs._settled()
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if exists (select 1 from jobs.result_waits w where w.expires_at > jobs._now()) then
    perform pg_notify('jobs_settled', '');
    return true;
  end if;
  return false;
end;
$$;

-- jobs.await_results_v1: register a caller that waits for results, so that the statements
-- ending jobs notify jobs_settled; listen on it first.
-- Arguments: ttl (how long the registration holds: 1 second to 1 day).
-- Answers the registration's id, for jobs.stop_awaiting_v1. Raises X_ARGUMENT_INVALID.
-- Locks nothing.
create function jobs.await_results_v1(ttl interval)
returns bigint
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_id bigint;
begin
  perform jobs._require(array['enqueuer', 'operator', 'worker'], 'jobs.await_results_v1',
                        scoped => true);
  if ttl is null or ttl < interval '1 second' or ttl > interval '1 day' then
    perform jobs._invalid('jobs.await_results_v1', 'ttl',
                          'must be an interval from 1 second to 1 day');
  end if;
  insert into jobs.result_waits as w (expires_at)
  values (jobs._now() + await_results_v1.ttl)
  returning w.id into v_id;
  return v_id;
end;
$$;

-- jobs.stop_awaiting_v1: end a registration of jobs.await_results_v1.
-- Arguments: id. Answers whether it was there. Raises X_ARGUMENT_INVALID. Locks its row.
create function jobs.stop_awaiting_v1(id bigint)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['enqueuer', 'operator', 'worker'], 'jobs.stop_awaiting_v1',
                        scoped => true);
  if id is null then
    perform jobs._invalid('jobs.stop_awaiting_v1', 'id', 'must be a registration id');
  end if;
  delete from jobs.result_waits w where w.id = stop_awaiting_v1.id;
  return found;
end;
$$;

create type jobs.job_outcome as (
  id uuid,
  state text,
  result jsonb,
  error text,
  error_code text,
  finished_at timestamptz
);

-- jobs.results: the outcomes of the jobs with these ids that exist (another tenant's are not
-- told), in no particular order: a waiting job answers its state with NULL result and error; a
-- done one its result; a failed, dead or cancelled one its last error and code.
-- Arguments: ids (at most 10,000); tenant_id (optional: answer only that tenant's jobs; a
-- session bound to a tenant always reads as its tenant, 014_tenants).
-- Raises X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH. Locks nothing.
create function jobs.results(ids uuid[], tenant_id text default null)
returns setof jobs.job_outcome
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_tenant text;
begin
  perform jobs._require(array['enqueuer', 'operator', 'worker'], 'jobs.results', scoped => true);
  if ids is null or coalesce(array_ndims(ids), 1) <> 1 or cardinality(ids) > 10000 then
    perform jobs._invalid('jobs.results', 'ids', 'must be an array of at most 10000 job ids');
  end if;
  v_tenant := jobs._scoped_tenant('jobs.results', 'tenant_id', results.tenant_id);
  return query
    select j.id, j.state, j.result,
           case when j.state in ('failed', 'dead', 'cancelled') then j.last_error end,
           case when j.state in ('failed', 'dead', 'cancelled') then j.last_error_code end,
           j.finished_at
      from jobs.jobs j
     where j.id = any(results.ids)
       and (v_tenant is null or j.tenant_id = v_tenant);
end;
$$;

-- jobs.result: the outcome of one job, as jobs.results answers it.
-- Arguments: id; tenant_id (as jobs.results).
-- Raises X_JOB_NOT_FOUND (no job of the tenant has that id: never made, rolled back, or
-- purged), X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH. Locks nothing.
create function jobs.result(id uuid, tenant_id text default null)
returns jobs.job_outcome
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_outcome jobs.job_outcome;
begin
  if id is null then
    perform jobs._invalid('jobs.result', 'id', 'must be a job id');
  end if;
  select o.id, o.state, o.result, o.error, o.error_code, o.finished_at
    into v_outcome
    from jobs.results(array[result.id], result.tenant_id) o;
  if v_outcome.id is null then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', result.id),
                        jsonb_build_object('id', result.id),
                        'select id, state from jobs.jobs order by created_at desc limit 20');
  end if;
  return v_outcome;
end;
$$;
