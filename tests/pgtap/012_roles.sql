-- 012_roles: least privilege. PUBLIC can call nothing; jobs.grant_roles makes an enqueuer, a
-- worker and an operator role; each role may call its own functions and is refused the others
-- with X_PERMISSION_DENIED naming the role to grant; no role can touch a table but through the
-- functions (an operator may read). Before the roles, every function was PUBLIC's to call and
-- ran with the caller's table privileges.
begin;
\ir fixtures/factory.sql
select plan(105);
set local durajobs.now = '2026-03-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- on install: nothing for PUBLIC, every public function runs as the owner

select is((select count(*)::integer
             from pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and has_function_privilege('public', p.oid, 'execute')),
          0, 'PUBLIC may execute no function of schema jobs');
select is((select array_agg(p.proname order by p.proname)
             from pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and p.proname !~ '^_'
              and not p.prosecdef),
          null, 'every public function is security definer');
select is((select array_agg(p.proname order by p.proname)
             from pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and p.prosecdef
              and not coalesce('search_path=pg_catalog, pg_temp' = any(p.proconfig), false)),
          null, 'and every one of them pins search_path');
select is((select array_agg(p.proname order by p.proname)
             from pg_proc p
            where p.pronamespace = 'jobs'::regnamespace
              and p.proname ~ '^_'
              and p.prosecdef),
          null, 'no internal helper is security definer: they run inside the public ones');

-- ---------------------------------------------------------------------------------------------
-- jobs.grant_roles

select is((select string_agg(format('%s=%s:%s', kind, role_name, created), ' ')
             from jobs.grant_roles('t_enq', 't_wrk', 't_opr')),
          'enqueuer=t_enq:t worker=t_wrk:t operator=t_opr:t',
          'grant_roles makes the three roles');
select is((select string_agg(format('%s=%s', kind, role_name), ' ' order by kind) from jobs.roles),
          'enqueuer=t_enq operator=t_opr worker=t_wrk', 'and records them');
select is((select rolcanlogin from pg_roles where rolname = 't_wrk'), false, 'roles are NOLOGIN');
select ok(pg_has_role('t_wrk', 't_enq', 'usage') and pg_has_role('t_opr', 't_enq', 'usage'),
          'worker and operator roles can do what the enqueuer role can');
select ok(not pg_has_role('t_opr', 't_wrk', 'usage') and not pg_has_role('t_wrk', 't_opr', 'usage'),
          'the worker role is not an operator, nor the operator a worker');
select is((select string_agg(format('%s:%s', kind, created), ' ')
             from jobs.grant_roles('t_enq', 't_wrk', 't_opr')),
          'enqueuer:f worker:f operator:f', 'a second call adopts the roles it finds');

-- the application's logins
create role t_app;     grant t_enq to t_app;
create role t_runner;  grant t_wrk to t_runner;
create role t_admin;   grant t_opr to t_admin;
create role t_nobody;
-- the test's own helpers, for every role
grant usage on schema jobs_test to public;

select jobs_test.enqueue(queue => 'rq', idempotency_key => 'k-roles') as job_id \gset

-- ---------------------------------------------------------------------------------------------
-- the enqueuer

set local role t_app;
select lives_ok($$ select jobs.enqueue('r', '{}', 'k-app') $$, 'enqueuer: enqueue');
select lives_ok($$ select jobs.enqueue_many('[{"name": "r", "input": {}, "idempotency_key": "k-app2"}]') $$,
                'enqueuer: enqueue_many');
select lives_ok($$ select jobs.outbox_stage('r', '{}', 'k-app3') $$, 'enqueuer: outbox_stage');
select lives_ok($$ select jobs.publish_event('paid') $$, 'enqueuer: publish_event');
select lives_ok(format($$ select jobs.inspect_job(%L) $$, :'job_id'),
                'enqueuer: inspect_job of a job it knows the id of');
select lives_ok($$ select jobs.version() $$, 'enqueuer: version');
select throws_ok(
  $$ select jobs.claim_v1(array['rq'], 'w') $$, 'JQ018',
  'X_PERMISSION_DENIED: jobs.claim_v1: role t_app may not call it; it is for members of t_wrk',
  'enqueuer: claim_v1 is refused, naming the role that may');
select is(jobs_test.error_hint($$ select jobs.cancel(gen_random_uuid()) $$),
          'grant t_opr to t_app (as the owner of schema jobs), or call it as a role that has it',
          'the refusal''s fix names the role to grant and to whom');
