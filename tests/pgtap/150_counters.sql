-- 150_counters: the settle counters. ack, nack and the claim's burial add to the current
-- minute's bucket (UTC, 1-minute aligned) of their job name, in the settling statement, through
-- jobs._count_settled; jobs.rollup_counters folds past minutes' shards, then the tiers
-- (1m -> 5m after 24 h, 5m -> 1h after 7 days, 1h deleted after 30 days) without changing a
-- total; jobs.counters and jobs.counter_totals read them.
begin;
\ir fixtures/factory.sql
select plan(74);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- local helpers (in jobs_test, so the rollback removes them) ----------------------------------

-- one job name's counters summed over every tier, bucket and shard:
-- array[done, retried, failed, dead, duration_ms]
create function jobs_test.tally(name text)
returns bigint[]
language sql
stable
as $$
  select array[coalesce(sum(c.done), 0), coalesce(sum(c.retried), 0),
               coalesce(sum(c.failed), 0), coalesce(sum(c.dead), 0),
               coalesce(sum(c.duration_ms), 0)]::bigint[]
    from jobs.counter_buckets c
   where c.name = tally.name
$$;

-- how many counter rows a job name has
create function jobs_test.counter_rows(name text)
returns bigint
language sql
stable
as $$
  select count(*) from jobs.counter_buckets c where c.name = counter_rows.name
$$;

-- enqueue a job named `name` on its own queue and claim it now; answers the claimed row
create function jobs_test.running(
  name text,
  max_attempts integer default 20,
  worker_id text default 'w1'
)
returns jobs.claimed_job
language plpgsql
volatile
as $$
declare
  v_queue text := 'q-' || running.name || '-' || gen_random_uuid()::text;
  v_id uuid;
  v_claimed jobs.claimed_job;
begin
  v_id := jobs_test.enqueue(name => running.name, queue => v_queue,
                            max_attempts => running.max_attempts);
  v_claimed := jobs_test.claim_one(queue => v_queue, worker_id => running.worker_id);
  if v_claimed.id is distinct from v_id then
    raise exception 'jobs_test.running: claimed % instead of %', v_claimed.id, v_id;
  end if;
  return v_claimed;
end;
$$;

-- =============================================================================================
-- ack: done = 1, duration_ms = settle time - claimed_at, in the minute's bucket, this backend's
-- shard

set local durajobs.now = '2026-01-01 00:00:10+00';
select * from jobs_test.running('c-ack') \gset ack1_
set local durajobs.now = '2026-01-01 00:00:12.5+00';
select is(jobs.ack_v1(id => :'ack1_id', worker_id => 'w1', claim => :ack1_claim), true,
          'ack lands');
select is(jobs_test.tally('c-ack'), array[1, 0, 0, 0, 2500]::bigint[],
          'ack adds done 1 and duration_ms 2500 (acked 2.5 s after the claim)');
select results_eq(
  $$select tier, bucket, shard from jobs.counter_buckets where name = 'c-ack'$$,
  $$values ('1m', '2026-01-01 00:00:00+00'::timestamptz, (pg_backend_pid() % 64)::smallint)$$,
  'ack writes the 1m bucket of the settle minute, in this backend''s shard');

-- a second ack of the same name in the same minute adds to the same row
set local durajobs.now = '2026-01-01 00:00:20+00';
select * from jobs_test.running('c-ack') \gset ack2_
set local durajobs.now = '2026-01-01 00:00:59.999+00';
select ok(jobs.ack_v1(id => :'ack2_id', worker_id => 'w1', claim => :ack2_claim),
          'a second ack lands');
select is(jobs_test.tally('c-ack'), array[2, 0, 0, 0, 42499]::bigint[],
          'a second ack in the minute adds done 1 and its 39,999 ms');
select is(jobs_test.counter_rows('c-ack'), 1::bigint,
          'acks in the same minute share one counter row');

-- the next minute starts a new bucket
select * from jobs_test.running('c-ack') \gset ack3_
set local durajobs.now = '2026-01-01 00:01:00+00';
select ok(jobs.ack_v1(id => :'ack3_id', worker_id => 'w1', claim => :ack3_claim),
          'an ack at the next minute''s first instant lands');
