-- durajobs revision 0007 up, frozen by scripts/freeze-revision.
-- Never edit after release: a change ships as a new revision.

-- >>> schema changes: tables, types, indexes, rows (by hand; kept on regeneration)
-- the live table is today's table, renamed: its rows, indexes and storage parameters stay
alter table jobs.jobs rename to jobs_live;
alter index jobs.jobs_pkey rename to jobs_live_pkey;

create table jobs.jobs_history (
  id uuid not null,
  name text not null,
  queue text not null,
  input jsonb not null,
  idempotency_key text not null,
  tenant_id text,
  run_id uuid not null,
  state text not null,
  priority integer not null default 0,
  attempt integer not null default 0,
  max_attempts integer not null,
  run_at timestamptz not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  finished_at timestamptz not null,
  claimed_by text,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  claims bigint not null default 0,
  last_error text,
  last_error_code text,
  last_error_stack text,
  progress jsonb,
  traceparent text,
  enqueued_by text,
  concurrency_key text,
  capped boolean not null default false
) partition by list (state);

create table jobs.jobs_history_done
  partition of jobs.jobs_history for values in ('done')
  partition by range (finished_at);

create table jobs.jobs_history_done_default
  partition of jobs.jobs_history_done default;

create table jobs.jobs_history_ended
  partition of jobs.jobs_history for values in ('failed', 'dead', 'cancelled');

-- every finished row moves, in this transaction: nothing stored is lost, and no finished row is
-- left where the claim reads
with gone as (
  delete from jobs.jobs_live j
   where j.state not in ('ready', 'delayed', 'running', 'suspended')
  returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id, j.state,
            j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.updated_at,
            j.finished_at, j.claimed_by, j.claimed_at, j.lease_expires_at, j.claims, j.last_error,
            j.last_error_code, j.last_error_stack, j.progress, j.traceparent, j.enqueued_by,
            j.concurrency_key, j.capped
)
insert into jobs.jobs_history (
  id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
  max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
  lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress, traceparent,
  enqueued_by, concurrency_key, capped)
select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, g.state,
       g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, g.updated_at,
       coalesce(g.finished_at, g.updated_at), g.claimed_by, g.claimed_at, g.lease_expires_at,
       g.claims, g.last_error, g.last_error_code, g.last_error_stack, g.progress, g.traceparent,
       g.enqueued_by, g.concurrency_key, g.capped
  from gone g;

alter table jobs.jobs_live
  add constraint jobs_live_state_check
  check (state in ('ready', 'delayed', 'running', 'suspended'));

-- the indexes of finished rows leave the live table for the history's
drop index jobs.jobs_done_idx;
drop index jobs.jobs_ended_idx;
drop index jobs.jobs_dead_idx;

create index jobs_history_id_idx
  on jobs.jobs_history (id);

create index jobs_history_queue_created_idx
  on jobs.jobs_history (queue, created_at, id);

create index jobs_dead_idx
  on jobs.jobs_history_ended (queue)
  where state = 'dead';

create index jobs_done_idx
  on jobs.jobs_history_done_default (finished_at);

create index jobs_ended_idx
  on jobs.jobs_history_ended (finished_at);

create index jobs_history_run_shared_idx
  on jobs.jobs_history (run_id)
  where run_id <> id;

create view jobs.jobs as
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped
    from jobs.jobs_live
  union all
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped
    from jobs.jobs_history;

alter view jobs.jobs alter column priority set default 0;
alter view jobs.jobs alter column attempt set default 0;
alter view jobs.jobs alter column claims set default 0;
alter view jobs.jobs alter column capped set default false;

-- the trigger needs its function now; the functions below replace this placeholder's body
create function jobs._write_through()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$ begin return null; end; $$;

create trigger jobs_write_through
  instead of insert or update or delete on jobs.jobs
  for each row execute function jobs._write_through();

-- >>> functions (generated by scripts/freeze-revision; do not edit)
set local check_function_bodies = off;

