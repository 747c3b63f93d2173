-- 016_limit_rules: limits an operator sets in SQL rather than a job declaring them: at most N
-- attempts running, or at most K attempts started per window, for a queue, for one tenant, for
-- each tenant apart, or for the whole fleet, across every queue or within one. The claim
-- enforces them (jobs._claim_limited in 030_claim); jobs.limits() in 035_limits shows them.
--
-- Tables: jobs.limit_rules (one row per selector), jobs.limit_starts (the starts a rate counts,
-- kept for one window), jobs.jobs_live (its capped flag: whether any limit applies to a row, so a
-- claim of rows no limit touches never reads the limited ones). Locks: jobs.set_limit and
-- jobs.clear_limit take the selector's row, then the live job rows whose capped flag changes.

create table jobs.limit_rules (
  id bigint generated always as identity primary key,
  -- the queue the rule counts in; NULL: every queue together
  queue text,
  -- one tenant; with both NULL and every_tenant false the rule counts every tenant together
  tenant_id text,
  -- the rule holds for each tenant apart (rows without a tenant are not counted); a rule of one
  -- tenant with the same queue scope overrides it for that tenant, limit kind by limit kind
  every_tenant boolean not null default false,
  -- at most this many attempts running at once (0 stops the scope)
  concurrency integer check (concurrency >= 0),
  -- at most `rate` attempts started in any window of length `per` (0 stops the scope)
  rate integer check (rate >= 0),
  per interval check (per > interval '0'),
  set_by text,
  set_at timestamptz not null,
  check (concurrency is not null or rate is not null),
  check ((rate is null) = (per is null)),
  check (not (every_tenant and tenant_id is not null)),
  constraint limit_rules_selector_key unique nulls not distinct (queue, tenant_id, every_tenant)
);

-- the starts a rate counts: one row per attempt handed out under a rate, for one window
create table jobs.limit_starts (
  rule_id bigint not null references jobs.limit_rules (id) on delete cascade,
  -- the tenant of an every_tenant rule's group; '' for a rule that counts one group
  tenant_id text not null,
  started_at timestamptz not null
);

create index limit_starts_group_idx
  on jobs.limit_starts (rule_id, tenant_id, started_at);

create type jobs.limit_rule as (
  queue text,
  tenant_id text,
  every_tenant boolean,
  concurrency integer,
  rate integer,
  per interval,
  set_by text,
  set_at timestamptz
);

-- jobs._rule_groups_of: the rule groups each of many rows counts in, one per rule that applies
-- to it, for the rows given as parallel arrays of queue and tenant_id (ord is the row's place in
-- them, from 1). Each group with its name (its advisory lock and its count share it), the rule,
-- the tenant its rate starts are stamped under ('' unless every_tenant), its concurrency cap and
-- its rate (each NULL where the rule sets none, or where a rule of the row's own tenant with the
-- same queue scope overrides an every_tenant rule for that kind), and the scope it counts.
-- One statement for every row: a function called per row is planned per call.
-- Raises nothing. Locks nothing.
create function jobs._rule_groups_of(queues text[], tenant_ids text[])
returns table (
  ord integer,
  grp text,
  rule_id bigint,
  stamp_tenant text,
  cap integer,
  rate integer,
  per interval,
  scope_queue text,
  scope_tenant text
)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    select g.ord, g.grp, g.rule_id, g.stamp_tenant, g.cap, g.rate, g.per, g.scope_queue,
           g.scope_tenant
      from (
        select x.ord::integer as ord,
               'r:' || r.id || case when r.every_tenant then E'\x1f' || x.tenant_id else '' end
                 as grp,
               r.id as rule_id,
               case when r.every_tenant then x.tenant_id else '' end as stamp_tenant,
               case when own_cap.id is not null then null else r.concurrency end as cap,
               case when own_rate.id is not null then null else r.rate end as rate,
               r.per,
               r.queue as scope_queue,
               case when r.every_tenant then x.tenant_id else r.tenant_id end as scope_tenant
          from unnest(_rule_groups_of.queues, _rule_groups_of.tenant_ids)
                 with ordinality as x(queue, tenant_id, ord)
          join jobs.limit_rules r
            on (r.queue is null or r.queue = x.queue)
           and (r.tenant_id = x.tenant_id
                or (r.tenant_id is null and not r.every_tenant)
                or (r.every_tenant and x.tenant_id is not null))
          -- the tenant's own rule with the same queue scope, per kind
          left join jobs.limit_rules own_cap
            on r.every_tenant
           and own_cap.tenant_id = x.tenant_id
           and own_cap.queue is not distinct from r.queue
           and own_cap.concurrency is not null
          left join jobs.limit_rules own_rate
            on r.every_tenant
           and own_rate.tenant_id = x.tenant_id
           and own_rate.queue is not distinct from r.queue
           and own_rate.rate is not null
      ) g
     where g.cap is not null
        or g.rate is not null;
