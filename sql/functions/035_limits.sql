-- 035_limits: what each declared concurrency limit holds and holds back, for operators and
-- dashboards (the claim enforces the limits: jobs._claim_limited in 030_claim).
--
-- Tables: jobs.declarations, jobs.jobs (read: the live rows of limited jobs only). Locks nothing.

create type jobs.limit_row as (
  name text,
  concurrency_key text,
  concurrency integer,
  when_busy text,
  running bigint,
  waiting bigint,
  held_back bigint,
  holders text[]
);

-- jobs.limits: one row per limited job, and for a keyed limit one per key that has live rows
-- (a key with none is not listed), with what runs under it now, what waits, how many of the
-- waiting rows are due but held back because the group is at its limit, and the workers that
-- hold its places. Arguments: name (NULL: every limited job).
-- Answers jobs.limit_row ordered by name, then key. Raises nothing. Locks nothing.
create function jobs.limits(name text default null)
returns setof jobs.limit_row
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from limits l
      join jobs.jobs j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  grouped as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from limits l
      left join live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  )
  select g.name, g.group_key, g.concurrency, g.when_busy, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end,
         g.holders
    from grouped g
   order by g.name collate "C", g.group_key collate "C" nulls first
$$;
