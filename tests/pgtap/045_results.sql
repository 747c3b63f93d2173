-- 045_results: what a finished job returned, or why it did not. jobs.ack_results_v1 stores each
-- row's result with the ack that ends it (an oversized one fails its row instead); jobs.result and
-- jobs.results answer state, result, error and code by id, within the caller's tenant; a requeue
-- forgets the result; jobs.ack_v1 and jobs.ack_many_v1 store none.
begin;
\ir fixtures/factory.sql
select plan(60);

set local durajobs.now = '2026-05-01 00:00:00+00';

-- a job enqueued on a queue of its own and claimed by `worker_id`: the claimed row
create function jobs_test.running(queue text, worker_id text default 'w1',
                                  tenant_id text default null)
returns jobs.claimed_job
language plpgsql
volatile
as $$
declare
  v_id uuid := jobs_test.enqueue(queue => running.queue, tenant_id => running.tenant_id);
  v_claimed jobs.claimed_job := jobs_test.claim_one(queue => running.queue,
                                                    worker_id => running.worker_id);
begin
  if v_claimed.id is distinct from v_id then
    raise exception 'jobs_test.running: could not claim job % of queue %', v_id, running.queue;
  end if;
  return v_claimed;
end;
$$;

-- ---------------------------------------------------------------------------------------------
-- ack_results_v1: one row, its result stored with the ack that ends it

select * from jobs_test.running('q-one') \gset one_
select results_eq(
  format($$select id, landed from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L]::uuid[],
                                                      claims => array[%s]::bigint[],
                                                      results => array['{"total": 3}']::jsonb[])$$,
         :'one_id', :one_claim),
  format($$values (%L::uuid, true)$$, :'one_id'),
  'ack_results_v1 of a held row answers it landed');
select results_eq(
  format($$select state, result, finished_at from jobs.jobs where id = %L$$, :'one_id'),
  $$values ('done', '{"total": 3}'::jsonb, '2026-05-01 00:00:00+00'::timestamptz)$$,
  'the row is done, finished now, with the result the body returned');

-- ---------------------------------------------------------------------------------------------
-- a batch mixing rows with and without results, answered in input order

select * from jobs_test.running('q-mix-a') \gset mix_a_
select * from jobs_test.running('q-mix-b') \gset mix_b_
select * from jobs_test.running('q-mix-c') \gset mix_c_
select * from jobs_test.running('q-mix-d') \gset mix_d_
-- input order c, a, d, b: not the order of the ids
select results_eq(
  format($$select id, landed
             from jobs.ack_results_v1(worker_id => 'w1',
                                      ids => array[%L, %L, %L, %L]::uuid[],
                                      claims => array[%s, %s, %s, %s]::bigint[],
                                      results => array['[1, 2, 3]', '{"a": 1}', '"text"', null]::jsonb[])$$,
         :'mix_c_id', :'mix_a_id', :'mix_d_id', :'mix_b_id',
         :mix_c_claim, :mix_a_claim, :mix_d_claim, :mix_b_claim),
  format($$values (%L::uuid, true), (%L::uuid, true), (%L::uuid, true), (%L::uuid, true)$$,
         :'mix_c_id', :'mix_a_id', :'mix_d_id', :'mix_b_id'),
  'a mixed batch answers every row landed, in input order');
select is((jobs_test.job(:'mix_a_id')).result, '{"a": 1}'::jsonb,
          'an object result is stored on its own row');
select is((jobs_test.job(:'mix_c_id')).result, '[1, 2, 3]'::jsonb,
          'an array result is stored on its own row');
select is((jobs_test.job(:'mix_d_id')).result, '"text"'::jsonb,
          'a scalar result is stored on its own row');
select is((jobs_test.job(:'mix_b_id')).result, null::jsonb,
          'a NULL result stores none');
select is((select array_agg(distinct state) from jobs.jobs
            where id in (:'mix_a_id', :'mix_b_id', :'mix_c_id', :'mix_d_id')),
          array['done'], 'every row of the mixed batch is done');


