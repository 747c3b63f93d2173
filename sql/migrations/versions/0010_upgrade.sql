-- Revision 0010 up: the enqueue's wake and ids.
-- jobs._announce, the wake throttle every enqueue runs, tests for a waiting row of its queue in
-- its 250 ms slot. The planner could take the claim index for that test (its state test proves
-- the index's predicate) and read every waiting row of the queue, filtering on created_at: with
-- statistics that did not yet know the queue's backlog, a single enqueue next to 12,000 waiting
-- rows took 3.2 ms of server time instead of 0.33, growing with the backlog. Each range now
-- sits in a subquery that names no state, so only the (queue, created_at) index serves it; the
-- test reads the slot's rows.
-- jobs._uuid_v7, which makes the id of every single enqueue, outbox row and event, was a SQL
-- function calling another SQL function, re-planned on every call: about 50 us. It is PL/pgSQL
-- now, about 9 us, with the formula still only in jobs._uuid_v7_many.
-- jobs.queue_stats() (no queues named) lists a paused queue even when it holds nothing counted;
-- before, a queue paused ahead of its jobs, or after they all finished, was not listed at all.
-- Otherwise the same arguments, answers, errors and locks. Schema version 10. Frozen: never
-- edit after release; a change ships as a new revision.

-- jobs.version: the installed schema version; the Python package refuses an older one.
-- Answers an integer. Raises nothing. Introduced in revision 0001; since then it answers the
-- number of the newest revision installed (10 since revision 0010).
create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 10
$$;

-- >>> sql/functions/010_util.sql: _uuid_v7

-- jobs._uuid_v7: a time-ordered uuid (RFC 9562 version 7), so ids sort by creation and new rows
-- land at the right edge of every id index.
-- Answers a uuid. Raises nothing. Introduced in revision 0001; since revision 0007 one element of
-- jobs._uuid_v7_many, which holds the only copy of the formula. PL/pgSQL since revision 0010: as
-- a SQL function it re-planned the SQL function it calls on every call, about 50 us of a single
-- enqueue; now about 9.
create or replace function jobs._uuid_v7()
returns uuid
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return (jobs._uuid_v7_many(1))[1];
end;
$$;

-- >>> sql/functions/020_enqueue.sql: _announce

-- jobs._announce: wake idle workers of `queue` for rows created at `created_at`, unless a row
-- another transaction created in the same 250 ms slot, due at once and STILL WAITING, already
-- announced it: the workers it woke are claiming and will find this row too. A row of the slot
-- that was already claimed says nothing about this one (its worker may be idle again), so it
-- does not silence the wake (since revision 0006; before, a second job 50 ms after the first
-- waited for the poll).
-- Rows of the calling transaction share its created_at and are skipped: Postgres folds identical
-- notifications of one transaction anyway. Answers whether it notified. Locks nothing.
-- Reads the slot's rows of the queue by (queue, created_at), whatever the statistics say (since
-- revision 0010). Introduced in revision 0001.
create or replace function jobs._announce(queue text, created_at timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$$;

-- >>> sql/functions/060_stats.sql: queue_stats

-- jobs.queue_stats: per queue, how many jobs are ready, delayed, running, suspended and dead,
-- and how long the oldest ready-and-due job has waited past its run_at.
-- Each row counts in exactly one bucket. ready: state 'ready' (a shed row included, even while
-- its short delay runs) and 'delayed' rows that came due; delayed: 'delayed' rows not yet due.
-- A suspended row (a sleep, a park) is excluded from oldest_ready_age even when due, on purpose.
-- Arguments: queues (NULL: every queue holding a counted job, and every paused queue; given:
-- exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Since revision 0008 each state is read through the partial index that holds it, so the
-- finished rows of a queue, however many, are never read (a metrics scrape calls this). Since
-- revision 0010 a paused queue is listed even when it holds nothing counted: a pause taken
-- before the jobs come, or one that outlived them, was invisible. Introduced in revision 0001.
create or replace function jobs.queue_stats(queues text[] default null)
returns setof jobs.queue_stat
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
    )
    select w.queue,
           coalesce(c.ready, 0),
           coalesce(c.delayed, 0),
           coalesce(c.running, 0),
           coalesce(c.suspended, 0),
           coalesce(c.dead, 0),
           c.oldest_ready_age,
           exists (select 1 from jobs.queue_pauses p where p.queue = w.queue)
      from wanted w
      left join counted c on c.queue = w.queue
     order by w.queue;
end;
$$;
