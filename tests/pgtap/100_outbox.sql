-- 100_outbox: the transactional outbox: jobs.outbox_stage, the relay's lease claim
-- (jobs.outbox_claim), its fenced mark and release (jobs.outbox_mark_published,
-- jobs.outbox_release), the publish under the staged ids (jobs._publish) and the one-call relay
-- (jobs.outbox_relay), with the regression cases R11-R18 and R21, the publish order
-- (staged_at, seq) and the prefix rule (a relay claims only ahead of the rows another relay
-- holds under a live lease). The wake (NOTIFY on commit) cannot be observed inside one
-- transaction and is not tested here; nor is the claim's serialisation: its advisory lock is
-- transaction-scoped, and the whole file is one transaction, so every claim re-enters it.
--
-- jobs.outbox_claim looks at every unpublished row, so each section starts from an empty outbox
-- (`delete from jobs.outbox`, rolled back with the file).
begin;
\ir fixtures/factory.sql
select plan(198);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- outbox_stage answers (id, run_id, false): the ids the job will have, known at stage time (R17)

select * from jobs.outbox_stage(name => 's1', input => '{"user_id": 1}', idempotency_key => 'k-s1') \gset s1_
select is(:'s1_deduped'::boolean, false, 'stage answers deduped = false');
select is(substr(replace(:'s1_id', '-', ''), 13, 1), '7', 'stage: the answered id is a uuid v7');
select isnt(:'s1_run_id'::uuid, null, 'R17: stage answers a run_id');
select is(:'s1_run_id'::uuid, :'s1_id'::uuid,
          'R17: the run_id is the job''s own id, which names the job''s run');
select is((select count(*) from jobs.outbox where id = :'s1_id'), 1::bigint,
          'stage: the answered id is the outbox row''s id');
select is((select run_id from jobs.outbox where id = :'s1_id'), :'s1_run_id'::uuid,
          'stage: the answered run_id is stored on the row');
select is((select staged_at from jobs.outbox where id = :'s1_id'), jobs._now(),
          'stage: staged_at is now');
select is((select row(claimed_by, claim_expires_at, published_at)::text from jobs.outbox where id = :'s1_id'),
          row(null::text, null::timestamptz, null::timestamptz)::text,
          'stage: a staged row is unclaimed and unpublished');
-- options left out stay out: the publish takes the queue database's declaration, or the defaults
select is((select request from jobs.outbox where id = :'s1_id'),
          '{"name": "s1", "input": {"user_id": 1}, "idempotency_key": "k-s1"}'::jsonb,
          'stage: a minimal request holds name, input and key only');

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
select throws_ok($$select jobs.outbox_stage(name => 'x', input => '{}', idempotency_key => 'k-bad', run_at => 'infinity')$$,
                 'JQ001', null, 'stage: run_at ''infinity'' raises JQ001');
select is((select count(*) from jobs.outbox), :'stage_refusals_before'::bigint, 'a refused stage stores nothing');
select is((select count(*) from jobs.outbox where request ->> 'idempotency_key' = 'k-bad'), 0::bigint,
          'a refused stage leaves no row with its key');
select is(jobs_test.job_count(), 0::bigint, 'a refused stage inserts no job row');

-- ---------------------------------------------------------------------------------------------
-- R11: outbox_claim is a claim under a lease: it stamps the claimant and the expiry, a second
-- relay inside the lease gets nothing (neither relay-a's rows nor, by the prefix rule, the rows
-- behind them), and after the lease lapses the rows come back, with the rows behind them

delete from jobs.outbox;
set local durajobs.now = '2026-01-02 00:00:00+00';
select jobs.outbox_stage(name => 'c', input => '{}', idempotency_key => 'k-c-' || g)
  from generate_series(1, 5) g \g /dev/null

create table jobs_test.claim_a as
  select * from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 3, lease => interval '30 seconds');
