-- API keys for machine clients (SPEC 2.9, 5.4). The secret keys an HMAC, so the verifier
-- needs it: it is stored sealed with the master key (AES-256-GCM), plus its SHA-256 for the
-- x-api-key-secret check. After a rotation the previous secret stays valid until
-- prev_valid_until (bounded grace).
CREATE TABLE api_keys (
  id               text PRIMARY KEY CHECK (id ~ '^pk_(live|test)_[A-Za-z0-9]{16,64}$'),
  tenant_id        text NOT NULL REFERENCES tenants(id),
  name             text NOT NULL,
  secret_enc       bytea NOT NULL,
  secret_hash      bytea NOT NULL,
  prev_secret_enc  bytea,
  prev_secret_hash bytea,
  prev_valid_until timestamptz,
  scopes           text[] NOT NULL DEFAULT '{}',
  -- {"daily_amount": "50000.00", "currency": "KES", "per_minute": 60}
  budget           jsonb NOT NULL DEFAULT '{}'::jsonb,
  ip_allowlist     cidr[] NOT NULL DEFAULT '{}',
  expires_at       timestamptz,
  created_by       text NOT NULL,
  -- millisecond precision so the list cursor (ISO 8601, ms) is exact
  created_at       timestamptz NOT NULL DEFAULT date_trunc('milliseconds', clock_timestamp()),
  rotated_at       timestamptz,
  revoked_at       timestamptz,
  UNIQUE (tenant_id, id)
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, created_at);
CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('api_keys_changed', 'id');

-- Budget counters shared by every edge instance (DESIGN.md: shared counters, unlogged).
CREATE UNLOGGED TABLE api_key_usage (
  key_id        text NOT NULL,
  window_kind   text NOT NULL CHECK (window_kind IN ('minute', 'day')),
  window_start  timestamptz NOT NULL,
  count         integer NOT NULL DEFAULT 0,
  amount_micros bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (key_id, window_kind, window_start)
);
