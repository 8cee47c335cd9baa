-- Idempotency keys belong to the caller (DESIGN "Idempotency keys belong to the caller (tenant +
-- principal)"; issue 13 item 3): a stored response is found by (tenant, key, principal), so a
-- key value another principal of the tenant used is simply a different key. `principal` is
-- `type:id` (core/idempotency: customer:, agent:, staff:, client:, service:).
--
-- Existing rows: nothing stored says whose they were (the audit record of the same
-- transaction is not linked to the key), so they are marked 'legacy'. A legacy row is never
-- replayed to anyone (its response may be another caller's) and a request presenting its key
-- value is refused 409 until housekeeping deletes it (kept 7 days, core/housekeeping/prune.ts):
-- its owner's retry across the upgrade must not move money a second time. No new legacy row
-- can be written, so nobody can block a key that did not exist before this migration.
ALTER TABLE idempotency_keys ADD COLUMN principal text;
UPDATE idempotency_keys SET principal = 'legacy';
ALTER TABLE idempotency_keys ALTER COLUMN principal SET NOT NULL;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_principal_check
  CHECK (principal = 'legacy' OR principal ~ '^[a-z][a-z-]*:.+$');
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
-- (tenant, key) first: the caller's own row and a legacy row of the same key are one index range,
-- and the inspection routes look a key up across principals.
ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key, principal);

-- Secrets shown once stay unreadable (issue 13 item 7): a response carrying a secret keeps its
-- original sealed with the master key (AES-256-GCM, bound to its row) for the caller's replay;
-- response_body then holds the same response with the secret fields redacted, for inspection.
ALTER TABLE idempotency_keys ADD COLUMN response_sealed bytea;
-- Legacy rows are never replayed: redact their secrets in place (the secret-bearing field names
-- of core/idempotency/secrets.ts at the time of this migration; values are JSON strings).
UPDATE idempotency_keys
   SET response_body = regexp_replace(response_body,
         '("(secret|client_secret|clientSecret|apiKeySecret|api_key_secret|secret_key|secretKey|private_key|privateKey|password|pin|otp|token|access_token|accessToken|refresh_token|refreshToken|verificationToken|challengeToken)"[[:space:]]*:[[:space:]]*)"([^"\\]|\\.)*"',
         '\1"[redacted]"', 'g')
 WHERE response_body IS NOT NULL;

-- The ledger batch claims keys in one statement (0105): the same, with the principal. A key
-- held by a legacy row is not claimed, so the caller is answered from that row (409).
CREATE OR REPLACE FUNCTION ledger_apply_keyed(p_keys jsonb, p_cmds jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
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
