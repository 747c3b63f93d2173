-- Revision 0003 down: remove the event bus and go back to schema version 2. Refused while runs
-- wait for an event: they would wait for ever.
do $$
declare
  v_waiting bigint;
begin
  select count(*) into v_waiting
    from jobs.steps s
    join jobs.jobs j on j.run_id = s.run_id and j.state = 'suspended'
   where s.status = 'waiting';
  if v_waiting > 0 then
    raise exception 'durajobs revision 0003 down: % runs wait for an event', v_waiting
      using hint = 'let them finish, or cancel them (jobs.cancel), then downgrade';
  end if;
end;
$$;

drop function jobs.find_event(text, text, timestamptz);
drop function jobs.publish_event(text, jsonb, text, interval);
drop type jobs.event_lookup;
drop table jobs.events;

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 2
$$;