select is((select count(*) from jobs_test.claim_a), 3::bigint, 'R11: a batch of 3 out of 5 claims exactly 3');
select is(array(select id from jobs_test.claim_a),
          array(select id from jobs.outbox order by staged_at, seq limit 3),
          'R11: the batch is the first 3 rows in (staged_at, seq) order, answered in that order');
select is((select count(*) from jobs_test.claim_a
            where claimed_by = 'relay-a' and claim_expires_at = '2026-01-02 00:00:30+00'), 3::bigint,
          'R11: each claimed record answers claimed_by and claim_expires_at = now + lease');
select is((select count(*) from jobs.outbox o join jobs_test.claim_a a using (id)
            where o.claimed_by = 'relay-a' and o.claim_expires_at = '2026-01-02 00:00:30+00'), 3::bigint,
          'R11: the claim is stamped on the rows');
select is((select count(*) from jobs.outbox where claimed_by is null), 2::bigint,
          'R11: the 2 rows outside the batch are not stamped');

-- a second relay inside the lease gets none of relay-a's rows, and (the prefix rule) none of
-- the 2 unclaimed rows behind them either: it stands by
select jobs_test.advance(interval '10 seconds') \g /dev/null
create table jobs_test.claim_b as
  select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10, lease => interval '30 seconds');
select is((select count(*) from jobs_test.claim_b), 0::bigint,
          'R11: a second relay inside the lease gets nothing, not even the 2 unclaimed rows behind relay-a''s');
select is((select count(*) from jobs.outbox o left join jobs_test.claim_a a using (id)
            where a.id is null and o.claimed_by is null and o.claim_expires_at is null), 2::bigint,
          'R11: the 2 rows behind relay-a''s are left unclaimed');
select is((select count(*) from jobs.outbox o join jobs_test.claim_a a using (id) where o.claimed_by = 'relay-a'),
          3::bigint, 'R11: relay-a''s rows are still relay-a''s');

-- one second before relay-a's lease lapses, nothing is claimable
select jobs_test.advance(interval '19 seconds') \g /dev/null
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)$$,
                'R11: inside the lease a committed row cannot be claimed twice');

-- after the lease lapses (relay-a died), another relay re-claims relay-a's rows and the rows
-- behind them, in order
select jobs_test.advance(interval '2 seconds') \g /dev/null
create table jobs_test.claim_c as
  select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10, lease => interval '1 minute');
select is(array(select id from jobs_test.claim_c),
          array(select id from jobs.outbox order by staged_at, seq),
          'R11: after the lease lapses another relay re-claims the dead relay''s rows and the 2 behind them, in order');
select is((select count(*) from jobs_test.claim_c c join jobs_test.claim_a a using (id)), 3::bigint,
          'R11: the re-claim includes each of the dead relay''s rows');
select is((select count(*) from jobs.outbox o join jobs_test.claim_c c using (id)
            where o.claimed_by = 'relay-c' and o.claim_expires_at = jobs._now() + interval '1 minute'),
          5::bigint, 'R11: the re-claim stamps the new claimant and a new expiry on all 5 rows');

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
-- The prefix rule: a relay claims only rows ahead of the first unpublished row another relay
-- holds under a live lease. While relay-a holds rows, relay-b claims nothing behind them (one
-- relay works, the others stand by); relay-b proceeds once relay-a has published them, released
-- them, or let its lease lapse. relay-a claiming again while it holds rows re-takes its own rows
-- first: a relay never claims past rows it still holds, so it cannot overtake them either.

delete from jobs.outbox;
set local durajobs.now = '2026-01-02 12:00:00+00';
select jobs.outbox_stage(name => 'h', input => '{}', idempotency_key => 'k-h-' || g)
  from generate_series(1, 8) g \g /dev/null
select array_agg(id order by staged_at, seq) as h_ids from jobs.outbox \gset

