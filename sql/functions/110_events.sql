-- 110_events: a stored event bus for step.wait_for_event. A run waiting for an event parks
-- 'suspended' with a 'waiting' step; publishing a matching event makes those runs due at once,
-- and the run, resumed, finds the earliest matching event published since its wait began.
-- One clock: events and waits are stamped with the database's time (jobs._now()), so a worker
-- whose clock runs ahead can neither miss an event nor time out early.
--
-- Tables: jobs.events (insert, read), jobs.steps (read), jobs.jobs_live (update run_at of
-- waiters).
-- Lock order: job rows (the waiters), as everywhere.

create table jobs.events (
  id uuid primary key,
  name text not null,
  payload jsonb not null,
  correlation_key text,
  published_at timestamptz not null,
  expires_at timestamptz not null,
  -- the tenant whose runs it is for; NULL: any run's (014_tenants)
  tenant_id text
);

-- a waiter looks for the earliest event of a name (and key) published since its wait began
create index events_find_idx
  on jobs.events (name, correlation_key, published_at);

create type jobs.event_lookup as (
  found boolean,
  event_id uuid,
  payload jsonb,
  published_at timestamptz,
  now timestamptz
);

-- jobs.publish_event: publish an event and wake the runs waiting for it.
-- Arguments: name; payload (a JSON value, {} by default); correlation_key (ties it to the waits
-- that match on it; a wait without a match takes any event of the name); ttl (7 days);
-- tenant_id (the tenant whose runs it is for, NULL: any run's; a session bound to a tenant
-- always publishes for its tenant, 014_tenants).
-- Answers the event's id. Raises X_ARGUMENT_INVALID. Locks: the waiting job rows it wakes.
-- Wakes: pg_notify('jobs_wake', <the queue's wake token, 013_wake>) once per queue of the runs
-- it made due, on commit.
create function jobs.publish_event(
  name text,
  payload jsonb default '{}',
  correlation_key text default null,
  ttl interval default interval '7 days',
  tenant_id text default null
)
returns uuid
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  perform jobs._require(array['enqueuer'], 'jobs.publish_event', scoped => true);
  publish_event.tenant_id := jobs._scoped_tenant('jobs.publish_event', 'tenant_id',
                                                 publish_event.tenant_id);
  perform jobs._check_label('jobs.publish_event', 'tenant_id', publish_event.tenant_id,
                            required => false);
  perform jobs._check_label('jobs.publish_event', 'name', publish_event.name);
  perform jobs._check_label('jobs.publish_event', 'correlation_key', publish_event.correlation_key,
                            required => false);
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  perform jobs._check_bytes('jobs.publish_event', 'payload',
                            jobs._json_bytes(publish_event.payload), 'input');
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at,
                                tenant_id)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl, publish_event.tenant_id);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and (publish_event.tenant_id is null or j.tenant_id = publish_event.tenant_id)
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', jobs._wake_token(v_queue));
  end loop;
  return v_id;
end;
$$;

-- jobs.find_event: the earliest unexpired event of `name` published at or after `after`, with
-- `correlation_key` when one is given, for a run of `tenant_id` (an event published for another
-- tenant is never found; one published for no tenant is found by every run); also answers the
-- database's now, the one clock a wait's timeout is judged on.
-- Answers one jobs.event_lookup (found = false and NULL fields when there is none).
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs.find_event(
  name text,
  correlation_key text default null,
  after timestamptz default '-infinity',
  tenant_id text default null
)
returns jobs.event_lookup
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_lookup jobs.event_lookup;
begin
  perform jobs._require(array['worker'], 'jobs.find_event');
  perform jobs._check_label('jobs.find_event', 'name', find_event.name);
  select true, e.id, e.payload, e.published_at, v_now
    into v_lookup
    from jobs.events e
   where e.name = find_event.name
     and (find_event.correlation_key is null or e.correlation_key = find_event.correlation_key)
     and e.published_at >= coalesce(find_event.after, '-infinity')
     and (e.tenant_id is null or e.tenant_id = find_event.tenant_id)
     and e.expires_at > v_now
   order by e.published_at, e.id
   limit 1;
  if not found then
    v_lookup := (false, null, null, null, v_now)::jobs.event_lookup;
  end if;
  return v_lookup;
end;
$$;
