-- 230_children: a run that enqueues child jobs (jobs.enqueue's parent_id, of the parent's
-- tenant) and waits for them without holding a worker: jobs.wait_children_v1 answers the
-- children's outcomes when all have settled, else parks the parent; the statement that ends the
-- last awaited child (ack, nack to dead or failed, cancel) makes the parent due at once.
-- jobs.children lists a parent's children; jobs.cancel(children => true) cancels the live
-- descendants; jobs.inspect_job counts the children.
begin;
\ir fixtures/factory.sql
select plan(81);

set local durajobs.now = '2026-06-01 00:00:00+00';

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

-- a child of `parent_id` on a queue of its own; answers its id
create function jobs_test.child(parent_id uuid, queue text, tenant_id text default null,
                                name text default 'child')
returns uuid
language sql
volatile
as $$
  select (jobs.enqueue(name => child.name, input => '{}', idempotency_key => jobs_test.key(),
                       queue => child.queue, tenant_id => child.tenant_id,
                       parent_id => child.parent_id)).id
$$;

-- claim the one job of `queue` as `worker_id`; answers its claim token
create function jobs_test.claim_token(queue text, worker_id text default 'wc')
returns bigint
language sql
volatile
as $$
  select (jobs_test.claim_one(queue => claim_token.queue, worker_id => claim_token.worker_id)).claim
$$;

-- ---------------------------------------------------------------------------------------------
-- enqueue: parent_id is stored, and must name a job of the same tenant

select * from jobs_test.running('q-parent', 'w-p') \gset p_
select jobs_test.child(:'p_id', 'q-c1') as c1 \gset
select jobs_test.advance('1 second') \g /dev/null
select jobs_test.child(:'p_id', 'q-c2') as c2 \gset
select is((jobs_test.job(:'c1')).parent_id, :'p_id'::uuid, 'enqueue stores parent_id');
select is((jobs_test.job(:'p_id')).parent_id, null::uuid, 'a job enqueued without one has none');
select throws_ok(
  format($$select jobs.enqueue('child', '{}', 'k-orphan', parent_id => %L)$$, gen_random_uuid()),
  'JQ001', null, 'a parent_id naming no job raises X_ARGUMENT_INVALID');

select jobs_test.enqueue(queue => 'q-acme', tenant_id => 'acme') as acme_p \gset
select throws_ok(
  format($$select jobs.enqueue('child', '{}', 'k-globex', tenant_id => 'globex', parent_id => %L)$$,
         :'acme_p'),
  'JQ001', null, 'a parent_id naming a job of another tenant raises X_ARGUMENT_INVALID');
select throws_ok(
  format($$select jobs.enqueue('child', '{}', 'k-none', parent_id => %L)$$, :'acme_p'),
  'JQ001', null, 'a tenantless child of a tenant''s parent raises X_ARGUMENT_INVALID');
select throws_ok(
  format($$select jobs.enqueue('child', '{}', 'k-acme-to-none', tenant_id => 'acme', parent_id => %L)$$,
         :'p_id'),
  'JQ001', null, 'a tenant''s child of a tenantless parent raises X_ARGUMENT_INVALID');
select lives_ok(
  format($$select jobs.enqueue('child', '{}', 'k-acme', tenant_id => 'acme', parent_id => %L)$$,
         :'acme_p'),
  'a child of the parent''s tenant is accepted');
select jobs_test.done_job() as finished_p \gset
select lives_ok(
  format($$select jobs.enqueue('child', '{}', 'k-late', parent_id => %L)$$, :'finished_p'),
  'a parent_id naming a finished job is accepted');

-- ---------------------------------------------------------------------------------------------
-- wait_children_v1 with a child live: (false, NULL), the step 'waiting', the parent parked

select is((jobs_test.job(:'p_id')).attempt, 1, 'the running parent is on attempt 1');
select results_eq(
  format($$select settled, outcomes
             from jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'wait-kids',
                                        children => array[%L, %L]::uuid[], poll => '10 minutes')$$,
         :'p_id', :p_claim, :'c1', :'c2'),
  $$values (false, null::jsonb)$$,
  'with a child live, wait_children_v1 answers (false, NULL)');
