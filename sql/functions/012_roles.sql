-- 012_roles: who may call what. Every public function runs as the schema's owner (security
-- definer, with search_path pinned), so the roles an application is granted hold no privilege on
-- any table: the functions are the only way in, and each states which kind of role may call it.
--
-- Kinds: enqueuer (put work on the queue, publish events, read a job it knows the id of), worker
-- (the worker protocol, steps, the registry, the scheduler, the relay, declarations, counters'
-- rollup, retention) and operator (listing, inspection, cancel, requeue, remove, promote, pauses,
-- limits, stats, counters, retention). Worker and operator roles are members of the enqueuer
-- role, so both can also do what it does. jobs.grant_roles makes the three roles (names the
-- installer chooses) and records them in jobs.roles; until it runs, no kind check refuses
-- anything, and only the owner can call the functions at all (PUBLIC has no EXECUTE).
--
-- The caller is the role the session acts as: the role of `set role`, else the login. Inside a
-- security definer function current_user is the owner, so the caller is read from the `role`
-- setting, which only `set role` (checked by Postgres for membership) can change.
--
-- Tables: jobs.roles (written by jobs.grant_roles). Locks nothing else.

-- the roles jobs.grant_roles made or adopted, one per kind
create table jobs.roles (
  kind text primary key check (kind in ('enqueuer', 'worker', 'operator')),
  role_name name not null unique
);

-- jobs._role_name: the role of `kind` ('enqueuer', 'worker' or 'operator'), NULL before
-- jobs.grant_roles ran. jobs.grant_roles replaces this function with one that answers the names
-- it recorded: immutable, so a check's plan holds the name as a constant and reads no table.
-- Answers a name. Raises nothing.
create function jobs._role_name(kind text)
returns name
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select null::name
$$;

-- jobs._caller: the role calling, as the session acts: its `set role` role, else its login.
-- Answers a name. Raises nothing.
create function jobs._caller()
returns name
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(nullif(current_setting('role'), 'none'), session_user)::name
$$;

-- jobs._require: refuse the caller unless it is a member of one of `kinds`' roles (or no roles
-- were made yet); unless `scoped` (the function holds a bound session to its tenant itself),
-- also refuse a session bound to a tenant (014_tenants). The hot functions inline the same
-- tests instead of calling this one.
-- Raises X_PERMISSION_DENIED naming the role to grant. Locks nothing.
create function jobs._require(kinds text[], function_name text, scoped boolean default false)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs._denied: raise X_PERMISSION_DENIED for the caller and `function_name`, which the roles of
-- `kinds` may call. Raises X_PERMISSION_DENIED. Locks nothing.
create function jobs._denied(kinds text[], function_name text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs._require_owner: refuse a caller that is not the owner of schema jobs (nor a member of its
-- role) the owner's own `action`. Raises X_PERMISSION_DENIED. Locks nothing.
create function jobs._require_owner(function_name text, action text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
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
$$;

-- jobs.grant_roles: make the three roles (NOLOGIN, unless they exist already), let them call the
-- functions, and record them. Run it once as the owner of schema jobs, with the right to create
-- roles; run it again after a migration that adds functions, or to rename: the new names take
-- over and the old roles keep nothing.
-- Grants each role USAGE on schema jobs and EXECUTE on every public function; each function
-- then refuses a caller outside its kinds with X_PERMISSION_DENIED (the owner's own,
-- jobs.use_test_clock, jobs.set_size_limit and this one, refuse every caller but the owner).
-- The worker and operator roles become members of the enqueuer role, the schema's owner a
-- member of all three, and the operator role may SELECT from the view jobs.jobs and the tables
-- an operator reads in psql.
-- Arguments: the three role names (durajobs_enqueuer, durajobs_worker, durajobs_operator).
-- Answers (kind, role_name, created) per kind. Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED.
-- Locks jobs.roles and the catalogue rows it changes.
create function jobs.grant_roles(
  enqueuer name default 'durajobs_enqueuer',
  worker name default 'durajobs_worker',
  operator name default 'durajobs_operator'
)
returns table (kind text, role_name name, created boolean)
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
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
$$;