select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 2)),
          (:'h_ids'::uuid[])[1:2], 'prefix: relay-a claims the first 2 of 8 rows');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)$$,
                'prefix: while relay-a holds the first rows under a live lease, relay-b claims nothing, not even the 6 unclaimed rows behind them');
select is((select count(*) from jobs.outbox where claimed_by is null), 6::bigint,
          'prefix: relay-b''s empty claim stamped no row');

-- relay-a claiming again while it holds rows re-takes its own rows first, then the next ones
select jobs_test.advance(interval '5 seconds') \g /dev/null
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 4)),
          (:'h_ids'::uuid[])[1:4], 'prefix: relay-a claiming again re-takes its own held rows first, never claiming past them');
select is(array(select claim_expires_at from jobs.outbox where claimed_by = 'relay-a' order by staged_at, seq),
          array['2026-01-02 12:00:35+00', '2026-01-02 12:00:35+00',
                '2026-01-02 12:00:35+00', '2026-01-02 12:00:35+00']::timestamptz[],
          'R11: the re-taken rows and the new ones share the new lease; no other relay holds any of them');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)$$,
                'prefix: relay-b still claims nothing while relay-a holds 4 rows');

-- publishing some of its rows is not enough while relay-a still holds earlier-staged ones
select is(array(select * from jobs.outbox_mark_published(relay_id => 'relay-a', ids => (:'h_ids'::uuid[])[1:2]) m order by 1),
          array(select unnest((:'h_ids'::uuid[])[1:2]) order by 1), 'prefix: relay-a marks its first 2 rows published');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)$$,
                'prefix: with rows 1-2 published and rows 3-4 still held by relay-a, relay-b claims nothing behind them');

-- a release hands relay-a's rows on at once, and the rows behind them with them
select is(jobs.outbox_release(relay_id => 'relay-a', ids => (:'h_ids'::uuid[])[3:4]), 2,
          'prefix: relay-a releases rows 3-4 (a failed publish stopped its batch)');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 4)),
          (:'h_ids'::uuid[])[3:6],
          'prefix: once relay-a released its rows, relay-b claims them at once, with the rows after them, in order');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10)$$,
                'prefix: now relay-a stands by: it claims nothing behind relay-b''s rows');

-- a relay that published all it holds blocks nothing, though its lease is still live
select is((select count(*) from jobs.outbox_mark_published(relay_id => 'relay-b', ids => (:'h_ids'::uuid[])[3:6])),
          4::bigint, 'prefix: relay-b marks its 4 rows published');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10)),
          (:'h_ids'::uuid[])[7:8],
          'prefix: once relay-b published all it held, relay-a claims the rows behind them, inside relay-b''s lease');

-- a lapsed lease frees the dead relay's rows and every row behind them
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs.outbox_stage(name => 'h', input => '{}', idempotency_key => 'k-h-' || g)
  from generate_series(9, 10) g \g /dev/null
select array_agg(id order by staged_at, seq) as h2_ids from jobs.outbox
 where request ->> 'idempotency_key' in ('k-h-9', 'k-h-10') \gset
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)$$,
                'prefix: relay-c claims nothing behind relay-a''s live rows, not even rows staged later');
-- relay-a's rows 7-8 were claimed at 12:00:05 under a 30 s lease: it ends at 12:00:35
select jobs_test.advance(interval '29 seconds') \g /dev/null
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)),
          (:'h_ids'::uuid[])[7:8] || :'h2_ids'::uuid[],
          'prefix: when relay-a''s lease ends, relay-c claims relay-a''s rows and every row behind them, in order');

-- "ahead of": an unclaimed row that sorts before the first row another relay holds (a
-- transaction that started earlier and committed late) is claimable, and only it
delete from jobs.outbox;
set local durajobs.now = '2026-01-02 13:00:10+00';
select jobs.outbox_stage(name => 'h', input => '{}', idempotency_key => 'k-ha-' || g)
  from generate_series(1, 2) g \g /dev/null
