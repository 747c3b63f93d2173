-- 095_drain: an operator's "done by hand" (L148). A live job ends as done without running and
-- moves no counter; a running one's worker finds its attempt gone (its ack matches nothing); a
-- finished job is refused and left as it ended.
begin;
\ir fixtures/factory.sql
select plan(14);
set local durajobs.now = '2026-03-01 00:00:00+00';

create function jobs_test.counted()
returns bigint
language sql
stable
as $$
  select coalesce(sum(done + retried + failed + dead), 0)::bigint from jobs.counter_buckets
$$;

select jobs_test.enqueue(queue => 'dq', idempotency_key => 'd-ready') as ready_id \gset
select is(jobs.drain(:'ready_id'), true, 'a ready job drains');
select is((jobs_test.job(:'ready_id')).state, 'done', 'it is done');
select is((jobs_test.job(:'ready_id')).attempt, 0, 'no attempt of it ran');
select is((select count(*)::integer from jobs.jobs_live where id = :'ready_id'), 0,
          'it left the live table');
select is(jobs_test.counted(), 0::bigint, 'and no counter moved');

select jobs_test.enqueue(queue => 'dq', idempotency_key => 'd-running') as running_id \gset
create temporary table held on commit drop as
  select * from jobs_test.claim_one(queue => 'dq', worker_id => 'w-d');
select is(jobs.drain(:'running_id'), true, 'a running job drains');
select is(jobs.ack_v1(:'running_id', 'w-d', (select claim from held)), false,
          'its worker''s late ack matches nothing');
select is(jobs_test.counted(), 0::bigint, 'still no counter moved');
select is(jobs.heartbeat_v1(:'running_id', 'w-d', (select claim from held)), 'lost',
          'its next heartbeat answers that the lease is lost');

select throws_ok(format($$ select jobs.drain(%L) $$, :'ready_id'), 'JQ020',
                 format('X_JOB_NOT_DRAINABLE: job %s is done; only a live job can be drained',
                        :'ready_id'),
                 'a finished job is refused');
select is((jobs_test.job(:'ready_id')).finished_at, '2026-03-01 00:00:00+00'::timestamptz,
          'and left exactly as it ended');
select throws_ok($$ select jobs.drain(gen_random_uuid()) $$, 'JQ011', null,
                 'an unknown id is not found');
select jobs.grant_roles('dr_enq', 'dr_wrk', 'dr_opr') \g /dev/null
create role dr_app; grant dr_wrk to dr_app;
set local role dr_app;
select throws_ok(format($$ select jobs.drain(%L) $$, :'running_id'), 'JQ018', null,
                 'a worker role may not drain: it is the operator''s');
reset role;

-- the counters do move for an ack: what the tests above saw unmoved is the drain's doing
select jobs_test.enqueue(queue => 'dq2', idempotency_key => 'd-acked') as acked_id \gset
select jobs.ack_v1(c.id, 'w-d2', c.claim)
  from jobs_test.claim_one(queue => 'dq2', worker_id => 'w-d2') c \g /dev/null
select is(jobs_test.counted(), 1::bigint, 'an ack counts one');

select * from finish();
rollback;
