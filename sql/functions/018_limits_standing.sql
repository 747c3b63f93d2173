-- 018_limits_standing: how many limits stand now, kept as one counted row, so that a claim learns
-- "no limit at all" from one small table. The claim used to ask jobs.declarations (a declared
-- concurrency) and jobs.limit_rules (any rule) directly: five relations and their locks, about
-- 0.04 ms of an idle worker's pickup on a backend that slept
-- (bench/results/pickup-cold-2026-12-04.md).
--
-- Tables: jobs.limits_standing (one row: the declared concurrencies plus the limit rules). Kept
-- by triggers on jobs.declarations and jobs.limit_rules, in the writer's transaction, so a claim
-- sees the count its snapshot would have counted. Locks: a write that changes the count takes
-- the row (writers of limits queue behind each other; a repeatable-read writer that meets
-- another's change gets a serialization failure and retries).

create table jobs.limits_standing (
  standing bigint not null check (standing >= 0)
);

-- no index: the claim reads the one row whole, and an index would be one more relation to lock
insert into jobs.limits_standing (standing)
select (select count(*) from jobs.declarations d where d.concurrency is not null)
       + (select count(*) from jobs.limit_rules);

-- The trigger functions run as the writer of the table: the public functions that write limits
-- (security definer) or the schema's owner; no other role may write either table.

-- a declaration's concurrency set, changed to or from none, or its row removed
create function jobs._count_declared_limit()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_delta integer := 0;
begin
  if tg_op <> 'DELETE' then
    if new.concurrency is not null then
      v_delta := v_delta + 1;
    end if;
  end if;
  if tg_op <> 'INSERT' then
    if old.concurrency is not null then
      v_delta := v_delta - 1;
    end if;
  end if;
  if v_delta <> 0 then
    -- an increment, not a recount: two writers' changes add up whichever commits first
    update jobs.limits_standing set standing = standing + v_delta;
  end if;
  return null;
end;
$$;

-- a limit rule set or cleared
create function jobs._count_limit_rule()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  update jobs.limits_standing
     set standing = standing + case tg_op when 'INSERT' then 1 else -1 end;
  return null;
end;
$$;

-- either table truncated: count again, from a snapshot taken once the row is held, so that a
-- writer of the other table is either counted or adds its increment after this
create function jobs._recount_limits()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  perform 1 from jobs.limits_standing for update;
  update jobs.limits_standing
     set standing = (select count(*) from jobs.declarations d where d.concurrency is not null)
                    + (select count(*) from jobs.limit_rules);
  return null;
end;
$$;

create trigger declarations_count_limits
  after insert or update of concurrency or delete on jobs.declarations
  for each row execute function jobs._count_declared_limit();

create trigger declarations_recount_limits
  after truncate on jobs.declarations
  for each statement execute function jobs._recount_limits();

create trigger limit_rules_count_limits
  after insert or delete on jobs.limit_rules
  for each row execute function jobs._count_limit_rule();

create trigger limit_rules_recount_limits
  after truncate on jobs.limit_rules
  for each statement execute function jobs._recount_limits();
