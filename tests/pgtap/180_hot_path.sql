-- 180_hot_path: the claim, the batch ack and the enqueue's wake touch the rows they need, not
-- the table. With statistics taken while no row was running, the planner once read every live
-- row through a partial index to find a batch's rows (ack_many_v1) or hashed a scan of the whole
-- table to update them (claim_v1); since revision 0007 both go by primary key. The wake's slot
-- test read every waiting row of its queue through the claim index, so each enqueue cost grew
-- with the backlog; since revision 0010 it reads the slot's rows only.
begin;
\ir fixtures/factory.sql
select plan(12);

-- 20,000 waiting rows, and statistics that say none is running
select jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'hot', 'queue', 'hot', 'input', '{}'::jsonb,
                                       'idempotency_key', 'k' || g))
     from generate_series(1, 20000) g));
analyze jobs.jobs;

select jobs_test.mark();
create temporary table taken as
  select id, claim from jobs.claim_v2(array['hot'], 'w1', batch_size => 500);
select is((select count(*) from taken), 500::bigint, 'the claim hands out 500 rows');
select cmp_ok(jobs_test.read_since_mark(), '<', 5000::bigint,
              'a claim of 500 rows reads far fewer than the 20,000 rows of the table');

select jobs_test.mark();
select is(
  (select count(*) filter (where landed)
     from jobs.ack_many_v1('w1', (select array_agg(id) from (select id from taken limit 20) t),
                           (select array_agg(claim) from (select claim from taken limit 20) t))),
  20::bigint, 'ack_many_v1 settles the 20 rows it is given');
select cmp_ok(jobs_test.read_since_mark(), '<', 200::bigint,
              'an ack of 20 rows reads about 20 index entries, not every live row');

-- the fence is judged on the locked row: a wrong claim or a wrong worker lands nothing
select is(
  (select array_agg(landed order by ord)
     from (select landed, row_number() over () as ord
             from jobs.ack_many_v1('w1',
                    (select array_agg(id) from (select id from taken offset 20 limit 2) t),
                    array[0::bigint, 0::bigint])) a),
  array[false, false], 'a stale claim lands nothing');
select is(
  (select array_agg(landed)
     from jobs.ack_many_v1('w2',
            (select array_agg(id) from (select id from taken offset 22 limit 2) t),
            (select array_agg(claim) from (select claim from taken offset 22 limit 2) t))),
  array[false, false], 'another worker''s ack lands nothing');

-- a pickup from idle is one claim: re-planning its statements on every call (the plan cache's
-- choice for them) cost about 0.5 ms of it
select ok(
  (select 'plan_cache_mode=force_generic_plan' = any(p.proconfig)
     from pg_proc p
    where p.oid = 'jobs._claim(text, text[], text, integer, interval, text[], boolean)'::regprocedure),
  'jobs._claim (behind claim_v1 and claim_v3) keeps generic plans');

-- the wake's slot test next to a backlog of 5,000 waiting rows made after the statistics were
-- taken (so the planner believes the queue is empty), all in one slot
set local durajobs.now = '2026-01-01 00:00:00+00';
select count(*) from jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'hot', 'queue', 'hot-wake', 'input', '{}'::jsonb,
                                       'idempotency_key', 'w' || g))
     from generate_series(1, 5000) g)) \g /dev/null
select jobs_test.mark();
select is(jobs._announce('hot-wake', '2026-01-01 01:00:00+00'), true,
          '_announce: a slot with no row of its own wakes the queue, backlog or not');
select cmp_ok(jobs_test.read_since_mark(), '<', 50::bigint,
              '_announce reads the rows of its 250 ms slot, not the 5,000 waiting before it');
select is(jobs._announce('hot-wake', '2026-01-01 00:00:00.1+00'), false,
          '_announce: the backlog''s own slot is already announced');
-- the transaction that made the 5,000 rows announces once more (one enqueue after another in a
-- long transaction): its own rows share its created_at and the index bounds step over them
select jobs_test.mark();
select is(jobs._announce('hot-wake', '2026-01-01 00:00:00+00'), true,
          '_announce: the caller''s own rows of the slot do not silence it');
select cmp_ok(jobs_test.read_since_mark(), '<', 50::bigint,
              '_announce steps over the caller''s own 5,000 rows by the index bounds');

select * from finish();
rollback;