end;
$$;

-- jobs._rule_groups: jobs._rule_groups_of for one row of `queue` and `tenant_id`.
-- Raises nothing. Locks nothing.
create function jobs._rule_groups(queue text, tenant_id text)
returns table (
  grp text,
  rule_id bigint,
  stamp_tenant text,
  cap integer,
  rate integer,
  per interval,
  scope_queue text,
  scope_tenant text
)
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select g.grp, g.rule_id, g.stamp_tenant, g.cap, g.rate, g.per, g.scope_queue, g.scope_tenant
    from jobs._rule_groups_of(array[_rule_groups.queue], array[_rule_groups.tenant_id]) g
$$;

-- jobs._rules_cap: whether any limit rule applies to a row of `queue` and `tenant_id`.
-- Raises nothing. Locks nothing.
create function jobs._rules_cap(queue text, tenant_id text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1
      from jobs.limit_rules r
     where (r.queue is null or r.queue = _rules_cap.queue)
       and (r.tenant_id = _rules_cap.tenant_id
            or (r.tenant_id is null and not r.every_tenant)
            or (r.every_tenant and _rules_cap.tenant_id is not null)))
$$;

-- jobs._rules_stop: whether a limit rule at 0 (concurrency or rate) stops a row of `queue` and
-- `tenant_id`, overrides applied. Raises nothing. Locks nothing.
create function jobs._rules_stop(queue text, tenant_id text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1
                   from jobs._rule_groups(_rules_stop.queue, _rules_stop.tenant_id) g
                  where g.cap = 0
                     or g.rate = 0)
$$;

-- jobs._capped: whether any limit applies to a row of job `name` in `queue` for `tenant_id`: its
-- declaration caps its concurrency, or a limit rule counts it. Raises nothing. Locks nothing.
create function jobs._capped(name text, queue text, tenant_id text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1
                   from jobs.declarations d
                  where d.name = _capped.name
                    and d.concurrency is not null)
      or jobs._rules_cap(_capped.queue, _capped.tenant_id)
$$;

-- jobs._sync_capped: set the capped flag of the live rows of job `name` to what the limits now
-- say, so the claim reads each with the right rule. Locks: those of its live rows that change.
create function jobs._sync_capped(name text)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if exists (select 1
               from jobs.declarations d
              where d.name = _sync_capped.name
                and d.concurrency is not null) then
    update jobs.jobs_live j
       set capped = true
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and not j.capped;
  else
    update jobs.jobs_live j
       set capped = false
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and j.capped
       and not jobs._rules_cap(j.queue, j.tenant_id);
  end if;
end;
$$;

-- jobs._sync_capped_scope: the same for the live rows a rule's selector covers (queue NULL:
-- every queue; tenant_id NULL: every tenant). Locks: those of the rows that change.
create function jobs._sync_capped_scope(queue text, tenant_id text)
returns void
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  update jobs.jobs_live j
     set capped = not j.capped
   where j.state in ('ready', 'delayed', 'running', 'suspended')
     and (_sync_capped_scope.queue is null or j.queue = _sync_capped_scope.queue)
     and (_sync_capped_scope.tenant_id is null or j.tenant_id = _sync_capped_scope.tenant_id)
     and j.capped <> (exists (select 1
                                from jobs.declarations d
                               where d.name = j.name
                                 and d.concurrency is not null)
                      or jobs._rules_cap(j.queue, j.tenant_id))
$$;

-- jobs._check_selector: refuse a rule selector no rule could have. Raises X_ARGUMENT_INVALID.
create function jobs._check_selector(
  function_name text,
  queue text,
  tenant_id text,
  every_tenant boolean
)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._check_label(function_name, 'queue', queue, required => false);
  perform jobs._check_label(function_name, 'tenant_id', tenant_id, required => false);
  if every_tenant is null then
    perform jobs._invalid(function_name, 'every_tenant', 'must be true or false');
  end if;
  if every_tenant and tenant_id is not null then
    perform jobs._invalid(function_name, 'every_tenant',
                          'cannot be true with a tenant_id: a rule is for one tenant or for each');
  end if;
end;
$$;

