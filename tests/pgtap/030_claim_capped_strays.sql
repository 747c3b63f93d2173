-- 030_claim_capped_strays: a waiting row left capped with no limit standing is claimed again.
-- An enqueue that read a limit before the clear of the last one committed writes its row capped
-- where the clear's unflagging cannot see it; with no limit standing, the claims read uncapped
-- rows only, so before revision 0026 such a row waited until some limit was set again. The
-- claim's recovery pass (recover_lapsed) unflags it; a claim without the pass leaves it be.
begin;
select plan(5);

set local durajobs.now = '2026-01-01 00:00:00+00';

select is((select standing from jobs.limits_standing), 0::bigint, 'no limit stands');
select id as stray from jobs.enqueue('stray', '{}', 'stray-1', queue => 'strays') \gset
-- the race's outcome, made by hand: the enqueue saw a limit the clear then removed
update jobs.jobs_live set capped = true where id = :'stray';

select is((select count(*) from jobs.claim_v1(queues => array['strays'], worker_id => 'w1',
                                              recover_lapsed => false)),
          0::bigint, 'a claim without the recovery pass does not hand the capped row out');
select is((select array_agg(c.id) from jobs.claim_v1(queues => array['strays'],
                                                       worker_id => 'w1',
                                                       recover_lapsed => true) c),
          array[:'stray'::uuid], 'the recovery pass unflags it, and the same claim hands it out');
select is((select (state, capped)::text from jobs.jobs_live where id = :'stray'),
          '(running,f)', 'it runs, uncapped');

-- while a limit stands, the pass leaves capped rows to the limited claim
select jobs.set_limit(queue => 'held', concurrency => 1) \g /dev/null
select id as held from jobs.enqueue('held-job', '{}', 'held-1', queue => 'held') \gset
update jobs.jobs_live set capped = true where id = :'held';
select jobs.claim_v1(queues => array['other'], worker_id => 'w1', recover_lapsed => true)
  \g /dev/null
select is((select capped from jobs.jobs_live where id = :'held'), true,
          'with a limit standing, a capped row keeps its flag');

select * from finish();
rollback;
