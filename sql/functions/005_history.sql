-- 005_history: how a job row moves between jobs.jobs_live and jobs.jobs_history, and the day
-- partitions of the done rows.
--
-- Tables: jobs.jobs_history_done (its day partitions are made here). The functions that end a
-- row (ack, nack, cancel, the claim's burials and refusals) delete it from jobs.jobs_live and
-- insert what jobs._ended makes of it into jobs.jobs_history in one statement; jobs.requeue
-- moves a finished row back (jobs._revived, in 080_requeue). Locks: jobs.prepare_history takes the
-- partitioned table's lock while it adds a partition.

-- jobs._ended: the history row a live row becomes when it ends as `state` at `now`: its lease
-- is gone and finished_at is set. The three error columns are replaced only when error is given
-- (error_code and error_stack then replace theirs, NULL included); give_back_attempt takes back
-- the claim's increment (never below zero), for an attempt that does not count; claimed_by, when
-- given, names the claimer that ended a row it never ran (a refusal), claimed at `now`; result is
-- what a completed body returned (NULL for any other ending).
-- Answers a jobs.jobs_history row. Raises nothing. Locks nothing.
create function jobs._ended(
  j jobs.jobs_live,
  state text,
  now timestamptz,
  error text default null,
  error_code text default null,
  error_stack text default null,
  give_back_attempt boolean default false,
  claimed_by text default null,
  result jsonb default null
)
returns jobs.jobs_history
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select row(
    j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
    _ended.state, j.priority,
    case when _ended.give_back_attempt then greatest(j.attempt - 1, 0) else j.attempt end,
    j.max_attempts, j.run_at, j.created_at,
    _ended.now,  -- updated_at
    _ended.now,  -- finished_at
    coalesce(_ended.claimed_by, j.claimed_by),
    case when _ended.claimed_by is null then j.claimed_at else _ended.now end,
    null,        -- lease_expires_at
    j.claims,
    case when _ended.error is null then j.last_error else _ended.error end,
    case when _ended.error is null then j.last_error_code else _ended.error_code end,
    case when _ended.error is null then j.last_error_stack else _ended.error_stack end,
    j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped,
    _ended.result, j.parent_id
  )::jobs.jobs_history
$$;

-- jobs._history_day: the name of the partition of jobs.jobs_history_done holding the rows that
-- finished on `day` (UTC). Answers text. Raises nothing.
create function jobs._history_day(day date)
returns text
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select 'jobs_history_done_p' || to_char(_history_day.day, 'YYYYMMDD')
$$;

-- jobs.prepare_history: make the day partitions of jobs.jobs_history_done for today and the
-- next `days` days (UTC), those not made yet. A day whose rows already went to the default
-- partition (no partition existed when they finished) is skipped: its rows stay there, and the
-- purge deletes them by age. The purge calls this on every run; a row finishing on a day with no
-- partition is never refused.
-- Arguments: days (0..31, default 2). Answers how many partitions it made.
-- Raises X_ARGUMENT_INVALID. Locks: jobs.jobs_history_done, for each partition it adds.
create function jobs.prepare_history(days integer default 2)
returns integer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_today date := (jobs._now() at time zone 'UTC')::date;
  v_day date;
  v_from timestamptz;
  v_made integer := 0;
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.prepare_history');
  if days is null or days < 0 or days > 31 then
    perform jobs._invalid('jobs.prepare_history', 'days', 'must be between 0 and 31');
  end if;
  for v_day in select v_today + g from generate_series(0, prepare_history.days) g loop
    continue when to_regclass('jobs.' || jobs._history_day(v_day)) is not null;
    v_from := v_day::timestamp at time zone 'UTC';
    continue when exists (select 1
                            from jobs.jobs_history_done_default d
                           where d.finished_at >= v_from
                             and d.finished_at < v_from + interval '1 day');
    execute format('create table jobs.%I partition of jobs.jobs_history_done '
                   'for values from (%L) to (%L)',
                   jobs._history_day(v_day), v_from, v_from + interval '1 day');
    v_made := v_made + 1;
  end loop;
  return v_made;
end;
$$;

-- jobs._write_through: what a write to the view jobs.jobs does, row by row: the row is taken out
-- of whichever table holds it and put, as written, into the table its state belongs to (a
-- finished row without finished_at finishes now). For an operator's repair in psql and for
-- tests that set a row up; no function of the schema writes through the view.
-- Raises what the target table raises (a check, a unique index, a state no table holds).
-- Locks the rows it moves.
create function jobs._write_through()
returns trigger
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if tg_op in ('UPDATE', 'DELETE') then
    delete from jobs.jobs_live j where j.id = old.id;
    if not found then
      delete from jobs.jobs_history j where j.id = old.id;
    end if;
  end if;
  if tg_op = 'DELETE' then
    return old;
  end if;
  if new.state in ('ready', 'delayed', 'running', 'suspended') then
    insert into jobs.jobs_live values (new.*);
  else
    new.finished_at := coalesce(new.finished_at, jobs._now());
    insert into jobs.jobs_history values (new.*);
  end if;
  return new;
end;
$$;

create trigger jobs_write_through
  instead of insert or update or delete on jobs.jobs
  for each row execute function jobs._write_through();
