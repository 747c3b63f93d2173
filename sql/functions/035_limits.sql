-- 035_limits: what each limit holds and holds back, for operators and dashboards: the
-- concurrency a job declares and the limits of jobs.set_limit (the claim enforces them all:
-- jobs._claim_limited in 030_claim).
--
-- Tables: jobs.declarations, jobs.limit_rules, jobs.limit_starts, jobs.jobs_live (read: the live
-- rows of capped jobs only). Locks nothing.

create type jobs.limit_row as (
  -- 'job' (a declaration), 'fleet', 'queue', 'tenant' or 'every tenant' (a rule)
  scope text,
  name text,
  concurrency_key text,
  queue text,
  tenant_id text,
  concurrency integer,
  when_busy text,
  rate integer,
  per interval,
  started bigint,
  running bigint,
  waiting bigint,
  held_back bigint,
  holders text[]
);

-- jobs.limits: one row per limit with what it holds now. A job's declared limit: one row, and for
-- a keyed limit one per key that has live rows. A rule of jobs.set_limit: one row, and for an
-- every_tenant rule one per tenant that has live rows under it (a tenant a rule of its own
-- overrides is listed under that rule). Each row: what runs under it now, what waits, how many
-- of the waiting rows are due but held back because the group is at its concurrency or has used
-- its rate (`started` counts the starts inside the rate's window), and the workers that hold its
-- places. Arguments: name (a job: only its declared limit; NULL: every limit).
-- Answers jobs.limit_row ordered by scope, then name, queue, tenant and key. Raises nothing.
-- Locks nothing.
create function jobs.limits(name text default null)
returns setof jobs.limit_row
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.limits');
  with declared as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  declared_live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from declared l
      join jobs.jobs_live j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  declared_rows as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from declared l
      left join declared_live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  ),
  -- the live rows a rule may count, grouped before any rule is asked
  live as materialized (
    select j.queue, j.tenant_id, j.state, j.run_at <= jobs._now() as due, j.claimed_by,
           count(*) as n,
           row_number() over (order by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(),
                                       j.claimed_by)::integer as ord
      from jobs.jobs_live j
     where limits.name is null
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
     group by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(), j.claimed_by
  ),
  ruled as (
    select g.grp, g.rule_id, g.scope_tenant, l.state, l.due, l.claimed_by, l.n
      from jobs._rule_groups_of(array(select l.queue from live l order by l.ord),
                                array(select l.tenant_id from live l order by l.ord)) g
      join live l on l.ord = g.ord
  ),
  rule_rows as (
    select r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per,
           case when r.every_tenant then x.scope_tenant else r.tenant_id end as tenant_id,
           coalesce('r:' || r.id
                      || case when r.every_tenant then E'\x1f' || x.scope_tenant else '' end,
                    '') as grp,
           coalesce(sum(x.n) filter (where x.state = 'running'), 0) as running,
           coalesce(sum(x.n) filter (where x.state <> 'running'), 0) as waiting,
           coalesce(sum(x.n) filter (where x.state <> 'running' and x.due), 0) as due,
           coalesce(array_agg(distinct x.claimed_by order by x.claimed_by)
                      filter (where x.state = 'running'), '{}') as holders
      from jobs.limit_rules r
      left join ruled x on x.rule_id = r.id
     where limits.name is null
     group by r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per, r.tenant_id,
              x.scope_tenant
  ),
  started as (
    select s.grp, s.started
      from jobs._started_groups(jobs._now()) s
     where limits.name is null
  )
  select u.scope, u.name, u.concurrency_key, u.queue, u.tenant_id, u.concurrency, u.when_busy,
         u.rate, u.per, u.started, u.running, u.waiting, u.held_back, u.holders
    from (
  select 'job' as scope, g.name, g.group_key as concurrency_key, null as queue,
         null as tenant_id, g.concurrency, g.when_busy, null::integer as rate,
         null::interval as per, null::bigint as started, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end as held_back,
         g.holders
    from declared_rows g
  union all
  select case when r.every_tenant then 'every tenant'
              when r.tenant_id is not null then 'tenant'
              when r.queue is not null then 'queue'
              else 'fleet' end,
         null, null, r.queue, r.tenant_id, r.concurrency, null, r.rate, r.per,
         case when r.rate is not null then coalesce(s.started, 0) end,
         r.running, r.waiting,
         case when r.running >= r.concurrency or coalesce(s.started, 0) >= r.rate then r.due
              else 0 end,
         r.holders
    from rule_rows r
    left join started s on s.grp = r.grp
    ) u
   order by u.scope collate "C", u.name collate "C", u.queue collate "C" nulls first,
            u.tenant_id collate "C" nulls first, u.concurrency_key collate "C" nulls first
$$;