select results_eq(
  format($$select status, output, wake_at from jobs.steps where run_id = %L and name = 'wait-kids'$$,
         :'p_run_id'),
  format($$values ('waiting', jsonb_build_object('children', jsonb_build_array(%L, %L)),
                   '2026-06-01 00:10:01+00'::timestamptz)$$, :'c1', :'c2'),
  'the step is recorded waiting with {"children": [...]}, due at the poll');
select results_eq(
  format($$select state, attempt, lease_expires_at, run_at from jobs.jobs where id = %L$$, :'p_id'),
  $$values ('suspended', 0, null::timestamptz, '2026-06-01 00:10:01+00'::timestamptz)$$,
  'the parent is parked: suspended, its attempt given back, no lease, due at now + poll');
select is(jobs.ack_v1(id => :'p_id', worker_id => 'w-p', claim => :p_claim), false,
          'the parked attempt''s ack matches nothing');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'wait-again',
                                        children => array[%L]::uuid[])$$, :'p_id', :p_claim, :'c1'),
  'JQ007', null, 'a second wait by the parked attempt raises X_JOB_LEASE_LOST');

-- ---------------------------------------------------------------------------------------------
-- the wake: acking one child while another is live leaves the parent parked; the last wakes it

select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-c1') as c1_claim \gset
select is((select array_agg(landed)
             from jobs.ack_many_v1(worker_id => 'wc', ids => array[:'c1']::uuid[],
                                   claims => array[:c1_claim]::bigint[])),
          array[true], 'the first child is acked');
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'p_id'),
  $$values ('suspended', '2026-06-01 00:10:01+00'::timestamptz)$$,
  'acking a child while another awaited child is live leaves the parent''s run_at unchanged');

select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-c2') as c2_claim \gset
select is((select array_agg(landed)
             from jobs.ack_results_v1(worker_id => 'wc', ids => array[:'c2']::uuid[],
                                      claims => array[:c2_claim]::bigint[],
                                      results => array['{"n": 2}']::jsonb[])),
          array[true], 'the last child is acked with a result');
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'p_id'),
  $$values ('suspended', '2026-06-01 00:02:01+00'::timestamptz)$$,
  'acking the last live child makes the parent due now, still suspended');

-- ---------------------------------------------------------------------------------------------
-- resumed: every child finished, the wait answers the outcomes in the given order

select jobs_test.advance('1 second') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-parent', worker_id => 'w-p') \gset p2_
select is(:'p2_id'::uuid, :'p_id'::uuid, 'the woken parent is claimed again');
select is(:p2_attempt, 1, 'its attempt is 1 again: the park did not count');
select jsonb_build_array(
         jsonb_build_object('id', :'c2', 'state', 'done', 'result', '{"n": 2}'::jsonb,
                            'error', null, 'error_code', null),
         jsonb_build_object('id', :'c1', 'state', 'done', 'result', null,
                            'error', null, 'error_code', null)) as want_outcomes \gset
select results_eq(
  format($$select settled, outcomes
             from jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'wait-kids',
                                        children => array[%L, %L]::uuid[])$$,
         :'p_id', :p2_claim, :'c2', :'c1'),
  format($$values (true, %L::jsonb)$$, :'want_outcomes'),
  'with every child finished, wait_children_v1 answers settled with the outcomes in the given order');
select results_eq(
  format($$select status, output from jobs.steps where run_id = %L and name = 'wait-kids'$$, :'p_run_id'),
  format($$values ('completed', jsonb_build_object('outcomes', %L::jsonb))$$, :'want_outcomes'),
  'the step is recorded completed with {"outcomes": ...}');
select results_eq(
  format($$select state, claims from jobs.jobs where id = %L$$, :'p_id'),
  format($$values ('running', %s::bigint)$$, :p2_claim),
  'a settled wait leaves the parent''s attempt running');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'wait-kids',
                                        children => array[%L]::uuid[])$$, :'p_id', :p2_claim, :'c1'),
  'JQ009', null, 'waiting again under a completed step''s name raises X_STEP_DUPLICATE');

