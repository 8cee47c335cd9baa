-- The batcher's one statement per batch (G8): claim the batch's idempotency keys and apply the
-- commands whose key this transaction now owns, in one round trip. p_keys is aligned with
-- p_cmds: null (no key) or {tenant, key, principal, method, path, hash}; a key is the caller's
-- (tenant, key, principal). Keys are claimed in (tenant, key, principal) order, before any
-- balance row (no claim deadlocks); a key already taken (an earlier or concurrent request: the
-- INSERT waits for a concurrent one to end), held by a `legacy` row (migration 0710: never
-- replayed, answered 409) or repeated inside the batch (the first occurrence claims it, with its
-- own request hash) loses, and its command is not run: its answer is null and the caller replays
-- the stored response after the commit. A key without its principal is a bug and aborts.
-- Every key costs one primary-key probe whatever the statistics say (migration 0920: no
-- sequential scans, no hash or merge joins).
-- Proved by: test/ledger/batch.test.ts › "ledger_apply_keyed claims keys per (tenant, key,
-- principal): …", "ledger_apply_keyed: a second batch with a key in flight waits for the first,
-- then does not run it"; test/ledger/key-lookups.test.ts › "claims a batch of keys, applies it
-- and stores its responses with key probes only".
CREATE OR REPLACE FUNCTION ledger_apply_keyed(p_keys jsonb, p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql
  SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
DECLARE
  v_run integer[];
  v_res jsonb;
BEGIN
  IF jsonb_array_length(p_keys) <> jsonb_array_length(p_cmds) THEN
    RAISE EXCEPTION 'ledger_apply_keyed: % keys for % commands', jsonb_array_length(p_keys), jsonb_array_length(p_cmds);
  END IF;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_keys) x
              WHERE jsonb_typeof(x) = 'object' AND (x->>'principal' IS NULL OR x->>'principal' = 'legacy')) THEN
    RAISE EXCEPTION 'ledger_apply_keyed: a key without its principal';
  END IF;
  WITH k AS (
    SELECT n, x->>'tenant' AS t, x->>'key' AS k, x->>'principal' AS p, x->>'method' AS method, x->>'path' AS path, x->>'hash' AS hash
      FROM jsonb_array_elements(p_keys) WITH ORDINALITY a(x, n) WHERE jsonb_typeof(x) = 'object'),
  firsts AS (SELECT DISTINCT ON (t, k, p) n, t, k, p, method, path, hash FROM k ORDER BY t, k, p, n),
  won AS (
    INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash)
    SELECT f.t, f.k, f.p, f.method, f.path, f.hash FROM firsts f
     WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys l WHERE l.tenant_id = f.t AND l.key = f.k AND l.principal = 'legacy')
     ORDER BY f.t, f.k, f.p
    ON CONFLICT DO NOTHING RETURNING tenant_id, key, principal)
  SELECT array_agg(c.n ORDER BY c.n) INTO v_run
    FROM jsonb_array_elements(p_keys) WITH ORDINALITY c(x, n)
   WHERE jsonb_typeof(c.x) <> 'object'
      OR c.n IN (SELECT f.n FROM firsts f JOIN won w ON w.tenant_id = f.t AND w.key = f.k AND w.principal = f.p);
  IF v_run IS NULL THEN
    RETURN (SELECT jsonb_agg(NULL::jsonb) FROM generate_series(1, jsonb_array_length(p_cmds)));
  END IF;
  v_res := ledger_apply((SELECT jsonb_agg(p_cmds->(i - 1) ORDER BY o) FROM unnest(v_run) WITH ORDINALITY u(i, o)));
  RETURN (SELECT jsonb_agg(CASE WHEN u.o IS NULL THEN NULL ELSE v_res->(u.o::integer - 1) END ORDER BY g.n)
            FROM generate_series(1, jsonb_array_length(p_cmds)) g(n)
            LEFT JOIN unnest(v_run) WITH ORDINALITY u(i, o) ON u.i = g.n);
END $$;
