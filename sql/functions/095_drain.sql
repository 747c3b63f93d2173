-- 095_drain: an operator's "done by hand". A job whose work an operator finished outside
-- durajobs (a payment settled at the bank's counter, a mail sent by hand) ends as done without
-- running, and counts nowhere: no counter moves, as no attempt of it ran to the end. A running
-- one keeps its claimer and token, so its worker's late ack, nack or step write matches
-- nothing; its next heartbeat answers that the lease is lost.
--
-- Tables: jobs.jobs_live (the row leaves), jobs.jobs_history (it ends there as done). Locks: the
-- job row.

-- jobs.drain: end a live job (ready, delayed, running, suspended) as done, uncounted.
-- Arguments: id; tenant_id (optional: act only on that tenant's job; a session bound to a
-- tenant always acts for its own, 014_tenants).
-- Answers true. Raises X_JOB_NOT_FOUND (no job of the tenant has that id), X_JOB_NOT_DRAINABLE
-- (it is finished, and is left exactly as it ended), X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH.
-- Locks the row.
create function jobs.drain(id uuid, tenant_id text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_state text;
  v_parent uuid;
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
   cross join lateral jobs._ended(g.j, 'done', v_now) e
  returning parent_id into v_parent;
  if found then
    -- a drained child settles for its parent as an acked one does
    if v_parent is not null then
      perform jobs._wake_parents(array[drain.id], array[v_parent]);
    end if;
    perform jobs._settled();
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
$$;
