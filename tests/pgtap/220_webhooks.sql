-- 220_webhooks: the delivery ledger. Every recorded attempt is a row; delivered clears the
-- endpoint's consecutive failures, rejected and failed add one, throttled neither; at
-- disable_after the endpoint is disabled (R83); webhook_check_v1 answers the disabled mark and a
-- delivery made already; an operator enables the endpoint again.
begin;
\ir fixtures/factory.sql
select plan(23);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- one attempt of event `event` to endpoint ep: "failures,disabled"
create function jobs_test.record(outcome text, event text default 'e1')
returns text
language sql
as $$
  select (r.consecutive_failures, r.disabled)::text
    from jobs.webhook_record_v1(webhook => 'hook', endpoint_id => 'ep', event_id => event,
                                topic => 't', job_id => gen_random_uuid(), attempt => 1,
                                outcome => outcome, status_code => 500,
                                disable_after => 3) r
$$;

create function jobs_test.check(event text default 'e1')
returns text
language sql
as $$
  select (c.disabled_at is not null, c.delivered_at is not null, c.consecutive_failures)::text
    from jobs.webhook_check_v1(webhook => 'hook', endpoint_id => 'ep', event_id => event) c
$$;

select is(jobs_test.check(), '(f,f,0)', 'an endpoint never reached: enabled, nothing delivered');
select is(jobs_test.record('failed'), '(1,f)', 'a failure counts one');
select is(jobs_test.record('rejected'), '(2,f)', 'a rejection counts one more');
select is(jobs_test.record('throttled'), '(2,f)', 'a throttled answer neither counts nor clears');
select is(jobs_test.record('delivered', 'e2'), '(0,f)', 'a delivery clears the count');
select is(jobs_test.check('e2'), '(f,t,0)', 'the check finds the delivery made');
select is(jobs_test.check('e1'), '(f,f,0)', 'and not for another event');
select is(jobs_test.record('failed'), '(1,f)', 'counting starts again');
select is(jobs_test.record('failed'), '(2,f)', 'two');
select is(jobs_test.record('failed'), '(3,t)', 'the third in a row disables the endpoint');
select is(jobs_test.check(), '(t,f,3)', 'the check answers it disabled');
select is(jobs_test.record('failed'), '(4,f)', 'a later failure does not disable it again');
select is((select count(*)::int from jobs.webhook_attempts), 8, 'every attempt is a row');
select is((select disabled_reason from jobs.webhook_endpoints),
          '3 consecutive failed deliveries, the last 500', 'the reason names the count');

select is(jobs.enable_webhook_endpoint_v1(endpoint_id => 'ep'), 1,
          'enabling a disabled endpoint answers how many were disabled');
select is(jobs_test.check(), '(f,f,0)', 'and clears its mark and its count');

select throws_ok($$select * from jobs.webhook_record_v1(webhook => 'hook', endpoint_id => 'ep',
                     event_id => 'e', topic => 't', job_id => gen_random_uuid(), attempt => 1,
                     outcome => 'lost')$$,
                 'JQ001', null, 'an unknown outcome is refused');
select is((select count(*)::int from jobs.webhook_attempts_v1(endpoint => 'ep', event => 'e2')),
          1, 'the attempts of one event are listed');

-- another tenant's ep is another endpoint; this attempt's own answer is found for a retry of it
select is((select (r.consecutive_failures, r.disabled)::text
             from jobs.webhook_record_v1(webhook => 'hook', endpoint_id => 'ep', event_id => 'e9',
                                         topic => 't', job_id => gen_random_uuid(), attempt => 1,
                                         outcome => 'failed', disable_after => 1,
                                         tenant_id => 'acme') r),
          '(1,t)', 'acme''s ep counts apart and is disabled at its own threshold');
select is(jobs_test.check(), '(f,f,0)', 'the tenantless ep is untouched');
select gen_random_uuid() as job9 \gset
select jobs.webhook_record_v1(webhook => 'hook', endpoint_id => 'ep', event_id => 'e10',
                              topic => 't', job_id => :'job9', attempt => 2,
                              outcome => 'throttled', status_code => 429,
                              retry_after_seconds => 120);
select is((select (c.this_outcome, c.this_status_code, c.this_retry_after_seconds)::text
             from jobs.webhook_check_v1(webhook => 'hook', endpoint_id => 'ep', event_id => 'e10',
                                        job_id => :'job9', attempt => 2) c),
          '(throttled,429,120)', 'the check answers what this attempt got already');
select is((select c.this_outcome
             from jobs.webhook_check_v1(webhook => 'hook', endpoint_id => 'ep', event_id => 'e10',
                                        job_id => :'job9', attempt => 3) c),
          null, 'and nothing for the next attempt');
select is(jobs.enable_webhook_endpoint_v1(endpoint_id => 'ep', tenant_id => 'acme'), 1,
          'one tenant''s endpoint is enabled on its own');

select * from finish();
rollback;
