-- Revision 0002 down: remove the outbox and go back to schema version 1. Refused while staged
-- jobs wait unpublished: dropping them would lose those jobs.
do $$
declare
  v_waiting bigint;
begin
  select count(*) into v_waiting from jobs.outbox where published_at is null;
  if v_waiting > 0 then
    raise exception 'durajobs revision 0002 down: % staged jobs are not published yet', v_waiting
      using hint = 'run `durajobs relay` until the outbox is empty, then downgrade';
  end if;
end;
$$;

drop function jobs.outbox_relay(text, integer);
drop function jobs._publish(jobs.outbox_record);
drop function jobs.outbox_release(text, uuid[]);
drop function jobs.outbox_mark_published(text, uuid[]);
drop function jobs.outbox_claim(text, integer, interval);
drop function jobs._check_relay(text, text, uuid[]);
drop function jobs.outbox_stage(text, jsonb, text, text, text, timestamptz, integer, integer, uuid, text, text);
drop type jobs.outbox_record;
drop table jobs.outbox;

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 1
$$;
