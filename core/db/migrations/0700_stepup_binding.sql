-- Request-bound step-ups are single use; device keys wait out a cool-off; intents are single use.
-- (issue 13 items 1 and 2; SPEC 4.3 rules 2-4; DESIGN.md "Shared state is in PostgreSQL".)

-- One row per request-bound step-up that authorised a committed action. The grant is the AAL 2
-- access token the step-up issued (its jti). Written in the transaction of the action it
-- authorised, so a failed action uses nothing up. A LOGGED table on purpose: after a failover
-- a used step-up must stay used (an unlogged table would come back empty).
CREATE TABLE stepup_uses (
  tenant_id        text NOT NULL REFERENCES tenants(id),
  grant_jti        text NOT NULL,
  session_id       uuid NOT NULL,
  customer_id      uuid NOT NULL,
  orig             text NOT NULL,
  action           text NOT NULL,
  -- The Idempotency-Key of the request that used it: a retry with that key replays the
  -- stored response instead of being asked for a new step-up.
  idempotency_key  text,
  used_at          timestamptz NOT NULL,
  -- The grant's own expiry (the token's exp): past it no request can present the grant.
  expires_at       timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, grant_jti)
);
CREATE INDEX stepup_uses_expiry_idx ON stepup_uses (expires_at);

-- Device keys: usable for step-ups and intents only from usable_from (registration + the
-- tenant's cool-off) and once the customer was told on the verified phone (notified_at).
-- client_device is the X-Device-Id of the session that registered the key (the phone itself).
ALTER TABLE customer_devices
  ADD COLUMN usable_from   timestamptz,
  ADD COLUMN notified_at   timestamptz,
  ADD COLUMN last_used_at  timestamptz,
  ADD COLUMN client_device text,
  ADD COLUMN revoke_reason text;
-- Keys registered before this migration were added with a step-up bought for any request and
-- without telling the customer: any of them may be an attacker's. They are revoked; the
-- customer registers the phone again (bound step-up, notification, cool-off).
UPDATE customer_devices SET revoked_at = now(), revoke_reason = 'registered_before_cooloff'
  WHERE revoked_at IS NULL;
UPDATE customer_devices SET usable_from = created_at WHERE usable_from IS NULL;
ALTER TABLE customer_devices ALTER COLUMN usable_from SET NOT NULL;
CREATE INDEX customer_devices_customer_idx ON customer_devices (tenant_id, customer_id, created_at DESC);

-- A revoked device is refused at the edge on the next request (tokens stepped up with it,
-- intents naming it): the edge caches device state and drops it on this notification.
CREATE FUNCTION customer_devices_notify_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('devices_changed', json_build_object('tenantId', NEW.tenant_id, 'deviceId', NEW.id)::text);
  RETURN NULL;
END $$;
CREATE TRIGGER customer_devices_revoked AFTER UPDATE OF revoked_at ON customer_devices
  FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
  EXECUTE FUNCTION customer_devices_notify_revoked();

-- One intent signature approves one transfer: the hash of (device, signed payload) is unique.
-- Kept with the transfer for as long as the transfer is kept.
ALTER TABLE transfers ADD COLUMN intent_hash bytea;
CREATE UNIQUE INDEX transfers_intent_hash_idx ON transfers (tenant_id, intent_hash) WHERE intent_hash IS NOT NULL;
