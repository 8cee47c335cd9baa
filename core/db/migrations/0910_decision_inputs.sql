-- Issue 22 item 1: the policy input of each decision (or a configured sample), kept for replay.
-- Written by the edge's audit thread after the decision's audit record (audit_id links them),
-- secrets removed and personal identifiers replaced by per-tenant keyed pseudonyms before they
-- leave the edge. Partitioned by hour so retention drops whole partitions, never scans rows.
CREATE TABLE decision_inputs (
  recorded_at    timestamptz NOT NULL,
  tenant_id      text NOT NULL,
  audit_id       bigint NOT NULL,
  decision_id    text NOT NULL,
  purpose        text NOT NULL,
  route          text NOT NULL,
  -- The policy's own verdict (not the answer: an API-key budget can still refuse an allow).
  allow          boolean NOT NULL,
  code           text NOT NULL,
  policy_version text NOT NULL,
  -- The shorter of the configured window and the purpose's retention_days.
  expires_at     timestamptz NOT NULL,
  input          jsonb NOT NULL,
  PRIMARY KEY (tenant_id, recorded_at, audit_id)
) PARTITION BY RANGE (recorded_at);

-- The hour partition holding `at` (UTC hours whatever the session's TimeZone), created once;
-- concurrent edges serialise on an advisory lock instead of racing CREATE TABLE.
CREATE FUNCTION decision_inputs_partition(at timestamptz) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  lo timestamptz := date_trunc('hour', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  name text := 'decision_inputs_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDDHH24');
BEGIN
  IF to_regclass(name) IS NOT NULL THEN RETURN name; END IF;
  PERFORM pg_advisory_xact_lock(hashtext('decision_inputs_partition'));
  IF to_regclass(name) IS NOT NULL THEN RETURN name; END IF;
  EXECUTE format('CREATE TABLE %I PARTITION OF decision_inputs FOR VALUES FROM (%L) TO (%L)', name, lo, lo + interval '1 hour');
  RETURN name;
END $$;

-- The hour partitions, oldest first, with their start and size on disk.
CREATE FUNCTION decision_inputs_partitions() RETURNS TABLE (name text, starts timestamptz, bytes bigint) LANGUAGE sql STABLE AS $$
  SELECT c.relname::text, to_timestamp(substr(c.relname, 18), 'YYYYMMDDHH24')::timestamp AT TIME ZONE 'UTC', pg_total_relation_size(c.oid)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = 'decision_inputs'::regclass AND c.relname ~ '^decision_inputs_p[0-9]{10}$'
  ORDER BY 2
$$;

-- Issue 22 item 2: candidate bundles, verified against the trusted keys on upload and stored
-- whole so every core can load one by its ref. Owned by the uploading tenant.
CREATE TABLE policy_candidates (
  tenant_id        text NOT NULL REFERENCES tenants(id),
  ref              text NOT NULL,
  policy_version   text NOT NULL,
  registry_version text NOT NULL,
  manifest         bytea NOT NULL,
  registry         bytea NOT NULL,
  wasm             bytea NOT NULL,
  uploaded_by      text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, ref)
);

-- Replay jobs: claimed by a core's worker under a lease, advanced a page at a time (the cursor
-- and partial result are committed per page, so a job outlives the core that started it).
CREATE TABLE policy_impact_jobs (
  id            uuid PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id),
  candidate_ref text NOT NULL,
  since         timestamptz NOT NULL,
  until         timestamptz NOT NULL,
  status        text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
  requested_by  text NOT NULL,
  cursor_ts     timestamptz,
  cursor_id     bigint,
  result        jsonb NOT NULL DEFAULT '{}'::jsonb,
  error         text,
  lease_until   timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  finished_at   timestamptz,
  FOREIGN KEY (tenant_id, candidate_ref) REFERENCES policy_candidates (tenant_id, ref)
);
CREATE INDEX policy_impact_jobs_open_idx ON policy_impact_jobs (created_at) WHERE status IN ('queued', 'running');
