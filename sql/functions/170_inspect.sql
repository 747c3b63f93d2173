-- 170_inspect: one job in full, and the queue depth an autoscaler scales on.
--
-- Tables: jobs.jobs (both job tables), jobs.jobs_live, jobs.steps, jobs.queue_pauses,
-- jobs.workers, jobs.declarations, jobs.limit_rules, jobs.limit_starts (read).
-- Locks nothing.

-- jobs.inspect_job: everything stored about one job, as one JSON document.
-- Arguments: id; tenant_id (optional: answer only that tenant's job; a session bound to a
-- tenant always reads as its tenant, 014_tenants). Answers {"job": the row (every column, input
-- and progress included; the value of each input key that looks like a secret replaced by
-- "[redacted]", 017_redaction),
-- "steps": the run's step trace in the order the steps started, each {name, status, attempts,
-- started_at, updated_at, finished_at, wake_at, duration_ms (NULL until it finished),
-- output_bytes, error}, "queue_paused": whether its queue is paused, "limit": NULL, or for a
-- job declaring a concurrency limit {concurrency, keyed, when_busy, key, running (in its group
-- now), held_back (waiting and due while its group runs at the limit)}, "rules": the limits of
-- jobs.set_limit that count the row, each {queue, tenant_id (the scope it counts), concurrency,
-- running, rate, per_seconds, started (inside the window), held_back (waiting and due while
-- this rule has no room)}}.
-- Raises X_JOB_NOT_FOUND. Locks nothing.
create function jobs.inspect_job(id uuid, tenant_id text default null)
returns jsonb
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job jobs.jobs;
begin
  perform jobs._require(array['enqueuer'], 'jobs.inspect_job', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.inspect_job', 'id', 'must be a job id');
  end if;
  select j.* into v_job from jobs.jobs j where j.id = inspect_job.id;
  -- another tenant's job is answered as no job (014_tenants)
  if not found
     or jobs._foreign_job(inspect_job.id,
                          jobs._scoped_tenant('jobs.inspect_job', 'tenant_id',
                                              inspect_job.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND',
                        format('jobs.inspect_job: no job has id %s', inspect_job.id),
                        jsonb_build_object('function', 'jobs.inspect_job', 'id', inspect_job.id));
  end if;

  return jsonb_build_object(
    -- the input as an operator may see it: secrets' values hidden (017_redaction)
    -- the input and the result as an operator may see them: secrets' values hidden
    -- (017_redaction)
    'job', jsonb_set(jsonb_set(to_jsonb(v_job), '{input}', jobs._redacted(v_job.input)),
                     '{result}', coalesce(jobs._redacted(v_job.result), 'null'::jsonb)),
    -- the jobs its steps enqueued: how many in each state, and the first 50
    'children', (
      select jsonb_build_object(
               'total', coalesce(sum(c.n), 0),
               'states', coalesce(jsonb_object_agg(c.state, c.n), '{}'::jsonb),
               'first', coalesce((
                 select jsonb_agg(jsonb_build_object('id', f.id, 'name', f.name,
                                                     'state', f.state)
                                  order by f.created_at, f.id)
                   from (select k.id, k.name, k.state, k.created_at
                           from jobs.jobs k
                          where k.parent_id = v_job.id
                          order by k.created_at, k.id
                          limit 50) f), '[]'::jsonb))
        from (select k.state, count(*) as n
                from jobs.jobs k
               where k.parent_id = v_job.id
               group by k.state) c),
    'steps', coalesce((
      select jsonb_agg(jsonb_build_object(
               'name', s.name,
               'status', s.status,
               'attempts', s.attempts,
               'started_at', s.started_at,
               'updated_at', s.updated_at,
               'finished_at', s.finished_at,
               'wake_at', s.wake_at,
               'duration_ms', (extract(epoch from (s.finished_at - s.started_at)) * 1000)::bigint,
               'output_bytes', octet_length(s.output::text),
               'error', s.error)
             order by s.started_at, s.name)
        from jobs.steps s
       where s.run_id = v_job.run_id), '[]'::jsonb),
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$$;

create type jobs.queue_depth_row as (
  queue text,
  running bigint,
  due bigint,
  draining_held bigint,
  depth bigint
);

-- jobs.queue_depth: the number an autoscaler scales workers on, per queue: the jobs running
-- plus the jobs due now (ready, delayed or suspended with run_at <= now), minus the running jobs
-- that draining workers hold (they come back as due work once handed back, and are not new
-- demand). A paused queue is left out: more workers would not drain it.
-- Arguments: queues (NULL: every queue holding live work). Answers one jobs.queue_depth_row per
-- queue with live work, ordered by queue. Locks nothing. Reads the clock once a call, not once a
-- row: a read per row is four fifths of its time at 22,000 live rows.
create function jobs.queue_depth(queues text[] default null)
returns setof jobs.queue_depth_row
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.queue_depth');
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs_live j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$$;
