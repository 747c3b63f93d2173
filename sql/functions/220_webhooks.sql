-- 220_webhooks: the webhook delivery ledger. The Python factory (durajobs.declare.webhook) asks
-- jobs.webhook_check_v1 before every request (is the endpoint disabled, was this delivery made
-- already, did this attempt get an answer before a drain handed it back) and records every
-- attempt that reached an answer or a network failure with jobs.webhook_record_v1 before it
-- raises, which also counts the endpoint's consecutive failures and disables it at the declared
-- threshold. An attempt the worker abandoned (its deadline, a lost lease, a cancel) is not
-- recorded: it says nothing about the endpoint. Re-enabling an endpoint is an operator's act
-- (jobs.enable_webhook_endpoint_v1).
--
-- An endpoint is the application's id within one webhook and one tenant: two tenants' `ep_1`
-- are two endpoints, and one's failures never disable the other's. A tenantless delivery's
-- tenant_key is '' (a tenant id is never blank).
--
-- Tables: jobs.webhook_endpoints, jobs.webhook_attempts. Locks: the endpoint's row while an
-- attempt is recorded or the endpoint re-enabled.

create table jobs.webhook_endpoints (
  webhook text not null,
  tenant_key text not null,
  endpoint_id text not null check (length(endpoint_id) between 1 and 200),
  consecutive_failures integer not null default 0 check (consecutive_failures >= 0),
  disabled_at timestamptz,
  disabled_reason text,
  last_attempt_at timestamptz,
  last_delivered_at timestamptz,
  primary key (webhook, tenant_key, endpoint_id)
);

create table jobs.webhook_attempts (
  id bigint generated always as identity primary key,
  webhook text not null,
  tenant_key text not null,
  endpoint_id text not null,
  event_id text not null,
  topic text not null,
  job_id uuid not null,
  attempt integer not null,
  -- delivered (2xx), rejected (other 4xx, 3xx: terminal), throttled (429 or 503 with a
  -- Retry-After), failed (5xx, a network failure, a timeout of the request itself)
  outcome text not null check (outcome in ('delivered', 'rejected', 'throttled', 'failed')),
  status_code integer,
  error text check (length(error) <= 2000),
  retry_after_seconds double precision check (retry_after_seconds >= 0),
  duration_ms integer,
  at timestamptz not null
);

create index webhook_attempts_delivered_idx
  on jobs.webhook_attempts (webhook, tenant_key, endpoint_id, event_id)
  where outcome = 'delivered';
create index webhook_attempts_job_idx on jobs.webhook_attempts (job_id, attempt);
create index webhook_attempts_endpoint_idx on jobs.webhook_attempts (endpoint_id, at desc, id desc);

-- jobs.webhook_check_v1: what a delivery asks before its request: whether its endpoint is
-- disabled (disabled_at, NULL when not); when this webhook delivered this event to it already
-- (delivered_at, NULL when never); and what attempt `attempt` of job `job_id` was answered
-- already (this_outcome and its status, error, stated wait and age in seconds, NULL when
-- nothing): a drain hands an attempt back uncounted after its request finished, and the same
-- attempt must then take that answer rather than send again.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker kind). Locks nothing.
create function jobs.webhook_check_v1(
  webhook text,
  endpoint_id text,
  event_id text,
  tenant_id text default null,
  job_id uuid default null,
  attempt integer default null
)
returns table (
  disabled_at timestamptz,
  delivered_at timestamptz,
  consecutive_failures integer,
  this_outcome text,
  this_status_code integer,
  this_error text,
  this_retry_after_seconds double precision,
  this_age_seconds double precision
)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_tenant text := coalesce(webhook_check_v1.tenant_id, '');
begin
  perform jobs._require(array['worker'], 'jobs.webhook_check_v1');
  perform jobs._check_label('jobs.webhook_check_v1', 'webhook', webhook_check_v1.webhook);
  perform jobs._check_label('jobs.webhook_check_v1', 'endpoint_id', webhook_check_v1.endpoint_id);
  perform jobs._check_label('jobs.webhook_check_v1', 'event_id', webhook_check_v1.event_id);
  perform jobs._check_label('jobs.webhook_check_v1', 'tenant_id', webhook_check_v1.tenant_id,
                            false);
  return query
    select e.disabled_at,
           (select max(a.at)
              from jobs.webhook_attempts a
             where a.webhook = webhook_check_v1.webhook
               and a.tenant_key = v_tenant
               and a.endpoint_id = webhook_check_v1.endpoint_id
               and a.event_id = webhook_check_v1.event_id
               and a.outcome = 'delivered'),
           coalesce(e.consecutive_failures, 0),
           t.outcome, t.status_code, t.error, t.retry_after_seconds,
           extract(epoch from jobs._now() - t.at)::double precision
      from (select 1) one
      left join jobs.webhook_endpoints e
        on e.webhook = webhook_check_v1.webhook
       and e.tenant_key = v_tenant
       and e.endpoint_id = webhook_check_v1.endpoint_id
      left join lateral (
        select a.outcome, a.status_code, a.error, a.retry_after_seconds, a.at
          from jobs.webhook_attempts a
         where a.job_id = webhook_check_v1.job_id
           and a.attempt = webhook_check_v1.attempt
         order by a.id desc
         limit 1) t on true;