select throws_ok(format($$ select jobs.%s $$, f.call), 'JQ018', null, 'enqueuer: refused ' || f.call)
  from (values
    ('ack_v1(gen_random_uuid(), ''w'', 1)'),
    ('nack_v1(gen_random_uuid(), ''w'', 1)'),
    ('heartbeat_v1(gen_random_uuid(), ''w'', 1)'),
    ('record_step_v1(gen_random_uuid(), ''w'', 1, ''s'', ''completed'')'),
    ('steps_v1(gen_random_uuid())'),
    ('worker_announce(''w'', ''h'', 1, array[''q''], 1)'),
    ('declare_job(''d'', ''q'', 3, 0, false, ''me'')'),
    ('cancel(gen_random_uuid())'),
    ('list_jobs()'),
    ('pause_queue(''rq'')'),
    ('set_limit(queue => ''rq'', concurrency => 1)'),
    ('queue_stats()'),
    ('horizon()'),
    ('counters()'),
    ('workers_live()'),
    ('purge()'),
    ('outbox_relay(''r1'')'),
    ('grant_roles()'),
    ('set_size_limit(''input'', 4096)'),
    ('use_test_clock()')
  ) as f(call);
-- the functions are the only way in
select throws_ok($$ select count(*) from jobs.jobs_live $$, '42501', null,
                 'enqueuer: no SELECT on jobs.jobs_live');
select throws_ok($$ select count(*) from jobs.jobs $$, '42501', null,
                 'enqueuer: no SELECT on the view jobs.jobs');
select throws_ok($$ insert into jobs.jobs_live (id, name, queue, input, idempotency_key, run_id,
                                                state, run_at, created_at, updated_at)
                    values (gen_random_uuid(), 'x', 'q', '{}', 'k', gen_random_uuid(),
                            'running', now(), '2000-01-01', now()) $$,
                 '42501', null, 'enqueuer: no INSERT on jobs.jobs_live');
select throws_ok($$ delete from jobs.jobs_live $$, '42501', null,
                 'enqueuer: no DELETE on jobs.jobs_live');
select throws_ok($$ update jobs.steps set output = '{}' $$, '42501', null,
                 'enqueuer: no UPDATE on jobs.steps');
reset role;

-- ---------------------------------------------------------------------------------------------
-- the worker

set local role t_runner;
select lives_ok($$ select jobs.declare_job('rj', 'rq', 3, 0, false, 'deploy') $$, 'worker: declare_job');
select lives_ok($$ select jobs.worker_announce('w-r', 'h', 1, array['rq'], 1) $$, 'worker: worker_announce');
create temporary table t_claimed on commit drop as
  select * from jobs.claim_v1(array['rq'], 'w-r');
select is((select count(*)::integer from t_claimed), 1, 'worker: claim_v1 claims');
select lives_ok(format($$ select jobs.record_step_v1(%L, 'w-r', %s, 's1', 'completed') $$,
                       (select id from t_claimed), (select claim from t_claimed)),
                'worker: record_step_v1');
select lives_ok(format($$ select jobs.steps_v1(%L) $$, (select run_id from t_claimed)),
                'worker: steps_v1');
select lives_ok(format($$ select jobs.heartbeat_v1(%L, 'w-r', %s) $$,
                       (select id from t_claimed), (select claim from t_claimed)),
                'worker: heartbeat_v1');
select lives_ok(format($$ select jobs.progress_v1(%L, 'w-r', %s, 1) $$,
                       (select id from t_claimed), (select claim from t_claimed)),
                'worker: progress_v1');
select is(jobs.ack_v1((select id from t_claimed), 'w-r', (select claim from t_claimed)), true,
          'worker: ack_v1');
select lives_ok($$ select jobs.enqueue('child', '{}', 'k-child') $$,
                'worker: enqueue (a worker role is an enqueuer too)');
select lives_ok($$ select jobs.outbox_relay('relay-r') $$, 'worker: outbox_relay');
select lives_ok($$ select jobs.scheduler_lead('node-1') $$, 'worker: scheduler_lead');
select lives_ok($$ select jobs.rollup_counters() $$, 'worker: rollup_counters');
select lives_ok($$ select jobs.purge() $$, 'worker: purge, which makes day partitions as the owner');
select lives_ok($$ select jobs.queue_stats() $$, 'worker: queue_stats');
select lives_ok($$ select * from jobs.horizon() $$, 'worker: horizon');
select lives_ok($$ select jobs.worker_forget('w-r') $$, 'worker: worker_forget');
select throws_ok(format($$ select jobs.%s $$, f.call), 'JQ018', null, 'worker: refused ' || f.call)
  from (values
    ('cancel(gen_random_uuid())'),
    ('requeue(gen_random_uuid())'),
    ('remove(gen_random_uuid())'),
    ('promote(gen_random_uuid())'),
    ('list_jobs()'),
    ('pause_queue(''rq'')'),
    ('resume_queue(''rq'')'),
    ('set_limit(queue => ''rq'', concurrency => 1)'),
    ('requeue_many(''dead'')')
  ) as f(call);
select throws_ok($$ update jobs.jobs_live set state = 'ready' $$, '42501', null,
                 'worker: no UPDATE on jobs.jobs_live');
select throws_ok($$ delete from jobs.steps $$, '42501', null, 'worker: no DELETE on jobs.steps');
reset role;

