-- 090_cancel: stop a live job. A waiting one is cancelled at once; a running one keeps its
-- claimed_by and claim token, so its worker's next heartbeat answers 'cancelled' and its late
-- ack, nack or step write matches nothing: the row stays cancelled.
--
-- Tables: jobs.jobs_live (the row leaves), jobs.jobs_history (it ends there). Locks: the job row.

-- jobs.cancel: cancel a live job (ready, delayed, running, suspended).
-- Arguments: id; reason (optional, kept in last_error); tenant_id (optional: act only on that
-- tenant's job; a session bound to a tenant always acts for its tenant, 014_tenants); children
-- (also cancel every live descendant, the children its steps enqueued and theirs; a child's
-- last_error names the parent). A cancelled child wakes a parent that waits for it.
-- Answers true. Raises X_JOB_NOT_CANCELLABLE (the job is finished, and is left exactly as it
-- ended, or no job of the tenant has that id), X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH.
-- Locks the descendants (in id order), then the row, then its parent.
create function jobs.cancel(
  id uuid,
  reason text default null,
  tenant_id text default null,
  children boolean default false
)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_state text;
  v_descendants uuid[];
  v_parent uuid;
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

  if cancel.children and exists (select 1 from jobs.jobs_live j where j.id = cancel.id) then
    -- every descendant, through finished ones too; only the live ones are cancelled, locked in
    -- id order. Again until none is left: a child whose enqueue of its own children committed
    -- after a pass read the tree is found by the next (one still uncommitted fails its fence)
    loop
      with recursive tree(id) as (
        select c.id from jobs.jobs c where c.parent_id = cancel.id
        union
        select c.id from jobs.jobs c join tree t on c.parent_id = t.id
      )
      -- the job itself is locked with them, in the same id order: locked after them, it
      -- would close a cycle with a batch of the same worker's rows (heartbeat_many_v1,
      -- ack_many_v1), which locks a parent before its child (uuid v7 ids grow with time)
      select array_agg(l.id order by l.id) filter (where l.id <> cancel.id)
        into v_descendants
        from (select j.id
                from jobs.jobs_live j
               where j.id = any(array(select t.id from tree t) || cancel.id)
               order by j.id
                 for update) l;
      exit when v_descendants is null;
      with gone as (
        delete from jobs.jobs_live j
         where j.id = any(v_descendants)
        returning j
      )
      insert into jobs.jobs_history
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                      error => format('cancelled with job %s', cancel.id)
                                               || coalesce(': ' || cancel.reason, ''),
                                      error_code => 'X_JOB_CANCELLED') e;
    end loop;
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
                                  error_code => 'X_JOB_CANCELLED') e
  returning parent_id into v_parent;
  if found then
    if v_parent is not null then
      perform jobs._wake_parents(array[cancel.id], array[v_parent]);
    end if;
    perform jobs._settled();
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
$$;
