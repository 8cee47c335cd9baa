-- Shared state for N core instances (issue 23 item 6): admin rate limits.
-- Administration mutation rate limits (SPEC 5.5), counted once for every core instance:
-- one row per (window start, scope), scope 'ip:<address>' or 'tenant:<id>'; core/admin/rate-limit.ts
-- increments it with one upsert per request. UNLOGGED: not written to the WAL (the hot path
-- costs no fsync) and emptied after a database crash or on a promoted standby, which only
-- forgets a minute of counts. The window start leads the key so housekeeping deletes past
-- windows through the primary key. fillfactor leaves room for HOT updates of the count.
CREATE UNLOGGED TABLE admin_rate_counters (
  window_start timestamptz NOT NULL,
  scope        text NOT NULL,
  count        integer NOT NULL CHECK (count >= 0),
  PRIMARY KEY (window_start, scope)
) WITH (fillfactor = 70);
