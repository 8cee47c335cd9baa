-- Shared state for N core instances (issue 23 item 6): webhook delivery leases.
-- Webhook delivery leases (core/admin/webhooks/dispatcher.ts): a dispatcher that claims a
-- delivery writes a fresh token here and pushes next_attempt_at to the lease's end; it sends only
-- while the token is still its own and records the result only under that token. Another
-- dispatcher may claim the delivery once next_attempt_at has passed (its holder died), which
-- replaces the token. NULL: not leased.
ALTER TABLE admin_webhook_deliveries ADD COLUMN lease_token uuid;