-- an id naming no job of the parent's tenant answers state NULL
select * from jobs_test.running('q-unknown-p', 'w-p') \gset u_
select gen_random_uuid() as ghost \gset
select jobs_test.done_job(tenant_id => 'acme') as acme_done \gset
select results_eq(
  format($$select settled, outcomes
             from jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L, %L]::uuid[])$$,
         :'u_id', :u_claim, :'ghost', :'acme_done'),
  format($$values (true, jsonb_build_array(
                     jsonb_build_object('id', %L, 'state', null, 'result', null, 'error', null,
                                        'error_code', null),
                     jsonb_build_object('id', %L, 'state', null, 'result', null, 'error', null,
                                        'error_code', null)))$$, :'ghost', :'acme_done'),
  'an id naming no job, or another tenant''s job, answers state NULL');

-- ---------------------------------------------------------------------------------------------
-- the fence: a stale claim, a cancelled parent

select * from jobs_test.running('q-stale-p', 'w-p') \gset s1_
select jobs_test.lapse(:'s1_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-stale-p', worker_id => 'w-p') \gset s2_
select jobs_test.child(:'s1_id', 'q-stale-c') as sc \gset
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L]::uuid[])$$, :'s1_id', :s1_claim, :'sc'),
  'JQ007', null, 'a wait under a stale claim raises X_JOB_LEASE_LOST');
select results_eq(
  format($$select state, claims, lease_expires_at is not null from jobs.jobs where id = %L$$, :'s1_id'),
  format($$values ('running', %s::bigint, true)$$, :s2_claim),
  'the stale wait leaves the parent running under its new claim');
select is((select count(*)::integer from jobs.steps where run_id = :'s1_run_id'), 0,
          'the stale wait records no step');

select * from jobs_test.running('q-cxl-p', 'w-p') \gset x_
select jobs_test.child(:'x_id', 'q-cxl-c') as xc \gset
select jobs.cancel(:'x_id') \g /dev/null
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L]::uuid[])$$, :'x_id', :x_claim, :'xc'),
  'JQ008', null, 'a wait of a cancelled parent raises X_JOB_CANCELLED');

-- ---------------------------------------------------------------------------------------------
-- bad arguments raise X_ARGUMENT_INVALID

select * from jobs_test.running('q-args-p', 'w-p') \gset a_
select jobs_test.child(:'a_id', 'q-args-c') as ac \gset
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => '{}'::uuid[])$$, :'a_id', :a_claim),
  'JQ001', null, 'an empty children array raises JQ001');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => null)$$, :'a_id', :a_claim),
  'JQ001', null, 'children NULL raises JQ001');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L, null]::uuid[])$$, :'a_id', :a_claim, :'ac'),
  'JQ001', null, 'a NULL child id raises JQ001');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L]::uuid[], poll => '0')$$,
         :'a_id', :a_claim, :'ac'),
  'JQ001', null, 'a poll of 0 raises JQ001');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => %s, name => 'w',
                                        children => array[%L]::uuid[], poll => '2 days')$$,
         :'a_id', :a_claim, :'ac'),
  'JQ001', null, 'a poll over 1 day raises JQ001');
select throws_ok(
  format($$select jobs.wait_children_v1(id => %L, worker_id => 'w-p', claim => null, name => 'w',
                                        children => array[%L]::uuid[])$$, :'a_id', :'ac'),
  'JQ001', null, 'a wait without a claim token raises JQ001');
select results_eq(
  format($$select state, attempt from jobs.jobs where id = %L$$, :'a_id'),
  $$values ('running', 1)$$,
  'the refused waits leave the parent running');

-- ---------------------------------------------------------------------------------------------
-- a retry of a child does not wake the parent; its nack to 'dead' does

select * from jobs_test.running('q-dead-p', 'w-p') \gset d_
select jobs_test.child(:'d_id', 'q-dead-c') as dc \gset
select (jobs.wait_children_v1(id => :'d_id', worker_id => 'w-p', claim => :d_claim, name => 'w',
                              children => array[:'dc']::uuid[], poll => '1 hour')).settled as d_settled \gset
select is(:'d_settled'::boolean, false, 'the parent waiting for a live child is parked');
select (jobs_test.job(:'d_id')).run_at as d_parked_until \gset
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-dead-c') as dc_claim1 \gset
select jobs.nack_v1(id => :'dc', worker_id => 'wc', claim => :dc_claim1, next_state => 'ready',
                    error => 'try again') \g /dev/null