end;
$$;

-- jobs.webhook_record_v1: record one attempt of a delivery and count it against its endpoint:
-- delivered clears the endpoint's consecutive failures; rejected and failed add one, and at
-- `disable_after` (NULL: never) the endpoint is disabled; throttled (the endpoint asked for time,
-- retry_after_seconds when it said how long) neither adds nor clears. Answers the endpoint's
-- consecutive failures and whether this attempt disabled it.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker kind). Locks the endpoint's row.
create function jobs.webhook_record_v1(
  webhook text,
  endpoint_id text,
  event_id text,
  topic text,
  job_id uuid,
  attempt integer,
  outcome text,
  status_code integer default null,
  error text default null,
  duration_ms integer default null,
  disable_after integer default null,
  tenant_id text default null,
  retry_after_seconds double precision default null
)
returns table (consecutive_failures integer, disabled boolean)
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_tenant text := coalesce(webhook_record_v1.tenant_id, '');
  v_failed boolean := webhook_record_v1.outcome in ('rejected', 'failed');
  v_failures integer;
  v_disabled_at timestamptz;
begin
  perform jobs._require(array['worker'], 'jobs.webhook_record_v1');
  perform jobs._check_label('jobs.webhook_record_v1', 'webhook', webhook_record_v1.webhook);
  perform jobs._check_label('jobs.webhook_record_v1', 'endpoint_id',
                            webhook_record_v1.endpoint_id);
  perform jobs._check_label('jobs.webhook_record_v1', 'event_id', webhook_record_v1.event_id);
  perform jobs._check_label('jobs.webhook_record_v1', 'topic', webhook_record_v1.topic);
  perform jobs._check_label('jobs.webhook_record_v1', 'tenant_id', webhook_record_v1.tenant_id,
                            false);
  if outcome is null or outcome not in ('delivered', 'rejected', 'throttled', 'failed') then
    perform jobs._invalid('jobs.webhook_record_v1', 'outcome',
                          'must be delivered, rejected, throttled or failed');
  end if;
  if job_id is null or attempt is null or attempt < 1 then
    perform jobs._invalid('jobs.webhook_record_v1', 'job_id, attempt',
                          'must name the job and its attempt (from 1)');
  end if;
  if disable_after is not null and disable_after < 1 then
    perform jobs._invalid('jobs.webhook_record_v1', 'disable_after', 'must be NULL or at least 1');
  end if;
  if retry_after_seconds < 0 or retry_after_seconds in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.webhook_record_v1', 'retry_after_seconds',
                          'must be NULL or a finite number of seconds of at least 0');
  end if;

  insert into jobs.webhook_attempts (webhook, tenant_key, endpoint_id, event_id, topic, job_id,
                                     attempt, outcome, status_code, error, retry_after_seconds,
                                     duration_ms, at)
  values (webhook_record_v1.webhook, v_tenant, webhook_record_v1.endpoint_id,
          webhook_record_v1.event_id, webhook_record_v1.topic, webhook_record_v1.job_id,
          webhook_record_v1.attempt, webhook_record_v1.outcome, webhook_record_v1.status_code,
          left(webhook_record_v1.error, 2000), webhook_record_v1.retry_after_seconds,
          webhook_record_v1.duration_ms, v_now);

  insert into jobs.webhook_endpoints as e (webhook, tenant_key, endpoint_id, consecutive_failures,
                                           last_attempt_at, last_delivered_at)
  values (webhook_record_v1.webhook, v_tenant, webhook_record_v1.endpoint_id,
          case when v_failed then 1 else 0 end, v_now,
          case when webhook_record_v1.outcome = 'delivered' then v_now end)
  on conflict on constraint webhook_endpoints_pkey do update
     set consecutive_failures = case
           when webhook_record_v1.outcome = 'delivered' then 0
           when v_failed then e.consecutive_failures + 1
           else e.consecutive_failures end,
         last_attempt_at = v_now,
         last_delivered_at = case when webhook_record_v1.outcome = 'delivered' then v_now
                                  else e.last_delivered_at end
  returning e.consecutive_failures, e.disabled_at into v_failures, v_disabled_at;

  if v_failed and v_disabled_at is null and webhook_record_v1.disable_after is not null
     and v_failures >= webhook_record_v1.disable_after then
    update jobs.webhook_endpoints e
       set disabled_at = v_now,
           disabled_reason = format('%s consecutive failed deliveries, the last %s',
                                    v_failures, coalesce(webhook_record_v1.status_code::text,
                                                         left(webhook_record_v1.error, 200)))
     where e.webhook = webhook_record_v1.webhook
       and e.tenant_key = v_tenant
       and e.endpoint_id = webhook_record_v1.endpoint_id;
    return query select v_failures, true;
    return;
  end if;
  return query select v_failures, false;
