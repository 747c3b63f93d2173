-- 060_stats: what each queue holds, for dashboards, metrics and autoscalers.
--
-- Tables: jobs.jobs, jobs.queue_pauses (read). Locks nothing.

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
-- Arguments: queues (NULL: every queue holding a job; given: exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Introduced in revision 0001.
create function jobs.queue_stats(queues text[] default null)
returns setof jobs.queue_stat
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted as (
      select j.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where j.state = 'ready'
                                 or (j.state = 'delayed' and j.run_at <= v_now)) as ready,
             count(*) filter (where j.state = 'delayed' and j.run_at > v_now) as delayed,
             count(*) filter (where j.state = 'running') as running,
             count(*) filter (where j.state = 'suspended') as suspended,
             count(*) filter (where j.state = 'dead') as dead,
             v_now - min(j.run_at) filter (where j.state in ('ready', 'delayed')
                                             and j.run_at <= v_now) as oldest_ready_age
        from jobs.jobs j
       where j.state in ('ready', 'delayed', 'running', 'suspended', 'dead')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
       group by j.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
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
