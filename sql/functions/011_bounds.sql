-- 011_bounds: the largest values durajobs takes, and the checks that refuse anything past them
-- before a row is written. An over-long name would otherwise fail deep inside an index (a raw
-- 54000), a queue name past 8,000 bytes inside pg_notify, and a huge interval inside timestamp
-- arithmetic; a 10 MB input would be sent back by every claim.
--
-- Every name a caller passes (job, queue, idempotency key, tenant, worker, relay, step, event,
-- task and the `*_by` fields) is at most 200 characters and never blank: NULL where allowed, or
-- a text with a character that is not whitespace. 200 characters of 4-byte UTF-8 in each of
-- the three columns of jobs_dedupe_idx still fit an index row.
--
-- Tables: jobs.size_limits (the byte limits, read by the checks; written only by
-- jobs.set_size_limit). Locks nothing but set_size_limit's row.

-- the largest input (also an event's payload), step output and error text, in bytes of their
-- stored form; the owner changes them with jobs.set_size_limit
create table jobs.size_limits (
  name text primary key check (name in ('input', 'step_output', 'error_text')),
  max_bytes integer not null check (max_bytes between 1024 and 104857600)
);

insert into jobs.size_limits (name, max_bytes) values
  ('input', 1048576),
  ('step_output', 1048576),
  ('error_text', 65536);

-- jobs._max_bytes: the limit named `name` in jobs.size_limits. Answers an integer. Raises nothing.
create function jobs._max_bytes(name text)
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select l.max_bytes from jobs.size_limits l where l.name = _max_bytes.name
$$;

-- jobs._json_bytes: the size of `value` in bytes as stored uncompressed: what a claim sends back,
-- whatever compression a row it was read from had. Answers an integer. Raises nothing.
create function jobs._json_bytes(value jsonb)
returns integer
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  -- a compressed datum (read from a table) is expanded by the concatenation, which answers the
  -- value itself
  select case when pg_column_compression(value) is null then pg_column_size(value)
              else pg_column_size(value || '{}'::jsonb) end
$$;

-- jobs._bad_label: whether `value` is not a name durajobs takes: blank (empty, or whitespace
-- only) or longer than 200 characters. NULL is not bad here; the caller decides whether it may
-- be NULL. Answers a boolean. Raises nothing.
create function jobs._bad_label(value text)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select value !~ '[^[:space:]]' or length(value) > 200
$$;

-- jobs._check_label: refuse `value` for `argument` of `function_name` unless it is a name
-- durajobs takes (see jobs._bad_label); NULL is refused when required.
-- Raises X_ARGUMENT_INVALID, naming the argument and the limit. Locks nothing.
create function jobs._check_label(
  function_name text,
  argument text,
  value text,
  required boolean default true
)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is null then
    if required then
      perform jobs._invalid(function_name, argument,
                            'must not be NULL: pass a name of 1 to 200 characters');
    end if;
  elsif value !~ '[^[:space:]]' then
    perform jobs._invalid(function_name, argument,
                          'must not be blank (empty or only whitespace)');
  elsif length(value) > 200 then
    perform jobs._invalid(function_name, argument,
                          format('must be at most 200 characters, got %s', length(value)));
  end if;
end;
$$;

-- jobs._check_labels: jobs._check_label for each element of `labels`, which must be a
-- one-dimensional array of 1 to 1,000 names without NULL. Raises X_ARGUMENT_INVALID naming the
-- first culprit (argument[3]). Locks nothing.
create function jobs._check_labels(function_name text, argument text, labels text[])
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_at integer;
begin
  if labels is null or coalesce(array_ndims(labels), 1) <> 1 or cardinality(labels) > 1000 then
    perform jobs._invalid(function_name, argument,
                          'must be a one-dimensional array of at most 1000 names');
  end if;
  select u.ord
    into v_at
    from unnest(labels) with ordinality u (label, ord)
   where u.label is null or jobs._bad_label(u.label)
   order by u.ord
   limit 1;
  if v_at is not null then
    perform jobs._check_label(function_name, format('%s[%s]', argument, v_at), labels[v_at]);
  end if;
end;
$$;

-- jobs._check_interval: refuse `value` for `argument` unless it lies from `low` to `high`
-- (both inclusive; NULL refused). Raises X_ARGUMENT_INVALID naming both bounds. Locks nothing.
create function jobs._check_interval(
  function_name text,
  argument text,
  value interval,
  low interval,
  high interval
)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is null or value < low or value > high then
    perform jobs._invalid(function_name, argument,
                          format('must be an interval from %s to %s, got %s', low, high,
                                 coalesce(value::text, 'NULL')));
  end if;
end;
$$;

-- jobs._check_bytes: refuse `value` (of `size` bytes) for `argument` when it is larger than the
-- size limit `limit_name` (see jobs.size_limits). Raises X_ARGUMENT_INVALID naming the limit and
-- how to raise it. Locks nothing.
create function jobs._check_bytes(
  function_name text,
  argument text,
  size integer,
  limit_name text
)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_max integer := jobs._max_bytes(limit_name);
begin
  if size > v_max then
    perform jobs._raise(
      'X_ARGUMENT_INVALID',
      format('%s: %s is %s bytes, over the %s limit of %s bytes', function_name, argument, size,
             limit_name, v_max),
      jsonb_build_object('function', function_name, 'argument', argument, 'bytes', size,
                         'limit', limit_name, 'max_bytes', v_max),
      format('store less (keep large data elsewhere and pass its address), or have the schema''s '
             'owner raise the limit: select jobs.set_size_limit(''%s'', <bytes>)', limit_name));
  end if;
end;
$$;

-- jobs._cut: `value` cut to at most `max_bytes` bytes of UTF-8 (never inside a character), with
-- a note of how much was cut. A failure report is cut, never refused: refusing it would leave
-- the attempt running until its lease lapsed. Answers text; NULL stays NULL. Raises nothing.
create function jobs._cut(value text, max_bytes integer)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_note text;
  v_budget integer;
  v_low integer := 0;  -- this many characters fit
  v_high integer;      -- this many may not
  v_mid integer;
begin
  if value is null or octet_length(value) <= max_bytes then
    return value;
  end if;
  v_note := format(' [cut: %s bytes in all]', octet_length(value));
  v_budget := max_bytes - octet_length(v_note);
  v_high := least(length(value), v_budget + 1);
  -- the longest prefix of whole characters within the budget, by halving
  while v_low + 1 < v_high loop
    v_mid := (v_low + v_high) / 2;
    if octet_length(left(value, v_mid)) <= v_budget then
      v_low := v_mid;
    else
      v_high := v_mid;
    end if;
  end loop;
  return left(value, v_low) || v_note;
end;
$$;

-- jobs._check_traceparent: refuse a traceparent that is not a W3C trace context header
-- (version-traceid-parentid-flags in lower-case hex, version not ff, ids not all zero).
-- NULL passes. Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_traceparent(function_name text, argument text, value text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is not null and not jobs._valid_traceparent(value) then
    perform jobs._invalid(
      function_name, argument,
      'must be a W3C traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, '
      'ids not all zero');
  end if;
end;
$$;

-- jobs._valid_traceparent: whether `value` is a W3C traceparent (see _check_traceparent).
-- Answers a boolean (NULL for NULL). Raises nothing.
create function jobs._valid_traceparent(value text)
returns boolean
language sql
immutable
set search_path = pg_catalog, pg_temp
as $$
  select value ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
     and left(value, 2) <> 'ff'
     and substr(value, 4, 32) <> repeat('0', 32)
     and substr(value, 37, 16) <> repeat('0', 16)
$$;

-- jobs.set_size_limit: set the size limit `name` ('input', 'step_output' or 'error_text') to
-- max_bytes (1 KiB to 100 MiB). Rows already stored stay as they are. Only the owner of schema
-- jobs (or a member of its role) can.
-- Answers the previous limit. Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED. Locks the limit's
-- row.
create function jobs.set_size_limit(name text, max_bytes integer)
returns integer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_previous integer;
begin
  perform jobs._require_owner('jobs.set_size_limit', 'change a size limit');
  if name is null or name not in ('input', 'step_output', 'error_text') then
    perform jobs._invalid('jobs.set_size_limit', 'name',
                          'must be ''input'', ''step_output'' or ''error_text''');
  end if;
  if max_bytes is null or max_bytes < 1024 or max_bytes > 104857600 then
    perform jobs._invalid('jobs.set_size_limit', 'max_bytes',
                          'must be from 1024 (1 KiB) to 104857600 (100 MiB)');
  end if;
  select l.max_bytes into v_previous from jobs.size_limits l where l.name = set_size_limit.name;
  update jobs.size_limits l
     set max_bytes = set_size_limit.max_bytes
   where l.name = set_size_limit.name;
  return v_previous;
end;
$$;