-- jobs.set_limit: set a limit that holds across every worker. The selector: queue (NULL: every
-- queue together), tenant_id (one tenant) or every_tenant (each tenant apart; a rule of one
-- tenant with the same queue scope overrides it for that tenant); neither tenant_id nor
-- every_tenant counts every tenant together, so queue alone caps a queue and no selector at all
-- caps the fleet. The limits: concurrency (at most this many attempts running at once) and rate
-- with per (at most `rate` attempts started in any window of length `per`, counted in the
-- database, so a restart grants no fresh allowance); 0 stops the scope. A kind left NULL keeps
-- what the selector's rule already has. set_by names who set it.
-- Answers the selector's rule as it now stands. The scope's live rows become capped at once; an
-- attempt already running over a lowered limit runs on, and the scope admits no new one until
-- it is under the limit again.
-- Raises X_ARGUMENT_INVALID. Locks: the selector's rule row, then the scope's live rows.
create function jobs.set_limit(
  queue text default null,
  tenant_id text default null,
  every_tenant boolean default false,
  concurrency integer default null,
  rate integer default null,
  per interval default null,
  set_by text default null
)
returns jobs.limit_rule
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_rule jobs.limit_rules;
begin
  perform jobs._require(array['operator'], 'jobs.set_limit');
  perform jobs._check_selector('jobs.set_limit', set_limit.queue, set_limit.tenant_id,
                               set_limit.every_tenant);
  if set_limit.concurrency is null and set_limit.rate is null then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'or rate must be given (jobs.clear_limit removes a limit)');
  end if;
  if set_limit.concurrency < 0 then
    perform jobs._invalid('jobs.set_limit', 'concurrency',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if set_limit.rate < 0 then
    perform jobs._invalid('jobs.set_limit', 'rate',
                          'must be an integer of at least 0 (0 stops the scope)');
  end if;
  if (set_limit.rate is null) <> (set_limit.per is null) then
    perform jobs._invalid('jobs.set_limit', 'per',
                          'must be given with rate, and only with it (e.g. rate => 100, per => ''1 minute'')');
  end if;
  if set_limit.per <= interval '0' or set_limit.per > interval '1 day' then
    perform jobs._invalid('jobs.set_limit', 'per', 'must be a positive interval of at most 1 day');
  end if;
  perform jobs._check_label('jobs.set_limit', 'set_by', set_limit.set_by, required => false);

  insert into jobs.limit_rules as r (queue, tenant_id, every_tenant, concurrency, rate, per,
                                     set_by, set_at)
  values (set_limit.queue, set_limit.tenant_id, set_limit.every_tenant, set_limit.concurrency,
          set_limit.rate, set_limit.per, set_limit.set_by, jobs._now())
  on conflict on constraint limit_rules_selector_key do update
     set concurrency = coalesce(excluded.concurrency, r.concurrency),
         rate = coalesce(excluded.rate, r.rate),
         per = coalesce(excluded.per, r.per),
         set_by = excluded.set_by,
         set_at = excluded.set_at
  returning r.* into v_rule;

  perform jobs._sync_capped_scope(set_limit.queue, set_limit.tenant_id);
  return (v_rule.queue, v_rule.tenant_id, v_rule.every_tenant, v_rule.concurrency, v_rule.rate,
          v_rule.per, v_rule.set_by, v_rule.set_at)::jobs.limit_rule;
end;
$$;

-- jobs.clear_limit: remove a limit set by jobs.set_limit. The selector as there; kind
-- 'concurrency', 'rate' or 'all' (default) says which of the rule's limits goes. The scope's
-- live rows that no other limit covers are uncapped at once.
-- Answers whether a limit was removed. Raises X_ARGUMENT_INVALID. Locks: the rule row, then the
-- scope's live rows.
create function jobs.clear_limit(
  queue text default null,
  tenant_id text default null,
  every_tenant boolean default false,
  kind text default 'all'
)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_id bigint;
begin
  perform jobs._require(array['operator'], 'jobs.clear_limit');
  perform jobs._check_selector('jobs.clear_limit', clear_limit.queue, clear_limit.tenant_id,
                               clear_limit.every_tenant);
  if kind is null or kind not in ('concurrency', 'rate', 'all') then
    perform jobs._invalid('jobs.clear_limit', 'kind', 'must be ''concurrency'', ''rate'' or ''all''');
  end if;

  select r.id
    into v_id
    from jobs.limit_rules r
   where r.queue is not distinct from clear_limit.queue
     and r.tenant_id is not distinct from clear_limit.tenant_id
     and r.every_tenant = clear_limit.every_tenant
     and case clear_limit.kind
           when 'concurrency' then r.concurrency is not null
           when 'rate' then r.rate is not null
           else true
         end
     for update;
  if v_id is null then
    return false;
  end if;

  if kind = 'all'
     or (kind = 'concurrency' and (select r.rate is null from jobs.limit_rules r where r.id = v_id))
     or (kind = 'rate' and (select r.concurrency is null from jobs.limit_rules r where r.id = v_id))
  then
    delete from jobs.limit_rules r where r.id = v_id;
  elsif kind = 'concurrency' then
    update jobs.limit_rules r set concurrency = null where r.id = v_id;
  else
    update jobs.limit_rules r set rate = null, per = null where r.id = v_id;
    delete from jobs.limit_starts s where s.rule_id = v_id;
  end if;

  perform jobs._sync_capped_scope(clear_limit.queue, clear_limit.tenant_id);
  return true;
end;
$$;
