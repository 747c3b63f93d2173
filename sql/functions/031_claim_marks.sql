-- 031_claim_marks: where a claim starts reading when a held xmin horizon (a long transaction, a
-- session idle in transaction) keeps every claimed row's old entry in jobs_claim_idx alive.
--
-- Each claim leaves the entry of the waiting version of its rows behind in jobs_claim_idx, and
-- while any snapshot older than those claims is open, no scan may mark it dead and no vacuum may
-- remove it: a claim that starts at the head of the index walks all of them (100,000 jobs behind
-- one held snapshot: 30 ms an empty claim). So a claim counts the entries its scan walked
-- (pg_stat_get_xact_tuples_returned of the index, before and after) and, past
-- jobs._claim_walk_limit() of them beyond the rows it took, keeps a mark per queue in its
-- session: the key (priority, run_at, id) of the last row it handed out. For the next second
-- (jobs._claim_rescan()) that session's claims of the queue start after its mark, then one
-- claim reads from the head again: a row that came in behind a mark (a lower priority number,
-- an earlier run_at, a row another claimer skipped and gave back) is handed out at that rescan,
-- within a second, and the marks end as soon as a read from the head walks little.
-- With nothing holding the horizon, dead entries are marked so by the scans that meet them and
-- a claim never keeps a mark: the hand-out order is exact.
--
-- The marks are session state (the setting jobs.claim_marks: jsonb of queue to
-- {p, r, i, until}), so they cost no write and no lock, and a rolled-back claim takes its mark
-- back with it. A session can only make its own claims start later, never see another's rows.

-- jobs._claim_walk_limit: index entries beyond the rows taken that a claim from the head may
-- walk before its session keeps marks. A dead entry costs about 0.3 us: 1,000 is 0.3 ms.
create function jobs._claim_walk_limit()
returns integer
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$ select 1000 $$;

-- jobs._claim_rescan: how long a session's marks stand before a claim reads from the head again,
-- which bounds how long a row behind a mark waits.
create function jobs._claim_rescan()
returns interval
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$ select interval '1 second' $$;

-- jobs._claim_marks_of: the standing marks of this session for `queues` at `clock`, in the order
-- of `queues`: for a queue with none, the lowest key there is, so the scan starts at the head.
-- Raises nothing. Locks nothing.
create function jobs._claim_marks_of(
  queues text[],
  marks jsonb,
  clock timestamptz,
  out priorities integer[],
  out run_ats timestamptz[],
  out ids uuid[]
)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  select array_agg(coalesce((m.mark ->> 'p')::integer, -2147483648) order by q.ord),
         array_agg(coalesce((m.mark ->> 'r')::timestamptz, '-infinity') order by q.ord),
         array_agg(coalesce((m.mark ->> 'i')::uuid, '00000000-0000-0000-0000-000000000000')
                   order by q.ord)
    into priorities, run_ats, ids
    from unnest(_claim_marks_of.queues) with ordinality as q(queue, ord)
    left join lateral (
      select _claim_marks_of.marks -> q.queue as mark
       where (_claim_marks_of.marks -> q.queue ->> 'until')::timestamptz
               > _claim_marks_of.clock
    ) m on true;
end;
$$;

-- jobs._claim_marks_keep: this session's marks after a claim. `head_queues` were read from the
-- head of the index: when the read walked past the limit (`heavy`), each gets (or keeps) a mark
-- standing until `until`, else it loses its mark. Each queue in `taken_queues` then marks the
-- last key handed out of it (keys in hand-out order); a queue read from its standing mark keeps
-- that mark's until. The setting is session-wide (not local): the marks outlive the claim's
-- transaction, but not its rollback. Raises nothing. Locks nothing.
create function jobs._claim_marks_keep(
  marks jsonb,
  head_queues text[],
  heavy boolean,
  until timestamptz,
  taken_queues text[],
  taken_priorities integer[],
  taken_run_ats timestamptz[],
  taken_ids uuid[]
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_marks jsonb := coalesce(_claim_marks_keep.marks, '{}');
  v_last integer := coalesce(cardinality(_claim_marks_keep.taken_queues), 0);
  v_queue text := _claim_marks_keep.taken_queues[1];
begin
  if heavy then
    select v_marks || coalesce(jsonb_object_agg(
             h.queue,
             coalesce(v_marks -> h.queue, '{}')
               || jsonb_build_object('until', _claim_marks_keep.until)),
             '{}')
      into v_marks
      from unnest(_claim_marks_keep.head_queues) as h(queue);
  else
    v_marks := v_marks - _claim_marks_keep.head_queues;
  end if;
  if v_last > 0 and _claim_marks_keep.taken_queues <@ array[v_queue] then
    -- the rows of one queue (every claim of one queue): its last key is the last handed out.
    -- Sorting a batch to find it cost a busy claim 1 ms of its 500 rows
    if v_marks ? v_queue then
      v_marks := v_marks || jsonb_build_object(
                   v_queue,
                   v_marks -> v_queue
                     || jsonb_build_object('p', _claim_marks_keep.taken_priorities[v_last],
                                           'r', _claim_marks_keep.taken_run_ats[v_last],
                                           'i', _claim_marks_keep.taken_ids[v_last]));
    end if;
  elsif v_last > 0 then
    select v_marks || coalesce(jsonb_object_agg(
             l.queue,
             v_marks -> l.queue || jsonb_build_object('p', l.priority, 'r', l.run_at, 'i', l.id)),
             '{}')
      into v_marks
      from (
        select distinct on (t.queue) t.queue, t.priority, t.run_at, t.id
          from unnest(_claim_marks_keep.taken_queues, _claim_marks_keep.taken_priorities,
                      _claim_marks_keep.taken_run_ats, _claim_marks_keep.taken_ids)
                 with ordinality as t(queue, priority, run_at, id, ord)
         order by t.queue, t.ord desc
      ) l
     where v_marks ? l.queue;
  end if;
  perform set_config('jobs.claim_marks',
                     case when v_marks = '{}' then '' else v_marks::text end, false);
end;
$$;
