-- Proof of possession (issue 17; RFC 9449 DPoP, RFC 8705 mTLS, RFC 7523 client assertions).

-- A session signed in with a DPoP proof is bound to that key: its access tokens carry
-- cnf.jkt and its refresh tokens are usable only with a proof by the same key (RFC 9449 §5).
ALTER TABLE sessions ADD COLUMN dpop_jkt text;

-- OAuth confidential clients (SPEC 5.4.6): how a client authenticates at /oauth2/token.
-- The secret methods keep secret_hash; private_key_jwt keeps the client's public keys (jwks);
-- the mTLS methods keep the certificate's subject DN (tls_client_auth, RFC 8705 §2.1) or its
-- SHA-256 thumbprint (self_signed_tls_client_auth, §2.2).
ALTER TABLE oauth_clients ALTER COLUMN secret_hash DROP NOT NULL;
ALTER TABLE oauth_clients
  ADD COLUMN token_endpoint_auth_method text NOT NULL DEFAULT 'client_secret_basic'
    CHECK (token_endpoint_auth_method IN ('client_secret_basic', 'client_secret_post', 'private_key_jwt', 'tls_client_auth', 'self_signed_tls_client_auth')),
  ADD COLUMN jwks jsonb,
  ADD COLUMN tls_subject text,
  ADD COLUMN tls_thumbprint text,
  ADD COLUMN created_by jsonb,
  ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_credential_present CHECK (
  (token_endpoint_auth_method IN ('client_secret_basic', 'client_secret_post') AND secret_hash IS NOT NULL)
  OR (token_endpoint_auth_method = 'private_key_jwt' AND jwks IS NOT NULL)
  OR (token_endpoint_auth_method = 'tls_client_auth' AND (tls_subject IS NOT NULL OR tls_thumbprint IS NOT NULL))
  OR (token_endpoint_auth_method = 'self_signed_tls_client_auth' AND tls_thumbprint IS NOT NULL)
);

-- The edge drops what it cached about a client (revocation, rotation) on this channel.
CREATE TRIGGER oauth_clients_changed AFTER INSERT OR UPDATE OR DELETE ON oauth_clients
  FOR EACH ROW EXECUTE FUNCTION notify_row_change('oauth_clients_changed', 'client_id');