CREATE OR REPLACE FUNCTION jobs._announce(queue text, created_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs_live j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._candidate_groups(ids uuid[])
 RETURNS TABLE(id uuid, grp text, cap integer, rate integer, per interval, when_busy text, rule_id bigint, stamp_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with candidates as materialized (
      select j.id, j.name, j.concurrency_key, j.queue, j.tenant_id,
             row_number() over (order by j.id)::integer as ord
        from jobs.jobs_live j
       where j.id = any(_candidate_groups.ids)
    )
    select c.id,
           case when d.concurrency_keyed
                then 'k:' || d.name || E'\x1f' || coalesce(c.concurrency_key, '')
                else 'j:' || d.name end,
           d.concurrency, null::integer, null::interval, d.when_busy, null::bigint, null::text
      from candidates c
      join jobs.declarations d on d.name = c.name and d.concurrency is not null
    union all
    select c.id, g.grp, g.cap, g.rate, g.per, 'wait', g.rule_id, g.stamp_tenant
      from jobs._rule_groups_of(
             array(select c.queue from candidates c order by c.ord),
             array(select c.tenant_id from candidates c order by c.ord)) g
      join candidates c on c.ord = g.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._capped_candidates(queues text[], room integer, now timestamp with time zone, full_jobs text[], full_keys text[], blocked_queues text[], blocked_tenants text[], blocked_pairs text[], every_stopped boolean)
 RETURNS uuid[]
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET enable_bitmapscan TO 'off'
 SET enable_seqscan TO 'off'
AS $function$
declare
  v_held uuid[];
begin
  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select w.id
        from unnest(_capped_candidates.queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = true
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= _capped_candidates.now
             and not (j.name = any(_capped_candidates.full_jobs))
             and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '')
                        = any(_capped_candidates.full_keys))
             and (j.tenant_id is null
                  or not (j.tenant_id = any(_capped_candidates.blocked_tenants)
                          or q.queue || E'\x1f' || j.tenant_id
                               = any(_capped_candidates.blocked_pairs)
                          -- an every_tenant rule at 0 stops tenants that never ran, so no
                          -- count names them: asked of each row, only while such a rule is
                          or (_capped_candidates.every_stopped
                              and jobs._rules_stop(q.queue, j.tenant_id))))
           order by j.priority, j.run_at, j.id
           limit _capped_candidates.room
             for update skip locked
        ) w
       where not (q.queue = any(_capped_candidates.blocked_queues))
       order by w.priority, w.run_at, w.id
       limit _capped_candidates.room
    ) c;
  return v_held;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._claim_limited(function_name text, queues text[], worker_id text, room integer, visibility interval, now timestamp with time zone)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_rules boolean := exists (select 1 from jobs.limit_rules);
  v_free uuid[];
  v_stray uuid[];
  v_held uuid[];
  v_admitted uuid[] := '{}';
  v_refused uuid[] := '{}';
  v_full_jobs text[];
  v_full_keys text[];
  v_block_all boolean;
  v_block_queues text[];
  v_block_tenants text[];
  v_block_pairs text[];
  v_every_stopped boolean := exists (select 1
                                       from jobs.limit_rules r
                                      where r.every_tenant
                                        and (r.concurrency = 0 or r.rate = 0));
  v_lock bigint;
  -- group -> attempts it runs, then also the rows this claim admits
  v_used jsonb;
  -- rate group -> starts inside its window, then also the rows this claim admits
  v_started jsonb;
  -- group -> rows this claim admits (evidence that another run holds a 'fail' key)
  v_taken jsonb := '{}';
  v_cand record;
  v_fits boolean;
  v_busy_group text;
  -- the candidates' groups, one element per (candidate, group), from jobs._candidate_groups
  v_cg_ids uuid[];
  v_cg_grps text[];
  v_cg_caps integer[];
  v_cg_rates integer[];
  v_cg_busy text[];
  v_cg_rules bigint[];
  v_cg_tenants text[];
  v_stamp_ids uuid[] := '{}';
  v_stamp_rules bigint[] := '{}';
  v_stamp_tenants text[] := '{}';
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs_live j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- an enqueue that read the limits before a change committed wrote its row uncapped after the
  -- change marked the live rows: such a row joins the capped ones (it is locked already)
  with stray as (
    update jobs.jobs_live j
       set capped = true
     where j.id = any(v_free)
       and (exists (select 1
                      from jobs.declarations d
                     where d.name = j.name
                       and d.concurrency is not null)
            or (v_rules and jobs._rules_cap(j.queue, j.tenant_id)))
    returning j.id
  )
  select coalesce(array_agg(stray.id), '{}') into v_stray from stray;
  if cardinality(v_stray) > 0 then
    v_free := array(select f from unnest(v_free) f where not (f = any(v_stray)));
  end if;

  -- the groups already at their limit, counted without a lock: only to pass over their rows
  with at_limit as (
    select g.cap as lim, g.busy, g.when_busy, g.scope_job, g.scope_key, g.scope_queue,
           g.scope_tenant
      from jobs._running_groups() g
     where g.busy >= g.cap
    union all
    select s.rate, s.started, 'wait', null, null, s.scope_queue, s.scope_tenant
      from jobs._started_groups(_claim_limited.now) s
     where v_rules
       and s.started >= s.rate
    -- a rule of one group at 0 stops its scope before anything runs in it
    union all
    select 0, 0, 'wait', null, null, r.queue, r.tenant_id
      from jobs.limit_rules r
     where not r.every_tenant
       and (r.concurrency = 0 or r.rate = 0)
  )
  select coalesce(array_agg(f.scope_job) filter (where f.scope_job is not null
                                                   and f.scope_key is null), '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(f.scope_job || E'\x1f' || f.scope_key)
                    filter (where f.scope_key is not null and f.when_busy = 'wait'), '{}'),
         coalesce(bool_or(f.scope_job is null and f.scope_queue is null
                          and f.scope_tenant is null), false),
         -- no NULL may reach these arrays: `= any` of an array holding one answers NULL, and
         -- the filter would then pass over every row
         coalesce(array_agg(f.scope_queue)
                    filter (where f.scope_job is null and f.scope_tenant is null
                              and f.scope_queue is not null), '{}'),
         coalesce(array_agg(f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is null
                              and f.scope_tenant is not null), '{}'),
         coalesce(array_agg(f.scope_queue || E'\x1f' || f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is not null
                              and f.scope_tenant is not null), '{}')
    into v_full_jobs, v_full_keys, v_block_all, v_block_queues, v_block_tenants, v_block_pairs
    from at_limit f;

  if v_block_all then
    v_held := '{}';
  else
    v_held := jobs._capped_candidates(_claim_limited.queues, _claim_limited.room,
                                      _claim_limited.now, v_full_jobs, v_full_keys,
                                      v_block_queues, v_block_tenants, v_block_pairs,
                                      v_every_stopped);
  end if;

  if cardinality(v_held) > 0 then
    -- by lock key, not by group: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.grp), '{}'),
           coalesce(array_agg(g.cap), '{}'), coalesce(array_agg(g.rate), '{}'),
           coalesce(array_agg(g.when_busy), '{}'), coalesce(array_agg(g.rule_id), '{}'),
           coalesce(array_agg(g.stamp_tenant), '{}')
      into v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules, v_cg_tenants
      from jobs._candidate_groups(v_held) g;

    for v_lock in
      select distinct hashtextextended('durajobs.limit:' || g.grp, 0)
        from unnest(v_cg_grps) as g(grp)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, statements of their own: what each group runs and has started now,
    -- committed claims of the other claimers included
    select coalesce(jsonb_object_agg(g.grp, g.busy), '{}')
      into v_used
      from jobs._running_groups() g;
    if v_rules then
      delete from jobs.limit_starts s
       using jobs.limit_rules r
       where r.id = s.rule_id
         and s.started_at <= _claim_limited.now - r.per
         and (s.rule_id, s.tenant_id) in (
               select g.rule_id, g.stamp_tenant
                 from unnest(v_cg_rules, v_cg_tenants, v_cg_rates) as g(rule_id, stamp_tenant, rate)
                where g.rate is not null);
      select coalesce(jsonb_object_agg(s.grp, s.started), '{}')
        into v_started
        from jobs._started_groups(_claim_limited.now) s;
    else
      v_started := '{}';
    end if;

    -- in hand-out order, each row takes a place in every group it counts in, or none
    for v_cand in
      select j.id, j.run_id, j.name, j.concurrency_key,
             array_agg(g.grp order by g.grp) filter (where g.grp is not null) as grps,
             array_agg(g.cap order by g.grp) filter (where g.grp is not null) as caps,
             array_agg(g.rate order by g.grp) filter (where g.grp is not null) as rates,
             array_agg(g.rule_id order by g.grp) filter (where g.grp is not null) as rule_ids,
             array_agg(g.stamp_tenant order by g.grp) filter (where g.grp is not null)
               as stamp_tenants,
             (array_agg(g.grp) filter (where g.when_busy = 'fail'))[1] as fail_group
        from jobs.jobs_live j
        left join unnest(v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules,
                         v_cg_tenants)
               as g(id, grp, cap, rate, when_busy, rule_id, stamp_tenant)
          on g.id = j.id
       where j.id = any(v_held)
       group by j.id, j.run_id, j.name, j.concurrency_key, j.priority, j.run_at
       order by j.priority, j.run_at, j.id
    loop
      v_fits := true;
      v_busy_group := null;
      for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
        if v_cand.caps[i] is not null
           and coalesce((v_used ->> v_cand.grps[i])::bigint, 0) >= v_cand.caps[i] then
          v_fits := false;
          v_busy_group := coalesce(v_busy_group, v_cand.grps[i]);
        end if;
        if v_cand.rates[i] is not null
           and coalesce((v_started ->> v_cand.grps[i])::bigint, 0) >= v_cand.rates[i] then
          v_fits := false;
        end if;
      end loop;

      if v_fits then
        v_admitted := v_admitted || v_cand.id;
        for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
          if v_cand.caps[i] is not null then
            v_used := v_used || jsonb_build_object(
              v_cand.grps[i], coalesce((v_used ->> v_cand.grps[i])::bigint, 0) + 1);
            v_taken := v_taken || jsonb_build_object(
              v_cand.grps[i], coalesce((v_taken ->> v_cand.grps[i])::bigint, 0) + 1);
          end if;
          if v_cand.rates[i] is not null then
            v_started := v_started || jsonb_build_object(
              v_cand.grps[i], coalesce((v_started ->> v_cand.grps[i])::bigint, 0) + 1);
            v_stamp_ids := v_stamp_ids || v_cand.id;
            v_stamp_rules := v_stamp_rules || v_cand.rule_ids[i];
            v_stamp_tenants := v_stamp_tenants || v_cand.stamp_tenants[i];
          end if;
        end loop;
      elsif v_cand.fail_group is not null and v_busy_group = v_cand.fail_group
            -- refused only on evidence that another run holds the key: a running row of
            -- another run, or an earlier candidate this claim admits
            and (coalesce((v_taken ->> v_cand.fail_group)::bigint, 0) > 0
                 or exists (select 1
                              from jobs.jobs_live r
                             where r.state = 'running'
                               and r.capped
                               and r.name = v_cand.name
                               and r.concurrency_key = v_cand.concurrency_key
                               and r.run_id <> v_cand.run_id)) then
        v_refused := v_refused || v_cand.id;
      end if;
    end loop;

    if cardinality(v_refused) > 0 then
      return query
        with gone as (
          delete from jobs.jobs_live j
           where j.id = any(v_refused)
          returning j
        ),
        refused as (
          insert into jobs.jobs_history as h
          select e.*
            from gone g
           cross join lateral jobs._ended(
                   g.j, 'failed', _claim_limited.now,
                   error => format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                   (g.j).concurrency_key, (g.j).name),
                   error_code => 'X_JOB_KEY_BUSY',
                   claimed_by => _claim_limited.worker_id) e
          returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                    h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                    h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at))
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs_live j
       where j.id = any(v_free || v_admitted)
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    ),
    -- a start under a rate is stamped only for a row this statement hands out
    stamped as (
      insert into jobs.limit_starts (rule_id, tenant_id, started_at)
      select s.rule_id, s.tenant_id, _claim_limited.now
        from unnest(v_stamp_ids, v_stamp_rules, v_stamp_tenants) as s(id, rule_id, tenant_id)
       where s.id in (select c.id from claimed c)
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._drop_day(partition_name text, batch_size integer, OUT dropped_jobs integer, OUT dropped_steps integer)
 RETURNS record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_runs uuid[];
  v_count integer;
  v_awaited boolean;
  v_timeout text := current_setting('lock_timeout');
begin
  dropped_jobs := 0;
  dropped_steps := 0;
  execute format('select exists (select 1 from jobs.outbox o '
                 'where o.published_at is null '
                 'and exists (select 1 from jobs.%I p where p.id = o.id))', partition_name)
     into v_awaited;
  if v_awaited then
    execute format('with gone as ('
                   '  delete from jobs.%1$I p'
                   '   where p.ctid in (select q.ctid from jobs.%1$I q'
                   '                     where not jobs._outbox_awaits(q.id)'
                   '                     limit $1 for update skip locked)'
                   '  returning p.run_id) '
                   'select count(*)::integer, coalesce(array_agg(distinct g.run_id), ''{}'') '
                   '  from gone g', partition_name)
       into v_count, v_runs
      using batch_size;
  else
    execute format('select count(*)::integer, coalesce(array_agg(distinct p.run_id) filter ('
                   'where exists (select 1 from jobs.steps s where s.run_id = p.run_id)), '
                   '''{}'') from jobs.%I p', partition_name)
       into v_count, v_runs;
    begin
      perform set_config('lock_timeout', '2s', true);
      execute format('drop table jobs.%I', partition_name);
      perform set_config('lock_timeout', v_timeout, true);
    exception
      when lock_not_available then
        perform set_config('lock_timeout', v_timeout, true);
        return;
    end;
  end if;
  dropped_jobs := v_count;
  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select count(*) into dropped_steps from gone;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._ended(j jobs.jobs_live, state text, now timestamp with time zone, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text, give_back_attempt boolean DEFAULT false, claimed_by text DEFAULT NULL::text)
 RETURNS jobs.jobs_history
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select row(
    j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
    _ended.state, j.priority,
    case when _ended.give_back_attempt then greatest(j.attempt - 1, 0) else j.attempt end,
    j.max_attempts, j.run_at, j.created_at,
    _ended.now,  -- updated_at
    _ended.now,  -- finished_at
    coalesce(_ended.claimed_by, j.claimed_by),
    case when _ended.claimed_by is null then j.claimed_at else _ended.now end,
    null,        -- lease_expires_at
    j.claims,
    case when _ended.error is null then j.last_error else _ended.error end,
    case when _ended.error is null then j.last_error_code else _ended.error_code end,
    case when _ended.error is null then j.last_error_stack else _ended.error_stack end,
    j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
  )::jobs.jobs_history
$function$;

CREATE OR REPLACE FUNCTION jobs._find_live(name text, tenant_id text, idempotency_key text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_result jobs.enqueue_result;
begin
  select j.id, j.run_id, true
    into v_result
    from jobs.jobs_live j
   where j.name = _find_live.name
     and coalesce(j.tenant_id, '') = coalesce(_find_live.tenant_id, '')
     and j.idempotency_key = _find_live.idempotency_key
     and j.state in ('ready', 'delayed', 'running', 'suspended')
   limit 1;
  return v_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._history_day(day date)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 'jobs_history_done_p' || to_char(_history_day.day, 'YYYYMMDD')
$function$;

CREATE OR REPLACE FUNCTION jobs._revived(h jobs.jobs_history, now timestamp with time zone)
 RETURNS jobs.jobs_live
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select row(
    h.id, h.name, h.queue, h.input, h.idempotency_key, h.tenant_id, h.run_id,
    'ready', h.priority,
    0,           -- attempt
    h.max_attempts,
    _revived.now,  -- run_at
    h.created_at,
    _revived.now,  -- updated_at
    null,        -- finished_at
    h.claimed_by, h.claimed_at,
    null,        -- lease_expires_at
    h.claims,
    null, null, null,  -- last_error, last_error_code, last_error_stack
    h.progress, h.traceparent, h.enqueued_by, h.concurrency_key,
    -- the limits may have changed since the row was live
    jobs._capped(h.name, h.queue, h.tenant_id)
  )::jobs.jobs_live
$function$;

CREATE OR REPLACE FUNCTION jobs._run_stands(run_id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  -- PL/pgSQL, one probe a statement: inlined into a caller's delete, the four tests became a
  -- hashed subplan that read every finished row once per call
  return exists (select 1 from jobs.jobs_live j where j.id = _run_stands.run_id and j.run_id = j.id)
      or exists (select 1
                   from jobs.jobs_live j
                  where j.run_id = _run_stands.run_id and j.run_id <> j.id)
      or exists (select 1
                   from jobs.jobs_history j
                  where j.id = _run_stands.run_id and j.run_id = j.id)
      or exists (select 1
                   from jobs.jobs_history j
                  where j.run_id = _run_stands.run_id and j.run_id <> j.id);
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._running_groups()
 RETURNS TABLE(grp text, cap integer, busy bigint, when_busy text, scope_job text, scope_key text, scope_queue text, scope_tenant text)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  return query
    with running as materialized (
      select r.name, r.concurrency_key, r.queue, r.tenant_id, count(*) as n
        from jobs.jobs_live r
       where r.state = 'running'
         and r.capped
       group by r.name, r.concurrency_key, r.queue, r.tenant_id
    ),
    scopes as materialized (
      select x.queue, x.tenant_id, sum(x.n) as n,
             row_number() over (order by x.queue, x.tenant_id)::integer as ord
        from running x
       group by x.queue, x.tenant_id
    ),
    counted as (
      select case when d.concurrency_keyed
                  then 'k:' || d.name || E'\x1f' || coalesce(x.concurrency_key, '')
                  else 'j:' || d.name end as grp,
             d.concurrency as cap, x.n, d.when_busy, d.name as scope_job,
             case when d.concurrency_keyed then x.concurrency_key end as scope_key,
             null::text as scope_queue, null::text as scope_tenant
        from running x
        join jobs.declarations d on d.name = x.name and d.concurrency is not null
      union all
      select g.grp, g.cap, x.n, 'wait', null, null, g.scope_queue, g.scope_tenant
        from jobs._rule_groups_of(array(select x.queue from scopes x order by x.ord),
                                  array(select x.tenant_id from scopes x order by x.ord)) g
        join scopes x on x.ord = g.ord
       where g.cap is not null
    )
    select c.grp, c.cap, sum(c.n)::bigint, c.when_busy, c.scope_job, c.scope_key, c.scope_queue,
           c.scope_tenant
      from counted c
     group by c.grp, c.cap, c.when_busy, c.scope_job, c.scope_key, c.scope_queue, c.scope_tenant;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped(name text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if exists (select 1
               from jobs.declarations d
              where d.name = _sync_capped.name
                and d.concurrency is not null) then
    update jobs.jobs_live j
       set capped = true
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and not j.capped;
  else
    update jobs.jobs_live j
       set capped = false
     where j.name = _sync_capped.name
       and j.state in ('ready', 'delayed', 'running', 'suspended')
       and j.capped
       and not jobs._rules_cap(j.queue, j.tenant_id);
  end if;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs._sync_capped_scope(queue text, tenant_id text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  update jobs.jobs_live j
     set capped = not j.capped
   where j.state in ('ready', 'delayed', 'running', 'suspended')
     and (_sync_capped_scope.queue is null or j.queue = _sync_capped_scope.queue)
     and (_sync_capped_scope.tenant_id is null or j.tenant_id = _sync_capped_scope.tenant_id)
     and j.capped <> (exists (select 1
                                from jobs.declarations d
                               where d.name = j.name
                                 and d.concurrency is not null)
                      or jobs._rules_cap(j.queue, j.tenant_id))
$function$;

CREATE OR REPLACE FUNCTION jobs._write_through()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if tg_op in ('UPDATE', 'DELETE') then
    delete from jobs.jobs_live j where j.id = old.id;
    if not found then
      delete from jobs.jobs_history j where j.id = old.id;
    end if;
  end if;
  if tg_op = 'DELETE' then
    return old;
  end if;
  if new.state in ('ready', 'delayed', 'running', 'suspended') then
    insert into jobs.jobs_live values (new.*);
  else
    new.finished_at := coalesce(new.finished_at, jobs._now());
    insert into jobs.jobs_history values (new.*);
  end if;
  return new;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
 RETURNS SETOF jobs.settle_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.ack_many_v1', 'worker_id', 'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner can
    -- read every live row of the table through a partial index whose statistics say no row is
    -- running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             -- no index reads these: only the owner's rows are locked, never a stranger's
             and j.claimed_by = ack_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(array(select h.id from held h))
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped
        from gone g
      returning h.id, h.claims, h.name, h.claimed_at
    ),
    counted as (
      select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                                 array_agg(s.claimed_at)) as rows
        from settled s
    )
    select r.id, s.id is not null
      from requested r
      cross join counted
      left join settled s on s.id = r.id and s.claims = r.claim
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.ack_v1(id uuid, worker_id text, claim bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_landed bigint;
begin
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  -- the counter moves in this statement, so it can never disagree with the rows
  with gone as (
    delete from jobs.jobs_live j
     where j.id = ack_v1.id
       and j.state = 'running'
       and j.claimed_by = ack_v1.worker_id
       and j.claims = ack_v1.claim
    returning j
  ),
  settled as (
    insert into jobs.jobs_history as h
    select e.* from gone g cross join lateral jobs._ended(g.j, 'done', v_now) e
    returning h.name, h.claimed_at
  ),
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                               array_agg(s.claimed_at))
      from settled s
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.cancel(id uuid, reason text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  if id is null then
    perform jobs._invalid('jobs.cancel', 'id', 'must be a job id');
  end if;

  with gone as (
    delete from jobs.jobs_live j
     where j.id = cancel.id
    returning j
  )
  insert into jobs.jobs_history
  select e.*
    from gone g
   cross join lateral jobs._ended(g.j, 'cancelled', v_now,
                                  error => 'cancelled' || coalesce(': ' || cancel.reason, ''),
                                  error_code => 'X_JOB_CANCELLED') e;
  if found then
    return true;
  end if;

  select j.state into v_state from jobs.jobs_history j where j.id = cancel.id;
  perform jobs._raise(
    'X_JOB_NOT_CANCELLABLE',
    case when v_state is null then format('no job has id %s', cancel.id)
         else format('job %s is %s; only a live job can be cancelled', cancel.id, v_state) end,
    jsonb_build_object('id', cancel.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.claim_v1(queues text[], worker_id text, batch_size integer DEFAULT 1, visibility interval DEFAULT '00:00:30'::interval, drop_exhausted text[] DEFAULT '{}'::text[], recover_lapsed boolean DEFAULT true)
 RETURNS SETOF jobs.claimed_job
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
  v_room integer;
  v_blank boolean;
  v_limited boolean;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  -- one statement for what every claim must know first: the queues not paused (a pause is a
  -- row, read here, so it takes effect at every worker's next claim), a blank name among them,
  -- and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         coalesce(bool_or(q.name is null or btrim(q.name) = ''), false),
         exists (select 1 from jobs.declarations d where d.concurrency is not null)
           or exists (select 1 from jobs.limit_rules)
    into v_queues, v_blank, v_limited
    from unnest(claim_v1.queues) as q(name);
  if v_blank then
    perform jobs._invalid('jobs.claim_v1', 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.claim_v1', 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.claim_v1', 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      gone as (
        delete from jobs.jobs_live j
         using lapsed
         where j.id = lapsed.id
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
           set claimed_by = claim_v1.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + claim_v1.visibility,
               claims = j.claims + 1,
               attempt = j.attempt + 1,
               updated_at = v_now
          from lapsed
         where j.id = lapsed.id
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                  j.last_error, j.traceparent, j.enqueued_by
      )
      select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
             c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
    return;
  end if;

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order, so the scan stops after the rows it
  -- needs: `queue = any(...)` would read and sort every waiting row of every queue instead.
  return query
    with due as materialized (
      select w.id
        from unnest(v_queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue(name text, input jsonb, idempotency_key text, queue text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT NULL::integer, priority integer DEFAULT NULL::integer, id uuid DEFAULT NULL::uuid, run_id uuid DEFAULT NULL::uuid, on_conflict text DEFAULT 'dedupe'::text, traceparent text DEFAULT NULL::text, enqueued_by text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text)
 RETURNS jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
  v_declared record;
  v_queue text;
  v_max_attempts integer;
  v_priority integer;
begin
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency,
         t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = enqueue.name;
  v_queue := coalesce(enqueue.queue, v_declared.queue, 'default');
  v_max_attempts := coalesce(enqueue.max_attempts, v_declared.max_attempts, 20);
  v_priority := coalesce(enqueue.priority, v_declared.priority, 0);
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, v_queue, enqueue.tenant_id,
                              v_run_at, v_max_attempts, v_priority,
                              coalesce(v_declared.tenant_required, false),
                              enqueue.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false));
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs_live as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
      capped)
    values (
      v_id, enqueue.name, v_queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, v_priority,
      v_max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by,
      enqueue.concurrency_key,
      v_declared.concurrency is not null or jobs._rules_cap(v_queue, enqueue.tenant_id))
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    -- the primary key guards the live rows only: a given id may name a finished job. Asked
    -- after the insert, in a statement of its own, so a row that moved to history while the
    -- insert waited for its delete to commit is seen too
    if v_result.id is not null
       and enqueue.id is not null
       and exists (select 1 from jobs.jobs_history h where h.id = enqueue.id) then
      delete from jobs.jobs_live j where j.id = enqueue.id;
      v_result := null;
    end if;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(v_queue, v_now);
      end if;
      return v_result;
    end if;

    if enqueue.id is not null then
      select j.id, j.run_id, j.name, j.tenant_id, j.idempotency_key
        into v_by_id
        from jobs.jobs j
       where j.id = enqueue.id;
      if found then
        -- the same job published again (an outbox relay after a crash) answers the row it
        -- made, live or finished; an id naming a different job is never reused
        if v_by_id.name <> enqueue.name
           or coalesce(v_by_id.tenant_id, '') <> coalesce(enqueue.tenant_id, '')
           or v_by_id.idempotency_key <> enqueue.idempotency_key then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('id %s already names job %s with idempotency key %s; an id is never reused',
                   enqueue.id, v_by_id.name, v_by_id.idempotency_key),
            jsonb_build_object('reason', 'id_taken', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key),
            'pass a fresh id, or none and one is made');
        end if;
        if enqueue.on_conflict = 'error' then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('job %s already exists', enqueue.id),
            jsonb_build_object('reason', 'id_exists', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
        end if;
        return (v_by_id.id, v_by_id.run_id, true)::jobs.enqueue_result;
      end if;
    end if;

    v_result := jobs._find_live(enqueue.name, enqueue.tenant_id, enqueue.idempotency_key);
    if v_result.id is not null then
      if enqueue.on_conflict = 'error' then
        perform jobs._raise(
          'X_JOB_DUPLICATE',
          format('job %s with idempotency key %s is already held by live job %s',
                 enqueue.name, enqueue.idempotency_key, v_result.id),
          jsonb_build_object('reason', 'key_held', 'job', enqueue.name,
                             'idempotency_key', enqueue.idempotency_key,
                             'tenant_id', enqueue.tenant_id, 'existing_id', v_result.id));
      end if;
      return v_result;
    end if;
  end loop;

  perform jobs._raise(
    'X_DRIVER_UNAVAILABLE',
    format('enqueue of %s was rejected but no live row holds its idempotency key', enqueue.name),
    jsonb_build_object('job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
  return null;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.enqueue_many(requests jsonb, on_conflict text DEFAULT 'dedupe'::text)
 RETURNS SETOF jobs.enqueue_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_requests jobs._enqueue_request[];
  v_pending jobs._enqueue_request[];
  -- the answers so far, as parallel arrays (request ordinal, id, run_id, deduped)
  v_answered integer[] := '{}';
  v_answer_ids uuid[] := '{}';
  v_answer_run_ids uuid[] := '{}';
  v_answer_deduped boolean[] := '{}';
  v_inserted uuid[];
  v_taken_back uuid[];
  v_supplied uuid[];  -- the ids the caller gave
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
  -- whether any limit rule exists: with none, no request pays for asking which rules apply
  v_any_rules boolean := exists (select 1 from jobs.limit_rules);
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}'),
         coalesce(array_agg((parsed.r).id) filter (where (parsed.r).id_supplied), '{}')
    into v_requests, v_supplied
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, t.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null", as jobs.enqueue's does
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, t.max_attempts, 20),
              coalesce(x.priority, t.priority, 0),
              x.traceparent,
              x.enqueued_by,
              coalesce(t.tenant_required, false),
              x.concurrency_key,
              t.concurrency is not null
                or (v_any_rules and jobs._rules_cap(coalesce(x.queue, t.queue, 'default'),
                                                    x.tenant_id)),
              coalesce(t.concurrency_keyed, false))::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text, concurrency_key text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    concurrency_key, ord)
        left join jobs.declarations t on t.name = x.name
    ) parsed;
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range or invalid_parameter_value then
      perform jobs._invalid('jobs.enqueue_many', 'requests',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  select format('requests[%s].id', later.ord)
    into v_bad_key
    from unnest(v_requests) later
    join unnest(v_requests) earlier
      on earlier.id = later.id and earlier.ord < later.ord and later.id_supplied
   order by later.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'repeats the id of an earlier request');
  end if;

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
      or (r.tenant_required and r.tenant_id is null)
      or btrim(r.concurrency_key) = '' or length(r.concurrency_key) > 200
      or (r.concurrency_keyed and r.concurrency_key is null)
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority,
                                v_request.tenant_required, v_request.concurrency_key,
                                v_request.concurrency_keyed);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs_live as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by, concurrency_key,
        capped)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by,
             r.concurrency_key, r.capped
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- a given id may name a finished job, which the primary key does not guard: as in
    -- jobs.enqueue, asked after the insert, and such a row is taken back
    if cardinality(v_supplied) > 0 then
      with taken_back as (
        delete from jobs.jobs_live j
         where j.id = any(v_inserted)
           and j.id = any(v_supplied)
           and exists (select 1 from jobs.jobs_history h where h.id = j.id)
        returning j.id
      )
      select coalesce(array_agg(t.id), '{}') into v_taken_back from taken_back t;
      if cardinality(v_taken_back) > 0 then
        v_inserted := array(select i from unnest(v_inserted) i where not (i = any(v_taken_back)));
      end if;
    end if;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashes a scan of the whole table, even on fresh statistics
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request: the calls cost more than a batch's insert
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs_live j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
    ),
    found_answers as (
      select a.ord, (a.answer).id, (a.answer).run_id, (a.answer).deduped
        from answered a
       where (a.answer).id is not null
    )
    select v_answered || coalesce(array_agg(f.ord order by f.ord), '{}'),
           v_answer_ids || coalesce(array_agg(f.id order by f.ord), '{}'),
           v_answer_run_ids || coalesce(array_agg(f.run_id order by f.ord), '{}'),
           v_answer_deduped || coalesce(array_agg(f.deduped order by f.ord), '{}')
      into v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped
      from found_answers f;

    select coalesce(array_agg((r.*)::jobs._enqueue_request order by r.ord), '{}')
      into v_pending
      from unnest(v_pending) r
      left join unnest(v_answered) as done(ord) on done.ord = r.ord
     where done.ord is null;
    exit when cardinality(v_pending) = 0;
  end loop;

  -- after the inserts, so an id another transaction took meanwhile is caught too: a supplied
  -- id answers only the same job (name, tenant, key), never a stranger
  select r.ord, r.id, j.name, j.idempotency_key
    into v_duplicate
    from unnest(v_requests) r
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names job %s with idempotency key %s; an id is never '
             'reused', v_duplicate.ord, v_duplicate.id, v_duplicate.name,
             v_duplicate.idempotency_key),
      jsonb_build_object('reason', 'id_taken', 'existing_id', v_duplicate.id,
                         'request', v_duplicate.ord),
      'pass a fresh id, or none and one is made');
  end if;

  if cardinality(v_pending) > 0 then
    perform jobs._raise(
      'X_DRIVER_UNAVAILABLE',
      format('enqueue of %s was rejected but no live row holds its idempotency key',
             v_pending[1].name),
      jsonb_build_object('job', v_pending[1].name, 'idempotency_key', v_pending[1].idempotency_key));
  end if;

  if enqueue_many.on_conflict = 'error' then
    select r.ord, r.name, r.idempotency_key, r.tenant_id, a.id, r.id_supplied,
           earlier.ord as earlier_ord
      into v_duplicate
      from unnest(v_answered, v_answer_ids, v_answer_deduped) as a(ord, id, deduped)
      join unnest(v_requests) r on r.ord = a.ord
      left join unnest(v_requests) earlier on earlier.id = a.id and earlier.ord < r.ord
     where a.deduped
     order by r.ord
     limit 1;
    if found and v_duplicate.earlier_ord is not null then
      -- the holder is a row of this very batch, rolled back with it: name the request instead
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s repeats the idempotency key %s of requests[%s]',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.earlier_ord),
        jsonb_build_object('reason', 'key_repeated', 'job', v_duplicate.name,
                           'idempotency_key', v_duplicate.idempotency_key,
                           'request', v_duplicate.ord, 'earlier_request', v_duplicate.earlier_ord));
    elsif found then
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s with idempotency key %s is already held by job %s',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.id),
        jsonb_build_object('reason', case when v_duplicate.id_supplied
                                          and v_duplicate.id = (v_requests[v_duplicate.ord]).id
                                          then 'id_exists' else 'key_held' end,
                           'job', v_duplicate.name, 'idempotency_key', v_duplicate.idempotency_key,
                           'tenant_id', v_duplicate.tenant_id,
                           'existing_id', v_duplicate.id, 'request', v_duplicate.ord));
    end if;
  end if;

  -- one wake per queue that received a row due now
  for v_queue in
    select distinct r.queue
      from unnest(v_answered, v_answer_deduped) as a(ord, deduped)
      join unnest(v_requests) r on r.ord = a.ord
     where not a.deduped
       and r.run_at <= v_now + interval '1 second'
  loop
    perform jobs._announce(v_queue, v_now);
  end loop;

  return query
    select a.id, a.run_id, a.deduped
      from unnest(v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped)
             as a(ord, id, run_id, deduped)
     order by a.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_many_v1(worker_id text, ids uuid[], claims bigint[], visibility interval DEFAULT '00:00:30'::interval)
 RETURNS SETOF jobs.heartbeat_answer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'worker_id',
                          'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility', 'must be a positive interval');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      left join renewed n on n.id = r.id
     order by r.ord;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.heartbeat_v1(id uuid, worker_id text, claim bigint, visibility interval DEFAULT '00:00:30'::interval)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility', 'must be a positive interval');
  end if;

  update jobs.jobs_live j
     set lease_expires_at = v_now + heartbeat_v1.visibility,
         updated_at = v_now
   where j.id = heartbeat_v1.id
     and j.state = 'running'
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if found then
    return 'ok';
  end if;

  -- a cancel keeps the token, so only the attempt that was running sees 'cancelled'
  select j.state
    into v_state
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.inspect_job(id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job jobs.jobs;
begin
  if id is null then
    perform jobs._invalid('jobs.inspect_job', 'id', 'must be a job id');
  end if;
  select j.* into v_job from jobs.jobs j where j.id = inspect_job.id;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND',
                        format('jobs.inspect_job: no job has id %s', inspect_job.id),
                        jsonb_build_object('function', 'jobs.inspect_job', 'id', inspect_job.id));
  end if;

  return jsonb_build_object(
    'job', to_jsonb(v_job),
    'steps', coalesce((
      select jsonb_agg(jsonb_build_object(
               'name', s.name,
               'status', s.status,
               'attempts', s.attempts,
               'started_at', s.started_at,
               'updated_at', s.updated_at,
               'finished_at', s.finished_at,
               'wake_at', s.wake_at,
               'duration_ms', (extract(epoch from (s.finished_at - s.started_at)) * 1000)::bigint,
               'output_bytes', octet_length(s.output::text),
               'error', s.error)
             order by s.started_at, s.name)
        from jobs.steps s
       where s.run_id = v_job.run_id), '[]'::jsonb),
    'queue_paused', exists (select 1 from jobs.queue_pauses p where p.queue = v_job.queue),
    'limit', (
      select jsonb_build_object(
               'concurrency', d.concurrency,
               'keyed', d.concurrency_keyed,
               'when_busy', d.when_busy,
               'key', case when d.concurrency_keyed then v_job.concurrency_key end,
               'running', running.n,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              and running.n >= d.concurrency)
        from jobs.declarations d
        cross join lateral (
          select count(*) as n
            from jobs.jobs_live r
           where r.state = 'running'
             and r.capped
             and r.name = d.name
             and (not d.concurrency_keyed or r.concurrency_key = v_job.concurrency_key)
        ) running
       where d.name = v_job.name
         and d.concurrency is not null),
    'rules', coalesce((
      select jsonb_agg(jsonb_build_object(
               'queue', g.scope_queue,
               'tenant_id', g.scope_tenant,
               'concurrency', g.cap,
               'running', coalesce(r.busy, 0),
               'rate', g.rate,
               'per_seconds', extract(epoch from g.per),
               'started', case when g.rate is not null then coalesce(s.started, 0) end,
               'held_back', v_job.state in ('ready', 'delayed', 'suspended')
                              and v_job.run_at <= jobs._now()
                              -- a kind the rule does not set holds nothing back
                              and (coalesce(coalesce(r.busy, 0) >= g.cap, false)
                                   or coalesce(coalesce(s.started, 0) >= g.rate, false)))
             order by g.grp)
        from jobs._rule_groups(v_job.queue, v_job.tenant_id) g
        left join jobs._running_groups() r on r.grp = g.grp
        left join jobs._started_groups(jobs._now()) s on s.grp = g.grp), '[]'::jsonb));
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.limits(name text DEFAULT NULL::text)
 RETURNS SETOF jobs.limit_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with declared as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
       and (limits.name is null or d.name = limits.name)
  ),
  declared_live as (
    select l.name, case when l.concurrency_keyed then j.concurrency_key end as group_key,
           j.state, j.run_at, j.claimed_by
      from declared l
      join jobs.jobs_live j
        on j.name = l.name
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
  ),
  declared_rows as (
    select l.name, g.group_key, l.concurrency, l.when_busy,
           count(g.state) filter (where g.state = 'running') as running,
           count(g.state) filter (where g.state <> 'running') as waiting,
           count(g.state) filter (where g.state <> 'running' and g.run_at <= jobs._now()) as due,
           coalesce(array_agg(distinct g.claimed_by order by g.claimed_by)
                      filter (where g.state = 'running'), '{}') as holders
      from declared l
      left join declared_live g on g.name = l.name
     group by l.name, g.group_key, l.concurrency, l.when_busy
  ),
  -- the live rows a rule may count, grouped before any rule is asked
  live as materialized (
    select j.queue, j.tenant_id, j.state, j.run_at <= jobs._now() as due, j.claimed_by,
           count(*) as n,
           row_number() over (order by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(),
                                       j.claimed_by)::integer as ord
      from jobs.jobs_live j
     where limits.name is null
       and j.capped
       and j.state in ('ready', 'delayed', 'running', 'suspended')
     group by j.queue, j.tenant_id, j.state, j.run_at <= jobs._now(), j.claimed_by
  ),
  ruled as (
    select g.grp, g.rule_id, g.scope_tenant, l.state, l.due, l.claimed_by, l.n
      from jobs._rule_groups_of(array(select l.queue from live l order by l.ord),
                                array(select l.tenant_id from live l order by l.ord)) g
      join live l on l.ord = g.ord
  ),
  rule_rows as (
    select r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per,
           case when r.every_tenant then x.scope_tenant else r.tenant_id end as tenant_id,
           coalesce('r:' || r.id
                      || case when r.every_tenant then E'\x1f' || x.scope_tenant else '' end,
                    '') as grp,
           coalesce(sum(x.n) filter (where x.state = 'running'), 0) as running,
           coalesce(sum(x.n) filter (where x.state <> 'running'), 0) as waiting,
           coalesce(sum(x.n) filter (where x.state <> 'running' and x.due), 0) as due,
           coalesce(array_agg(distinct x.claimed_by order by x.claimed_by)
                      filter (where x.state = 'running'), '{}') as holders
      from jobs.limit_rules r
      left join ruled x on x.rule_id = r.id
     where limits.name is null
     group by r.id, r.every_tenant, r.queue, r.concurrency, r.rate, r.per, r.tenant_id,
              x.scope_tenant
  ),
  started as (
    select s.grp, s.started
      from jobs._started_groups(jobs._now()) s
     where limits.name is null
  )
  select u.scope, u.name, u.concurrency_key, u.queue, u.tenant_id, u.concurrency, u.when_busy,
         u.rate, u.per, u.started, u.running, u.waiting, u.held_back, u.holders
    from (
  select 'job' as scope, g.name, g.group_key as concurrency_key, null as queue,
         null as tenant_id, g.concurrency, g.when_busy, null::integer as rate,
         null::interval as per, null::bigint as started, g.running, g.waiting,
         case when g.running >= g.concurrency then g.due else 0 end as held_back,
         g.holders
    from declared_rows g
  union all
  select case when r.every_tenant then 'every tenant'
              when r.tenant_id is not null then 'tenant'
              when r.queue is not null then 'queue'
              else 'fleet' end,
         null, null, r.queue, r.tenant_id, r.concurrency, null, r.rate, r.per,
         case when r.rate is not null then coalesce(s.started, 0) end,
         r.running, r.waiting,
         case when r.running >= r.concurrency or coalesce(s.started, 0) >= r.rate then r.due
              else 0 end,
         r.holders
    from rule_rows r
    left join started s on s.grp = r.grp
    ) u
   order by u.scope collate "C", u.name collate "C", u.queue collate "C" nulls first,
            u.tenant_id collate "C" nulls first, u.concurrency_key collate "C" nulls first
$function$;

CREATE OR REPLACE FUNCTION jobs.nack_v1(id uuid, worker_id text, claim bigint, next_state text DEFAULT 'ready'::text, delay interval DEFAULT '00:00:00'::interval, counts_as_attempt boolean DEFAULT true, error text DEFAULT NULL::text, error_code text DEFAULT NULL::text, error_stack text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
  v_landed bigint;
begin
  perform jobs._check_fence('jobs.nack_v1', nack_v1.id, nack_v1.worker_id, nack_v1.claim);
  if next_state is null or next_state not in ('ready', 'suspended', 'dead', 'failed') then
    perform jobs._invalid('jobs.nack_v1', 'next_state',
                          'must be one of ''ready'', ''suspended'', ''dead'', ''failed''');
  end if;
  if delay is null or delay < interval '0' or delay > interval '100 years' then
    perform jobs._invalid('jobs.nack_v1', 'delay', 'must be an interval from 0 to 100 years');
  end if;
  if counts_as_attempt is null then
    perform jobs._invalid('jobs.nack_v1', 'counts_as_attempt', 'must be true or false');
  end if;

  select j.attempt, j.max_attempts
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.prepare_history(days integer DEFAULT 2)
 RETURNS integer
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_today date := (jobs._now() at time zone 'UTC')::date;
  v_day date;
  v_from timestamptz;
  v_made integer := 0;
begin
  if days is null or days < 0 or days > 31 then
    perform jobs._invalid('jobs.prepare_history', 'days', 'must be between 0 and 31');
  end if;
  for v_day in select v_today + g from generate_series(0, prepare_history.days) g loop
    continue when to_regclass('jobs.' || jobs._history_day(v_day)) is not null;
    v_from := v_day::timestamp at time zone 'UTC';
    continue when exists (select 1
                            from jobs.jobs_history_done_default d
                           where d.finished_at >= v_from
                             and d.finished_at < v_from + interval '1 day');
    execute format('create table jobs.%I partition of jobs.jobs_history_done '
                   'for values from (%L) to (%L)',
                   jobs._history_day(v_day), v_from, v_from + interval '1 day');
    v_made := v_made + 1;
  end loop;
  return v_made;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.progress_v1(id uuid, worker_id text, claim bigint, done numeric, total numeric DEFAULT NULL::numeric, note text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._check_fence('jobs.progress_v1', progress_v1.id, progress_v1.worker_id,
                            progress_v1.claim);
  -- numeric has NaN and Infinity, which compare above every number: refuse them by name
  if done is null or done < 0 or done in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'done', 'must be a finite number of at least 0');
  end if;
  if total < 0 or total in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'total',
                          'must be NULL or a finite number of at least 0');
  end if;
  if length(note) > 1000 then
    perform jobs._invalid('jobs.progress_v1', 'note', 'must be at most 1,000 characters');
  end if;

  update jobs.jobs_live j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.promote(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_queue text;
  v_state text;
begin
  update jobs.jobs_live j
     set state = 'ready',
         run_at = v_now,
         updated_at = v_now
   where j.id = promote.id
     and j.state in ('delayed', 'ready')
     and j.run_at > v_now
  returning j.queue into v_queue;
  if found then
    perform pg_notify('jobs_wake', v_queue);
    return true;
  end if;
  select j.state into v_state from jobs.jobs j where j.id = promote.id;
  if v_state is null then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', promote.id),
                        jsonb_build_object('id', promote.id));
  end if;
  perform jobs._raise(
    'X_JOB_NOT_PROMOTABLE',
    format('job %s is %s and not waiting on its run_at', promote.id, v_state),
    jsonb_build_object('id', promote.id, 'state', v_state));
  return false;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.promote_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_affected integer;
  v_remaining bigint;
  v_queues text[];
  v_queue text;
