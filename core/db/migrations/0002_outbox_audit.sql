-- Outbox (SPEC 2.11, 6): events written in the same transaction as the change they announce.
CREATE TABLE outbox (
  id              uuid PRIMARY KEY,
  tenant_id       text NOT NULL,
  aggregate       text NOT NULL,
  aggregate_id    text NOT NULL,
  event           text NOT NULL CHECK (event ~ '^[a-z_]+(\.[a-z_]+)+$'),
  payload         jsonb NOT NULL,
  headers         jsonb NOT NULL DEFAULT '{}'::jsonb,
  attempts        integer NOT NULL DEFAULT 0,
  status          text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'DELIVERED', 'DEAD')),
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  processed_at    timestamptz
);
CREATE INDEX outbox_pending_idx ON outbox (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX outbox_tenant_idx ON outbox (tenant_id, created_at, id);
CREATE INDEX outbox_aggregate_idx ON outbox (tenant_id, aggregate, aggregate_id, created_at);

-- Audit (SPEC 2.8): append-only, hash-chained per tenant. row_hash = SHA-256(prev_hash ||
-- canonical JSON of the record); the head table serialises appends within one tenant.
CREATE TABLE audit_log (
  id        bigserial PRIMARY KEY,
  ts        timestamptz NOT NULL,
  tenant_id text NOT NULL,
  actor     jsonb NOT NULL,
  action    text NOT NULL,
  target    jsonb NOT NULL,
  decision  jsonb NOT NULL DEFAULT '{}'::jsonb,
  attrs     jsonb NOT NULL DEFAULT '{}'::jsonb,
  prev_hash bytea NOT NULL,
  row_hash  bytea NOT NULL
);
CREATE INDEX audit_log_tenant_idx ON audit_log (tenant_id, id);
CREATE INDEX audit_log_action_idx ON audit_log (tenant_id, action, ts);

CREATE TABLE audit_chain_heads (
  tenant_id text PRIMARY KEY,
  last_id   bigint,
  last_hash bytea NOT NULL
);

-- Entries are never updated or deleted.
CREATE FUNCTION audit_log_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit_log is append-only';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
  FOR EACH ROW EXECUTE FUNCTION audit_log_immutable();
