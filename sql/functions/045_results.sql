-- 045_results: what a finished job returned, or why it did not, read by id.
--
-- Tables: jobs.jobs_live and jobs.jobs_history (read, through the view jobs.jobs). The result
-- is stored by the ack that ends the row (jobs.ack_results_v1, 040_settle) in the same
-- statement, and leaves with the row when the purge drops or deletes it.
-- Wake: every statement that ends rows (ack, nack to failed or dead, cancel, drain) sends
-- pg_notify('jobs_settled', '') once; a caller awaiting a result listens there and reads its
-- jobs again, and polls as the guarantee. The notice says nothing of the job, so a listener of
-- another tenant learns nothing but that something settled.

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