-- inspect_job shows the result as an operator may see it; jobs.result answers it whole
select * from jobs_test.running('q-secret') \gset sec_
select jobs.ack_results_v1(worker_id => 'w1', ids => array[:'sec_id']::uuid[],
                           claims => array[:sec_claim]::bigint[],
                           results => array['{"api_token": "t-1", "n": 1}']::jsonb[]) \g /dev/null
select is(jobs.inspect_job(:'sec_id') -> 'job' -> 'result', '{"api_token": "[redacted]", "n": 1}'::jsonb,
          'inspect_job hides a secret''s value in the result');
select is((jobs.result(:'sec_id')).result, '{"api_token": "t-1", "n": 1}'::jsonb,
          'jobs.result answers the stored result whole');
select is(jobs.inspect_job(:'mix_d_id') -> 'job' -> 'result', '"text"'::jsonb,
          'inspect_job shows a scalar result as it is');
select is(jobs.inspect_job(:'mix_b_id') -> 'job' -> 'result', 'null'::jsonb,
          'inspect_job shows no result as JSON null');

-- ---------------------------------------------------------------------------------------------
-- a stale claim lands nothing and stores nothing

select * from jobs_test.running('q-stale') \gset st1_
select jobs_test.lapse(:'st1_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-stale', worker_id => 'w1') \gset st2_
select * from jobs_test.running('q-stale-mate') \gset sm_
select results_eq(
  format($$select id, landed
             from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L, %L]::uuid[],
                                      claims => array[%s, %s]::bigint[],
                                      results => array['{"stale": true}', '{"mate": true}']::jsonb[])$$,
         :'st1_id', :'sm_id', :st1_claim, :sm_claim),
  format($$values (%L::uuid, false), (%L::uuid, true)$$, :'st1_id', :'sm_id'),
  'a stale claim answers false, its batch neighbour true');
select results_eq(
  format($$select state, claims, result from jobs.jobs where id = %L$$, :'st1_id'),
  format($$values ('running', %s::bigint, null::jsonb)$$, :st2_claim),
  'the stale ack leaves the row running under its new claim, with no result');
select is((jobs_test.job(:'sm_id')).result, '{"mate": true}'::jsonb,
          'the neighbour''s result is stored');
select is((select landed from jobs.ack_results_v1(worker_id => 'w-other', ids => array[:'st1_id']::uuid[],
                                                  claims => array[:st2_claim]::bigint[],
                                                  results => array['{}']::jsonb[])),
          false, 'another worker''s ack_results_v1 answers false');
select is((jobs_test.job(:'st1_id')).state, 'running', 'and leaves the row running');

-- ---------------------------------------------------------------------------------------------
-- an oversized result fails its row; its neighbour is acked as usual

select jobs.set_size_limit('step_output', 2048) \g /dev/null
select * from jobs_test.running('q-big') \gset big_
select * from jobs_test.running('q-big-mate') \gset bm_
select * from jobs_test.running('q-fits') \gset fit_
select results_eq(
  format($$select id, landed
             from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L, %L, %L]::uuid[],
                                      claims => array[%s, %s, %s]::bigint[],
                                      results => array[jsonb_build_object('blob', repeat('x', 3000)),
                                                       '{"small": true}'::jsonb,
                                                       jsonb_build_object('blob', repeat('y', 1500))])$$,
         :'big_id', :'bm_id', :'fit_id', :big_claim, :bm_claim, :fit_claim),
  format($$values (%L::uuid, true), (%L::uuid, true), (%L::uuid, true)$$,
         :'big_id', :'bm_id', :'fit_id'),
  'an oversized result answers landed = true (the attempt ended), as do its neighbours');
select results_eq(
  format($$select state, last_error_code, result from jobs.jobs where id = %L$$, :'big_id'),
  $$values ('failed', 'X_JOB_RESULT_INVALID', null::jsonb)$$,
  'the oversized row ends failed with X_JOB_RESULT_INVALID, its result not stored');