select is((jobs_test.job(:'d_id')).run_at, :'d_parked_until'::timestamptz,
          'a nack of the child to ready (a retry: still live) leaves the parent parked');
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-dead-c') as dc_claim2 \gset
select ok(jobs.nack_v1(id => :'dc', worker_id => 'wc', claim => :dc_claim2, next_state => 'dead',
                       error => 'child broke', error_code => 'E_CHILD'),
          'the child is nacked to dead');
select results_eq(
  format($$select state, run_at <= jobs._now() from jobs.jobs where id = %L$$, :'d_id'),
  $$values ('suspended', true)$$,
  'a nack of the last awaited child to dead makes the parent due now');
select (jobs_test.claim_one(queue => 'q-dead-p', worker_id => 'w-p')).claim as d_claim2 \gset
select is((jobs.wait_children_v1(id => :'d_id', worker_id => 'w-p', claim => :d_claim2, name => 'w',
                                 children => array[:'dc']::uuid[])).outcomes,
          jsonb_build_array(jsonb_build_object('id', :'dc', 'state', 'dead', 'result', null,
                                               'error', 'child broke', 'error_code', 'E_CHILD')),
          'the resumed wait answers the dead child''s error and code');

-- a nack of the last child to 'failed' wakes it too
select * from jobs_test.running('q-failed-p', 'w-p') \gset f_
select jobs_test.child(:'f_id', 'q-failed-c') as fc \gset
select jobs.wait_children_v1(id => :'f_id', worker_id => 'w-p', claim => :f_claim, name => 'w',
                             children => array[:'fc']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-failed-c') as fc_claim \gset
select jobs.nack_v1(id => :'fc', worker_id => 'wc', claim => :fc_claim, next_state => 'failed',
                    error => 'no') \g /dev/null
select is((jobs_test.job(:'f_id')).run_at, jobs._now(),
          'a nack of the last awaited child to failed makes the parent due now');

-- ---------------------------------------------------------------------------------------------
-- a cancel of the child wakes the parent

select * from jobs_test.running('q-cxlc-p', 'w-p') \gset k_
select jobs_test.child(:'k_id', 'q-cxlc-c') as kc \gset
select jobs.wait_children_v1(id => :'k_id', worker_id => 'w-p', claim => :k_claim, name => 'w',
                             children => array[:'kc']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs.cancel(:'kc') \g /dev/null
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'k_id'),
  $$values ('suspended', jobs._now())$$,
  'a jobs.cancel of the last awaited child makes the parent due now');

