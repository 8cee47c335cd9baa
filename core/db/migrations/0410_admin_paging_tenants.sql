-- Administration API follow-up (issue 6).
-- Secrets of the administration service itself, sealed with the master key (KeyStore.sealSecret):
-- `cursor_mac` keys the HMAC that makes list cursors tamper-evident and the same on every core
-- instance and across restarts. Created on first use (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE admin_secrets (
  name       text PRIMARY KEY,
  sealed     bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Which tenant created a tenant through POST /v1/tenants: that tenant's staff see and manage
-- it (list, GET, PATCH, suspend, activate); nobody else's do.
CREATE TABLE admin_tenant_owners (
  tenant_id       text PRIMARY KEY REFERENCES tenants (id),
  owner_tenant_id text NOT NULL REFERENCES tenants (id),
  created_at      timestamptz NOT NULL DEFAULT now(),
  CHECK (tenant_id <> owner_tenant_id)
);
CREATE INDEX admin_tenant_owners_owner_idx ON admin_tenant_owners (owner_tenant_id, tenant_id);
