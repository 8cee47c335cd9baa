-- Every edge keeps the used request-bound step-ups in memory (issue 18 item 1: no database round
-- trip on a transfer's Check). A use is announced on commit; an edge that was not listening
-- reloads the live rows when its listener reconnects. Core stays the authority: it inserts the
-- row in the action's own transaction (ON CONFLICT DO NOTHING), so a grant replayed before the
-- announcement reaches an edge is refused by core.
CREATE FUNCTION stepup_uses_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('stepup_used', json_build_object(
    'tenantId', NEW.tenant_id, 'grantJti', NEW.grant_jti, 'idempotencyKey', NEW.idempotency_key,
    'expiresAtMs', floor(extract(epoch FROM NEW.expires_at) * 1000))::text);
  RETURN NULL;
END $$;
CREATE TRIGGER stepup_uses_announced AFTER INSERT ON stepup_uses
  FOR EACH ROW EXECUTE FUNCTION stepup_uses_notify();