-- ack_v1 of the last child wakes it too, and an oversized result (the child failed) does
select * from jobs_test.running('q-ack1-p', 'w-p') \gset o_
select jobs_test.child(:'o_id', 'q-ack1-c') as oc \gset
select jobs.wait_children_v1(id => :'o_id', worker_id => 'w-p', claim => :o_claim, name => 'w',
                             children => array[:'oc']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-ack1-c') as oc_claim \gset
select jobs.ack_v1(id => :'oc', worker_id => 'wc', claim => :oc_claim) \g /dev/null
select is((jobs_test.job(:'o_id')).run_at, jobs._now(),
          'jobs.ack_v1 of the last awaited child makes the parent due now');

select jobs.set_size_limit('step_output', 2048) \g /dev/null
select * from jobs_test.running('q-big-p', 'w-p') \gset b_
select jobs_test.child(:'b_id', 'q-big-c') as bc \gset
select jobs.wait_children_v1(id => :'b_id', worker_id => 'w-p', claim => :b_claim, name => 'w',
                             children => array[:'bc']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-big-c') as bc_claim \gset
select jobs.ack_results_v1(worker_id => 'wc', ids => array[:'bc']::uuid[],
                           claims => array[:bc_claim]::bigint[],
                           results => array[jsonb_build_object('blob', repeat('x', 3000))]) \g /dev/null
select results_eq(
  format($$select (select state from jobs.jobs where id = %L), run_at from jobs.jobs where id = %L$$,
         :'bc', :'b_id'),
  $$values ('failed', jobs._now())$$,
  'an oversized result fails the last awaited child and makes the parent due now');

-- two children acked in one batch: the parent wakes once both have left
select * from jobs_test.running('q-two-p', 'w-p') \gset t_
select jobs_test.child(:'t_id', 'q-two-c1') as tc1 \gset
select jobs_test.child(:'t_id', 'q-two-c2') as tc2 \gset
select jobs.wait_children_v1(id => :'t_id', worker_id => 'w-p', claim => :t_claim, name => 'w',
                             children => array[:'tc1', :'tc2']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs_test.claim_token('q-two-c1') as tc1_claim \gset
select jobs_test.claim_token('q-two-c2') as tc2_claim \gset
select jobs.ack_many_v1(worker_id => 'wc', ids => array[:'tc1', :'tc2']::uuid[],
                        claims => array[:tc1_claim, :tc2_claim]::bigint[]) \g /dev/null
select is((jobs_test.job(:'t_id')).run_at, jobs._now(),
          'acking both awaited children in one batch makes the parent due now');

-- ---------------------------------------------------------------------------------------------
-- jobs.children: live and finished, oldest first, with results; max_rows bounds it

select jobs_test.advance('1 second') \g /dev/null
select jobs_test.child(:'p_id', 'q-c3', name => 'late-child') as c3 \gset
select results_eq(
  format($$select id, state, result, error from jobs.children(%L)$$, :'p_id'),
  format($$values (%L::uuid, 'done', null::jsonb, null::text), (%L::uuid, 'done', '{"n": 2}'::jsonb, null::text),
                  (%L::uuid, 'ready', null::jsonb, null::text)$$, :'c1', :'c2', :'c3'),
  'jobs.children lists the live and finished children oldest first, with their results');
select results_eq(
  format($$select name from jobs.children(%L) where id = %L$$, :'p_id', :'c3'),
  $$values ('late-child')$$,
  'jobs.children answers each child''s name');
select results_eq(
  format($$select id from jobs.children(%L, max_rows => 2)$$, :'p_id'),
  format($$values (%L::uuid), (%L::uuid)$$, :'c1', :'c2'),
  'max_rows bounds jobs.children to the oldest');
select results_eq(
  format($$select state, error, error_code from jobs.children(%L)$$, :'d_id'),
  $$values ('dead', 'child broke', 'E_CHILD')$$,
  'jobs.children answers a dead child''s error and code');
select is_empty(format($$select * from jobs.children(%L)$$, gen_random_uuid()),
                'a job without children has none listed');
select throws_ok(format($$select * from jobs.children(%L, max_rows => 0)$$, :'p_id'),
                 'JQ001', null, 'max_rows 0 raises JQ001');
select throws_ok($$select * from jobs.children(null)$$, 'JQ001', null,
                 'jobs.children of a NULL parent raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- jobs.inspect_job counts the children

select is(jobs.inspect_job(:'p_id') -> 'children' -> 'total', '3'::jsonb,
          'inspect_job: children -> total counts every child');
select is(jobs.inspect_job(:'p_id') -> 'children' -> 'states', '{"done": 2, "ready": 1}'::jsonb,
          'inspect_job: children -> states counts them by state');
select is(jobs.inspect_job(:'c1') -> 'children',
          '{"total": 0, "states": {}, "first": []}'::jsonb,
          'inspect_job of a job without children: total 0, no states');

-- ---------------------------------------------------------------------------------------------
-- jobs.cancel(children => true) cancels the live descendants; without it they stay live

select jobs_test.enqueue(queue => 'q-g') as g \gset
select jobs_test.child(:'g', 'q-g1') as g1 \gset
select jobs_test.child(:'g', 'q-g2') as g2 \gset
select jobs_test.child(:'g1', 'q-g11') as g11 \gset
select jobs_test.child(:'g1', 'q-g12') as g12 \gset
select jobs_test.child(:'g2', 'q-g21') as g21 \gset
select jobs_test.claim_token('q-g2', 'wg') as g2_claim \gset
select jobs.ack_v1(id => :'g2', worker_id => 'wg', claim => :g2_claim) \g /dev/null
select jobs_test.claim_token('q-g12', 'wg') as g12_claim \gset

select is(jobs.cancel(id => :'g', reason => 'stop', children => true), true,
          'cancel with children answers true');
select results_eq(
  format($$select id, state, last_error, last_error_code
             from jobs.jobs where id in (%L, %L, %L, %L) order by id$$, :'g1', :'g11', :'g12', :'g21'),
  format($$select id, 'cancelled', %L, 'X_JOB_CANCELLED'
             from unnest(array[%L, %L, %L, %L]::uuid[]) id order by id$$,
         'cancelled with job ' || :'g' || ': stop', :'g1', :'g11', :'g12', :'g21'),
  'every live descendant (children, grandchildren, a grandchild of a done child) is cancelled, naming the job');
select results_eq(
  format($$select state, last_error from jobs.jobs where id = %L$$, :'g'),
  $$values ('cancelled', 'cancelled: stop')$$,
  'the job itself is cancelled with the reason');
select is((jobs_test.job(:'g2')).state, 'done', 'a done descendant stays done');
select is(jobs.heartbeat_v1(id => :'g12', worker_id => 'wg', claim => :g12_claim), 'cancelled',
          'a running descendant''s worker hears cancelled');
select is(jobs.inspect_job(:'g') -> 'children' -> 'states', '{"cancelled": 1, "done": 1}'::jsonb,
          'inspect_job counts the cancelled and the done child');

select jobs_test.enqueue(queue => 'q-h') as h \gset
select jobs_test.child(:'h', 'q-h1') as h1 \gset
select jobs.cancel(id => :'h') \g /dev/null
select results_eq(
  format($$select state from jobs.jobs where id in (%L, %L) order by id = %L$$, :'h', :'h1', :'h'),
  $$values ('ready'), ('cancelled')$$,
  'a cancel without children leaves the children live');
select jobs_test.enqueue(queue => 'q-m') as m \gset
select jobs_test.child(:'m', 'q-m1') as m1 \gset
select jobs.cancel(id => :'m', children => true) \g /dev/null
select is((jobs_test.job(:'m1')).last_error, 'cancelled with job ' || :'m',
          'a cancel with children and no reason names the job alone');
select throws_ok(format($$select jobs.cancel(id => %L, children => true)$$, :'g'), 'JQ013', null,
                 'cancel with children of a finished job raises X_JOB_NOT_CANCELLABLE');

-- a cancel with children of an awaited child wakes the parent and cancels the grandchildren
select * from jobs_test.running('q-cc-p', 'w-p') \gset cc_
select jobs_test.child(:'cc_id', 'q-cc-c') as ccc \gset
select jobs_test.child(:'ccc', 'q-cc-gc') as ccg \gset
select jobs.wait_children_v1(id => :'cc_id', worker_id => 'w-p', claim => :cc_claim, name => 'w',
                             children => array[:'ccc']::uuid[]) \g /dev/null
select jobs_test.advance('1 minute') \g /dev/null
select jobs.cancel(id => :'ccc', children => true) \g /dev/null
select results_eq(
  format($$select (select state from jobs.jobs where id = %L), state, run_at from jobs.jobs where id = %L$$,
         :'ccg', :'cc_id'),
  $$values ('cancelled', 'suspended', jobs._now())$$,
  'a cancel with children of the awaited child cancels its child and makes the parent due now');

-- ---------------------------------------------------------------------------------------------
-- tenants: a parent's children and outcomes stay within its tenant

select * from jobs_test.running('q-acme-p', 'w-p', tenant_id => 'acme') \gset ta_
select jobs_test.child(:'ta_id', 'q-acme-c', tenant_id => 'acme') as tac \gset
select is((select count(*)::integer from jobs.children(:'ta_id', tenant_id => 'acme')), 1,
          'jobs.children answers the tenant''s children');
select is((select count(*)::integer from jobs.children(:'ta_id', tenant_id => 'globex')), 0,
          'jobs.children of another tenant''s parent answers none');
select results_eq(
  format($$select settled, outcomes from jobs.wait_children_v1(id => %L, worker_id => 'w-p',
                                                               claim => %s, name => 'w',
                                                               children => array[%L]::uuid[])$$,
         :'ta_id', :ta_claim, :'tac'),
  $$values (false, null::jsonb)$$,
  'a tenant''s parent waits for its tenant''s live child');
select jobs_test.claim_token('q-acme-c') as tac_claim \gset
select jobs_test.advance('1 minute') \g /dev/null
select jobs.ack_v1(id => :'tac', worker_id => 'wc', claim => :tac_claim) \g /dev/null
select is((jobs_test.job(:'ta_id')).run_at, jobs._now(),
          'and is woken by its settle');

-- ---------------------------------------------------------------------------------------------
-- enqueue_children_v1: the children and the step that names them, in one call, fenced

select * from jobs_test.running('q-many-p', 'w-m') \gset mp_
select jobs_test.key() as mk1 \gset
select jobs_test.key() as mk2 \gset
select array_agg(e.id order by e.ord) as many_ids
  from jobs.enqueue_children_v1(
         id => :'mp_id', worker_id => 'w-m', claim => :mp_claim, name => 'enqueue:kid#1',
         requests => jsonb_build_array(
           jsonb_build_object('name', 'kid', 'input', '{"n": 1}'::jsonb,
                              'idempotency_key', :'mk1', 'queue', 'q-many-c'),
           jsonb_build_object('name', 'kid', 'input', '{"n": 2}'::jsonb,
                              'idempotency_key', :'mk2', 'queue', 'q-many-c',
                              'priority', 5, 'run_at', '2026-06-01T01:00:00+00:00')))
       with ordinality as e(id, run_id, deduped, ord) \gset
select is((select count(*)::int from jobs.jobs where parent_id = :'mp_id'), 2,
          'enqueue_children_v1 makes each child, naming the parent');
select is((select array_agg(j.state || ':' || j.priority order by j.input ->> 'n')
             from jobs.jobs j where j.parent_id = :'mp_id'),
          array['ready:0', 'delayed:5'],
          'each child takes its own request''s arguments (priority, run_at)');
select is((select s.status || ' ' || jsonb_array_length(s.output -> 'enqueued')
             from jobs.steps s where s.run_id = :'mp_id' and s.name = 'enqueue:kid#1'),
          'completed 2', 'and the step that names them is recorded completed with both');
select is((select array_agg(e::uuid order by o)
             from jobs.steps s,
                  jsonb_array_elements_text(s.output -> 'enqueued') with ordinality as x(e, o)
            where s.run_id = :'mp_id' and s.name = 'enqueue:kid#1'),
          :'many_ids'::uuid[], 'the step holds their ids in the order asked');
select throws_ok(
  format($q$select * from jobs.enqueue_children_v1(id => %L, worker_id => 'w-m', claim => %s,
                 name => 'enqueue:kid#1',
                 requests => '[{"name": "kid", "input": {}, "idempotency_key": "again"}]')$q$,
         :'mp_id', :mp_claim),
  'JQ009', null, 'a replay of the step is refused, and enqueues nothing');
select is((select count(*)::int from jobs.jobs where idempotency_key = 'again'), 0,
          'so the refused call left no child');
select throws_ok(
  format($q$select * from jobs.enqueue_children_v1(id => %L, worker_id => 'w-m', claim => %s,
                 name => 'enqueue:stale',
                 requests => '[{"name": "kid", "input": {}, "idempotency_key": "stale"}]')$q$,
         :'mp_id', :mp_claim + 1),
  'JQ007', null, 'a stale claim is refused');
select is((select count(*)::int from jobs.jobs where idempotency_key = 'stale'), 0,
          'and its child was taken back with the refused step');
select throws_ok(
  format($q$select * from jobs.enqueue_children_v1(id => %L, worker_id => 'w-m', claim => %s,
                 name => 'enqueue:bad', requests => '[]')$q$, :'mp_id', :mp_claim),
  'JQ001', null, 'an empty request list is refused');
select throws_ok(
  format($q$select * from jobs.enqueue_children_v1(id => %L, worker_id => 'w-m', claim => %s,
                 name => 'enqueue:bad',
                 requests => '[{"name": "kid", "input": {}, "idempotency_key": "k", "parent_id": null}]')$q$,
         :'mp_id', :mp_claim),
  'JQ001', null, 'a key that is not a child''s argument is refused');
select throws_ok(
  format($q$select * from jobs.enqueue_children_v1(id => %L, worker_id => 'w-m', claim => %s,
                 name => 'enqueue:bad',
                 requests => '[{"name": "kid", "input": {}, "idempotency_key": "k", "priority": "high"}]')$q$,
         :'mp_id', :mp_claim),
  'JQ001', null, 'a value of the wrong type is refused');

select * from finish();
rollback;
