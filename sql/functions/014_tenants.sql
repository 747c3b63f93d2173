-- 014_tenants: tenants that cannot reach each other. The owner binds a role to a tenant
-- (jobs.bind_tenant); a session acting as a member of that role is bound: what it enqueues,
-- stages or publishes is its tenant's, the operator functions answer and touch only its tenant's
-- rows, a job it names by id or run that belongs to another tenant is not found, and the
-- fleet-wide functions (the worker protocol, stats, pauses, limits, the scheduler, retention)
-- refuse it: workers serve every tenant, so a worker's login is never bound. Row-level security
-- on the tables an operator may read holds a bound operator's psql to its tenant too.
-- For every session, bound or not, a run belongs to the tenant of its jobs: a job naming another
-- tenant's run is refused, so it can neither read nor write that run's steps.
--
-- Tables: jobs.tenant_bindings (written by jobs.bind_tenant and jobs.unbind_tenant). Locks
-- nothing else.

create table jobs.tenant_bindings (
  role_name name primary key,
  tenant_id text not null
);

-- jobs._any_binding: whether any role is bound. jobs.bind_tenant and jobs.unbind_tenant replace
-- it; immutable, so with no binding the hot functions' test folds to a constant and reads no
-- table. Answers a boolean. Raises nothing.
create function jobs._any_binding()
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select false
$$;

-- jobs.bound_tenant: the tenant the calling session is bound to, NULL when it is not (a
-- superuser, the schema's owner and a role in no bound role are never bound). Public, for
-- applications and for the row-level security policies, which run as the reader.
-- Answers text. Raises X_PERMISSION_DENIED when the caller is a member of roles bound to two
-- different tenants. Locks nothing.
create function jobs.bound_tenant()
returns text
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs._refuse_bound: refuse a session bound to a tenant the fleet-wide `function_name`.
-- Raises X_PERMISSION_DENIED. Locks nothing.
create function jobs._refuse_bound(function_name text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs._scoped_tenant: the tenant a call of `function_name` acts for: the session's bound
-- tenant, else the `given` one (NULL: any tenant, for a session bound to none). A bound session
-- that names another tenant is refused.
-- Answers text. Raises X_JOB_TENANT_MISMATCH. Locks nothing.
create function jobs._scoped_tenant(function_name text, argument text, given text)
returns text
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs._foreign_job: whether the job `id` exists and is not `tenant_id`'s, for a call scoped to
-- that tenant (NULL: scoped to none, so no job is foreign). Such a job is answered as if no job
-- had the id: a tenant learns nothing of another's jobs. Answers a boolean. Locks nothing.
create function jobs._foreign_job(id uuid, tenant_id text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select _foreign_job.tenant_id is not null
     and exists (select 1 from jobs.jobs j
                  where j.id = _foreign_job.id
                    and j.tenant_id is distinct from _foreign_job.tenant_id)
$$;

-- jobs._check_run_tenant: refuse a job of `tenant_id` that names the run `run_id` of another
-- tenant (or a tenant's job naming a tenantless run, and the reverse). A run is its jobs' rows,
-- live or finished; a run none is left of has no steps either (the purge takes them with its
-- last row), so naming it starts a fresh history.
-- Raises X_JOB_TENANT_MISMATCH, naming neither the run's tenant nor its jobs. Locks nothing.
create function jobs._check_run_tenant(
  function_name text,
  argument text,
  run_id uuid,
  tenant_id text
)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs.bind_tenant: bind `role` to `tenant_id`: a session acting as a member of the role acts
-- for that tenant alone (see the file's head). Owner only.
-- Answers the tenant the role was bound to before (NULL: none). Raises X_ARGUMENT_INVALID,
-- X_PERMISSION_DENIED. Locks the binding's row and jobs._any_binding's catalogue row.
create function jobs.bind_tenant(role name, tenant_id text)
returns text
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs.unbind_tenant: end `role`'s binding. Owner only. Answers whether it was bound.
-- Raises X_PERMISSION_DENIED. Locks the binding's row and jobs._any_binding's catalogue row.
create function jobs.unbind_tenant(role name)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
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
$$;

