-- The batcher's one statement per batch: claim the batch's idempotency keys and apply the
-- commands whose key this transaction now owns, in one round trip instead of two.
-- p_keys is aligned with p_cmds: null (no key) or {tenant, key, method, path, hash}. Keys are
-- claimed in (tenant, key) order (no claim deadlocks); a key already taken (an earlier or
-- concurrent request: the INSERT waits for a concurrent one to end) or repeated inside the
-- batch (the first occurrence claims it, with its own request hash) loses, and its command is
-- not run: its answer is null and the caller replays the stored response after the commit.
-- Same rows, same order of locks (keys, then balance rows in ledger_apply) as before.
CREATE FUNCTION ledger_apply_keyed(p_keys jsonb, p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
  v_run integer[];
  v_res jsonb;
BEGIN
  IF jsonb_array_length(p_keys) <> jsonb_array_length(p_cmds) THEN
    RAISE EXCEPTION 'ledger_apply_keyed: % keys for % commands', jsonb_array_length(p_keys), jsonb_array_length(p_cmds);
  END IF;
  WITH k AS (
    SELECT n, x->>'tenant' AS t, x->>'key' AS k, x->>'method' AS method, x->>'path' AS path, x->>'hash' AS hash
      FROM jsonb_array_elements(p_keys) WITH ORDINALITY a(x, n) WHERE jsonb_typeof(x) = 'object'),
  firsts AS (SELECT DISTINCT ON (t, k) n, t, k, method, path, hash FROM k ORDER BY t, k, n),
  won AS (
    INSERT INTO idempotency_keys (tenant_id, key, method, path, request_hash)
    SELECT t, k, method, path, hash FROM firsts ORDER BY t, k
    ON CONFLICT DO NOTHING RETURNING tenant_id, key)
  SELECT array_agg(c.n ORDER BY c.n) INTO v_run
    FROM jsonb_array_elements(p_keys) WITH ORDINALITY c(x, n)
   WHERE jsonb_typeof(c.x) <> 'object'
      OR c.n IN (SELECT f.n FROM firsts f JOIN won w ON w.tenant_id = f.t AND w.key = f.k);
  IF v_run IS NULL THEN
    RETURN (SELECT jsonb_agg(NULL::jsonb) FROM generate_series(1, jsonb_array_length(p_cmds)));
  END IF;
  v_res := ledger_apply((SELECT jsonb_agg(p_cmds->(i - 1) ORDER BY o) FROM unnest(v_run) WITH ORDINALITY u(i, o)));
  RETURN (SELECT jsonb_agg(CASE WHEN u.o IS NULL THEN NULL ELSE v_res->(u.o::integer - 1) END ORDER BY g.n)
            FROM generate_series(1, jsonb_array_length(p_cmds)) g(n)
            LEFT JOIN unnest(v_run) WITH ORDINALITY u(i, o) ON u.i = g.n);
END $$;
