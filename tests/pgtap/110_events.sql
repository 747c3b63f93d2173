-- 110_events: the stored event bus: publish_event stamps the database's clock and wakes the
-- runs parked on a matching wait; find_event answers the earliest unexpired match published
-- since a wait began, with the database's now.
begin;
\ir fixtures/factory.sql
select plan(16);

set local durajobs.now = '2026-03-01 10:00:00+00';

-- publish stamps the database's clock and keeps the payload
select jobs.publish_event(name => 'paid', payload => '{"order": 1}', correlation_key => 'o-1') as e1 \gset
select is((select published_at from jobs.events where id = :'e1'), '2026-03-01 10:00:00+00'::timestamptz,
          'an event is stamped with jobs._now()');
select is((select expires_at from jobs.events where id = :'e1'), '2026-03-08 10:00:00+00'::timestamptz,
          'the default ttl is 7 days');
select is((select payload from jobs.events where id = :'e1'), '{"order": 1}'::jsonb, 'the payload is kept');

-- validation
select throws_ok($$select jobs.publish_event(name => '  ')$$, 'JQ001', null, 'a blank name raises JQ001');
select throws_ok($$select jobs.publish_event(name => 'x', payload => null)$$, 'JQ001', null,
                 'a NULL payload raises JQ001');
select throws_ok($$select jobs.publish_event(name => 'x', ttl => interval '0')$$, 'JQ001', null,
                 'a zero ttl raises JQ001');

-- find: the earliest match published at or after the wait began
select jobs_test.advance(interval '1 minute') \g /dev/null
select jobs.publish_event(name => 'paid', payload => '{"order": 2}', correlation_key => 'o-2') as e2 \gset
select jobs_test.advance(interval '1 minute') \g /dev/null
select jobs.publish_event(name => 'paid', payload => '{"order": 1, "again": true}', correlation_key => 'o-1') as e3 \gset

select is((jobs.find_event(name => 'paid', correlation_key => 'o-1')).event_id, :'e1'::uuid,
          'find answers the earliest match of the key');
select is((jobs.find_event(name => 'paid', correlation_key => 'o-1',
                           after => '2026-03-01 10:00:30+00')).event_id, :'e3'::uuid,
          'an event published before the wait began is not taken');
select is((jobs.find_event(name => 'paid')).event_id, :'e1'::uuid,
          'a wait without a key takes any event of the name, earliest first');
select is((jobs.find_event(name => 'paid', correlation_key => 'o-9')).found, false,
          'no match: found is false');
select is((jobs.find_event(name => 'paid', correlation_key => 'o-9')).now,
          '2026-03-01 10:02:00+00'::timestamptz, 'find answers the database''s now, the clock of a wait');
select jobs_test.advance(interval '8 days') \g /dev/null
select is((jobs.find_event(name => 'paid', correlation_key => 'o-1')).found, false,
          'an expired event is never found');

-- a publish wakes the runs parked on a matching wait, and only those
set local durajobs.now = '2026-04-01 00:00:00+00';
select jobs_test.enqueue(name => 'waiter', queue => 'q-ev') as waiter \gset
select (jobs_test.claim_one(queue => 'q-ev', worker_id => 'w-ev')).claim as waiter_claim \gset
select jobs.record_step_v1(id => :'waiter', worker_id => 'w-ev', claim => :waiter_claim,
                           name => 'wait-paid', status => 'waiting',
                           output => '{"event": "paid", "match": "o-7"}') \g /dev/null
select jobs.nack_v1(id => :'waiter', worker_id => 'w-ev', claim => :waiter_claim,
                    next_state => 'suspended', delay => interval '30 seconds',
                    counts_as_attempt => false) \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs.publish_event(name => 'paid', correlation_key => 'o-8') \g /dev/null
select is((jobs_test.job(:'waiter')).run_at, '2026-04-01 00:00:30+00'::timestamptz,
          'an event with another key leaves the waiter parked');
select jobs.publish_event(name => 'refunded', correlation_key => 'o-7') \g /dev/null
select is((jobs_test.job(:'waiter')).run_at, '2026-04-01 00:00:30+00'::timestamptz,
          'an event of another name leaves the waiter parked');
select jobs.publish_event(name => 'paid', correlation_key => 'o-7') \g /dev/null
select is((jobs_test.job(:'waiter')).run_at, '2026-04-01 00:00:01+00'::timestamptz,
          'a matching event makes the waiting run due at once');
select is((jobs_test.job(:'waiter')).state, 'suspended', 'it stays suspended until a claim takes it');

select * from finish();
rollback;
