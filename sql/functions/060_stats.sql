-- 060_stats: what each queue holds, for dashboards, metrics and autoscalers.
--
-- Tables: jobs.jobs_live, jobs.jobs_history_ended, jobs.queue_pauses (read). Locks nothing.

-- dead rows of a queue, for its dead count: the other counted states have their index already
-- (jobs_claim_idx, jobs_lease_idx), so the stats read no finished row. Rows enter it only as
-- they die, so the hot path never pays for it.
create index jobs_dead_idx
  on jobs.jobs_history_ended (queue)
  where state = 'dead';

create type jobs.queue_stat as (
  queue text,
  ready bigint,
  delayed bigint,
  running bigint,
  suspended bigint,
  dead bigint,
  oldest_ready_age interval,
  paused boolean
);

-- jobs.queue_stats: per queue, how many jobs are ready, delayed, running, suspended and dead,
-- and how long the oldest ready-and-due job has waited past its run_at.
-- Each row counts in exactly one bucket. ready: state 'ready' (a shed row included, even while
-- its short delay runs) and 'delayed' rows that came due; delayed: 'delayed' rows not yet due.
-- A suspended row (a sleep, a park) is excluded from oldest_ready_age even when due, on purpose.
-- Arguments: queues (NULL: every queue holding a counted job, and every paused queue; given:
-- exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Each state is read through the partial index that holds it, so the finished rows of a queue,
-- however many, are never read (a metrics scrape calls this). A paused queue is listed even when
-- it holds nothing counted: a pause taken before the jobs come, or one that outlived them, must
-- show.
create function jobs.queue_stats(queues text[] default null)
returns setof jobs.queue_stat
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.queue_stats');
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state = 'running'
         and j.lease_expires_at is not null  -- every running row: for jobs_lease_idx
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_history_ended j
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
