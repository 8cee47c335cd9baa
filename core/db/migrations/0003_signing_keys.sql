-- Per-tenant token signing keys (SPEC 3: states active, grace, retired; at most 24 h overlap).
-- Private keys are stored encrypted with the master key (AES-256-GCM), never in clear.
CREATE TABLE signing_keys (
  kid          text PRIMARY KEY,
  tenant_id    text NOT NULL REFERENCES tenants(id),
  alg          text NOT NULL DEFAULT 'EdDSA' CHECK (alg = 'EdDSA'),
  public_jwk   jsonb NOT NULL,
  private_enc  bytea NOT NULL,
  state        text NOT NULL CHECK (state IN ('active', 'grace', 'retired')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  grace_until  timestamptz,
  retired_at   timestamptz,
  CHECK (state <> 'grace' OR grace_until IS NOT NULL),
  CHECK (grace_until IS NULL OR grace_until <= created_at + interval '30 days')
);
CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys (tenant_id) WHERE state = 'active';
CREATE INDEX signing_keys_tenant_idx ON signing_keys (tenant_id, state);