select matches((jobs_test.job(:'big_id')).last_error,
               '^X_JOB_RESULT_INVALID: the result is [0-9]+ bytes, over the step_output limit of 2048$',
               'its last_error gives the sizes');
select results_eq(
  format($$select state, result from jobs.jobs where id = %L$$, :'bm_id'),
  $$values ('done', '{"small": true}'::jsonb)$$,
  'the oversized row''s batch neighbour is done with its result');
select is((jobs_test.job(:'fit_id')).result, jsonb_build_object('blob', repeat('y', 1500)),
          'a result over 1 KiB but under the limit is stored');
select is((jobs.result(:'big_id')).error_code, 'X_JOB_RESULT_INVALID',
          'jobs.result tells the oversized row''s code');
-- an oversized result under a stale claim fails nothing
select * from jobs_test.running('q-big-stale') \gset bs1_
select jobs_test.lapse(:'bs1_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-big-stale', worker_id => 'w1') \gset bs2_
select is((select landed from jobs.ack_results_v1(worker_id => 'w1', ids => array[:'bs1_id']::uuid[],
                                                  claims => array[:bs1_claim]::bigint[],
                                                  results => array[jsonb_build_object('blob', repeat('x', 3000))])),
          false, 'an oversized result under a stale claim answers false');
select is((jobs_test.job(:'bs1_id')).state, 'running',
          'and leaves the row running under its new claim');

-- ---------------------------------------------------------------------------------------------
-- argument errors raise X_ARGUMENT_INVALID (JQ001) and ack nothing

select * from jobs_test.running('q-args') \gset arg_
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L]::uuid[],
                                             claims => array[%s]::bigint[], results => null)$$,
         :'arg_id', :arg_claim),
  'JQ001', null, 'ack_results_v1 with results NULL raises JQ001');
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L]::uuid[],
                                             claims => array[%s]::bigint[],
                                             results => array['{}', '{}']::jsonb[])$$,
         :'arg_id', :arg_claim),
  'JQ001', null, 'ack_results_v1 with more results than ids raises JQ001');
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L, %L]::uuid[],
                                             claims => array[%s, 1]::bigint[],
                                             results => array['{}']::jsonb[])$$,
         :'arg_id', gen_random_uuid(), :arg_claim),
  'JQ001', null, 'ack_results_v1 with fewer results than ids raises JQ001');
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L]::uuid[],
                                             claims => array[%s]::bigint[],
                                             results => '{}'::jsonb[])$$,
         :'arg_id', :arg_claim),
  'JQ001', null, 'ack_results_v1 with an empty results array for one id raises JQ001');
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => 'w1', ids => array[%L]::uuid[],
                                             claims => array[%s, 2]::bigint[],
                                             results => array['{}']::jsonb[])$$,
         :'arg_id', :arg_claim),
  'JQ001', null, 'ack_results_v1 with ids and claims of different lengths raises JQ001');
select throws_ok(
  format($$select * from jobs.ack_results_v1(worker_id => '', ids => array[%L]::uuid[],
                                             claims => array[%s]::bigint[],
                                             results => array['{}']::jsonb[])$$,
         :'arg_id', :arg_claim),
  'JQ001', null, 'ack_results_v1 with an empty worker_id raises JQ001');
select is((jobs_test.job(:'arg_id')).state, 'running', 'the refused calls acked nothing');

-- a batch naming one row twice ends it once, as jobs.ack_many_v1 does
select * from jobs_test.running('q-twice-many') \gset twm_
select is((select count(*)::integer
             from jobs.ack_many_v1(worker_id => 'w1', ids => array[:'twm_id', :'twm_id']::uuid[],
                                   claims => array[:twm_claim, :twm_claim]::bigint[])),
          2, 'ack_many_v1 naming one row twice answers one line per input');
select is((select count(*)::integer from jobs.jobs where id = :'twm_id'), 1,
          'ack_many_v1 naming one row twice leaves one row with that id');