select array_agg(id order by staged_at, seq) as ha_ids from jobs.outbox \gset
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 1)),
          (:'ha_ids'::uuid[])[1:1], 'prefix: relay-a claims the first of 2 rows');
set local durajobs.now = '2026-01-02 13:00:00+00';
select (jobs.outbox_stage(name => 'h', input => '{}', idempotency_key => 'k-ha-early')).id as ha_early \gset
set local durajobs.now = '2026-01-02 13:00:20+00';
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)),
          array[:'ha_early'::uuid],
          'prefix: a row staged ahead of relay-a''s held row is claimable by relay-b, and only it, not the row behind relay-a''s');
select is((select row(claimed_by, claim_expires_at)::text from jobs.outbox where id = (:'ha_ids'::uuid[])[2]),
          row(null::text, null::timestamptz)::text, 'prefix: the row behind relay-a''s is left unclaimed');
select is_empty($$select * from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10)$$,
                'prefix: the rule binds relay-a too: relay-b now holds an earlier row, so relay-a claims nothing behind it');

-- ---------------------------------------------------------------------------------------------
-- R14: (staged_at, seq) is a total order, and within a transaction it is the order the rows were
-- staged in. 10 rows staged in one transaction share staged_at; seq numbers them in the order of
-- the jobs.outbox_stage calls. Ids are time-ordered only to the millisecond, so rows of one
-- transaction can sort differently by id: here the ids are rewritten to sort in the reverse of
-- the staging order, so id order cannot give the staging order. The first half (by seq) is then
-- rewritten again, so the heap order is not the staging order either, and index scans are off,
-- so the (staged_at, seq) index does not hand it out: only the claim's own order can give it.

delete from jobs.outbox;
set local durajobs.now = '2026-01-03 00:00:00+00';
-- one call after another, in a known order: the input's n is the call's place
do $$
begin
  for g in 1..10 loop
    perform jobs.outbox_stage(name => 'o', input => jsonb_build_object('n', g), idempotency_key => 'k-o-' || g);
  end loop;
end;
$$;
select is((select count(distinct staged_at) from jobs.outbox), 1::bigint,
          'R14: the 10 rows staged in one transaction share staged_at');
select is(array(select (request -> 'input' ->> 'n')::integer from jobs.outbox order by seq),
          array(select generate_series(1, 10)), 'R14: seq numbers the rows in the order they were staged');

update jobs.outbox o
   set id = format('00000000-0000-7000-8000-%s', lpad((100 - r.n)::text, 12, '0'))::uuid
  from (select id, row_number() over (order by staged_at, seq) as n from jobs.outbox) r
 where o.id = r.id;
select is(array(select (request -> 'input' ->> 'n')::integer from jobs.outbox order by id),
          array(select generate_series(10, 1, -1)), 'R14: the ids now sort in the reverse of the staging order');
update jobs.outbox set request = request where seq in (select seq from jobs.outbox order by seq limit 5);
set local enable_indexscan = off;
set local enable_indexonlyscan = off;
set local enable_bitmapscan = off;

create table jobs_test.r14 as
  select 'a1'::text as batch, c.ord, (c.request -> 'input' ->> 'n')::integer as n, c.id
    from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
insert into jobs_test.r14
  select 'b', c.ord, (c.request -> 'input' ->> 'n')::integer, c.id
    from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
insert into jobs_test.r14
  select 'a2', c.ord, (c.request -> 'input' ->> 'n')::integer, c.id
    from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 4)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
insert into jobs_test.r14
  select 'a3', c.ord, (c.request -> 'input' ->> 'n')::integer, c.id
    from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 10)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select is(array(select n from jobs_test.r14 where batch = 'a1' order by ord), array[1, 2, 3, 4],
          'R14: the first batch of 4 is the first 4 rows staged, in staging order, though their ids sort last');
select is((select count(*) from jobs_test.r14 where batch = 'b'), 0::bigint,
          'R14: a second relay''s batch is empty while relay-a holds the first rows (the prefix rule)');
