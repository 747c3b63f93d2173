-- 014_tenants: two tenants that cannot reach each other. A login of tenant A (bound through
-- jobs.bind_tenant) enqueues, stages and publishes for A alone; it can neither see nor touch a
-- job, step, outbox row or event of B through any function or in psql; fleet-wide functions
-- refuse it. For every session, a run belongs to its jobs' tenant. Before: run_id was accepted
-- for any tenant (A read and wrote B's steps), the id_taken refusal named B's job and key, and
-- the operator functions took no tenant.
begin;
\ir fixtures/factory.sql
select plan(72);
set local durajobs.now = '2026-03-01 00:00:00+00';

select jobs.grant_roles('x_enq', 'x_wrk', 'x_opr') \g /dev/null
create role x_tenant_a;
create role x_tenant_b;
create role app_a; grant x_tenant_a, x_enq, x_opr to app_a;
create role app_b; grant x_tenant_b, x_enq, x_opr to app_b;
create role runner; grant x_wrk to runner;
grant usage on schema jobs_test to public;

-- ---------------------------------------------------------------------------------------------
-- binding

select is(jobs.bind_tenant('x_tenant_a', 'acme'), null, 'bind_tenant answers the previous tenant');
select is(jobs.bind_tenant('x_tenant_b', 'globex'), null, 'a second tenant is bound');
select throws_ok($$ select jobs.bind_tenant('x_wrk', 'acme') $$, 'JQ001', null,
                 'a durajobs role is never bound');
select throws_ok($$ select jobs.bind_tenant('postgres', 'acme') $$, 'JQ001', null,
                 'nor a superuser');
select throws_ok($$ select jobs.bind_tenant('no_such_role', 'acme') $$, 'JQ001', null,
                 'nor a role that does not exist');
select is(jobs.bound_tenant(), null, 'the owner is bound to no tenant');
set local role app_a;
select is(jobs.bound_tenant(), 'acme', 'a member of a bound role acts for its tenant');
select throws_ok($$ select jobs.bind_tenant('x_tenant_a', 'globex') $$, 'JQ018', null,
                 'only the owner binds');
reset role;
set local role runner;
select is(jobs.bound_tenant(), null, 'a worker''s login is bound to no tenant');
reset role;

-- B's work, made by B
set local role app_b;
select id as b_job from jobs.enqueue('report', '{"secret": "b-only"}', 'b-key') \gset
reset role;
select jobs_test.enqueue(name => 'other', tenant_id => 'globex', idempotency_key => 'b2') as b_job2 \gset
select is((jobs_test.job(:'b_job')).tenant_id, 'globex', 'B''s job is B''s');

-- ---------------------------------------------------------------------------------------------
-- enqueue, stage and publish act for the bound tenant

set local role app_a;
select id as a_job from jobs.enqueue('report', '{"n": 1}', 'a-key') \gset
select throws_ok(
  $$ select jobs.enqueue('report', '{}', 'a-key-2', tenant_id => 'globex') $$, 'JQ019',
  'X_JOB_TENANT_MISMATCH: jobs.enqueue: tenant_id names a tenant other than the one this session is bound to',
  'A cannot enqueue for B');
select lives_ok($$ select jobs.enqueue('report', '{}', 'a-key-3', tenant_id => 'acme') $$,
                'A may name its own tenant');
select throws_ok(
  $$ select jobs.enqueue_many('[{"name": "m", "input": {}, "idempotency_key": "m1"},
                                {"name": "m", "input": {}, "idempotency_key": "m2", "tenant_id": "globex"}]') $$,
  'JQ019', null, 'enqueue_many refuses a request naming B');
select lives_ok(
  $$ select jobs.enqueue_many('[{"name": "m", "input": {}, "idempotency_key": "m3"}]') $$,
  'enqueue_many takes the bound tenant');
select lives_ok($$ select jobs.outbox_stage('staged', '{}', 's1') $$, 'A stages');
select throws_ok($$ select jobs.outbox_stage('staged', '{}', 's2', tenant_id => 'globex') $$,
                 'JQ019', null, 'A cannot stage for B');
-- a dedupe probe with B's name and key makes A's own job; it does not answer B's id
select isnt((select id from jobs.enqueue('report', '{}', 'b-key')), :'b_job'::uuid,
            'B''s key, probed by A, dedupes to nothing of B''s');
reset role;
select is((jobs_test.job(:'a_job')).tenant_id, 'acme', 'A''s job is A''s');
select is((select count(*)::integer from jobs.jobs where name = 'm'), 1,
          'the refused batch wrote nothing');
select is((select count(*)::integer from jobs.jobs where tenant_id = 'globex'), 2,
          'nothing was written for B by A');
select is((select request ->> 'tenant_id' from jobs.outbox where request ->> 'name' = 'staged'),
          'acme', 'the staged request is A''s');

-- ---------------------------------------------------------------------------------------------
-- a run is its tenant's, for every session

select throws_ok(
  format($$ select jobs.enqueue('steal', '{}', 'st1', tenant_id => 'acme', run_id => %L) $$,
         :'b_job'),
  'JQ019', 'X_JOB_TENANT_MISMATCH: jobs.enqueue: run_id names a run of another tenant',
  'even the owner cannot put an acme job on B''s run');
select throws_ok(
  format($$ select jobs.enqueue('steal', '{}', 'st2', run_id => %L) $$, :'b_job'),
  'JQ019', null, 'nor a tenantless job');
select throws_ok(
  format($$ select jobs.enqueue_many(jsonb_build_array(jsonb_build_object(
              'name', 'steal', 'input', '{}'::jsonb, 'idempotency_key', 'st3',
              'tenant_id', 'acme', 'run_id', %L))) $$, :'b_job'),
  'JQ019', 'X_JOB_TENANT_MISMATCH: jobs.enqueue_many: requests[1].run_id names a run of another tenant',
  'enqueue_many refuses it, naming the request');
select throws_ok(
  $$ select jobs.enqueue_many('[{"name": "r", "input": {}, "idempotency_key": "r1", "tenant_id": "acme", "id": "01950000-0000-7000-8000-0000000000aa"},
                                {"name": "r", "input": {}, "idempotency_key": "r2", "tenant_id": "globex", "run_id": "01950000-0000-7000-8000-0000000000aa"}]') $$,
  'JQ019', null, 'and within one batch');
select throws_ok(
  format($$ select jobs.outbox_stage('steal', '{}', 'st4', tenant_id => 'acme', run_id => %L) $$,
         :'b_job'),
  'JQ019', null, 'a stage refuses it at once, so no poison row reaches the relay');
select lives_ok(
  format($$ select jobs.enqueue('continue', '{}', 'c1', tenant_id => 'globex', run_id => %L) $$,
         :'b_job'),
  'B''s own job continues B''s run');
select is((select count(*)::integer from jobs.jobs where name = 'steal'), 0,
          'no stealing job was written');

-- a run outlives its first job: once that job is purged, its id is free, and naming it as a
-- job's own id (no run_id) names the run, whose other jobs are B's
select id as b_first from jobs.enqueue('first', '{}', 'b-first', tenant_id => 'globex') \gset
select jobs.enqueue('second', '{}', 'b-second', tenant_id => 'globex', run_id => :'b_first')
  \g /dev/null
delete from jobs.jobs_live where id = :'b_first';
select throws_ok(
  format($$ select jobs.enqueue('steal', '{}', 'st5', tenant_id => 'acme', id => %L) $$,
         :'b_first'),
  'JQ019', 'X_JOB_TENANT_MISMATCH: jobs.enqueue: id names a run of another tenant',
  'a freed id of B''s run cannot start an acme job on that run');
select throws_ok(
  format($$ select jobs.enqueue_many(jsonb_build_array(jsonb_build_object(
              'name', 'steal', 'input', '{}'::jsonb, 'idempotency_key', 'st6',
              'tenant_id', 'acme', 'id', %L))) $$, :'b_first'),
  'JQ019', null, 'nor in enqueue_many');
select is((select count(*)::integer from jobs.jobs where name = 'steal'), 0,
          'still no stealing job');
select lives_ok(
  format($$ select jobs.enqueue('again', '{}', 'b-again', tenant_id => 'globex', id => %L) $$,
         :'b_first'),
  'B may name its own run''s freed id');

-- the id_taken refusal tells nothing of the other job
select throws_ok(
  format($$ select jobs.enqueue('mine', '{}', 'mine-1', id => %L) $$, :'b_job'),
  'JQ004', format('X_JOB_DUPLICATE: id %s already names another job; an id is never reused', :'b_job'),
  'a taken id is refused without B''s name or key');

-- ---------------------------------------------------------------------------------------------
-- the operator functions, bound: A's rows alone, B's answered as no job

-- B's run gets a step
create temporary table b_claim on commit drop as
  select * from jobs.claim_v1(array['default'], 'w-b') where tenant_id = 'globex';
select jobs.record_step_v1(c.id, 'w-b', c.claim, 'secret-step', 'completed', '{"token": "b"}')
  from b_claim c \g /dev/null
select run_id as b_run from b_claim \gset

set local role app_a;
select is((select array_agg(distinct tenant_id) from jobs.list_jobs()), array['acme'],
          'list_jobs answers A''s rows alone');
select throws_ok($$ select jobs.list_jobs(tenant_id => 'globex') $$, 'JQ019', null,
                 'list_jobs refuses to be pointed at B');
select throws_ok(format($$ select jobs.inspect_job(%L) $$, :'b_job'), 'JQ011', null,
                 'inspect_job: B''s job is no job');
select lives_ok(format($$ select jobs.inspect_job(%L) $$, :'a_job'), 'inspect_job: A''s is');
select throws_ok(format($$ select jobs.cancel(%L) $$, :'b_job2'), 'JQ013',
                 format('X_JOB_NOT_CANCELLABLE: no job has id %s', :'b_job2'),
                 'cancel: B''s job is no job');
select throws_ok(format($$ select jobs.requeue(%L) $$, :'b_job'), 'JQ011', null,
                 'requeue: B''s job is no job');
select throws_ok(format($$ select jobs.remove(%L) $$, :'b_job2'), 'JQ011', null,
                 'remove: B''s job is no job');
select throws_ok(format($$ select jobs.promote(%L) $$, :'b_job2'), 'JQ011', null,
                 'promote: B''s job is no job');
select is((select count(*)::integer from jobs.steps_v1(:'b_run')), 0,
          'steps_v1: B''s run has no steps for A');
select is((select (jobs.requeue_many('dead')).affected), 0, 'requeue_many: none of B''s');
select count(*)::integer as a_ready from jobs.jobs where state = 'ready' \gset
select is((select (jobs.remove_many('ready')).affected), :a_ready,
          'remove_many removes A''s ready rows alone');
-- psql: the policies hold A's reads to A's rows
select is((select count(*)::integer from jobs.jobs where tenant_id = 'globex'), 0,
          'jobs.jobs: B''s rows are invisible to A');
select is((select count(*)::integer from jobs.jobs_live where tenant_id = 'globex'), 0,
          'jobs.jobs_live: B''s rows are invisible');
select is((select count(*)::integer from jobs.steps), 0, 'jobs.steps: B''s steps are invisible');
select is((select count(*)::integer from jobs.outbox), 1, 'jobs.outbox: A''s row alone');
-- the fleet-wide functions refuse a bound session
select throws_ok(format($$ select jobs.%s $$, f.call), 'JQ018', null, 'bound: refused ' || f.call)
  from (values ('queue_stats()'), ('queue_depth()'), ('pause_queue(''default'')'),
               ('purge()'), ('workers_live()'), ('set_limit(queue => ''q'', concurrency => 1)'),
               ('counters()'), ('horizon()')) as f(call);
reset role;
select is((jobs_test.job(:'b_job2')).state, 'ready', 'B''s job is untouched');
select is((select count(*)::integer from jobs.steps where name = 'secret-step'), 1,
          'B''s step is untouched');

-- B sees its own
set local role app_b;
select is((select count(*)::integer from jobs.steps_v1(:'b_run')), 1,
          'B reads its own run''s steps');
select ok((select count(*) from jobs.list_jobs()) > 0, 'B lists its own jobs');
reset role;

-- ---------------------------------------------------------------------------------------------
-- events: an event for a tenant wakes and is found by that tenant's runs alone

set local role app_a;
select jobs.publish_event('paid', '{"by": "a"}', correlation_key => 'inv-1') \g /dev/null
select throws_ok($$ select jobs.publish_event('paid', tenant_id => 'globex') $$, 'JQ019', null,
                 'A cannot publish for B');
reset role;
select is((select tenant_id from jobs.events where name = 'paid'), 'acme',
          'A''s event is A''s');
select is((jobs.find_event('paid', 'inv-1', tenant_id => 'globex')).found, false,
          'B''s run does not find A''s event');
select is((jobs.find_event('paid', 'inv-1', tenant_id => 'acme')).found, true,
          'A''s run does');
select jobs.publish_event('broadcast') \g /dev/null
select is((jobs.find_event('broadcast', tenant_id => 'globex')).found, true,
          'an event published for no tenant is found by every run');
set local role app_b;
select is((select count(*)::integer from jobs.events where name = 'paid'), 0,
          'jobs.events: A''s event is invisible to B');
reset role;

-- ---------------------------------------------------------------------------------------------
-- two bindings at once, and unbinding

create role app_both; grant x_tenant_a, x_tenant_b, x_enq to app_both;
set local role app_both;
select throws_ok($$ select jobs.enqueue('x', '{}', 'both') $$, 'JQ018', null,
                 'a login bound to two tenants acts for neither');
reset role;
select is(jobs.unbind_tenant('x_tenant_a'), true, 'unbind_tenant answers whether it was bound');
set local role app_a;
select is(jobs.bound_tenant(), null, 'unbound, A acts for no tenant in particular');
select ok((select count(*) from jobs.jobs where tenant_id = 'globex') > 0,
          'and reads every tenant''s rows again');
reset role;
select is(jobs.unbind_tenant('x_tenant_b'), true, 'the last binding goes');
select is(jobs._any_binding(), false, 'with no binding, the checks fold to nothing again');

select * from finish();
rollback;