select * from jobs_test.running('q-twice') \gset tw_
select is((select count(*)::integer
             from jobs.ack_results_v1(worker_id => 'w1', ids => array[:'tw_id', :'tw_id']::uuid[],
                                      claims => array[:tw_claim, :tw_claim]::bigint[],
                                      results => array['{"n": 1}', '{"n": 2}']::jsonb[])),
          2, 'a batch naming one row twice answers one line per input');
select is((select count(*)::integer from jobs.jobs where id = :'tw_id'), 1,
          'a batch naming one row twice leaves one row with that id');

-- ---------------------------------------------------------------------------------------------
-- jobs.result: a live, a done, a dead and a cancelled job

-- live, after a failed attempt: its last error is not an outcome yet
select jobs_test.enqueue(queue => 'q-live') as live_id \gset
select (jobs_test.claim_one(queue => 'q-live')).claim as live_claim \gset
select jobs.nack_v1(id => :'live_id', worker_id => 'w1', claim => :live_claim, next_state => 'ready',
                    delay => '1 minute', error => 'first try failed', error_code => 'E_TRY') \g /dev/null
select results_eq(
  format($$select id, state, result, error, error_code, finished_at from jobs.result(%L)$$, :'live_id'),
  format($$values (%L::uuid, 'ready', null::jsonb, null::text, null::text, null::timestamptz)$$,
         :'live_id'),
  'a live job answers its state with no result, error or code (not an earlier attempt''s error)');

select * from jobs_test.running('q-running') \gset run_
select is((jobs.result(:'run_id')).state, 'running', 'a running job answers running');

select results_eq(
  format($$select state, result, error, error_code, finished_at from jobs.result(%L)$$, :'one_id'),
  $$values ('done', '{"total": 3}'::jsonb, null::text, null::text,
            '2026-05-01 00:00:00+00'::timestamptz)$$,
  'a done job answers its result, finished_at, and no error');

select * from jobs_test.running('q-dead') \gset dead_
select jobs.nack_v1(id => :'dead_id', worker_id => 'w1', claim => :dead_claim, next_state => 'dead',
                    error => 'boom', error_code => 'E_BOOM') \g /dev/null
select results_eq(
  format($$select state, result, error, error_code from jobs.result(%L)$$, :'dead_id'),
  $$values ('dead', null::jsonb, 'boom', 'E_BOOM')$$,
  'a dead job answers its last error and code, no result');

select jobs_test.enqueue(queue => 'q-cancelled') as cxl_id \gset
select jobs.cancel(id => :'cxl_id', reason => 'not wanted') \g /dev/null
select results_eq(
  format($$select state, result, error, error_code from jobs.result(%L)$$, :'cxl_id'),
  $$values ('cancelled', null::jsonb, 'cancelled: not wanted', 'X_JOB_CANCELLED')$$,
  'a cancelled job answers the cancel''s error and X_JOB_CANCELLED');

select throws_ok(format($$select jobs.result(%L)$$, gen_random_uuid()), 'JQ011', null,
                 'jobs.result of an unknown id raises X_JOB_NOT_FOUND (JQ011)');