select is(array(select n from jobs_test.r14 where batch = 'a2' order by ord), array[1, 2, 3, 4],
          'R14: relay-a claiming again re-takes the rows it still holds, in staging order');
select is(array(select n from jobs_test.r14 where batch = 'a3' order by ord),
          array[1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
          'R14: a larger claim by relay-a answers its held rows, then the rest, in staging order');

-- after the leases lapse, two relays each claiming everything answer the same order
select jobs_test.advance(interval '31 seconds') \g /dev/null
insert into jobs_test.r14
  select 'd', c.ord, (c.request -> 'input' ->> 'n')::integer, c.id
    from jobs.outbox_claim(relay_id => 'relay-d', batch_size => 10)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select jobs_test.advance(interval '31 seconds') \g /dev/null
insert into jobs_test.r14
  select 'e', c.ord, (c.request -> 'input' ->> 'n')::integer, c.id
    from jobs.outbox_claim(relay_id => 'relay-e', batch_size => 10)
         with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord);
select is(array(select n from jobs_test.r14 where batch = 'd' order by ord), array(select generate_series(1, 10)),
          'R14: a relay claiming all 10 answers them in staging order (seq), not id order');
select is(array(select id from jobs_test.r14 where batch = 'e' order by ord),
          array(select id from jobs_test.r14 where batch = 'd' order by ord),
          'R14: a second relay claiming all 10 answers the identical order');

set local enable_indexscan = on;
set local enable_indexonlyscan = on;
set local enable_bitmapscan = on;

-- the same order where the (staged_at, seq) index may serve it
select jobs_test.advance(interval '31 seconds') \g /dev/null
select is(array(select (c.request -> 'input' ->> 'n')::integer
                  from jobs.outbox_claim(relay_id => 'relay-f', batch_size => 10)
                       with ordinality as c(id, run_id, staged_at, request, claimed_by, claim_expires_at, ord)
                 order by c.ord),
          array(select generate_series(1, 10)), 'R14: with index scans allowed, the same staging order');

-- staged_at comes first: a row of a transaction that started earlier (earlier staged_at) is
-- claimed before a row staged earlier by a later transaction, though its id and seq are higher
delete from jobs.outbox;
set local durajobs.now = '2026-01-03 01:00:10+00';
select (jobs.outbox_stage(name => 'o2', input => '{}', idempotency_key => 'k-o2-late')).id as o2_late \gset
-- ids carry the wall clock's milliseconds: let one pass so the second id is the higher
select pg_sleep(0.002) \g /dev/null
set local durajobs.now = '2026-01-03 01:00:00+00';
select (jobs.outbox_stage(name => 'o2', input => '{}', idempotency_key => 'k-o2-early')).id as o2_early \gset
set local durajobs.now = '2026-01-03 01:00:20+00';
select ok(:'o2_early'::uuid > :'o2_late'::uuid, 'the row staged second has the higher id');
select ok((select seq from jobs.outbox where id = :'o2_early') > (select seq from jobs.outbox where id = :'o2_late'),
          'the row staged second has the higher seq');
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-a', batch_size => 1)),
          array[:'o2_early'::uuid], 'the batch of 1 is the row with the earlier staged_at, not the lower id or seq');
select jobs.outbox_mark_published(relay_id => 'relay-a', ids => array[:'o2_early'::uuid]) \g /dev/null
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 1)),
          array[:'o2_late'::uuid], 'once it is published, the next batch is the row with the later staged_at');

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