-- ---------------------------------------------------------------------------------------------
-- the operator

select jobs_test.enqueue(queue => 'rq', idempotency_key => 'k-op') as op_id \gset
set local role t_admin;
select lives_ok($$ select jobs.list_jobs() $$, 'operator: list_jobs');
select lives_ok(format($$ select jobs.inspect_job(%L) $$, :'op_id'), 'operator: inspect_job');
select lives_ok($$ select jobs.pause_queue('rq') $$, 'operator: pause_queue');
select lives_ok($$ select jobs.resume_queue('rq') $$, 'operator: resume_queue');
select lives_ok(format($$ select jobs.cancel(%L) $$, :'op_id'), 'operator: cancel');
select lives_ok(format($$ select jobs.requeue(%L) $$, :'op_id'), 'operator: requeue');
select lives_ok($$ select jobs.set_limit(queue => 'rq', concurrency => 5) $$, 'operator: set_limit');
select lives_ok($$ select jobs.clear_limit(queue => 'rq') $$, 'operator: clear_limit');
select lives_ok($$ select jobs.queue_depth() $$, 'operator: queue_depth');
select lives_ok($$ select jobs.counters() $$, 'operator: counters');
select lives_ok($$ select jobs.counter_totals() $$, 'operator: counter_totals');
select lives_ok($$ select jobs.workers_live() $$, 'operator: workers_live');
select lives_ok($$ select jobs.limits() $$, 'operator: limits');
select lives_ok($$ select jobs.task_fires() $$, 'operator: task_fires');
select lives_ok($$ select jobs.enqueue('by-hand', '{}', 'k-hand') $$,
                'operator: enqueue (an operator role is an enqueuer too)');
select ok((select count(*) from jobs.jobs) > 0, 'operator: may read the view jobs.jobs in psql');
select throws_ok(format($$ select jobs.%s $$, f.call), 'JQ018', null, 'operator: refused ' || f.call)
  from (values
    ('claim_v1(array[''rq''], ''w'')'),
    ('ack_v1(gen_random_uuid(), ''w'', 1)'),
    ('record_step_v1(gen_random_uuid(), ''w'', 1, ''s'', ''completed'')'),
    ('worker_announce(''w'', ''h'', 1, array[''q''], 1)'),
    ('declare_job(''d'', ''q'', 3, 0, false, ''me'')'),
    ('outbox_claim(''r1'')'),
    ('scheduler_lead(''node-2'')')
  ) as f(call);
select throws_ok($$ update jobs.jobs_live set priority = 0 $$, '42501', null,
                 'operator: reads, never writes a table directly');
select throws_ok($$ select jobs.grant_roles() $$, 'JQ018', null,
                 'operator: grant_roles is the owner''s');
reset role;

-- ---------------------------------------------------------------------------------------------
-- a role in none of them, and `set role` to a lesser role

set local role t_nobody;
select throws_ok($$ select jobs.enqueue('r', '{}', 'k-nobody') $$, '42501', null,
                 'a role outside the three cannot reach the schema at all');
reset role;
create role t_lesser; grant t_enq to t_lesser;
create role t_both; grant t_opr, t_lesser to t_both;
set local role t_both;
select lives_ok($$ select jobs.list_jobs() $$, 'a login with the operator role lists jobs');
set local role t_lesser;
select throws_ok($$ select jobs.list_jobs() $$, 'JQ018',
                 'X_PERMISSION_DENIED: jobs.list_jobs: role t_lesser may not call it; it is for members of t_opr',
                 'after set role to a lesser role, the lesser role is the caller');
reset role;

-- ---------------------------------------------------------------------------------------------
-- new names take over; the old roles keep nothing

select lives_ok($$ select jobs.grant_roles('t_enq2', 't_wrk2', 't_opr2') $$,
                'grant_roles with new names');
select is(has_function_privilege('t_enq', 'jobs.enqueue(text, jsonb, text, text, text, timestamptz, integer, integer, uuid, uuid, text, text, text, text, uuid)', 'execute'),
          false, 'the old enqueuer role lost EXECUTE');
select is(has_schema_privilege('t_opr', 'jobs', 'usage'), false, 'the old operator role lost USAGE');
select is(has_table_privilege('t_opr', 'jobs.jobs', 'select'), false,
          'the old operator role lost SELECT');
grant t_enq2 to t_app;
set local role t_app;
select throws_ok($$ select jobs.cancel(gen_random_uuid()) $$, 'JQ018',
                 'X_PERMISSION_DENIED: jobs.cancel: role t_app may not call it; it is for members of t_opr2',
                 'the checks read the new names');
reset role;
select throws_ok($$ select jobs.grant_roles('Bad Name') $$, 'JQ001', null,
                 'grant_roles refuses a name it would have to quote');
select throws_ok($$ select jobs.grant_roles('same', 'same', 'other') $$, 'JQ001', null,
                 'grant_roles refuses one role for two kinds');

select * from finish();
rollback;
