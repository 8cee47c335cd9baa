-- Staff passkeys (issue 16 item 1): WebAuthn credentials of staff members, one-time enrolment
-- links that register them, and the WebAuthn challenges of ceremonies in flight. Challenges
-- live here, not in a process, so any core instance can finish a ceremony another began.
CREATE TABLE staff_passkeys (
  tenant_id     text NOT NULL,
  id            uuid NOT NULL,
  user_id       uuid NOT NULL,
  -- The authenticator's credential id (base64url), as the browser reports it.
  credential_id text NOT NULL,
  public_key    bytea NOT NULL,
  -- Signature counter: an assertion whose counter does not increase is a replay or a clone.
  counter       bigint NOT NULL DEFAULT 0,
  transports    text[] NOT NULL DEFAULT '{}',
  name          text NOT NULL,
  aaguid        text,
  backed_up     boolean NOT NULL DEFAULT false,
  created_at    timestamptz NOT NULL DEFAULT now(),
  last_used_at  timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, user_id) REFERENCES staff_users (tenant_id, id)
);
CREATE UNIQUE INDEX staff_passkeys_credential_idx ON staff_passkeys (tenant_id, credential_id);
CREATE INDEX staff_passkeys_user_idx ON staff_passkeys (tenant_id, user_id);

-- Enrolment links: valid 24 h, single use, only the SHA-256 of the token is stored.
CREATE TABLE staff_enrolment_links (
  tenant_id   text NOT NULL,
  id          uuid NOT NULL,
  user_id     uuid NOT NULL,
  token_hash  bytea NOT NULL,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz,
  -- A re-issued link replaces the user's earlier unused ones.
  revoked_at  timestamptz,
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, user_id) REFERENCES staff_users (tenant_id, id)
);
CREATE UNIQUE INDEX staff_enrolment_links_hash_idx ON staff_enrolment_links (token_hash);

-- WebAuthn challenges in flight: single use (deleted when consumed), short-lived.
CREATE TABLE webauthn_challenges (
  challenge     text PRIMARY KEY,
  tenant_id     text NOT NULL,
  ceremony      text NOT NULL CHECK (ceremony IN ('register', 'login')),
  -- Registration: the user being enrolled and the link that started it.
  user_id       uuid,
  enrolment_id  uuid,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz NOT NULL
);
CREATE INDEX webauthn_challenges_expiry_idx ON webauthn_challenges (expires_at);