select results_eq(
  $$select bucket, done, duration_ms from jobs.counter_buckets where name = 'c-ack'
     order by bucket$$,
  $$values ('2026-01-01 00:00:00+00'::timestamptz, 2::bigint, 42499::bigint),
           ('2026-01-01 00:01:00+00'::timestamptz, 1::bigint, 1::bigint)$$,
  'an ack at 00:01:00 counts in the 00:01 bucket, the one at 00:00:59.999 in the 00:00 one');

-- an ack that does not land adds nothing
set local durajobs.now = '2026-01-01 00:02:00+00';
select * from jobs_test.running('c-ack-miss') \gset miss_
select is(jobs.ack_v1(id => :'miss_id', worker_id => 'w1', claim => :miss_claim + 1), false,
          'ack with the wrong claim token answers false');
select is(jobs.ack_v1(id => :'miss_id', worker_id => 'w2', claim => :miss_claim), false,
          'ack with the wrong worker answers false');
select is(jobs_test.counter_rows('c-ack-miss'), 0::bigint, 'an ack that missed adds nothing');
select is(jobs.nack_v1(id => :'miss_id', worker_id => 'w1', claim => :miss_claim + 1,
                       next_state => 'dead'), false,
          'nack with the wrong claim token answers false');
select is(jobs_test.counter_rows('c-ack-miss'), 0::bigint, 'a nack that missed adds nothing');
select jobs.cancel(id => :'miss_id') \g /dev/null
select is(jobs.ack_v1(id => :'miss_id', worker_id => 'w1', claim => :miss_claim), false,
          'ack of a cancelled row answers false');
select is(jobs.nack_v1(id => :'miss_id', worker_id => 'w1', claim => :miss_claim,
                       next_state => 'failed'), false,
          'nack of a cancelled row answers false');
select is(jobs_test.counter_rows('c-ack-miss'), 0::bigint,
          'settles of a cancelled row add nothing');

-- =============================================================================================
-- nack: where the row lands decides the counter

set local durajobs.now = '2026-01-01 00:10:00+00';

-- counted 'ready': retried
select * from jobs_test.running('c-retry') \gset nr_
set local durajobs.now = '2026-01-01 00:10:01+00';
select ok(jobs.nack_v1(id => :'nr_id', worker_id => 'w1', claim => :nr_claim,
                       next_state => 'ready', delay => '1 minute', error => 'boom'),
          'a counted nack to ready lands');
select is(jobs_test.tally('c-retry'), array[0, 1, 0, 0, 1000]::bigint[],
          'a counted nack to ready adds retried 1 and its duration');

-- counted 'ready' on the final attempt: dead, not retried
select * from jobs_test.running('c-final', max_attempts => 1) \gset nf_
set local durajobs.now = '2026-01-01 00:10:03+00';
select ok(jobs.nack_v1(id => :'nf_id', worker_id => 'w1', claim => :nf_claim,
                       next_state => 'ready', error => 'boom'),
          'a counted nack to ready on the final attempt lands');
select is((jobs_test.job(:'nf_id')).state, 'dead', '... and the row is dead');
select is(jobs_test.tally('c-final'), array[0, 0, 0, 1, 2000]::bigint[],
          'a counted nack to ready on the final attempt adds dead 1, not retried');

-- 'dead' and 'failed'
select * from jobs_test.running('c-dead') \gset nx_
select ok(jobs.nack_v1(id => :'nx_id', worker_id => 'w1', claim => :nx_claim,
                       next_state => 'dead'), 'a nack to dead lands');
select is(jobs_test.tally('c-dead'), array[0, 0, 0, 1, 0]::bigint[], 'a nack to dead adds dead 1');
select * from jobs_test.running('c-failed') \gset nfl_
select ok(jobs.nack_v1(id => :'nfl_id', worker_id => 'w1', claim => :nfl_claim,
                       next_state => 'failed'), 'a nack to failed lands');
select is(jobs_test.tally('c-failed'), array[0, 0, 1, 0, 0]::bigint[],
          'a nack to failed adds failed 1');

