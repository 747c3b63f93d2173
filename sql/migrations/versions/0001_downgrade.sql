-- durajobs revision 0001 down, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

do $$
declare
  v_object record;
begin
  for v_object in
    select p.oid::regprocedure as signature
      from pg_proc p
     where p.pronamespace = 'jobs'::regnamespace
  loop
    execute format('drop function %s cascade', v_object.signature);
  end loop;
  for v_object in
    select c.relname
      from pg_class c
     where c.relnamespace = 'jobs'::regnamespace
       and c.relkind = 'r'
       and c.relname <> 'alembic_version'
  loop
    execute format('drop table jobs.%I cascade', v_object.relname);
  end loop;
  for v_object in
    select t.typname
      from pg_type t
     where t.typnamespace = 'jobs'::regnamespace
       and t.typtype = 'c'
       and not exists (select 1 from pg_class c where c.oid = t.typrelid and c.relkind <> 'c')
  loop
    execute format('drop type jobs.%I cascade', v_object.typname);
  end loop;
end;
$$;