select throws_ok($$select jobs.result(null)$$, 'JQ001', null,
                 'jobs.result of a NULL id raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- jobs.results: only the ids that name a job

select set_eq(
  format($$select id, state, result from jobs.results(array[%L, %L, %L, %L]::uuid[])$$,
         :'one_id', :'dead_id', gen_random_uuid(), :'live_id'),
  format($$values (%L::uuid, 'done', '{"total": 3}'::jsonb), (%L::uuid, 'dead', null::jsonb),
                  (%L::uuid, 'ready', null::jsonb)$$, :'one_id', :'dead_id', :'live_id'),
  'jobs.results answers the existing ids alone, each with its outcome');
select is_empty($$select * from jobs.results(array[gen_random_uuid()])$$,
                'jobs.results of an unknown id answers no row');
select is_empty($$select * from jobs.results('{}'::uuid[])$$,
                'jobs.results of no ids answers no row');
select throws_ok($$select * from jobs.results(null)$$, 'JQ001', null,
                 'jobs.results of NULL raises JQ001');
select throws_ok($$select * from jobs.results(array(select gen_random_uuid() from generate_series(1, 10001)))$$,
                 'JQ001', null, 'jobs.results of more than 10,000 ids raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- a requeued done job has no result again; ack_v1 and ack_many_v1 store none

select jobs.requeue(:'one_id') \g /dev/null
select results_eq(
  format($$select state, result from jobs.jobs where id = %L$$, :'one_id'),
  $$values ('ready', null::jsonb)$$,
  'a requeued done job is ready with result NULL');
select results_eq(
  format($$select state, result from jobs.result(%L)$$, :'one_id'),
  $$values ('ready', null::jsonb)$$,
  'and jobs.result answers it live, with no result');

select * from jobs_test.running('q-ack1') \gset ack1_
select ok(jobs.ack_v1(id => :'ack1_id', worker_id => 'w1', claim => :ack1_claim), 'ack_v1 lands');
select results_eq(
  format($$select state, result from jobs.jobs where id = %L$$, :'ack1_id'),
  $$values ('done', null::jsonb)$$,
  'ack_v1 stores no result');

select * from jobs_test.running('q-many-a') \gset ma_
select * from jobs_test.running('q-many-b') \gset mb_
select is((select array_agg(landed)
             from jobs.ack_many_v1(worker_id => 'w1', ids => array[:'ma_id', :'mb_id']::uuid[],
                                   claims => array[:ma_claim, :mb_claim]::bigint[])),
          array[true, true], 'ack_many_v1 lands both');
select results_eq(
  format($$select state, result from jobs.jobs where id in (%L, %L)$$, :'ma_id', :'mb_id'),
  $$values ('done', null::jsonb), ('done', null::jsonb)$$,
  'ack_many_v1 stores no result');

-- ---------------------------------------------------------------------------------------------
-- tenants: a bound session reads its own tenant's outcomes alone

select jobs_test.done_job(tenant_id => 'acme') as acme_done \gset
select jobs_test.done_job(tenant_id => 'globex') as globex_done \gset
select is((select count(*)::integer
             from jobs.results(array[:'acme_done', :'globex_done']::uuid[], tenant_id => 'globex')),
          1, 'an unbound caller naming a tenant reads that tenant''s outcomes alone');
select is((select id from jobs.results(array[:'acme_done', :'globex_done']::uuid[], tenant_id => 'globex')),
          :'globex_done'::uuid, 'namely the one of that tenant');

select jobs.grant_roles('r45_enq', 'r45_wrk', 'r45_opr') \g /dev/null
create role r45_tenant_a;
create role r45_app_a;
grant r45_tenant_a, r45_enq to r45_app_a;
select jobs.bind_tenant('r45_tenant_a', 'acme') \g /dev/null

set local role r45_app_a;
select is((select array_agg(id)
             from jobs.results(array[:'acme_done', :'globex_done', :'dead_id']::uuid[])),
          array[:'acme_done'::uuid], 'a session bound to a tenant reads its own tenant''s outcome alone');
select results_eq(
  format($$select state from jobs.result(%L)$$, :'acme_done'),
  $$values ('done')$$,
  'a bound session reads its own job''s outcome with jobs.result');
select throws_ok(format($$select jobs.result(%L)$$, :'globex_done'), 'JQ011', null,
                 'another tenant''s job is no job to jobs.result');
select throws_ok(format($$select * from jobs.results(array[%L]::uuid[], tenant_id => 'globex')$$,
                        :'globex_done'),
                 'JQ019', null, 'a bound session naming another tenant raises X_JOB_TENANT_MISMATCH');
reset role;
select jobs.unbind_tenant('r45_tenant_a') \g /dev/null

select * from finish();
rollback;
