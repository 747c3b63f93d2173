-- 065_horizon: what holds this database's xmin horizon back. While any snapshot or transaction
-- older than the finished jobs stays open, no vacuum may remove their dead row versions and no
-- scan may mark their index entries dead: tables and indexes grow, and every scan that meets
-- them slows (the claim keeps marks past them, 031_claim_marks; other readers do not).
--
-- Reads pg_stat_activity, pg_prepared_xacts and pg_replication_slots. As the owner of schema
-- jobs: other roles' sessions show their xmin only to a superuser or a member of
-- pg_read_all_stats, so grant the owner that role for the answer to cover every session.

create type jobs.horizon_holder as (
  holder text,
  pid integer,
  user_name text,
  name text,
  state text,
  since timestamptz,
  age_seconds double precision,
  xid_age integer
);

-- jobs.horizon: the oldest holder of this database's xmin horizon, or no row when nothing but
-- the call itself holds it. holder is 'session' (an open transaction or a running statement:
-- pid, user_name, name = its application_name, state such as 'idle in transaction', since = its
-- transaction's start), 'prepared' (a prepared transaction: name = its gid, since = when it was
-- prepared) or 'slot' (a replication slot's xmin: name = the slot, state 'active' or
-- 'inactive', since NULL). age_seconds is how long since `since` (NULL for a slot); xid_age is
-- how many transactions old the horizon it holds is. Raises X_PERMISSION_DENIED to a caller that
-- is neither worker nor operator, and to a session bound to a tenant (it names other sessions).
-- Locks nothing.
create function jobs.horizon()
returns setof jobs.horizon_holder
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.horizon');
  return query
    with holders as (
      select 'session'::text as holder, a.pid, a.usename::text as user_name,
             a.application_name::text as name, a.state, a.xact_start as since,
             age(coalesce(a.backend_xmin, a.backend_xid)) as xid_age
        from pg_stat_activity a
       where a.datname = current_database()
         and a.pid <> pg_backend_pid()
         -- sessions alone: autovacuum's own brief snapshots are not what an operator can end
         and a.backend_type = 'client backend'
         and coalesce(a.backend_xmin, a.backend_xid) is not null
      union all
      select 'prepared', null::integer, p.owner::text, p.gid, 'prepared', p.prepared,
             age(p.transaction)
        from pg_prepared_xacts p
       where p.database = current_database()
      union all
      select 'slot', null::integer, null::text, s.slot_name::text,
             case when s.active then 'active' else 'inactive' end, null::timestamptz,
             age(s.xmin)
        from pg_replication_slots s
       where s.xmin is not null
         and (s.database is null or s.database = current_database())
    )
    select h.holder, h.pid, h.user_name, h.name, h.state, h.since,
           extract(epoch from clock_timestamp() - h.since)::double precision, h.xid_age
      from holders h
     order by h.xid_age desc, h.since
     limit 1;
end;
$$;
