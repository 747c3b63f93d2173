-- 100_outbox: the transactional outbox: jobs.outbox_stage, the relay's lease claim
-- (jobs.outbox_claim), its fenced mark and release (jobs.outbox_mark_published,
-- jobs.outbox_release), the publish under the staged ids (jobs._publish) and the one-call relay
-- (jobs.outbox_relay), with the regression cases R11-R18 and R21. The wake (NOTIFY on commit)
-- cannot be observed inside one transaction and is not tested here.
--
-- jobs.outbox_claim takes any unpublished row, so each section starts from an empty outbox
-- (`delete from jobs.outbox`, rolled back with the file).
begin;
\ir fixtures/factory.sql
select plan(169);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- outbox_stage answers (id, run_id, false): the ids the job will have, known at stage time (R17)

select * from jobs.outbox_stage(name => 's1', input => '{"user_id": 1}', idempotency_key => 'k-s1') \gset s1_
select is(:'s1_deduped'::boolean, false, 'stage answers deduped = false');
select is(substr(replace(:'s1_id', '-', ''), 13, 1), '7', 'stage: the answered id is a uuid v7');
select isnt(:'s1_run_id'::uuid, null, 'R17: stage answers a run_id');
select isnt(:'s1_run_id'::uuid, :'s1_id'::uuid, 'R17: the run_id is not the outbox id');
select is((select count(*) from jobs.outbox where id = :'s1_id'), 1::bigint,
          'stage: the answered id is the outbox row''s id');
select is((select run_id from jobs.outbox where id = :'s1_id'), :'s1_run_id'::uuid,
          'stage: the answered run_id is stored on the row');
select is((select staged_at from jobs.outbox where id = :'s1_id'), jobs._now(),
          'stage: staged_at is now');
select is((select row(claimed_by, claim_expires_at, published_at)::text from jobs.outbox where id = :'s1_id'),
          row(null::text, null::timestamptz, null::timestamptz)::text,
          'stage: a staged row is unclaimed and unpublished');
-- defaults are staged as the values jobs.enqueue would use
select is((select request from jobs.outbox where id = :'s1_id'),
          '{"name": "s1", "input": {"user_id": 1}, "idempotency_key": "k-s1", "queue": "default",
            "max_attempts": 20, "priority": 0}'::jsonb,
          'stage: a minimal request holds name, input, key and the defaults');

-- every field of the request is held as given, and a supplied run_id is kept
select * from jobs.outbox_stage(
  name => 's2', input => '{"order": 42, "lines": [1, 2]}', idempotency_key => 'k-s2',
  queue => 'mail', tenant_id => 'acme', run_at => '2026-01-02 00:00:00+00', max_attempts => 3,
  priority => -5, run_id => '22222222-2222-4222-8222-222222222222',
  traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  enqueued_by => 'api@host-1') \gset s2_
select is(:'s2_run_id'::uuid, '22222222-2222-4222-8222-222222222222'::uuid, 'stage: a supplied run_id is answered');
select is((select run_id from jobs.outbox where id = :'s2_id'), '22222222-2222-4222-8222-222222222222'::uuid,
          'stage: a supplied run_id is stored');
select is((select request ->> 'name' from jobs.outbox where id = :'s2_id'), 's2', 'stage: name is held');
select is((select jsonb_typeof(request -> 'input') from jobs.outbox where id = :'s2_id'), 'object',
          'stage: input is held as a JSON object, not a string');
select is((select request -> 'input' from jobs.outbox where id = :'s2_id'), '{"order": 42, "lines": [1, 2]}'::jsonb,
          'stage: input is held unchanged');
select is((select request ->> 'idempotency_key' from jobs.outbox where id = :'s2_id'), 'k-s2',
          'stage: idempotency_key is held');
select is((select request ->> 'queue' from jobs.outbox where id = :'s2_id'), 'mail', 'stage: queue is held');
select is((select request ->> 'tenant_id' from jobs.outbox where id = :'s2_id'), 'acme', 'stage: tenant_id is held');
select is((select (request ->> 'run_at')::timestamptz from jobs.outbox where id = :'s2_id'),
          '2026-01-02 00:00:00+00'::timestamptz, 'stage: run_at is held');
select is((select (request ->> 'max_attempts')::integer from jobs.outbox where id = :'s2_id'), 3,
          'stage: max_attempts is held');
select is((select (request ->> 'priority')::integer from jobs.outbox where id = :'s2_id'), -5,
          'stage: priority is held');
