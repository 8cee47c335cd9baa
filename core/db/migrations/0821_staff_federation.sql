-- Federated staff sign-in (issue 14 items 1-2): each tenant's OpenID Connect provider, and the
-- short-lived, single-use state of sign-ins in progress (shared by every core instance).
CREATE TABLE staff_identity_providers (
  tenant_id          text PRIMARY KEY REFERENCES tenants(id),
  issuer             text NOT NULL,
  client_id          text NOT NULL,
  -- Sealed with the master key (KeyStore.sealSecret, aad idp:<tenant>); never returned.
  client_secret_enc  bytea NOT NULL,
  scopes             text[] NOT NULL,
  -- The ID-token claim carrying the member's groups (mapped to roles by staff_group_mappings).
  groups_claim       text NOT NULL,
  -- The callback URL registered at the provider (this platform's GET /auth/callback).
  redirect_uri       text NOT NULL,
  version            integer NOT NULL DEFAULT 1,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE staff_federation_states (
  -- SHA-256 of the state parameter: the value itself travels only through the browser.
  state_hash        bytea PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants(id),
  -- PKCE code verifier, sealed (aad fedstate:<hex of state_hash>).
  verifier_enc      bytea NOT NULL,
  nonce             text NOT NULL,
  -- The provider configuration the sign-in started with: a change in between refuses it.
  idp_version       integer NOT NULL,
  created_at        timestamptz NOT NULL DEFAULT now(),
  expires_at        timestamptz NOT NULL,
  used_at           timestamptz
);
CREATE INDEX staff_federation_states_expiry_idx ON staff_federation_states (expires_at);
