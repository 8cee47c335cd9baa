-- Issue 14 item 1: per-tenant SCIM bearer credentials. The identity provider's SCIM client
-- presents `scim_<random>`; only its SHA-256 is stored and the edge looks it up by that hash.
-- The tenant of every /scim/v2 request comes from this row, never from the path or body.
CREATE TABLE scim_credentials (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  name        text NOT NULL,
  token_hash  bytea NOT NULL UNIQUE,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz,
  revoked_by  text
);
CREATE INDEX scim_credentials_tenant_idx ON scim_credentials (tenant_id, created_at);
-- The edge drops a revoked credential from its cache at once (payload: the credential id).
CREATE TRIGGER scim_credentials_changed AFTER UPDATE OR DELETE ON scim_credentials
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('scim_credentials_changed', 'id');

-- Issue 14 item 6: service tokens are machine credentials with a lifecycle. Rotation keeps the
-- previous token valid until prev_valid_until (a grace period) so a deployment can roll over.
ALTER TABLE service_tokens
  ADD COLUMN prev_token_hash bytea UNIQUE,
  ADD COLUMN prev_valid_until timestamptz,
  ADD COLUMN created_by text,
  ADD COLUMN rotated_at timestamptz,
  ADD COLUMN revoked_by text;