-- a mixed call marks only the caller's own rows. While relay-a holds its rows, relay-c can hold
-- a row only ahead of them (the prefix rule): one of a transaction that started earlier and
-- committed late
set local durajobs.now = '2026-01-04 23:59:59+00';
select (jobs.outbox_stage(name => 'f', input => '{}', idempotency_key => 'k-f-c')).id as fc_id \gset
set local durajobs.now = '2026-01-05 00:00:00+00';
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-c', batch_size => 10)), array[:'fc_id'::uuid],
          'R13: relay-c claims the row ahead of relay-a''s, and only it');
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
select is(array(select id from jobs.outbox_claim(relay_id => 'relay-b', batch_size => 10)),
          array(select id from jobs.outbox where id = any(:'f_ids') order by staged_at, seq),
          'released rows are claimable at once by another relay, with no wait for the lease, in staging order');

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
          'relay: publishes the batch in (staged_at, seq) order');
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
          array(select id from jobs.outbox where request ->> 'idempotency_key' like 'k-r-b%' order by staged_at, seq offset 2),
          'relay: the row left is the last in staged order');
select is((select count(*) from jobs.outbox_relay(relay_id => 'relay-r', batch_size => 2)), 1::bigint,
          'relay: the next call publishes the rest');

-- the rows of one transaction go out in the order they were staged (seq), whatever their ids:
-- here the ids are rewritten to sort the other way
select jobs_test.advance(interval '1 second') \g /dev/null
do $$
begin
  for g in 1..5 loop
    perform jobs.outbox_stage(name => 'r', input => jsonb_build_object('n', g),
                              idempotency_key => 'k-r-seq-' || g, queue => 'q-r');
  end loop;
end;
$$;
update jobs.outbox o
   set id = format('00000000-0000-7000-8000-%s', lpad((200 - r.n)::text, 12, '0'))::uuid
  from (select id, row_number() over (order by staged_at, seq) as n
          from jobs.outbox where request ->> 'idempotency_key' like 'k-r-seq-%') r
 where o.id = r.id;
select is(array(select (request -> 'input' ->> 'n')::integer from jobs.outbox
                 where request ->> 'idempotency_key' like 'k-r-seq-%' order by id),
          array[5, 4, 3, 2, 1], 'relay: 5 rows staged in one transaction whose ids sort the other way');
create table jobs_test.relayed_seq as
  select r.ord, r.id
    from jobs.outbox_relay(relay_id => 'relay-r') with ordinality as r(id, run_id, deduped, ord);
select is(array(select (o.request -> 'input' ->> 'n')::integer
                  from jobs_test.relayed_seq s join jobs.outbox o using (id) order by s.ord),
          array[1, 2, 3, 4, 5], 'relay: publishes the rows of one transaction in the order they were staged');
select is(array(select (j.input ->> 'n')::integer
                  from jobs_test.relayed_seq s join jobs.jobs j using (id) order by s.ord),
          array[1, 2, 3, 4, 5], 'relay: each job is made under its own row''s id, with its input');

-- a row another relay holds under a live lease is not published, nor (the prefix rule) a row
-- staged after it
select jobs_test.advance(interval '1 second') \g /dev/null
select (jobs.outbox_stage(name => 'r', input => '{}', idempotency_key => 'k-r-held', queue => 'q-r')).id as rh_id \gset
select jobs.outbox_claim(relay_id => 'relay-x', batch_size => 10) \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select (jobs.outbox_stage(name => 'r', input => '{}', idempotency_key => 'k-r-behind', queue => 'q-r')).id as rb_id \gset
select is_empty($$select * from jobs.outbox_relay(relay_id => 'relay-r')$$,
                'relay: a row another relay holds under a live lease is not published, nor the row staged after it');
select is((select count(*) from jobs.jobs where id = :'rh_id'), 0::bigint, 'relay: no job for the held row');
select is((select count(*) from jobs.jobs where id = :'rb_id'), 0::bigint, 'relay: no job for the row behind it');
select jobs_test.advance(interval '30 seconds') \g /dev/null
select is(array(select id from jobs.outbox_relay(relay_id => 'relay-r')), array[:'rh_id'::uuid, :'rb_id'::uuid],
          'relay: once that lease lapses, the held row is published, then the row behind it');
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
