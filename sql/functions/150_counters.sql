-- 150_counters: per job name, how many attempts ended done, retried, failed or dead, and how
-- long they ran, in time buckets.
--
-- Tables: jobs.counter_buckets. The settling statements (ack, nack, the claim's burial) add to
-- the current minute's bucket through jobs._count_settled, in the statement that moves the row,
-- so a count never disagrees with the rows. Each backend writes one of 64 shards of a minute
-- (its pid modulo 64), so concurrent workers rarely meet on one row, and only briefly when they
-- do. jobs.rollup_counters folds shards and tiers: 1-minute buckets for 24 hours, 5-minute for
-- 7 days, 1-hour for 30 days, then gone. Every settled attempt sits in exactly one row at any
-- time, so readers sum across tiers.

create table jobs.counter_buckets (
  tier text not null,
  bucket timestamptz not null,
  name text not null,
  shard smallint not null default 0,
  done bigint not null default 0,
  retried bigint not null default 0,
  failed bigint not null default 0,
  dead bigint not null default 0,
  duration_ms bigint not null default 0,
  primary key (tier, bucket, name, shard),
  constraint counter_buckets_tier_check check (tier in ('1m', '5m', '1h'))
);

-- readers ask by name over a time range
create index counter_buckets_name_idx
  on jobs.counter_buckets (name, bucket);

-- jobs._bucket: the start of the bucket of width `width` holding `at`, aligned on the Unix epoch
-- in UTC whatever the session's time zone.
create function jobs._bucket(width interval, at timestamptz)
returns timestamptz
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select date_bin(width, at, timestamptz '1970-01-01 00:00:00+00')
$$;

-- jobs._count_settled: add settled attempts to the current minute's counters.
-- Arguments: settled_at (the settle's clock), and parallel arrays of job names, outcomes
-- ('done', 'retried', 'failed', 'dead'; NULL adds nothing) and the attempts' claimed_at (their
-- duration runs from it to settled_at). NULL arrays add nothing.
-- Answers the number of counter rows written. Locks this backend's shard rows of the minute.
create function jobs._count_settled(
  settled_at timestamptz,
  names text[],
  outcomes text[],
  claimed_ats timestamptz[]
)
returns integer
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  with tallied as (
    select s.name,
           count(*) filter (where s.outcome = 'done') as done,
           count(*) filter (where s.outcome = 'retried') as retried,
           count(*) filter (where s.outcome = 'failed') as failed,
           count(*) filter (where s.outcome = 'dead') as dead,
           coalesce(sum(greatest(
             (extract(epoch from (settled_at - s.claimed_at)) * 1000)::bigint, 0)), 0)
             as duration_ms
      from unnest(names, outcomes, claimed_ats) as s(name, outcome, claimed_at)
     where s.outcome in ('done', 'retried', 'failed', 'dead')
     group by s.name
  ),
  written as (
    insert into jobs.counter_buckets as c
           (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
    select '1m', jobs._bucket(interval '1 minute', settled_at), t.name,
           (pg_backend_pid() % 64)::smallint, t.done, t.retried, t.failed, t.dead,
           t.duration_ms
      from tallied t
     -- one lock order for every statement: two backends sharing a shard never deadlock
     order by t.name
    on conflict (tier, bucket, name, shard) do update
       set done = c.done + excluded.done,
           retried = c.retried + excluded.retried,
           failed = c.failed + excluded.failed,
           dead = c.dead + excluded.dead,
           duration_ms = c.duration_ms + excluded.duration_ms
    returning 1
  )
  select count(*)::integer from written
$$;

-- jobs._fold_counters: move the rows of `from_tier` older than `older_than` into `to_tier`
-- buckets of `to_width` (shard 0), adding to what is there; to_tier NULL deletes them.
-- Moving deletes, so a second call finds nothing to move: the fold is idempotent.
-- Answers the number of rows moved. Locks the moved rows and their targets.
create function jobs._fold_counters(
  from_tier text,
  older_than timestamptz,
  to_tier text,
  to_width interval,
  only_shards boolean default false
)
returns bigint
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  with moved as (
    delete from jobs.counter_buckets c
     where c.tier = from_tier
       and c.bucket < older_than
       and (not only_shards or c.shard <> 0)
    returning c.bucket, c.name, c.done, c.retried, c.failed, c.dead, c.duration_ms
  ),
  folded as (
    insert into jobs.counter_buckets as c
           (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
    select to_tier, jobs._bucket(to_width, m.bucket), m.name, 0, sum(m.done), sum(m.retried),
           sum(m.failed), sum(m.dead), sum(m.duration_ms)
      from moved m
     where to_tier is not null
     group by jobs._bucket(to_width, m.bucket), m.name
    on conflict (tier, bucket, name, shard) do update
       set done = c.done + excluded.done,
           retried = c.retried + excluded.retried,
           failed = c.failed + excluded.failed,
           dead = c.dead + excluded.dead,
           duration_ms = c.duration_ms + excluded.duration_ms
    returning 1
  )
  select count(*) from moved
$$;

-- jobs.rollup_counters: fold the counter tiers. Past minutes' shards become one row per name;
-- 1-minute buckets older than 24 hours fold into 5-minute ones, 5-minute older than 7 days into
-- 1-hour ones, and 1-hour buckets older than 30 days are deleted. The scheduler leader runs it
-- once a minute; running it again, or from two sessions at once, changes no total.
-- Answers (tier, moved): the rows each step moved out of that tier. Locks the moved rows.
create function jobs.rollup_counters()
returns table (tier text, moved bigint)
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.rollup_counters');
  -- a past minute takes no more settles: its shards can become one row
  tier := '1m shards';
  moved := jobs._fold_counters('1m', jobs._bucket(interval '1 minute', v_now), '1m',
                               interval '1 minute', true);
  return next;
  tier := '1m';
  moved := jobs._fold_counters('1m', v_now - interval '24 hours', '5m', interval '5 minutes');
  return next;
  tier := '5m';
  moved := jobs._fold_counters('5m', v_now - interval '7 days', '1h', interval '1 hour');
  return next;
  tier := '1h';
  moved := jobs._fold_counters('1h', v_now - interval '30 days', null, null);
  return next;
end;
$$;

create type jobs.counter_row as (
  name text,
  tier text,
  bucket timestamptz,
  done bigint,
  retried bigint,
  failed bigint,
  dead bigint,
  duration_ms bigint
);

-- jobs.counters: one job name's counter history since `since`, every tier, oldest first.
-- Arguments: name (NULL: every name), since (NULL: an hour ago).
-- Answers one jobs.counter_row per (name, tier, bucket), shards summed. Locks nothing.
create function jobs.counters(name text default null, since timestamptz default null)
returns setof jobs.counter_row
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.counters');
  select c.name, c.tier, c.bucket, sum(c.done)::bigint, sum(c.retried)::bigint,
         sum(c.failed)::bigint, sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where (counters.name is null or c.name = counters.name)
     and c.bucket >= coalesce(counters.since, jobs._now() - interval '1 hour')
   group by c.name, c.tier, c.bucket
   order by c.bucket, c.name, c.tier
$$;

-- jobs.counter_totals: per job name, the totals since `since` (NULL: an hour ago).
-- A bucket is counted whole when it starts at or after `since`.
-- Answers (name, done, retried, failed, dead, duration_ms) ordered by name. Locks nothing.
create function jobs.counter_totals(since timestamptz default null)
returns table (name text, done bigint, retried bigint, failed bigint, dead bigint,
               duration_ms bigint)
language sql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
  select jobs._require(array['worker', 'operator'], 'jobs.counter_totals');
  select c.name, sum(c.done)::bigint, sum(c.retried)::bigint, sum(c.failed)::bigint,
         sum(c.dead)::bigint, sum(c.duration_ms)::bigint
    from jobs.counter_buckets c
   where c.bucket >= coalesce(counter_totals.since, jobs._now() - interval '1 hour')
   group by c.name
   order by c.name
$$;