select is((select request ->> 'traceparent' from jobs.outbox where id = :'s2_id'),
          '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'stage: traceparent is held');
select is((select request ->> 'enqueued_by' from jobs.outbox where id = :'s2_id'), 'api@host-1',
          'stage: enqueued_by is held');

-- an input whose fields are JSON null is held as given: null is a value, not an absent field
select * from jobs.outbox_stage(name => 's3', input => '{"coupon": null, "address": {"line2": null}}',
                                idempotency_key => 'k-s3') \gset s3_
select is((select request -> 'input' from jobs.outbox where id = :'s3_id'),
          '{"coupon": null, "address": {"line2": null}}'::jsonb,
          'stage: null fields of input are held unchanged');

-- nothing lands in jobs.jobs at stage time
select is(jobs_test.job_count(), 0::bigint, 'stage inserts no job row');
select is((select count(*) from jobs.jobs where id in (:'s1_id', :'s2_id', :'s3_id')), 0::bigint,
          'no job row has a staged id before the relay');

-- stage validates like jobs.enqueue, and a refused stage stores nothing
select count(*) as stage_refusals_before from jobs.outbox \gset
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => null)$$,
                 'JQ003', null, 'stage: NULL idempotency_key raises JQ003');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => '')$$,
                 'JQ003', null, 'stage: empty idempotency_key raises JQ003');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => '  ')$$,
                 'JQ003', null, 'stage: blank idempotency_key raises JQ003');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '[1]', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'stage: a JSON array input raises JQ002');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '"{\"a\": 1}"', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'stage: a JSON string holding an object raises JQ002');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => null, idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'stage: NULL input raises JQ002');