-- an uncounted nack (a shed, a park, an interrupted attempt) adds nothing
select * from jobs_test.running('c-shed') \gset ns_
select ok(jobs.nack_v1(id => :'ns_id', worker_id => 'w1', claim => :ns_claim,
                       next_state => 'ready', counts_as_attempt => false),
          'an uncounted nack to ready lands');
select is(jobs_test.counter_rows('c-shed'), 0::bigint, 'an uncounted nack to ready adds nothing');
select * from jobs_test.running('c-shed-final', max_attempts => 1) \gset nsf_
select ok(jobs.nack_v1(id => :'nsf_id', worker_id => 'w1', claim => :nsf_claim,
                       next_state => 'ready', counts_as_attempt => false),
          'an uncounted nack to ready on the final attempt lands');
select is(jobs_test.counter_rows('c-shed-final'), 0::bigint,
          'an uncounted nack to ready on the final attempt adds nothing');
select * from jobs_test.running('c-park') \gset np_
select ok(jobs.nack_v1(id => :'np_id', worker_id => 'w1', claim => :np_claim,
                       next_state => 'suspended', delay => '1 hour',
                       counts_as_attempt => false),
          'an uncounted nack to suspended lands');
select is(jobs_test.counter_rows('c-park'), 0::bigint,
          'an uncounted nack to suspended adds nothing');
select * from jobs_test.running('c-susp') \gset nsu_
select ok(jobs.nack_v1(id => :'nsu_id', worker_id => 'w1', claim => :nsu_claim,
                       next_state => 'suspended', delay => '1 hour'),
          'a counted nack to suspended lands');
select is(jobs_test.counter_rows('c-susp'), 0::bigint, 'a counted nack to suspended adds nothing');

-- nack_many_v1 settles through nack_v1, so it counts the same way
select * from jobs_test.running('c-nm') \gset nm1_
select * from jobs_test.running('c-nm') \gset nm2_
select results_eq(
  format($$select landed from jobs.nack_many_v1(worker_id => 'w1', nacks => %L)$$,
         jsonb_build_array(
           jsonb_build_object('id', :'nm1_id', 'claim', :nm1_claim, 'next_state', 'dead'),
           jsonb_build_object('id', :'nm2_id', 'claim', :nm2_claim))),
  $$values (true), (true)$$,
  'nack_many_v1 lands both nacks');
select is(jobs_test.tally('c-nm'), array[0, 1, 0, 1, 0]::bigint[],
          'nack_many_v1 adds dead 1 and retried 1');

-- =============================================================================================
-- ack_many_v1: each landed row counted once; the per-id answer unchanged

set local durajobs.now = '2026-01-01 00:20:00+00';
select * from jobs_test.running('c-many', worker_id => 'w-many') \gset ma_
select * from jobs_test.running('c-many', worker_id => 'w-many') \gset mb_
select * from jobs_test.running('c-many', worker_id => 'w-many') \gset mc_
select * from jobs_test.running('c-many-other', worker_id => 'w-many') \gset md_
set local durajobs.now = '2026-01-01 00:20:03+00';
select results_eq(
  format($$select id, landed
             from jobs.ack_many_v1(worker_id => 'w-many', ids => array[%L, %L, %L, %L, %L]::uuid[],
                                   claims => array[%s, %s, %s, %s, %s]::bigint[])$$,
         :'ma_id', :'mb_id', :'mc_id', :'md_id', :'ma_id',
         :ma_claim, :mb_claim, :mc_claim + 1, :md_claim, :ma_claim),
  format($$values (%L::uuid, true), (%L::uuid, true), (%L::uuid, false), (%L::uuid, true),
                  (%L::uuid, true)$$,
         :'ma_id', :'mb_id', :'mc_id', :'md_id', :'ma_id'),
  'ack_many_v1 answers landed per id in input order (a repeated id answers like its first)');
select is(jobs_test.tally('c-many'), array[2, 0, 0, 0, 6000]::bigint[],
          'ack_many_v1 counts each landed row once: done 2, 3 s each (the repeat and the miss '
            || 'add nothing)');
select is(jobs_test.tally('c-many-other'), array[1, 0, 0, 0, 3000]::bigint[],
          'ack_many_v1 counts per job name');
