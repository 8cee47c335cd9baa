-- Customer identity (SPEC 2.4, 2.4.1, 3, 5.2, 8). Every table carries tenant_id and every
-- query filters on it. Phones appear in clear only in `customers`; counters, OTPs and
-- verifications are keyed by an HMAC of tenant + phone under the tenant's identity secret.

-- Per-tenant identity secret (argon2 `secret` input, HMAC keys), sealed with the master key.
CREATE TABLE identity_tenant_secrets (
  tenant_id  text PRIMARY KEY REFERENCES tenants(id),
  secret_enc bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE customers (
  id                uuid PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants(id),
  phone_e164        text NOT NULL CHECK (phone_e164 ~ '^\+[0-9]{7,15}$'),
  phone_verified_at timestamptz,
  status            text NOT NULL DEFAULT 'active',
  created_at        timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, phone_e164),
  UNIQUE (tenant_id, id)
);

-- One credential per customer; pin_hash is the raw argon2id output, parameters by kdf_version.
CREATE TABLE credentials (
  customer_id uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  pin_hash    bytea NOT NULL,
  pin_salt    bytea NOT NULL,
  kdf_version smallint NOT NULL,
  pin_set_at  timestamptz NOT NULL,
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id)
);

-- OTP codes (SPEC 3 phone verification, step-up): stored as HMAC, 5 minutes, single use,
-- bounded attempts. `purpose` 'verify' (phone) or 'stepup' (bound to a challenge jti).
CREATE TABLE otp_codes (
  id            uuid PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id),
  phone_key     bytea NOT NULL,
  purpose       text NOT NULL CHECK (purpose IN ('verify', 'stepup')),
  challenge_jti text,
  code_hash     bytea NOT NULL,
  attempts      integer NOT NULL DEFAULT 0,
  created_at    timestamptz NOT NULL,
  expires_at    timestamptz NOT NULL,
  consumed_at   timestamptz,
  CHECK (purpose <> 'stepup' OR challenge_jti IS NOT NULL)
);
CREATE INDEX otp_codes_phone_idx ON otp_codes (tenant_id, phone_key, purpose, created_at DESC);

-- verificationToken (SPEC 3): single use, required by pin/set; stored as SHA-256.
CREATE TABLE phone_verifications (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  customer_id uuid NOT NULL,
  token_hash  bytea NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz,
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id)
);

-- Lockout counters (SPEC 8) per tenant and scope: phone (HMAC of tenant+phone), ip, device,
-- and otp (verify failures per phone, never reset by a new code). Keys are HMACs, never raw.
CREATE TABLE auth_throttle (
  tenant_id      text NOT NULL,
  scope          text NOT NULL CHECK (scope IN ('phone', 'ip', 'device', 'otp', 'otp_send')),
  key            bytea NOT NULL,
  fails          integer NOT NULL DEFAULT 0,
  day_fails      integer NOT NULL DEFAULT 0,
  window_start   timestamptz NOT NULL,
  locked_until   timestamptz,
  needs_otp      boolean NOT NULL DEFAULT false,
  PRIMARY KEY (tenant_id, scope, key)
);

-- Sessions (SPEC 2.4.1). The edge reads these; changes NOTIFY 'sessions_changed'.
CREATE TABLE sessions (
  id           uuid PRIMARY KEY,
  tenant_id    text NOT NULL REFERENCES tenants(id),
  subject_type text NOT NULL CHECK (subject_type IN ('customer', 'agent', 'user')),
  subject_id   text NOT NULL,
  jti          text NOT NULL,
  aal          smallint NOT NULL CHECK (aal BETWEEN 1 AND 3),
  mfa_pending  boolean NOT NULL DEFAULT false,
  device       text,
  ip           text,
  created_at   timestamptz NOT NULL,
  last_seen    timestamptz NOT NULL,
  revoked_at   timestamptz,
  revoke_reason text
);
CREATE INDEX sessions_subject_idx ON sessions (tenant_id, subject_type, subject_id, created_at DESC);

-- Refresh tokens: opaque, stored as SHA-256, rotated on use; a family is one login's chain.
CREATE TABLE refresh_tokens (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  session_id  uuid NOT NULL REFERENCES sessions(id),
  family_id   uuid NOT NULL,
  token_hash  bytea NOT NULL UNIQUE,
  created_at  timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  rotated_at  timestamptz,
  revoked_at  timestamptz
);
CREATE INDEX refresh_tokens_family_idx ON refresh_tokens (tenant_id, family_id);

-- Step-up challenges consumed (single use): jti kept until the challenge would have expired.
CREATE TABLE used_challenges (
  tenant_id  text NOT NULL,
  jti        text NOT NULL,
  used_at    timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, jti)
);

-- Device keys (Ed25519) for step-up device assertions.
CREATE TABLE customer_devices (
  id          uuid PRIMARY KEY,
  tenant_id   text NOT NULL,
  customer_id uuid NOT NULL,
  public_key  bytea NOT NULL CHECK (length(public_key) = 32),
  label       text,
  created_at  timestamptz NOT NULL,
  revoked_at  timestamptz,
  FOREIGN KEY (tenant_id, customer_id) REFERENCES customers (tenant_id, id)
);
CREATE UNIQUE INDEX customer_devices_key_idx ON customer_devices (tenant_id, customer_id, public_key) WHERE revoked_at IS NULL;

-- Any revocation is announced in the revoking transaction so edge caches drop the session.
CREATE FUNCTION sessions_notify_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('sessions_changed', json_build_object('tenantId', NEW.tenant_id, 'sessionId', NEW.id)::text);
  RETURN NULL;
END $$;
CREATE TRIGGER sessions_revoked AFTER UPDATE OF revoked_at ON sessions
  FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
  EXECUTE FUNCTION sessions_notify_revoked();
