-- Issue 13 item 4: the source address of a sign-in is a throttle sized for carrier NAT
-- (core/identity/address-throttle.ts), no longer a 5-failure lockout. `strikes` carries the
-- progression of its delays across windows (0 for every other scope).
ALTER TABLE auth_throttle ADD COLUMN strikes integer NOT NULL DEFAULT 0;

-- Address counters were kept per raw address under the lockout rule; their locks (up to a day)
-- would keep every customer behind a NAT out after this change, and IPv6 is now counted per
-- /64 under a different key. They start again empty.
DELETE FROM auth_throttle WHERE scope = 'ip';
