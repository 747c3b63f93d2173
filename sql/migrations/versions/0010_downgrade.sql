-- Revision 0010 down: put back the jobs._uuid_v7 of revision 0007 (a SQL function), the
-- jobs._announce of revision 0006 (its slot tests free to take any index) and the
-- jobs.queue_stats of revision 0008 (a paused queue listed only when it holds a counted job), and
-- go back to schema version 9.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 9
$$;

create or replace function jobs._uuid_v7()
returns uuid
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select (jobs._uuid_v7_many(1))[1]
$$;

create or replace function jobs._announce(queue text, created_at timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  if exists (
       select 1
         from jobs.jobs j
        where j.queue = _announce.queue
          and j.created_at >= v_slot
          and j.created_at < _announce.created_at
          and j.state in ('ready', 'delayed')
          and j.run_at <= j.created_at + interval '1 second')
     or exists (
       select 1
         from jobs.jobs j
        where j.queue = _announce.queue
          and j.created_at > _announce.created_at
          and j.created_at < v_slot + interval '250 milliseconds'
          and j.state in ('ready', 'delayed')
          and j.run_at <= j.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$$;

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
