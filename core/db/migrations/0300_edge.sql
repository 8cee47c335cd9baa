-- Service tokens (SPEC 5.5): opaque bearer tokens for staff tooling and service-to-service
-- calls, with roles (Admin, Ops, ReadOnly, ...). Stored as SHA-256, shown once.
CREATE TABLE service_tokens (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  name        text NOT NULL,
  roles       text[] NOT NULL,
  token_hash  bytea NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz,
  revoked_at  timestamptz,
  UNIQUE (tenant_id, name)
);

-- One-time values seen by any edge instance (DPoP proof jti, API-key nonces): shared across
-- instances, so a replay is refused whichever edge it reaches. Unlogged: losing it on a crash
-- only reopens values whose window is still open, bounded by expires_at.
CREATE UNLOGGED TABLE edge_replay (
  kind       text NOT NULL,
  value      text NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (kind, value)
);
CREATE INDEX edge_replay_expiry_idx ON edge_replay (expires_at);

-- Edge caches drop a tenant's settings, a session or a service token when they change.
-- The payload is the changed row's value of the column named by the second argument.
CREATE FUNCTION notify_row_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_ARGV[0], to_jsonb(COALESCE(NEW, OLD)) ->> TG_ARGV[1]);
  RETURN NULL;
END $$;
CREATE TRIGGER tenants_changed AFTER UPDATE OR DELETE ON tenants
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('tenants_changed', 'id');
CREATE TRIGGER service_tokens_changed AFTER UPDATE OR DELETE ON service_tokens
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('service_tokens_changed', 'tenant_id');