select throws_ok($$select jobs.outbox_stage(name => '', input => '{}', idempotency_key => 'k-bad')$$,
                 'JQ001', null, 'stage: empty name raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => null, input => '{}', idempotency_key => 'k-bad')$$,
                 'JQ001', null, 'stage: NULL name raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', queue => '')$$,
                 'JQ001', null, 'stage: empty queue raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', tenant_id => '')$$,
                 'JQ001', null, 'stage: tenant_id '''' raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', max_attempts => 0)$$,
                 'JQ001', null, 'stage: max_attempts 0 raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', priority => null)$$,
                 'JQ001', null, 'stage: NULL priority raises JQ001');
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', run_at => 'infinity')$$,
                 'JQ001', null, 'stage: run_at ''infinity'' raises JQ001');
select is((select count(*) from jobs.outbox), :'stage_refusals_before'::bigint, 'a refused stage stores nothing');
select is((select count(*) from jobs.outbox where request ->> 'idempotency_key' = 'k-bad'), 0::bigint,
          'a refused stage leaves no row with its key');
select is(jobs_test.job_count(), 0::bigint, 'a refused stage inserts no job row');

-- ---------------------------------------------------------------------------------------------
-- R11: outbox_claim is a claim under a lease: it stamps the claimant and the expiry, a second
-- relay inside the lease gets a disjoint batch, and after the lease lapses the rows come back

delete from jobs.outbox;
set local durajobs.now = '2026-01-02 00:00:00+00';
select jobs.outbox_stage(name => 'c', input => '{}', idempotency_key => 'k-c-' || g)
  from generate_series(1, 5) g \g /dev/null

create table jobs_test.claim_a as
  select * from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 3, lease => interval '30 seconds');
select is((select count(*) from jobs_test.claim_a), 3::bigint, 'R11: a batch of 3 out of 5 claims exactly 3');
select is(array(select id from jobs_test.claim_a order by staged_at, id),
          array(select id from jobs.outbox order by staged_at, id limit 3),
          'R11: the batch is the first 3 rows in (staged_at, id) order');
select is((select count(*) from jobs_test.claim_a
            where claimed_by = 'relay-a' and claim_expires_at = '2026-01-02 00:00:30+00'), 3::bigint,
          'R11: each claimed record answers claimed_by and claim_expires_at = now + lease');
select is((select count(*) from jobs.outbox o join jobs_test.claim_a a using (id)
            where o.claimed_by = 'relay-a' and o.claim_expires_at = '2026-01-02 00:00:30+00'), 3::bigint,
          'R11: the claim is stamped on the rows');
select is((select count(*) from jobs.outbox where claimed_by is null), 2::bigint,
          'R11: the 2 rows outside the batch are not stamped');

-- a second relay inside the lease gets none of relay-a's rows
select jobs_test.advance(interval '10 seconds') \g /dev/null
create table jobs_test.claim_b as
  select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10, lease => interval '30 seconds');
select is((select count(*) from jobs_test.claim_b), 2::bigint,
          'R11: a second relay inside the lease gets only the 2 unclaimed rows');
select is((select count(*) from jobs_test.claim_b b join jobs_test.claim_a a using (id)), 0::bigint,
          'R11: the two batches are disjoint');
select is((select count(*) from jobs.outbox o join jobs_test.claim_a a using (id) where o.claimed_by = 'relay-a'),
          3::bigint, 'R11: relay-a''s rows are still relay-a''s');

-- one second before relay-a's lease lapses, nothing is claimable
select jobs_test.advance(interval '19 seconds') \g /dev/null
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)$$,
                'R11: inside the lease a committed row cannot be claimed twice');

-- after the lease lapses (relay-a died), another relay re-claims exactly relay-a's rows
select jobs_test.advance(interval '2 seconds') \g /dev/null
create table jobs_test.claim_c as
  select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10, lease => interval '1 minute');
select set_eq($$select id from jobs_test.claim_c$$, $$select id from jobs_test.claim_a$$,
              'R11: after the lease lapses another relay re-claims the dead relay''s rows, and only them');
select is((select count(*) from jobs.outbox o join jobs_test.claim_c c using (id)
            where o.claimed_by = 'relay-c' and o.claim_expires_at = jobs._now() + interval '1 minute'),
          3::bigint, 'R11: the re-claim stamps the new claimant and a new expiry');

-- batch_size 1 claims exactly one
select jobs_test.advance(interval '2 minutes') \g /dev/null
select is((select count(*) from jobs.outbox_claim(relay_id => 'relay-d', batch_size => 1)), 1::bigint,
          'batch_size 1 claims exactly one of 5 claimable rows');

-- R21: an impossible lease, batch or claimant is refused
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', lease => interval '0')$$,
                 'JQ001', null, 'R21: a lease of 0 raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', lease => interval '-1 second')$$,
                 'JQ001', null, 'R21: a negative lease raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', lease => null)$$,
                 'JQ001', null, 'R21: a NULL lease raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', lease => interval '1 day 1 second')$$,
                 'JQ001', null, 'R21: a lease over a day (a dead relay strands its rows) raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', batch_size => 0)$$,
                 'JQ001', null, 'batch_size 0 raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', batch_size => -1)$$,
                 'JQ001', null, 'a negative batch_size raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => 'r', batch_size => null)$$,
                 'JQ001', null, 'a NULL batch_size raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => null)$$,
                 'JQ001', null, 'a NULL relay_id raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => '')$$,
                 'JQ001', null, 'an empty relay_id raises JQ001');
select throws_ok($$select * from jobs.outbox_claim(relay_id => '   ')$$,
                 'JQ001', null, 'a blank relay_id raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- R14: (staged_at, id) is a total order. 10 rows staged in one transaction share staged_at; the
-- claim answers them in id order, every batch is the next slice of that order, and two relays
-- compose the same batches. The lower half is rewritten first, so the heap order is not the id
-- order, and index scans are off, so neither the heap nor the (staged_at, id) index hands out
-- the id order: only the claim's own tiebreak can give it.

delete from jobs.outbox;
set local durajobs.now = '2026-01-03 00:00:00+00';
select jobs.outbox_stage(name => 'o', input => '{}', idempotency_key => 'k-o-' || g)
  from generate_series(1, 10) g \g /dev/null
update jobs.outbox set request = request where id in (select id from jobs.outbox order by id limit 5);
set local enable_indexscan = off;
set local enable_indexonlyscan = off;
set local enable_bitmapscan = off;
select is((select count(distinct staged_at) from jobs.outbox), 1::bigint,
          'R14: the 10 rows staged in one transaction share staged_at');

create table jobs_test.r14 as
  select 'relay-a' as relay, c.ord, c.id
    from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
insert into jobs_test.r14
  select 'relay-b', c.ord, c.id
    from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
insert into jobs_test.r14
  select 'relay-c', c.ord, c.id
    from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select is(array(select id from jobs_test.r14 where relay = 'relay-a' order by ord),
          array(select id from jobs.outbox order by id limit 4),
          'R14: the first batch of 4 is the 4 lowest ids, in id order');
select is(array(select id from jobs_test.r14 where relay = 'relay-b' order by ord),
          array(select id from jobs.outbox order by id offset 4 limit 4),
          'R14: a second relay''s batch is the next 4 ids, in id order');
select is(array(select id from jobs_test.r14 where relay = 'relay-c' order by ord),
          array(select id from jobs.outbox order by id offset 8),
          'R14: a third relay''s batch is the last 2 ids, in id order');

-- after the leases lapse, two relays each claiming everything answer the same order
select jobs_test.advance(interval '31 seconds') \g /dev/null
insert into jobs_test.r14
  select 'relay-d', c.ord, c.id
    from jobs.outbox_claim(relay_id => 'relay-d', batch_size => 10)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select jobs_test.advance(interval '31 seconds') \g /dev/null
insert into jobs_test.r14
  select 'relay-e', c.ord, c.id
    from jobs.outbox_claim(relay_id => 'relay-e', batch_size => 10)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select is(array(select id from jobs_test.r14 where relay = 'relay-d' order by ord),
          array(select id from jobs.outbox order by id),
          'R14: a relay claiming all 10 answers them in id order');
select is(array(select id from jobs_test.r14 where relay = 'relay-e' order by ord),
          array(select id from jobs_test.r14 where relay = 'relay-d' order by ord),
          'R14: a second relay claiming all 10 answers the identical order');

set local enable_indexscan = on;
set local enable_indexonlyscan = on;
set local enable_bitmapscan = on;

-- staged_at comes first: a row of a transaction that started earlier (earlier staged_at) is
-- claimed before a row staged earlier by a later transaction, though its id is higher
delete from jobs.outbox;
set local durajobs.now = '2026-01-03 01:00:10+00';
select (jobs.outbox_stage(name => 'o2', input => '{}', idempotency_key => 'k-o2-late')).id as o2_late \gset
-- ids carry the wall clock's milliseconds: let one pass so the second id is the higher
select pg_sleep(0.002) \g /dev/null
set local durajobs.now = '2026-01-03 01:00:00+00';
select (jobs.outbox_stage(name => 'o2', input => '{}', idempotency_key => 'k-o2-early')).id as o2_early \gset
set local durajobs.now = '2026-01-03 01:00:20+00';
select ok(:'o2_early'::uuid > :'o2_late'::uuid, 'the row staged second has the higher id');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 1)),
          array[:'o2_early'::uuid], 'the batch of 1 is the row with the earlier staged_at, not the lower id');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 1)),
          array[:'o2_late'::uuid], 'the next batch is the row with the later staged_at');

-- ---------------------------------------------------------------------------------------------
-- R12: a relay whose lease lapsed cannot release or mark the rows another relay re-claimed;
-- the re-claimer marks them; a second mark is a no-op (first writer wins)

delete from jobs.outbox;
set local durajobs.now = '2026-01-04 00:00:00+00';
select jobs.outbox_stage(name => 'm', input => '{}', idempotency_key => 'k-m-' || g)
  from generate_series(1, 3) g \g /dev/null
create table jobs_test.m_ids as select array_agg(id order by id) as ids from jobs.outbox;
select ids as m_ids from jobs_test.m_ids \gset
select is((select count(*) from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10)), 3::bigint,
          'R12: relay-a claims the 3 rows');
select jobs_test.advance(interval '31 seconds') \g /dev/null
select is((select count(*) from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)), 3::bigint,
          'R12: relay-a''s lease lapsed: relay-b re-claims the 3 rows');
select is(jobs.outbox_release(relay_id => 'relay-a', ids => :'m_ids'), 0,
          'R12: relay-a''s late release releases 0 rows');
select is((select count(*) from jobs.outbox
            where claimed_by = 'relay-b' and claim_expires_at = jobs._now() + interval '30 seconds'),
          3::bigint, 'R12: relay-a''s late release leaves relay-b''s claim as it was');
select is_empty(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-a', ids => %L)$$, :'m_ids'),
                'R12: relay-a''s late mark_published marks nothing');
select is((select count(*) from jobs.outbox where published_at is not null), 0::bigint,
          'R12: relay-a''s late mark_published retires no row nobody published');
select set_eq(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-b', ids => %L)$$, :'m_ids'),
              $$select unnest(ids) from jobs_test.m_ids$$,
              'R12: relay-b''s mark_published marks the 3 rows and answers their ids');
select is((select count(*) from jobs.outbox where published_at = jobs._now()), 3::bigint,
          'R12: published_at is relay-b''s now');

-- first writer wins: a second mark, later, is a no-op and keeps published_at
select jobs_test.advance(interval '5 seconds') \g /dev/null
select is_empty(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-b', ids => %L)$$, :'m_ids'),
                'R12: a second mark_published of published rows marks nothing');
select is((select count(*) from jobs.outbox where published_at = '2026-01-04 00:00:31+00'), 3::bigint,
          'R12: published_at is unchanged by the second mark (first writer wins)');
select is(jobs.outbox_release(relay_id => 'relay-b', ids => :'m_ids'), 0,
          'a release of published rows releases nothing');
select is((select count(*) from jobs.outbox where published_at = '2026-01-04 00:00:31+00'), 3::bigint,
          'a release of published rows leaves them published');
-- a published row is never claimed again, even after its lease lapsed
select jobs_test.advance(interval '1 minute') \g /dev/null
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)$$,
                'a published row is never claimed again');

-- a relay whose lease lapsed (nobody re-claimed yet) no longer holds its rows: its mark and
-- release change nothing, and the row stays claimable
delete from jobs.outbox;
select (jobs.outbox_stage(name => 'm-lapsed', input => '{}', idempotency_key => 'k-m-lapsed')).id as ml_id \gset
select jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10) \g /dev/null
select jobs_test.advance(interval '31 seconds') \g /dev/null
select is_empty(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-a', ids => array[%L::uuid])$$, :'ml_id'),
                'a mark_published after the claimant''s lease lapsed marks nothing');
select is(jobs.outbox_release(relay_id => 'relay-a', ids => array[:'ml_id'::uuid]), 0,
          'a release after the claimant''s lease lapsed releases nothing');
select is((select published_at from jobs.outbox where id = :'ml_id'), null,
          'the lapsed row is still unpublished');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)), array[:'ml_id'::uuid],
          'the lapsed row is claimable by another relay');

-- ---------------------------------------------------------------------------------------------
-- R13: every mutation is fenced on the claimant: naming another relay's rows changes nothing

delete from jobs.outbox;
set local durajobs.now = '2026-01-05 00:00:00+00';
select jobs.outbox_stage(name => 'f', input => '{}', idempotency_key => 'k-f-' || g)
  from generate_series(1, 2) g \g /dev/null
create table jobs_test.f_ids as
  select array_agg(c.id order by c.id) as ids
    from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10) c;
select ids as f_ids from jobs_test.f_ids \gset
select is_empty(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-b', ids => %L)$$, :'f_ids'),
                'R13: mark_published naming another relay''s rows marks nothing');
select is(jobs.outbox_release(relay_id => 'relay-b', ids => :'f_ids'), 0,
          'R13: release naming another relay''s rows releases nothing');
select is((select count(*) from jobs.outbox
            where claimed_by = 'relay-a' and claim_expires_at = '2026-01-05 00:00:30+00'
              and published_at is null), 2::bigint,
          'R13: the rows are still relay-a''s, under the same lease, unpublished');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)$$,
                'R13: the rows are still not claimable by relay-b');

-- a mixed call marks only the caller's own rows
select (jobs.outbox_stage(name => 'f', input => '{}', idempotency_key => 'k-f-c')).id as fc_id \gset
select jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10) \g /dev/null
select is(array(select * from jobs.outbox_mark_published(relay_id => 'relay-c',
                                                         ids => :'f_ids'::uuid[] || :'fc_id'::uuid)),
          array[:'fc_id'::uuid], 'R13: a mark naming its own and another relay''s rows marks only its own');
select is((select count(*) from jobs.outbox where id = any(:'f_ids') and published_at is null), 2::bigint,
          'R13: the other relay''s rows stay unpublished');

-- release hands rows back at once: claimable with no wait for the lease
select is(jobs.outbox_release(relay_id => 'relay-a', ids => :'f_ids'), 2,
          'release answers how many rows it released');
select is((select count(*) from jobs.outbox
            where id = any(:'f_ids') and claimed_by is null and claim_expires_at is null), 2::bigint,
          'release clears claimed_by and claim_expires_at');
select set_eq($$select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)$$,
              $$select unnest(ids) from jobs_test.f_ids$$,
              'released rows are claimable at once by another relay, with no wait for the lease');

-- NULL ids and a missing claimant are refused
select throws_ok($$select * from jobs.outbox_mark_published(relay_id => 'relay-a', ids => null)$$,
                 'JQ001', null, 'mark_published: NULL ids raise JQ001');
select throws_ok($$select * from jobs.outbox_mark_published(relay_id => 'relay-a', ids => array[null::uuid])$$,
                 'JQ001', null, 'mark_published: an id array holding NULL raises JQ001');
select throws_ok($$select * from jobs.outbox_mark_published(relay_id => null, ids => '{}')$$,
                 'JQ001', null, 'mark_published: a NULL relay_id raises JQ001');
select throws_ok($$select * from jobs.outbox_mark_published(relay_id => ' ', ids => '{}')$$,
                 'JQ001', null, 'mark_published: a blank relay_id raises JQ001');
select throws_ok($$select jobs.outbox_release(relay_id => 'relay-a', ids => null)$$,
                 'JQ001', null, 'release: NULL ids raise JQ001');
select throws_ok($$select jobs.outbox_release(relay_id => 'relay-a', ids => array[null::uuid])$$,
                 'JQ001', null, 'release: an id array holding NULL raises JQ001');
select throws_ok($$select jobs.outbox_release(relay_id => null, ids => '{}')$$,
                 'JQ001', null, 'release: a NULL relay_id raises JQ001');
select throws_ok($$select jobs.outbox_release(relay_id => '', ids => '{}')$$,
                 'JQ001', null, 'release: an empty relay_id raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- R17: jobs._publish creates the job under the outbox row's id and run_id, with the staged
-- fields; R16: a re-publish after the job finished inserts nothing; R18: a staged duplicate of a
-- live key creates nothing and its ids name no row

delete from jobs.outbox;
set local durajobs.now = '2026-01-06 00:00:00+00';
select * from jobs.outbox_stage(
  name => 'p-full', input => '{"order": 7}', idempotency_key => 'k-p-full', queue => 'q-p-full',
  tenant_id => 'acme', run_at => '2026-01-07 00:00:00+00', max_attempts => 3, priority => -5,
  traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  enqueued_by => 'api@host-1') \gset p1_
select * from jobs.outbox_stage(name => 'p-done', input => '{}', idempotency_key => 'k-p-done',
                                queue => 'q-p-done') \gset p2_
select jobs_test.enqueue(name => 'p-dup', idempotency_key => 'k-p-dup', input => '{"holder": true}',
                         queue => 'q-p-dup') as p3_holder \gset
select run_id as p3_holder_run_id from jobs.jobs where id = :'p3_holder' \gset
select * from jobs.outbox_stage(name => 'p-dup', input => '{"staged": true}', idempotency_key => 'k-p-dup',
                                queue => 'q-p-dup') \gset p3_
select * from jobs.outbox_stage(name => 'p-null', input => '{"coupon": null}', idempotency_key => 'k-p-null') \gset p4_
select is(:'p3_deduped'::boolean, false, 'R18: staging a duplicate of a live key answers deduped = false (known only at publish)');

create table jobs_test.pub as
  select c as rec from jobs.outbox_claim(relay_id => 'relay-p', batch_size => 10) c;
select is((select count(*) from jobs_test.pub), 4::bigint, 'the 4 staged rows are claimed');

-- R17: the job is made under the staged ids, with the staged fields
select p.* from jobs_test.pub, lateral jobs._publish(rec) p where (rec).id = :'p1_id' \gset p1pub_
select is(:'p1pub_deduped'::boolean, false, 'R17: the first publish answers deduped = false');
select is(:'p1pub_id'::uuid, :'p1_id'::uuid, 'R17: the publish answers the staged id');
select is(:'p1pub_run_id'::uuid, :'p1_run_id'::uuid, 'R17: the publish answers the staged run_id');
select is((jobs_test.job(:'p1_id')).id, :'p1_id'::uuid, 'R17: the job row has the outbox row''s id');
select is((jobs_test.job(:'p1_id')).run_id, :'p1_run_id'::uuid, 'R17: the job row has the outbox row''s run_id');
select is((jobs_test.job(:'p1_id')).name, 'p-full', 'publish: name is the staged name');
select is((jobs_test.job(:'p1_id')).input, '{"order": 7}'::jsonb, 'publish: input is the staged input');
select is(jsonb_typeof((jobs_test.job(:'p1_id')).input), 'object', 'publish: input is a JSON object');
select is((jobs_test.job(:'p1_id')).idempotency_key, 'k-p-full', 'publish: the key is the staged key');
select is((jobs_test.job(:'p1_id')).queue, 'q-p-full', 'publish: queue is the staged queue');
select is((jobs_test.job(:'p1_id')).tenant_id, 'acme', 'publish: tenant_id is the staged tenant');
select is((jobs_test.job(:'p1_id')).run_at, '2026-01-07 00:00:00+00'::timestamptz, 'publish: run_at is the staged run_at');
select is((jobs_test.job(:'p1_id')).state, 'delayed', 'publish: a future staged run_at gives state delayed');
select is((jobs_test.job(:'p1_id')).max_attempts, 3, 'publish: max_attempts is the staged value');
select is((jobs_test.job(:'p1_id')).priority, -5, 'publish: priority is the staged value');
select is((jobs_test.job(:'p1_id')).traceparent, '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
          'publish: traceparent is the staged value');
select is((jobs_test.job(:'p1_id')).enqueued_by, 'api@host-1', 'publish: enqueued_by is the staged value');

-- the staged input reaches the job unchanged, JSON null fields included
select jobs._publish(rec) from jobs_test.pub where (rec).id = :'p4_id' \g /dev/null
select is((jobs_test.job(:'p4_id')).input, '{"coupon": null}'::jsonb,
          'publish: a staged input with a null field reaches the job unchanged');

-- R16: publish, run to done, publish again (a crash between publish and mark)
select p.* from jobs_test.pub, lateral jobs._publish(rec) p where (rec).id = :'p2_id' \gset p2pub_
select is(:'p2pub_deduped'::boolean, false, 'R16: the first publish inserts the job');
select is((jobs._publish(rec)).deduped, true, 'R16: a re-publish while the job is live answers deduped = true')
  from jobs_test.pub where (rec).id = :'p2_id';
select * from jobs_test.claim_one(queue => 'q-p-done', worker_id => 'w-p') \gset p2c_
select is(:'p2c_id'::uuid, :'p2_id'::uuid, 'R16: the published job is claimed');
select is(jobs.ack_v1(id => :'p2_id', worker_id => 'w-p', claim => :'p2c_claim'), true, 'R16: the job is acked');
select is((jobs_test.job(:'p2_id')).state, 'done', 'R16: the job is done');
select jobs_test.job_count() as r16_before \gset
select p.* from jobs_test.pub, lateral jobs._publish(rec) p where (rec).id = :'p2_id' \gset p2re_
select is(:'p2re_deduped'::boolean, true, 'R16: a re-publish after the job finished answers deduped = true');
select is(:'p2re_id'::uuid, :'p2_id'::uuid, 'R16: the re-publish answers the same id');
select is(:'p2re_run_id'::uuid, :'p2_run_id'::uuid, 'R16: the re-publish answers the same run_id');
select is(jobs_test.job_count(), :'r16_before'::bigint, 'R16: the re-publish inserts nothing');
select is((select count(*) from jobs.jobs where name = 'p-done' and idempotency_key = 'k-p-done'), 1::bigint,
          'R16: one job row has the key');
select is((jobs_test.job(:'p2_id')).state, 'done', 'R16: the finished job is left done');
select is((jobs_test.claim_one(queue => 'q-p-done', worker_id => 'w-p')).id, null,
          'R16: nothing is left to claim: the handler runs once');

-- R18: a staged duplicate of a live key creates nothing, and its ids name no row
select jobs_test.job_count() as r18_before \gset
select p.* from jobs_test.pub, lateral jobs._publish(rec) p where (rec).id = :'p3_id' \gset p3pub_
select is(:'p3pub_deduped'::boolean, true, 'R18: publishing a staged duplicate answers deduped = true');
select is(:'p3pub_id'::uuid, :'p3_holder'::uuid, 'R18: it answers the live holder''s id');
select is(jobs_test.job_count(), :'r18_before'::bigint, 'R18: the publish creates no job');
select is((select count(*) from jobs.jobs where id = :'p3_id'), 0::bigint, 'R18: no row has the staged id');
select is((select count(*) from jobs.jobs where run_id = :'p3_run_id'), 0::bigint, 'R18: no row has the staged run_id');
select is((jobs_test.job(:'p3_holder')).input, '{"holder": true}'::jsonb, 'R18: the holder''s input is unchanged');
select is((jobs_test.job(:'p3_holder')).run_id, :'p3_holder_run_id'::uuid, 'R18: the holder''s run_id is unchanged');
select is((jobs_test.job(:'p3_holder')).state, 'ready', 'R18: the holder is still ready');

-- ---------------------------------------------------------------------------------------------
-- outbox_relay: claim, publish in staged order and mark, in one call

delete from jobs.outbox;
-- staged out of id order: the row staged second belongs to a transaction that started earlier
set local durajobs.now = '2026-01-08 00:00:10+00';
select * from jobs.outbox_stage(name => 'r', input => '{"n": 1}', idempotency_key => 'k-r-1', queue => 'q-r') \gset r1_
select pg_sleep(0.002) \g /dev/null
set local durajobs.now = '2026-01-08 00:00:00+00';
select * from jobs.outbox_stage(name => 'r', input => '{"n": 2}', idempotency_key => 'k-r-2', queue => 'q-r') \gset r2_
select ok(:'r2_id'::uuid > :'r1_id'::uuid, 'relay: the row staged second has the higher id');
set local durajobs.now = '2026-01-08 00:00:20+00';
select * from jobs.outbox_stage(name => 'r', input => '{"n": 3}', idempotency_key => 'k-r-3', queue => 'q-r') \gset r3_
set local durajobs.now = '2026-01-08 00:01:00+00';

create table jobs_test.relayed as
  select r.ord, r.id, r.run_id, r.deduped
    from jobs.outbox_relay(relay_id => 'relay-r') with ordinality as r(id, run_id, deduped, ord);
select is(array(select id from jobs_test.relayed order by ord), array[:'r2_id', :'r1_id', :'r3_id']::uuid[],
          'relay: publishes the batch in (staged_at, id) order');
select is(array(select run_id from jobs_test.relayed order by ord),
          array[:'r2_run_id', :'r1_run_id', :'r3_run_id']::uuid[], 'relay: answers the staged run_ids');
select is(array(select deduped from jobs_test.relayed order by ord), array[false, false, false],
          'relay: answers deduped = false for new jobs');
select is((select count(*) from jobs.jobs j join jobs.outbox o using (id, run_id)
            where j.queue = 'q-r' and j.input = o.request -> 'input'), 3::bigint,
          'relay: each job exists under its outbox row''s id and run_id, with its input');
select is((select count(*) from jobs.outbox where published_at = jobs._now() and claimed_by = 'relay-r'),
          3::bigint, 'relay: the rows are marked published in the same call');
select is_empty($$select * from jobs.outbox_relay(relay_id => 'relay-r')$$,
                'relay: a second call publishes nothing');
select jobs_test.advance(interval '31 seconds') \g /dev/null
select is_empty($$select * from jobs.outbox_relay(relay_id => 'relay-s')$$,
                'relay: after the claim lease lapses, another relay publishes nothing (the rows are marked)');
select is((select count(*) from jobs.jobs where queue = 'q-r'), 3::bigint, 'relay: each row made one job');

-- a row staged later is published by the next call, and only it
select jobs_test.advance(interval '1 second') \g /dev/null
select * from jobs.outbox_stage(name => 'r', input => '{"n": 4}', idempotency_key => 'k-r-4', queue => 'q-r') \gset r4_
select results_eq($$select id, run_id, deduped from jobs.outbox_relay(relay_id => 'relay-r')$$,
                  format($$values (%L::uuid, %L::uuid, false)$$, :'r4_id', :'r4_run_id'),
                  'relay: a row staged later is published by the next call, alone');
select isnt((select published_at from jobs.outbox where id = :'r4_id'), null, 'relay: the later row is marked');

-- batch_size bounds a call, and the next call takes the rest in order
select jobs_test.advance(interval '1 second') \g /dev/null
select (jobs.outbox_stage(name => 'r', input => '{}', idempotency_key => 'k-r-b' || g, queue => 'q-r')).id
  from generate_series(1, 3) g \g /dev/null
select is((select count(*) from jobs.outbox_relay(relay_id => 'relay-r', batch_size => 2)), 2::bigint,
          'relay: batch_size 2 publishes exactly 2');
select is(array(select id from jobs.outbox where published_at is null),
          array(select id from jobs.outbox where request ->> 'idempotency_key' like 'k-r-b%' order by staged_at, id offset 2),
          'relay: the row left is the last in staged order');
select is((select count(*) from jobs.outbox_relay(relay_id => 'relay-r', batch_size => 2)), 1::bigint,
          'relay: the next call publishes the rest');

-- a row another relay holds under a live lease is not published
select jobs_test.advance(interval '1 second') \g /dev/null
select (jobs.outbox_stage(name => 'r', input => '{}', idempotency_key => 'k-r-held', queue => 'q-r')).id as rh_id \gset
select jobs.outbox_claim(relay_id => 'relay-x', batch_size => 10) \g /dev/null
select is_empty($$select * from jobs.outbox_relay(relay_id => 'relay-r')$$,
                'relay: a row another relay holds under a live lease is not published');
select is((select count(*) from jobs.jobs where id = :'rh_id'), 0::bigint, 'relay: no job for the held row');
select jobs_test.advance(interval '31 seconds') \g /dev/null
select is(array(select id from jobs.outbox_relay(relay_id => 'relay-r')), array[:'rh_id'::uuid],
          'relay: once that lease lapses, the row is published');
select is_empty(format($$select * from jobs.outbox_mark_published(relay_id => 'relay-x', ids => array[%L::uuid])$$, :'rh_id'),
                'relay: the dead relay''s late mark changes nothing');

-- R18 through the relay: a staged duplicate of a live key is answered deduped and marked, and
-- its staged id names no row
select jobs_test.enqueue(name => 'r-dup', idempotency_key => 'k-r-dup', queue => 'q-r-dup') as rd_holder \gset
select (jobs.outbox_stage(name => 'r-dup', input => '{}', idempotency_key => 'k-r-dup', queue => 'q-r-dup')).id as rd_id \gset
select results_eq($$select id, deduped from jobs.outbox_relay(relay_id => 'relay-r')$$,
                  format($$values (%L::uuid, true)$$, :'rd_holder'),
                  'R18: the relay answers the live holder, deduped = true');
select is((select count(*) from jobs.jobs where id = :'rd_id'), 0::bigint, 'R18: after the relay no row has the staged id');
select isnt((select published_at from jobs.outbox where id = :'rd_id'), null,
            'R18: the duplicate row is marked published, not left to be retried');

-- a refused relay call
select throws_ok($$select * from jobs.outbox_relay(relay_id => null)$$,
                 'JQ001', null, 'relay: a NULL relay_id raises JQ001');
select throws_ok($$select * from jobs.outbox_relay(relay_id => 'relay-r', batch_size => 0)$$,
                 'JQ001', null, 'relay: batch_size 0 raises JQ001');

select * from finish();
rollback;
