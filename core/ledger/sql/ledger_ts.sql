-- The ledger's timestamps on the wire: UTC, milliseconds, `Z` (SPEC timestamps), the same text
-- whichever function or route renders them.
-- Proved by: test/ledger/routes.test.ts › "holds: create, partial capture, void, …" (expires_at
-- and created_at as sent back).
CREATE OR REPLACE FUNCTION ledger_ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;
