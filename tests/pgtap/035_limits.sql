-- 035_limits: jobs.limits lists each declared limit (per key when keyed) with what runs under
-- it, what waits and what it holds back; jobs.inspect_job says the same of one row.
begin;
\ir fixtures/factory.sql
select plan(9);

set local durajobs.now = '2026-01-01 00:00:00+00';

select is_empty($$select * from jobs.limits()$$, 'no limit declared: nothing listed');

select jobs.declare_job(name => 'pair', queue => 'q-pair', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 2) \g /dev/null
select jobs.declare_job(name => 'acct', queue => 'q-acct', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1,
                        concurrency_keyed => true, when_busy => 'wait') \g /dev/null
select jobs.enqueue(name => 'pair', input => '{}', idempotency_key => 'p' || n)
  from generate_series(1, 3) n \g /dev/null
update jobs.jobs set queue = 'q-pair' where name = 'pair';
select jobs.enqueue(name => 'acct', input => '{}', idempotency_key => k, queue => 'q-acct',
                    concurrency_key => ck, run_at => jobs._now() - make_interval(secs => n))
  from (values ('a1', 'a', 3), ('a2', 'a', 2), ('b1', 'b', 1)) v(k, ck, n) \g /dev/null
select jobs.enqueue(name => 'acct', input => '{}', idempotency_key => 'later', queue => 'q-acct',
                    concurrency_key => 'c', run_at => jobs._now() + interval '1 hour') \g /dev/null

select results_eq(
  $$select name, concurrency_key, concurrency, when_busy, running, waiting, held_back, holders
      from jobs.limits()$$,
  $$values ('acct', 'a', 1, 'wait', 0::bigint, 2::bigint, 0::bigint, '{}'::text[]),
           ('acct', 'b', 1, 'wait', 0::bigint, 1::bigint, 0::bigint, '{}'::text[]),
           ('acct', 'c', 1, 'wait', 0::bigint, 1::bigint, 0::bigint, '{}'::text[]),
           ('pair', null, 2, 'wait', 0::bigint, 3::bigint, 0::bigint, '{}'::text[])$$,
  'each limit, and each key of a keyed one, with its waiting rows');

select count(*) from jobs.claim_v1(queues => array['q-pair'], worker_id => 'w-p', batch_size => 5) \g /dev/null
select count(*) from jobs.claim_v1(queues => array['q-acct'], worker_id => 'w-a', batch_size => 5) \g /dev/null

select results_eq(
  $$select name, concurrency_key, running, waiting, held_back, holders from jobs.limits()$$,
  $$values ('acct', 'a', 1::bigint, 1::bigint, 1::bigint, '{w-a}'::text[]),
           ('acct', 'b', 1::bigint, 0::bigint, 0::bigint, '{w-a}'::text[]),
           ('acct', 'c', 0::bigint, 1::bigint, 0::bigint, '{}'::text[]),
           ('pair', null, 2::bigint, 1::bigint, 1::bigint, '{w-p}'::text[])$$,
  'a group at its limit holds back its due rows; a row not due yet is waiting, not held back');
select results_eq($$select name from jobs.limits(name => 'pair')$$, $$values ('pair')$$,
                  'limits(name) lists one job');

select is((jobs.inspect_job(id => j.id)) -> 'limit',
          '{"concurrency": 1, "keyed": true, "when_busy": "wait", "key": "a", "running": 1,
            "held_back": true}'::jsonb,
          'inspect_job says a waiting row is held back by its key''s limit')
  from jobs.jobs j where j.idempotency_key = 'a2';
select is((jobs.inspect_job(id => j.id)) -> 'limit' -> 'held_back', 'false'::jsonb,
          'a row not due yet is not held back')
  from jobs.jobs j where j.idempotency_key = 'later';
select is((jobs.inspect_job(id => j.id)) -> 'limit' -> 'held_back', 'false'::jsonb,
          'a running row is not held back')
  from jobs.jobs j where j.idempotency_key = 'a1';
select jobs.enqueue(name => 'plain', input => '{}', idempotency_key => 'plain-1') \g /dev/null
select is((jobs.inspect_job(id => j.id)) -> 'limit', 'null'::jsonb,
          'a job without a limit has none')
  from jobs.jobs j where j.idempotency_key = 'plain-1';
select is((select proconfig from pg_proc where oid = 'jobs.limits'::regproc),
          array['search_path=pg_catalog, pg_temp'], 'jobs.limits pins its search_path');

select * from finish();
rollback;
