-- 032_plan_stability: the claim and the settles read what they touch, whatever the statistics
-- say. Two ways the planner misjudges a job table that empties and fills again:
-- 1. an analyze saw it drained: with no rows per page on record it takes a backlog for empty and
--    prices a whole index read at a page (a soak's worker fell from 4,000 jobs a second to 50
--    for a minute: each claim read 200,000 entries through another index);
-- 2. its plans were made while the table was a page or two, and are kept while a backlog fills
--    it, until an analyze or a vacuum of the table has them made again.
-- Each claim, ack, nack and heartbeat below must read a few entries per row it touches.
begin;
\ir fixtures/factory.sql
select plan(15);

-- one round of every call of the worker's protocol on the rows of queue ps: claim `batch`,
-- renew them singly and as a batch, ack two, nack two and ack the rest as a batch. Answers the
-- entries each call read, by name.
create function jobs_test.protocol_round(batch integer)
returns jsonb
language plpgsql
volatile
as $$
declare
  v_ids uuid[];
  v_claims bigint[];
  v_reads jsonb := '{}';
begin
  perform jobs_test.mark();
  select array_agg(c.id order by c.id), array_agg(c.claim order by c.id)
    into v_ids, v_claims
    from jobs.claim_v1(array['ps'], 'w-ps', batch) c;
  v_reads := v_reads || jsonb_build_object('claim', jobs_test.read_since_mark());
  if cardinality(v_ids) <> batch then
    raise exception 'the claim took % of % rows', cardinality(v_ids), batch;
  end if;

  perform jobs_test.mark();
  perform jobs.heartbeat_v1(v_ids[1], 'w-ps', v_claims[1]);
  v_reads := v_reads || jsonb_build_object('heartbeat_v1', jobs_test.read_since_mark());
  perform jobs_test.mark();
  perform jobs.heartbeat_many_v1('w-ps', v_ids, v_claims);
  v_reads := v_reads || jsonb_build_object('heartbeat_many_v1', jobs_test.read_since_mark());

  perform jobs_test.mark();
  perform jobs.ack_v1(v_ids[1], 'w-ps', v_claims[1]);
  v_reads := v_reads || jsonb_build_object('ack_v1', jobs_test.read_since_mark());
  perform jobs_test.mark();
  perform jobs.nack_v1(v_ids[2], 'w-ps', v_claims[2], 'failed', error => 'no');
  v_reads := v_reads || jsonb_build_object('nack_v1', jobs_test.read_since_mark());
  perform jobs_test.mark();
  perform jobs.nack_many_v1('w-ps', jsonb_build_array(
    jsonb_build_object('id', v_ids[3], 'claim', v_claims[3], 'next_state', 'failed')));
  v_reads := v_reads || jsonb_build_object('nack_many_v1', jobs_test.read_since_mark());
  perform jobs_test.mark();
  perform jobs.ack_many_v1('w-ps', v_ids[4:], v_claims[4:]);
  v_reads := v_reads || jsonb_build_object('ack_many_v1', jobs_test.read_since_mark());
  return v_reads;
end;
$$;

create function jobs_test.enqueue_ps(how_many integer, tag text)
returns void
language sql
volatile
as $$
  select count(*) from jobs.enqueue_many(
    (select jsonb_agg(jsonb_build_object('name', 'ps', 'queue', 'ps', 'input', '{}'::jsonb,
                                         'idempotency_key', tag || n))
       from generate_series(1, how_many) n))
$$;

-- =============================================================================================
-- 1. statistics that say the table is empty while it holds 20,000 waiting rows

select jobs_test.enqueue_ps(4000, 'gone-');
delete from jobs.jobs_live;
analyze jobs.jobs_live;
select is((select reltuples from pg_class where oid = 'jobs.jobs_live'::regclass), 0::real,
          'an analyze of the drained table records no rows');
select ok((select relpages from pg_class where oid = 'jobs.jobs_live'::regclass) > 10,
          'on the pages the drained rows filled');
select jobs_test.enqueue_ps(20000, 'a-');

-- the first round plans every statement; the second runs on kept plans
select jobs_test.protocol_round(200) \g /dev/null
select jobs_test.protocol_round(200) as reads \gset
select cmp_ok((:'reads'::jsonb ->> 'claim')::bigint, '<', 2000::bigint,
              'a claim of 200 reads a few entries a row, not the 20,000 the statistics hide');
select cmp_ok((:'reads'::jsonb ->> 'heartbeat_v1')::bigint, '<', 20::bigint,
              'a heartbeat reads its row by primary key');
select cmp_ok((:'reads'::jsonb ->> 'heartbeat_many_v1')::bigint, '<', 2000::bigint,
              'a batch heartbeat of 200 reads its rows by primary key');
select cmp_ok((:'reads'::jsonb ->> 'ack_v1')::bigint, '<', 20::bigint,
              'an ack reads its row by primary key');
select cmp_ok((:'reads'::jsonb ->> 'nack_v1')::bigint, '<', 20::bigint,
              'a nack reads its row by primary key');
select cmp_ok((:'reads'::jsonb ->> 'nack_many_v1')::bigint, '<', 20::bigint,
              'a batch nack reads its rows by primary key');
select cmp_ok((:'reads'::jsonb ->> 'ack_many_v1')::bigint, '<', 2000::bigint,
              'a batch ack of 197 reads its rows by primary key');

-- =============================================================================================
-- 2. plans made while the table was a page, kept while 20,000 rows fill it

truncate jobs.jobs_live;
analyze jobs.jobs_live;
-- six rounds: the plan cache keeps a generic plan from the sixth call of a statement on
select jobs_test.enqueue_ps(60, 'small-');
select jobs_test.protocol_round(10) from generate_series(1, 6) \g /dev/null
select is((select relpages from pg_class where oid = 'jobs.jobs_live'::regclass), 0,
          'the plans were made with the table on record as empty and pageless');
select jobs_test.enqueue_ps(20000, 'b-');

select jobs_test.protocol_round(200) as reads \gset
select cmp_ok((:'reads'::jsonb ->> 'claim')::bigint, '<', 2000::bigint,
              'a kept claim plan reads a few entries a row, not the table that grew under it');
select cmp_ok((:'reads'::jsonb ->> 'heartbeat_v1')::bigint
                + (:'reads'::jsonb ->> 'ack_v1')::bigint
                + (:'reads'::jsonb ->> 'nack_v1')::bigint, '<', 60::bigint,
              'kept plans of a heartbeat, an ack and a nack read their rows by primary key');
select cmp_ok((:'reads'::jsonb ->> 'heartbeat_many_v1')::bigint, '<', 2000::bigint,
              'a kept batch heartbeat plan reads its rows by primary key');
select cmp_ok((:'reads'::jsonb ->> 'nack_many_v1')::bigint, '<', 20::bigint,
              'a kept batch nack plan reads its rows by primary key');
select cmp_ok((:'reads'::jsonb ->> 'ack_many_v1')::bigint, '<', 2000::bigint,
              'a kept batch ack plan reads its rows by primary key');

select * from finish();
rollback;