begin
  perform jobs._bulk_check('jobs.promote_many', promote_many.state, array['delayed', 'ready']);
  with batch as materialized (
    select j.id
      from jobs.jobs_live j
     where j.state = promote_many.state
       and j.run_at > v_now
       and (promote_many.queue is null or j.queue = promote_many.queue)
       and (promote_many.name is null or j.name = promote_many.name)
       and (promote_many.tenant_id is null or j.tenant_id = promote_many.tenant_id)
     order by j.run_at, j.id
     limit 1000
       for update skip locked
  ),
  moved as (
    update jobs.jobs_live j
       set state = 'ready', run_at = v_now, updated_at = v_now
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;

  select count(*)
    into v_remaining
    from jobs.jobs j
   where j.state = promote_many.state
     and j.run_at > v_now
     and (promote_many.queue is null or j.queue = promote_many.queue)
     and (promote_many.name is null or j.name = promote_many.name)
     and (promote_many.tenant_id is null or j.tenant_id = promote_many.tenant_id);
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.publish_event(name text, payload jsonb DEFAULT '{}'::jsonb, correlation_key text DEFAULT NULL::text, ttl interval DEFAULT '7 days'::interval)
 RETURNS uuid
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_queue text;
begin
  if name is null or btrim(name) = '' then
    perform jobs._invalid('jobs.publish_event', 'name', 'must be a non-empty event name');
  end if;
  if payload is null then
    perform jobs._invalid('jobs.publish_event', 'payload', 'must be a JSON value (''{}'' for none)');
  end if;
  if ttl is null or ttl <= interval '0' or ttl > interval '10 years' then
    perform jobs._invalid('jobs.publish_event', 'ttl', 'must be a positive interval of at most 10 years');
  end if;

  insert into jobs.events as e (id, name, payload, correlation_key, published_at, expires_at)
  values (v_id, publish_event.name, publish_event.payload, publish_event.correlation_key,
          v_now, v_now + publish_event.ttl);

  -- the runs parked on a matching wait become due now, instead of at their next poll, and
  -- their queues' workers are woken (once per queue)
  for v_queue in
    with woken as (
      update jobs.jobs_live j
         set run_at = v_now,
             updated_at = v_now
       where j.state = 'suspended'
         and j.run_at > v_now
         and j.run_id in (
           select s.run_id
             from jobs.steps s
            where s.status = 'waiting'
              and s.output ->> 'event' = publish_event.name
              and (s.output ->> 'match' is null
                   or s.output ->> 'match' = publish_event.correlation_key))
      returning j.queue
    )
    select distinct w.queue from woken w
  loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;
  return v_id;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.purge(done_after interval DEFAULT '14 days'::interval, ended_after interval DEFAULT '90 days'::interval, published_after interval DEFAULT '7 days'::interval, batch_size integer DEFAULT 1000)
 RETURNS jobs.purge_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer := 0;
  v_rows integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
  v_day text;
begin
  if done_after is null or done_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'done_after', 'must be an interval of 0 or more');
  end if;
  if ended_after is null or ended_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'ended_after', 'must be an interval of 0 or more');
  end if;
  if published_after is null or published_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'published_after', 'must be an interval of 0 or more');
  end if;
  if batch_size is null or batch_size < 1 or batch_size > 10000 then
    perform jobs._invalid('jobs.purge', 'batch_size', 'must be between 1 and 10000');
  end if;

  perform pg_advisory_xact_lock(hashtext('jobs.purge'));
  perform jobs.prepare_history();

  -- the oldest day partition whose whole day is past the window, by the day in its name
  for v_day in
    select c.relname
      from pg_inherits i
      join pg_class c on c.oid = i.inhrelid
     where i.inhparent = 'jobs.jobs_history_done'::regclass
       and c.relname ~ '^jobs_history_done_p[0-9]{8}$'
       and (to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp at time zone 'UTC')
             + interval '1 day' <= v_now - purge.done_after
     order by c.relname
  loop
    select d.dropped_jobs, d.dropped_steps
      into v_rows, v_steps
      from jobs._drop_day(v_day, purge.batch_size) d;
    v_jobs := v_jobs + v_rows;
    exit when v_rows > 0;
  end loop;

  -- each window in its own statement part, so each walks its own index oldest first, and each
  -- deletes from its own partition by id (a join to the ids let the planner hash a scan of
  -- every partition); the done rows read here are the default partition's (a day partition
  -- goes whole, above)
  with done as materialized (
    select j.id
      from jobs.jobs_history_done_default j
     where j.finished_at < v_now - purge.done_after
       and not jobs._outbox_awaits(j.id)
     order by j.finished_at
     limit purge.batch_size
       for update skip locked
  ),
  ended as materialized (
    select j.id
      from jobs.jobs_history_ended j
     where j.finished_at < v_now - purge.ended_after
       and not jobs._outbox_awaits(j.id)
     order by j.finished_at
     limit purge.batch_size
       for update skip locked
  ),
  removed_done as (
    delete from jobs.jobs_history_done_default j
     where j.id = any(array(select d.id from done d))
    returning j.run_id
  ),
  removed_ended as (
    delete from jobs.jobs_history_ended j
     where j.id = any(array(select e.id from ended e))
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_rows, v_runs
    from (select d.run_id from removed_done d
          union all
          select e.run_id from removed_ended e) r;
  v_jobs := v_jobs + v_rows;
  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select v_steps + count(*) into v_steps from gone;

  -- no index orders either table by age: the scan stops at the batch's last row, and both are
  -- written in about the order they age in
  with gone as (
    delete from jobs.outbox o
     where o.id in (
       select p.id
         from jobs.outbox p
        where p.published_at < v_now - purge.published_after
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_outbox from gone;

  with gone as (
    delete from jobs.events e
     where e.id in (
       select x.id
         from jobs.events x
        where x.expires_at <= v_now
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_events from gone;

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_depth(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_depth_row
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs_live j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$function$;

CREATE OR REPLACE FUNCTION jobs.queue_stats(queues text[] DEFAULT NULL::text[])
 RETURNS SETOF jobs.queue_stat
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_live j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs_history_ended j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
    )
    select w.queue,
           coalesce(c.ready, 0),
           coalesce(c.delayed, 0),
           coalesce(c.running, 0),
           coalesce(c.suspended, 0),
           coalesce(c.dead, 0),
           c.oldest_ready_age,
           exists (select 1 from jobs.queue_pauses p where p.queue = w.queue)
      from wanted w
      left join counted c on c.queue = w.queue
     order by w.queue;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.record_step_v1(id uuid, worker_id text, claim bigint, name text, status text, output jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, wake_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
 RETURNS jobs.step_record
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name = '' then
    perform jobs._invalid('jobs.record_step_v1', 'name', 'must be a non-empty step name');
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
  if found
     and v_job.state = 'cancelled'
     and v_job.claimed_by = record_step_v1.worker_id
     and v_job.claims = record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_CANCELLED',
      format('job %s was cancelled; step %s was not recorded', record_step_v1.id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'step', record_step_v1.name));
  end if;
  if not found
     or v_job.state <> 'running'
     or v_job.claimed_by is distinct from record_step_v1.worker_id
     or v_job.claims <> record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_LEASE_LOST',
      format('job %s is no longer held by claim %s of worker %s; step %s was not recorded',
             record_step_v1.id, record_step_v1.claim, record_step_v1.worker_id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'worker_id', record_step_v1.worker_id,
                         'claim', record_step_v1.claim, 'step', record_step_v1.name));
  end if;

  insert into jobs.steps as s (
    run_id, name, status, output, error, attempts, started_at, updated_at, finished_at, wake_at)
  values (
    v_job.run_id, record_step_v1.name, record_step_v1.status, record_step_v1.output,
    record_step_v1.error, 1, v_now, v_now,
    case when record_step_v1.status in ('completed', 'failed') then v_now end,
    record_step_v1.wake_at)
  on conflict on constraint steps_pkey do update
     set status = excluded.status,
         output = excluded.output,
         error = excluded.error,
         -- a step that failed and is tried again counts one more attempt
         attempts = s.attempts + case when s.status = 'failed' then 1 else 0 end,
         updated_at = excluded.updated_at,
         finished_at = excluded.finished_at,
         wake_at = excluded.wake_at
   where s.status <> 'completed'
  returning s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
    into v_step;

  if v_step.name is null then
    perform jobs._raise(
      'X_STEP_DUPLICATE',
      format('step %s of run %s already completed; a step runs once', record_step_v1.name,
             v_job.run_id),
      jsonb_build_object('id', record_step_v1.id, 'run_id', v_job.run_id,
                         'step', record_step_v1.name));
  end if;
  return v_step;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.remove(id uuid)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_job record;
begin
  select j.state, j.run_id into v_job from jobs.jobs_live j where j.id = remove.id for update;
  if found then
    if v_job.state = 'running' then
      perform jobs._raise('X_JOB_NOT_REMOVABLE',
                          format('job %s is running; cancel it first', remove.id),
                          jsonb_build_object('id', remove.id, 'state', v_job.state));
    end if;
    delete from jobs.jobs_live j where j.id = remove.id;
  else
    delete from jobs.jobs_history j where j.id = remove.id returning j.run_id into v_job;
    if not found then
      perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', remove.id),
                          jsonb_build_object('id', remove.id));
    end if;
  end if;
  if not jobs._run_stands(v_job.run_id) then
    delete from jobs.steps s where s.run_id = v_job.run_id;
  end if;
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.remove_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_table text;
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
  perform jobs._bulk_check('jobs.remove_many', remove_many.state,
                           array['ready', 'delayed', 'suspended', 'done', 'failed', 'dead',
                                 'cancelled']);
  -- a state lives in one table, and the statements are the same for both
  v_table := case when remove_many.state in ('ready', 'delayed', 'suspended') then 'jobs.jobs_live'
                  else 'jobs.jobs_history' end;
  execute format($sql$
    with batch as materialized (
      -- in no particular order: every row of the state goes, and no index orders the table by
      -- age (an order by age would sort the whole state before the first row is locked)
      select j.id
        from %1$s j
       where j.state = $1
         and ($2 is null or j.queue = $2)
         and ($3 is null or j.name = $3)
         and ($4 is null or j.tenant_id = $4)
       limit 1000
         for update skip locked
    ),
    removed as (
      -- by id, and the state, so only the state's partitions are probed: a join to `batch` let
      -- the planner hash a scan of every partition
      delete from %1$s j
       where j.id = any(array(select b.id from batch b))
         and j.state = $1
      returning j.run_id
    )
    select count(*), coalesce(array_agg(distinct r.run_id), '{}')
      from removed r
    $sql$, v_table)
    into v_affected, v_runs
    using remove_many.state, remove_many.queue, remove_many.name, remove_many.tenant_id;

  delete from jobs.steps s
   where s.run_id = any(v_runs)
     and not jobs._run_stands(s.run_id);

  execute format($sql$
    select count(*)
      from %s j
     where j.state = $1
       and ($2 is null or j.queue = $2)
       and ($3 is null or j.name = $3)
       and ($4 is null or j.tenant_id = $4)
    $sql$, v_table)
    into v_remaining
    using remove_many.state, remove_many.queue, remove_many.name, remove_many.tenant_id;
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue(id uuid, from_step text DEFAULT NULL::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
  end if;

  v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
  if v_holder.id is not null then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('job %s cannot be requeued: live job %s holds idempotency key %s', requeue.id,
             v_holder.id, v_job.idempotency_key),
      jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                         'idempotency_key', v_job.idempotency_key, 'tenant_id', v_job.tenant_id));
  end if;

  if from_step is not null then
    select s.started_at
      into v_from
      from jobs.steps s
     where s.run_id = v_job.run_id
       and s.name = requeue.from_step;
    if not found then
      perform jobs._invalid('jobs.requeue', 'from_step',
                            format('names no step of run %s', v_job.run_id));
    end if;
  end if;

  begin
    with dropped as (
      delete from jobs.steps s
       where requeue.from_step is not null
         and s.run_id = v_job.run_id
         and (s.name = requeue.from_step or s.started_at >= v_from)
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
  exception
    when unique_violation then
      -- a live twin committed between the check and the update
      v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('job %s cannot be requeued: a live job holds idempotency key %s', requeue.id,
               v_job.idempotency_key),
        jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                           'idempotency_key', v_job.idempotency_key));
  end;

  perform pg_notify('jobs_wake', v_job.queue);
  return true;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.requeue_many(state text, queue text DEFAULT NULL::text, name text DEFAULT NULL::text, tenant_id text DEFAULT NULL::text)
 RETURNS jobs.bulk_result
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
declare
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
  perform jobs._bulk_check('jobs.requeue_many', requeue_many.state,
                           array['done', 'failed', 'dead', 'cancelled']);
  with movable as materialized (
    -- of several finished rows sharing a key, the oldest; none whose key a live job holds
    select distinct on (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id
      from jobs.jobs_history j
     where j.state = requeue_many.state
       and (requeue_many.queue is null or j.queue = requeue_many.queue)
       and (requeue_many.name is null or j.name = requeue_many.name)
       and (requeue_many.tenant_id is null or j.tenant_id = requeue_many.tenant_id)
       and not exists (
             select 1
               from jobs.jobs_live live
              where live.name = j.name
                and coalesce(live.tenant_id, '') = coalesce(j.tenant_id, '')
                and live.idempotency_key = j.idempotency_key
                and live.state in ('ready', 'delayed', 'running', 'suspended'))
     order by j.name, coalesce(j.tenant_id, ''), j.idempotency_key, j.created_at, j.id
  ),
  batch as materialized (
    -- the state again, under the lock: a row another session moved on since `movable` was read
    -- (requeued and claimed, say) is read anew here, and a lock by id alone would take it
    select j.id
      from jobs.jobs_history j
      join movable m on m.id = j.id
     where j.state = requeue_many.state
     order by j.created_at, j.id
     limit 1000
       for update of j skip locked
  ),
  gone as (
    -- by id, as jobs.remove_many deletes
    delete from jobs.jobs_history j
     where j.id = any(array(select b.id from batch b))
       and j.state = requeue_many.state
    returning j
  ),
  moved as (
    insert into jobs.jobs_live as l
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e
    returning l.queue
  )
  select (select count(*) from movable), count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_movable, v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;

  -- each moved row was its key's only movable row, and its key is live now
  return (v_affected, v_movable - v_affected)::jobs.bulk_result;
end;
$function$;

CREATE OR REPLACE FUNCTION jobs.version()
 RETURNS integer
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  select 7
$function$;

CREATE OR REPLACE FUNCTION jobs.worker_running_v1(worker_id text)
 RETURNS TABLE(id uuid, claim bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.worker_running_v1', 'worker_id', 'must name the worker');
  end if;
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$function$;
