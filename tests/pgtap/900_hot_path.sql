-- 900_hot_path: the claim, the batch ack and the enqueue's wake touch the rows they need, not
-- the table. With statistics taken while no row was running, the planner can read every live
-- row through a partial index to find a batch's rows (ack_many_v1) or hash a scan of the whole
-- table to update them (the claim); both go by primary key. The wake's slot test reads the
-- slot's rows only, not every waiting row of its queue through the claim index, so an enqueue's
-- cost does not grow with the backlog.
begin;
\ir fixtures/factory.sql
select plan(21);

-- 20,000 waiting rows, and statistics that say none is running
select jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'hot', 'queue', 'hot', 'input', '{}'::jsonb,
                                       'idempotency_key', 'k' || g))
     from generate_series(1, 20000) g));
analyze jobs.jobs_live, jobs.jobs_history;

select jobs_test.mark();
create temporary table taken as
  select id, claim from jobs.claim_v1(array['hot'], 'w1', batch_size => 500);
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
-- choice for them) costs about 0.5 ms of it
select ok(
  (select 'plan_cache_mode=force_generic_plan' = any(p.proconfig)
     from pg_proc p
    where p.oid = 'jobs.claim_v1(text[], text, integer, interval, text[], boolean)'::regprocedure),
  'jobs.claim_v1 keeps generic plans');

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

-- the tuples and index entries a statement returned from `t` and its indexes, this transaction
create function pg_temp.read_of(t regclass)
returns bigint
language sql
as $$
  select pg_stat_get_xact_tuples_returned(t)
         + coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0)
    from pg_index i
   where i.indrelid = t
$$;
create temporary table read_mark (t regclass primary key, n bigint);
create function pg_temp.mark(t regclass)
returns void
language sql
as $$
  insert into read_mark values (t, pg_temp.read_of(t))
  on conflict (t) do update set n = excluded.n;
$$;
create function pg_temp.read_since(t regclass)
returns bigint
language sql
as $$
  select pg_temp.read_of(t) - n from read_mark where read_mark.t = read_since.t
$$;

-- a batch that dedupes one request (its key held by a waiting row) finds that row by its key,
-- and the ids of the others by primary key: the table holds 25,000 rows
select pg_temp.mark('jobs.jobs');
select is(
  (select count(*) filter (where deduped)
     from jobs.enqueue_many(
       (select jsonb_agg(jsonb_build_object('name', 'hot', 'queue', 'hot', 'input', '{}'::jsonb,
                                            'idempotency_key', 'fresh-' || g))
          from generate_series(1, 200) g)
       || '[{"name": "hot", "queue": "hot-wake", "input": {}, "idempotency_key": "w1"}]'::jsonb)),
  1::bigint, 'enqueue_many: the request whose key a live row holds is deduped');
select cmp_ok(pg_temp.read_since('jobs.jobs'), '<', 2000::bigint,
              'enqueue_many: a batch of 201 that dedupes one reads a few hundred entries, '
              'not the 25,000 rows of the table');

-- the claim asks each row's run for steps by the steps' primary key, also on statistics taken
-- while jobs.steps held nothing, now that it holds 20,000 records of other runs
analyze jobs.steps;
insert into jobs.steps (run_id, name, status, output, attempts, started_at, updated_at, finished_at)
select r.run_id, 'step-' || s, 'completed', '{}'::jsonb, 1, jobs._now(), jobs._now(), jobs._now()
  from (select gen_random_uuid() as run_id from generate_series(1, 4000)) r,
       generate_series(1, 5) s;
select pg_temp.mark('jobs.steps');
select is((select count(*) from jobs.claim_v1(array['hot'], 'w3', batch_size => 10,
                                              recover_lapsed => false)),
          10::bigint, 'the claim without recovery hands out 10 rows');
select cmp_ok(pg_temp.read_since('jobs.steps'), '<', 50::bigint,
              'the claim reads no step of other runs to answer has_steps');
select pg_temp.mark('jobs.steps');
select is((select count(*) from jobs.claim_v1(array['hot'], 'w3', batch_size => 10)),
          10::bigint, 'the claim with recovery hands out 10 rows');
select cmp_ok(pg_temp.read_since('jobs.steps'), '<', 50::bigint,
              'the claim with recovery reads no step of other runs either');

-- a remove asks whether other rows share the run only when the run has steps
select id as done_id from jobs.jobs where state = 'done' limit 1 \gset
select pg_temp.mark('jobs.jobs');
select ok(jobs.remove(:'done_id'), 'remove removes a finished row');
select cmp_ok(pg_temp.read_since('jobs.jobs'), '<', 50::bigint,
              'remove of a run without steps reads the row, not the table');

-- a staged enqueue's wake test reads the unpublished rows in order, not the 5,000 published
-- rows that come before 1,000 waiting ones in the table
insert into jobs.outbox (id, run_id, staged_at, request, published_at)
select gen_random_uuid(), gen_random_uuid(), jobs._now(), '{}'::jsonb, jobs._now()
  from generate_series(1, 5000);
insert into jobs.outbox (id, run_id, staged_at, request)
select gen_random_uuid(), gen_random_uuid(), jobs._now(), '{}'::jsonb
  from generate_series(1, 1000);
analyze jobs.outbox;
select pg_temp.mark('jobs.outbox');
select jobs.outbox_stage(name => 'staged', input => '{}', idempotency_key => 'staged-1')
  \g /dev/null
select cmp_ok(pg_temp.read_since('jobs.outbox'), '<', 50::bigint,
              'outbox_stage reads the unpublished rows, not the published history');

select * from finish();
rollback;