select is((jobs_test.job(:'mc_id')).state, 'running', 'the row whose claim missed is running');
select results_eq(
  format($$select landed from jobs.ack_many_v1(worker_id => 'w-many', ids => array[%L]::uuid[],
                                              claims => array[%s]::bigint[])$$,
         :'ma_id', :ma_claim),
  $$values (false)$$,
  'ack_many_v1 of an already acked row answers false');
select is(jobs_test.tally('c-many'), array[2, 0, 0, 0, 6000]::bigint[],
          'an ack_many_v1 that lands nothing adds nothing');

-- =============================================================================================
-- the claim's burial: a running row whose lease lapsed at attempt >= max_attempts

set local durajobs.now = '2026-01-01 00:30:00+00';
select jobs_test.enqueue(name => 'c-bury', queue => 'q-bury', max_attempts => 1) as bury_id \gset
select jobs_test.claim_one(queue => 'q-bury', visibility => '30 seconds') \g /dev/null
set local durajobs.now = '2026-01-01 00:30:31+00';
select results_eq(
  $$select id, state from jobs.claim_v1(queues => array['q-bury'], worker_id => 'w2')$$,
  format($$values (%L::uuid, 'dead')$$, :'bury_id'),
  'the claim buries the lapsed final attempt as dead');
select is(jobs_test.tally('c-bury'), array[0, 0, 0, 1, 31000]::bigint[],
          'a burial adds dead 1 and the attempt''s duration (claim to burial)');
select results_eq(
  $$select bucket from jobs.counter_buckets where name = 'c-bury'$$,
  $$values ('2026-01-01 00:30:00+00'::timestamptz)$$,
  'a burial counts in the burying minute''s bucket');

select jobs_test.enqueue(name => 'c-bury-drop', queue => 'q-bury-drop', max_attempts => 1)
  as bury_drop_id \gset
select jobs_test.claim_one(queue => 'q-bury-drop', visibility => '10 seconds') \g /dev/null
set local durajobs.now = '2026-01-01 00:30:45+00';
select results_eq(
  $$select state from jobs.claim_v1(queues => array['q-bury-drop'], worker_id => 'w2',
                                    drop_exhausted => array['c-bury-drop'])$$,
  $$values ('failed')$$,
  'the claim buries a drop_exhausted name as failed');
select is(jobs_test.tally('c-bury-drop'), array[0, 0, 1, 0, 14000]::bigint[],
          'a burial of a drop_exhausted name adds failed 1, not dead');

-- a re-take (attempts left) is a new attempt, not a settle: it adds nothing
select jobs_test.enqueue(name => 'c-retake', queue => 'q-retake', max_attempts => 2)
  as retake_id \gset
select jobs_test.claim_one(queue => 'q-retake') \g /dev/null
select jobs_test.lapse(:'retake_id') \g /dev/null
select is((jobs_test.claim_one(queue => 'q-retake')).attempt, 2, 'the lapsed row is re-taken');
select is(jobs_test.counter_rows('c-retake'), 0::bigint, 'a re-take adds nothing');

-- =============================================================================================
-- buckets are UTC-aligned whatever the session time zone

set local timezone = 'Asia/Kolkata';
set local durajobs.now = '2026-01-01 05:37:10+05:30';
select * from jobs_test.running('c-tz') \gset tz_
set local durajobs.now = '2026-01-01 05:37:42+05:30';
select ok(jobs.ack_v1(id => :'tz_id', worker_id => 'w1', claim => :tz_claim),
          'an ack lands in Asia/Kolkata');
select is((select bucket from jobs.counter_buckets where name = 'c-tz'),
          '2026-01-01 00:07:00+00'::timestamptz,
          'in Asia/Kolkata the ack counts in the 1-minute bucket 00:07 UTC');
select is(jobs_test.tally('c-tz'), array[1, 0, 0, 0, 32000]::bigint[],
          'in Asia/Kolkata the duration is the same 32 s');
select is(jobs._bucket(interval '5 minutes', '2026-01-01 05:37:42+05:30'),
          '2026-01-01 00:05:00+00'::timestamptz,
          '_bucket: a 5-minute bucket is UTC-aligned in Asia/Kolkata');
