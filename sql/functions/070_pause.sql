-- 070_pause: pause and resume a queue. A pause is a row the claim reads, so it takes effect at
-- every worker's next claim; enqueues still land while a queue is paused.
--
-- Tables: jobs.queue_pauses (insert, delete). Locks: the pause row.

-- jobs.pause_queue: stop handing out the jobs of `queue`.
-- Arguments: queue, paused_by (who, for the record). Answers true when this call paused it,
-- false when it was already paused. Raises X_ARGUMENT_INVALID.
create function jobs.pause_queue(queue text, paused_by text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['operator'], 'jobs.pause_queue');
  perform jobs._check_label('jobs.pause_queue', 'queue', pause_queue.queue);
  perform jobs._check_label('jobs.pause_queue', 'paused_by', pause_queue.paused_by,
                            required => false);
  insert into jobs.queue_pauses as p (queue, paused_at, paused_by)
  values (pause_queue.queue, jobs._now(), pause_queue.paused_by)
  on conflict on constraint queue_pauses_pkey do nothing;
  return found;
end;
$$;

-- jobs.resume_queue: hand out the jobs of `queue` again, and wake its workers.
-- Arguments: queue (any length: a pause stored before names were limited to 200 characters is
-- lifted too, without a wake, since no worker can serve such a queue). Answers true when this
-- call resumed it, false when it was not paused. Raises X_ARGUMENT_INVALID.
create function jobs.resume_queue(queue text)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['operator'], 'jobs.resume_queue');
  if queue is null or queue !~ '[^[:space:]]' then
    perform jobs._check_label('jobs.resume_queue', 'queue', resume_queue.queue);
  end if;
  delete from jobs.queue_pauses p
   where p.queue = resume_queue.queue;
  if found then
    if length(resume_queue.queue) <= 200 then
      perform pg_notify('jobs_wake', jobs._wake_token(resume_queue.queue));
    end if;
    return true;
  end if;
  return false;
end;
$$;