end;
$$;

-- jobs.enable_webhook_endpoint_v1: take an endpoint out of its disabled state and clear its
-- consecutive failures (its owner fixed it): the endpoint `endpoint_id` of every webhook and
-- tenant, or of the one `webhook` and `tenant_id` name. Answers how many were disabled.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (operator kind). Locks the endpoints' rows.
create function jobs.enable_webhook_endpoint_v1(
  endpoint_id text,
  webhook text default null,
  tenant_id text default null
)
returns integer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_was integer;
begin
  perform jobs._require(array['operator'], 'jobs.enable_webhook_endpoint_v1');
  perform jobs._check_label('jobs.enable_webhook_endpoint_v1', 'endpoint_id',
                            enable_webhook_endpoint_v1.endpoint_id);
  with enabled as (
    update jobs.webhook_endpoints e
       set disabled_at = null, disabled_reason = null, consecutive_failures = 0
      from jobs.webhook_endpoints old
     where old.webhook = e.webhook
       and old.tenant_key = e.tenant_key
       and old.endpoint_id = e.endpoint_id
       and e.endpoint_id = enable_webhook_endpoint_v1.endpoint_id
       and (enable_webhook_endpoint_v1.webhook is null
            or e.webhook = enable_webhook_endpoint_v1.webhook)
       and (enable_webhook_endpoint_v1.tenant_id is null
            or e.tenant_key = enable_webhook_endpoint_v1.tenant_id)
    returning old.disabled_at
  )
  select count(*) filter (where d.disabled_at is not null) into v_was from enabled d;
  return v_was;
end;
$$;

-- jobs.webhook_endpoints_v1: every endpoint a delivery has reached, with its failures and
-- whether it is disabled, the disabled first. Raises X_PERMISSION_DENIED (worker and operator
-- kinds). Locks nothing.
create function jobs.webhook_endpoints_v1()
returns table (
  webhook text,
  tenant_id text,
  endpoint_id text,
  consecutive_failures integer,
  disabled_at timestamptz,
  disabled_reason text,
  last_attempt_at timestamptz,
  last_delivered_at timestamptz
)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.webhook_endpoints_v1');
  return query
    select e.webhook, nullif(e.tenant_key, ''), e.endpoint_id, e.consecutive_failures,
           e.disabled_at, e.disabled_reason, e.last_attempt_at, e.last_delivered_at
      from jobs.webhook_endpoints e
     order by e.disabled_at is null, e.endpoint_id, e.webhook, e.tenant_key;
end;
$$;

-- jobs.webhook_attempts_v1: the recorded attempts, newest first: to the endpoint `endpoint` and
-- of the event `event` when given, at most `max_rows`. Raises X_ARGUMENT_INVALID,
-- X_PERMISSION_DENIED (worker and operator kinds). Locks nothing.
create function jobs.webhook_attempts_v1(
  endpoint text default null,
  event text default null,
  max_rows integer default 100
)
returns table (
  id bigint,
  webhook text,
  tenant_id text,
  endpoint_id text,
  event_id text,
  topic text,
  job_id uuid,
  attempt integer,
  outcome text,
  status_code integer,
  error text,
  retry_after_seconds double precision,
  duration_ms integer,
  at timestamptz
)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.webhook_attempts_v1');
  if max_rows is null or max_rows not between 1 and 10000 then
    perform jobs._invalid('jobs.webhook_attempts_v1', 'max_rows', 'must be from 1 to 10,000');
  end if;
  return query
    select a.id, a.webhook, nullif(a.tenant_key, ''), a.endpoint_id, a.event_id, a.topic,
           a.job_id, a.attempt, a.outcome, a.status_code, a.error, a.retry_after_seconds,
           a.duration_ms, a.at
      from jobs.webhook_attempts a
     where (webhook_attempts_v1.endpoint is null or a.endpoint_id = webhook_attempts_v1.endpoint)
       and (webhook_attempts_v1.event is null or a.event_id = webhook_attempts_v1.event)
     order by a.at desc, a.id desc
     limit webhook_attempts_v1.max_rows;
end;
$$;