select is(jobs._bucket(interval '1 hour', '2026-01-01 05:37:42+05:30'),
          '2026-01-01 00:00:00+00'::timestamptz,
          '_bucket: an hour bucket starts on the UTC hour, not the Kolkata one (23:30 UTC)');

-- =============================================================================================
-- rollup_counters. Rows are inserted directly: shards other than 0 stand for other backends.
-- The time zone is still Asia/Kolkata, so the hour tier must still be UTC-aligned.

delete from jobs.counter_buckets;
set local durajobs.now = '2026-02-01 12:00:30+00';

insert into jobs.counter_buckets
       (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
values
  -- past minutes' shards fold into shard 0; the current minute's (12:00) stay
  ('1m', '2026-02-01 11:59:00+00', 'r-shard', 0, 1, 0, 0, 0, 10),
  ('1m', '2026-02-01 11:59:00+00', 'r-shard', 3, 2, 0, 0, 0, 20),
  ('1m', '2026-02-01 11:59:00+00', 'r-shard', 7, 4, 0, 0, 0, 40),
  ('1m', '2026-02-01 11:58:00+00', 'r-shard', 5, 0, 1, 0, 0, 5),
  ('1m', '2026-02-01 12:00:00+00', 'r-shard', 2, 1, 0, 0, 0, 1),
  ('1m', '2026-02-01 12:00:00+00', 'r-shard', 9, 1, 0, 0, 0, 1),
  -- 1m older than 24 h (before 2026-01-31 12:00:30) fold into 5m, adding to a 5m row there
  ('1m', '2026-01-31 11:01:00+00', 'r-1m', 0, 1, 0, 0, 0, 100),
  ('1m', '2026-01-31 11:03:00+00', 'r-1m', 4, 0, 0, 2, 0, 200),
  ('1m', '2026-01-31 11:06:00+00', 'r-1m', 0, 0, 0, 0, 1, 300),
  ('5m', '2026-01-31 11:00:00+00', 'r-1m', 0, 10, 0, 0, 0, 1000),
  ('1m', '2026-01-31 12:01:00+00', 'r-1m', 0, 1, 0, 0, 0, 7),
  -- 5m older than 7 days (before 2026-01-25 12:00:30) fold into 1h
  ('5m', '2026-01-24 12:05:00+00', 'r-5m', 0, 1, 0, 0, 0, 10),
  ('5m', '2026-01-24 12:50:00+00', 'r-5m', 0, 0, 1, 0, 0, 20),
  ('5m', '2026-01-25 13:00:00+00', 'r-5m', 0, 1, 0, 0, 0, 30),
  -- 1h younger than 30 days (after 2026-01-02 12:00:30) stays
  ('1h', '2026-01-02 13:00:00+00', 'r-1h', 0, 5, 0, 0, 0, 50),
  -- an old 1m shard row cascades through every tier in one call
  ('1m', '2026-01-20 10:07:00+00', 'r-cascade', 2, 1, 0, 0, 0, 9);

select coalesce(array_agg(t::text order by t.name), '{}') as totals_before
  from jobs.counter_totals(since => '2000-01-01 00:00:00+00') t \gset

select results_eq(
  $$select tier, moved from jobs.rollup_counters()$$,
  $$values ('1m shards', 5::bigint), ('1m', 4::bigint), ('5m', 3::bigint), ('1h', 0::bigint)$$,
  'rollup_counters answers the rows each step moved');
select results_eq(
  $$select tier, bucket, shard, done, retried, failed, dead, duration_ms
      from jobs.counter_buckets where name = 'r-shard' order by bucket, shard$$,
  $$values ('1m', '2026-02-01 11:58:00+00'::timestamptz, 0::smallint, 0::bigint, 1::bigint,
            0::bigint, 0::bigint, 5::bigint),
           ('1m', '2026-02-01 11:59:00+00'::timestamptz, 0::smallint, 7::bigint, 0::bigint,
            0::bigint, 0::bigint, 70::bigint),
           ('1m', '2026-02-01 12:00:00+00'::timestamptz, 2::smallint, 1::bigint, 0::bigint,
            0::bigint, 0::bigint, 1::bigint),
           ('1m', '2026-02-01 12:00:00+00'::timestamptz, 9::smallint, 1::bigint, 0::bigint,
            0::bigint, 0::bigint, 1::bigint)$$,
  'past minutes'' shards fold into shard 0 (added to it); the current minute''s shards stay');
select results_eq(
  $$select tier, bucket, shard, done, retried, failed, dead, duration_ms
      from jobs.counter_buckets where name = 'r-1m' order by tier, bucket$$,
  $$values ('1m', '2026-01-31 12:01:00+00'::timestamptz, 0::smallint, 1::bigint, 0::bigint,
            0::bigint, 0::bigint, 7::bigint),
           ('5m', '2026-01-31 11:00:00+00'::timestamptz, 0::smallint, 11::bigint, 0::bigint,
            2::bigint, 0::bigint, 1300::bigint),
           ('5m', '2026-01-31 11:05:00+00'::timestamptz, 0::smallint, 0::bigint, 0::bigint,
            0::bigint, 1::bigint, 300::bigint)$$,
  '1m rows older than 24 h fold into their 5m buckets (added to one there); a younger one stays');
select results_eq(
  $$select tier, bucket, shard, done, retried, failed, dead, duration_ms
      from jobs.counter_buckets where name = 'r-5m' order by tier, bucket$$,
  $$values ('1h', '2026-01-24 12:00:00+00'::timestamptz, 0::smallint, 1::bigint, 1::bigint,
            0::bigint, 0::bigint, 30::bigint),
           ('5m', '2026-01-25 13:00:00+00'::timestamptz, 0::smallint, 1::bigint, 0::bigint,
            0::bigint, 0::bigint, 30::bigint)$$,
  '5m rows older than 7 days fold into the UTC hour bucket; a younger one stays');
select results_eq(
  $$select tier, bucket, done from jobs.counter_buckets where name = 'r-1h'$$,
  $$values ('1h', '2026-01-02 13:00:00+00'::timestamptz, 5::bigint)$$,
  'a 1h row younger than 30 days stays');
select results_eq(
  $$select tier, bucket, shard, done, duration_ms
      from jobs.counter_buckets where name = 'r-cascade'$$,
  $$values ('1h', '2026-01-20 10:00:00+00'::timestamptz, 0::smallint, 1::bigint, 9::bigint)$$,
  'an 8-day-old 1m shard row cascades into its 1h bucket in one rollup');
select is((select coalesce(array_agg(t::text order by t.name), '{}')
             from jobs.counter_totals(since => '2000-01-01 00:00:00+00') t),
          :'totals_before'::text[], 'a rollup changes no total');

-- a second rollup moves nothing
select coalesce(array_agg(c::text order by c.tier, c.bucket, c.name, c.shard), '{}')
       as rows_after_first
  from jobs.counter_buckets c \gset
select results_eq(
  $$select tier, moved from jobs.rollup_counters()$$,
  $$values ('1m shards', 0::bigint), ('1m', 0::bigint), ('5m', 0::bigint), ('1h', 0::bigint)$$,
  'a second rollup moves nothing');
select is((select coalesce(array_agg(c::text order by c.tier, c.bucket, c.name, c.shard), '{}')
             from jobs.counter_buckets c),
          :'rows_after_first'::text[], 'a second rollup leaves every row as it was');
select is((select coalesce(array_agg(t::text order by t.name), '{}')
             from jobs.counter_totals(since => '2000-01-01 00:00:00+00') t),
          :'totals_before'::text[], 'a second rollup changes no total');

-- 1h rows older than 30 days are deleted
insert into jobs.counter_buckets (tier, bucket, name, shard, done)
values ('1h', '2026-01-02 12:00:00+00', 'r-old', 0, 3),
       ('1h', '2025-12-01 00:00:00+00', 'r-old', 0, 4);
select results_eq(
  $$select tier, moved from jobs.rollup_counters()$$,
  $$values ('1m shards', 0::bigint), ('1m', 0::bigint), ('5m', 0::bigint), ('1h', 2::bigint)$$,
  'rollup moves the two 1h rows older than 30 days out of the 1h tier');
select is(jobs_test.counter_rows('r-old'), 0::bigint, '1h rows older than 30 days are deleted');
select is((select coalesce(array_agg(c::text order by c.tier, c.bucket, c.name, c.shard), '{}')
             from jobs.counter_buckets c),
          :'rows_after_first'::text[], 'deleting the old 1h rows touches no other row');

-- settles after a rollup add to the current minute again
set local timezone to default;
set local durajobs.now = '2026-02-01 12:00:40+00';
select * from jobs_test.running('r-shard') \gset late_
select jobs.ack_v1(id => :'late_id', worker_id => 'w1', claim => :late_claim) \g /dev/null
select is((select sum(done) from jobs.counter_buckets
            where name = 'r-shard' and bucket = '2026-02-01 12:00:00+00'),
          3::numeric, 'an ack after a rollup adds to the current minute''s counters');

-- =============================================================================================
-- counters(name, since): filters by name and since, sums shards; counter_totals

delete from jobs.counter_buckets;
set local durajobs.now = '2026-02-01 12:00:30+00';
insert into jobs.counter_buckets
       (tier, bucket, name, shard, done, retried, failed, dead, duration_ms)
values
  ('1m', '2026-02-01 11:50:00+00', 'k-a', 1, 1, 0, 0, 0, 10),
  ('1m', '2026-02-01 11:50:00+00', 'k-a', 2, 2, 1, 0, 0, 20),
  ('5m', '2026-02-01 11:30:00+00', 'k-a', 0, 0, 0, 1, 0, 5),
  ('1m', '2026-02-01 10:59:00+00', 'k-a', 0, 100, 0, 0, 0, 1000),
  ('1m', '2026-02-01 11:50:00+00', 'k-b', 0, 0, 0, 0, 1, 3);

select results_eq(
  $$select * from jobs.counters(name => 'k-a')$$,
  $$values ('k-a', '5m', '2026-02-01 11:30:00+00'::timestamptz, 0::bigint, 0::bigint, 1::bigint,
            0::bigint, 5::bigint),
           ('k-a', '1m', '2026-02-01 11:50:00+00'::timestamptz, 3::bigint, 1::bigint, 0::bigint,
            0::bigint, 30::bigint)$$,
  'counters(name) answers that name''s buckets of the last hour, shards summed, oldest first');
select results_eq(
  $$select name, tier, bucket, done
      from jobs.counters(name => 'k-a', since => '2026-02-01 10:00:00+00')$$,
  $$values ('k-a', '1m', '2026-02-01 10:59:00+00'::timestamptz, 100::bigint),
           ('k-a', '5m', '2026-02-01 11:30:00+00'::timestamptz, 0::bigint),
           ('k-a', '1m', '2026-02-01 11:50:00+00'::timestamptz, 3::bigint)$$,
  'counters(name, since) reaches back to since');
select results_eq(
  $$select name, tier, bucket, done
      from jobs.counters(name => 'k-a', since => '2026-02-01 11:50:00+00')$$,
  $$values ('k-a', '1m', '2026-02-01 11:50:00+00'::timestamptz, 3::bigint)$$,
  'counters(name, since) keeps a bucket starting exactly at since and drops older ones');
select results_eq(
  $$select name, tier, bucket, dead from jobs.counters()$$,
  $$values ('k-a', '5m', '2026-02-01 11:30:00+00'::timestamptz, 0::bigint),
           ('k-a', '1m', '2026-02-01 11:50:00+00'::timestamptz, 0::bigint),
           ('k-b', '1m', '2026-02-01 11:50:00+00'::timestamptz, 1::bigint)$$,
  'counters() answers every name, ordered by bucket, then name');
select is_empty($$select * from jobs.counters(name => 'k-none')$$,
                'counters of a name with no counts answers no rows');
select results_eq(
  $$select * from jobs.counter_totals()$$,
  $$values ('k-a', 3::bigint, 1::bigint, 1::bigint, 0::bigint, 35::bigint),
           ('k-b', 0::bigint, 0::bigint, 0::bigint, 1::bigint, 3::bigint)$$,
  'counter_totals() sums the last hour per name');
select results_eq(
  $$select name, done from jobs.counter_totals(since => '2026-02-01 00:00:00+00')$$,
  $$values ('k-a', 103::bigint), ('k-b', 0::bigint)$$,
  'counter_totals(since) sums every bucket since since');

select * from finish();
rollback;
