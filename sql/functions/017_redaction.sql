-- 017_redaction: what an operator's view of a job hides. jobs.inspect_job (and through it the
-- CLI's `jobs show`, with or without --json, and the dashboard) shows a job's input with the
-- value of every key that looks like a secret replaced by "[redacted]": a key whose name,
-- lower-cased with '-' read as '_', contains one of the fragments in jobs.redacted_keys
-- (password, secret, token, authorization, api_key, ... on install, and any the application
-- declares through jobs.redact_keys). The stored row keeps the value: the worker's claim gets it
-- whole, and the owner reads it in psql.
--
-- Tables: jobs.redacted_keys (read by jobs.redact; written by jobs.redact_keys). Locks nothing
-- else.

create table jobs.redacted_keys (
  fragment text primary key check (fragment ~ '^[a-z0-9_]{1,100}$')
);

insert into jobs.redacted_keys (fragment) values
  ('password'), ('passwd'), ('secret'), ('token'), ('authorization'), ('api_key'), ('apikey'),
  ('private_key'), ('credential');

-- jobs._secret_key: whether the key `name` looks like a secret's (see the file's head).
-- Answers a boolean. Raises nothing.
create function jobs._secret_key(name text)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (select 1
                   from jobs.redacted_keys r
                  where strpos(replace(lower(name), '-', '_'), r.fragment) > 0)
$$;

-- jobs.redact: `value` with the value of every object key that looks like a secret, at any
-- depth, replaced by the string "[redacted]". Answers jsonb (NULL for NULL). Raises nothing.
create function jobs.redact(value jsonb)
returns jsonb
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return jobs._redacted(value);
end;
$$;

-- jobs._redacted: jobs.redact's work, recursive. Answers jsonb. Raises nothing.
create function jobs._redacted(value jsonb)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  case jsonb_typeof(value)
    when 'object' then
      return (select coalesce(jsonb_object_agg(
                                e.key,
                                case when jobs._secret_key(e.key) then to_jsonb('[redacted]'::text)
                                     else jobs._redacted(e.value) end),
                              '{}'::jsonb)
                from jsonb_each(value) e);
    when 'array' then
      return (select coalesce(jsonb_agg(jobs._redacted(e.value) order by e.ord), '[]'::jsonb)
                from jsonb_array_elements(value) with ordinality e(value, ord));
    else
      return value;
  end case;
end;
$$;

-- jobs.redact_keys: also redact the keys containing any of `fragments` (lower-case letters,
-- digits and _, e.g. 'ssn', 'card_number'): what an application declares secret in its inputs.
-- Answers how many fragments were new. Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker
-- and operator kinds: a worker declares its registry's at start). Locks the new rows.
create function jobs.redact_keys(fragments text[])
returns integer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_added integer;
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.redact_keys');
  if fragments is null or coalesce(array_ndims(fragments), 1) <> 1
     or cardinality(fragments) > 1000
     or exists (select 1 from unnest(fragments) f
                 where f is null or replace(lower(f), '-', '_') !~ '^[a-z0-9_]{1,100}$') then
    perform jobs._invalid('jobs.redact_keys', 'fragments',
                          'must be an array of at most 1000 key fragments of 1 to 100 letters, '
                          'digits, - or _');
  end if;
  insert into jobs.redacted_keys (fragment)
  select distinct replace(lower(f), '-', '_') from unnest(fragments) f
  on conflict on constraint redacted_keys_pkey do nothing;
  get diagnostics v_added = row_count;
  return v_added;
end;
$$;
