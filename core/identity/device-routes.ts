/**
 * A customer's device keys (issue 13 item 1): register, list, remove.
 *
 * Guarantees:
 * - Registering or removing a key changes who can authorise money, so each needs its own
 *   step-up bound to that very request and uses it up (bound.ts): a step-up bought for a
 *   transfer cannot buy a second factor.
 * - A new key cannot complete a step-up or sign an intent until the tenant's cool-off
 *   (settings.ts `device_cooloff_hours`, default 24 h) has passed and the customer has been
 *   told on the verified phone; the notification is sent in the registering transaction, so a
 *   key whose SMS could not be handed to the sender is not registered. The OTP of the
 *   registration step-up does not shorten the cool-off: a SIM swap hands an attacker the OTPs.
 * - A removed key is refused at once by core and, through the `devices_changed` notification,
 *   by the edge on the next request (tokens stepped up with it, intents naming it).
 */
import { Type } from '@sinclair/typebox';
import { uuidv7 } from '../../shared/uuid.ts';
import type { Queryable } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { withBoundStepUp } from './bound.ts';
import { auditAuth, clientIpOf, type IdentityDeps } from './context.ts';
import { PublicKeyInput, rawPublicKey } from './devices.ts';
import { utcMinute } from './pin-hold.ts';
import { defaultDeviceCooloffHours, tenantSettings } from './settings.ts';
import { authenticate, type Caller } from './tokens.ts';
import { declared } from '../http/declared.ts';

const tags = ['customer-auth'];
const bearerHeader = [{ name: 'Authorization', required: true, description: 'Bearer <access token>' }];
const DeviceBody = Type.Object(
  { publicKey: PublicKeyInput, label: Type.Optional(Type.String({ maxLength: 64 })) },
  { additionalProperties: false },
);
const DeviceStatus = Type.Union([
  Type.Literal('cooling_off'),
  Type.Literal('active'),
  Type.Literal('revoked'),
]);
const DeviceView = Type.Object({
  id: Type.String(),
  label: Type.Union([Type.String(), Type.Null()]),
  status: DeviceStatus,
  createdAt: Type.String(),
  usableFrom: Type.String(),
  lastUsedAt: Type.Union([Type.String(), Type.Null()]),
  revokedAt: Type.Union([Type.String(), Type.Null()]),
});
const Registered = Type.Object({ deviceId: Type.String(), status: DeviceStatus, usableFrom: Type.String() });
const IdParams = Type.Object({
  id: Type.String({ pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' }),
});

/** Devices listed per customer, newest first (removed ones included, so a customer sees what changed). */
export const maxListedDevices = 50;

interface DeviceRow {
  id: string;
  label: string | null;
  created_at: Date;
  usable_from: Date;
  notified_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

function statusOf(r: DeviceRow, nowMs: number): 'cooling_off' | 'active' | 'revoked' {
  if (r.revoked_at) return 'revoked';
  return r.notified_at && r.usable_from.getTime() <= nowMs ? 'active' : 'cooling_off';
}

const viewOf = (r: DeviceRow, nowMs: number) => ({
  id: r.id,
  label: r.label,
  status: statusOf(r, nowMs),
  createdAt: r.created_at.toISOString(),
  usableFrom: r.usable_from.toISOString(),
  lastUsedAt: r.last_used_at?.toISOString() ?? null,
  revokedAt: r.revoked_at?.toISOString() ?? null,
});

/** Tell the customer on the verified phone, inside the caller's transaction (a throw rolls back). */
async function notify(
  deps: IdentityDeps,
  q: Queryable,
  c: Caller,
  purpose: 'device_added' | 'device_removed',
  text: string,
  nowMs: number,
): Promise<void> {
  const { rows } = await q.query<{ phone_e164: string }>(
    'SELECT phone_e164 FROM customers WHERE tenant_id = $1 AND id = $2 AND phone_verified_at IS NOT NULL',
    [c.tenantId, c.customerId],
  );
  const to = rows[0]?.phone_e164;
  if (!to) throw new AppError('FORBIDDEN', 'the customer has no verified phone to notify');
  // The label is the registering client's text: it stays out of the SMS, so it cannot dress the warning up.
  await deps.sms.send(q, { tenantId: c.tenantId, to, purpose, text }, nowMs);
}

/** POST /customers/devices. */
const registerDevice = (deps: IdentityDeps) => {
  const { db, keys, now } = deps;
  return defineRoute({
    ...declared('POST', '/customers/devices'),
    operationId: 'customerDeviceRegister',
    tags,
    headers: bearerHeader,
    body: DeviceBody,
    summary: 'Register an Ed25519 device key (a step-up bound to this request; usable after the cool-off)',
    responses: { 201: { description: 'Registered; cooling off until usableFrom', schema: Registered } },
    handler: async (ctx) => {
      const c = await authenticate({ keys, db, now }, ctx);
      const raw = rawPublicKey(ctx.body.publicKey);
      const t = now();
      const settings = await tenantSettings(db, c.tenantId);
      const usableFrom = new Date(
        t + (settings?.deviceCooloffHours ?? defaultDeviceCooloffHours) * 3_600_000,
      );
      const id = uuidv7(t);
      await withBoundStepUp(deps, c, ctx, 'device.register', t, async (q) => {
        await q
          .query(
            `INSERT INTO customer_devices (id, tenant_id, customer_id, public_key, label, created_at, usable_from, notified_at, client_device)
           VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), $7, to_timestamp($6 / 1000.0), $8)`,
            [
              id,
              c.tenantId,
              c.customerId,
              raw,
              ctx.body.label ?? null,
              t,
              usableFrom,
              ctx.identity.deviceId ?? null,
            ],
          )
          .catch((err: unknown) => {
            if ((err as { code?: string }).code === '23505')
              throw new AppError('CONFLICT', 'this device key is already registered');
            throw err;
          });
        await notify(
          deps,
          q,
          c,
          'device_added',
          `A new device was added to your account. It can approve payments from ${utcMinute(usableFrom)} UTC. If this was not you, remove it under Devices in the app and call us.`,
          t,
        );
        await auditAuth(
          q,
          {
            tenantId: c.tenantId,
            action: 'auth.device_register',
            actor: { type: 'customer', id: c.customerId },
            target: { type: 'device', id },
            allow: true,
            aal: c.aal,
            attrs: { ip: clientIpOf(ctx), usable_from: usableFrom.toISOString(), notified: true },
            requestId: ctx.requestId,
          },
          t,
        );
      });
      return {
        status: 201,
        body: { deviceId: id, status: 'cooling_off' as const, usableFrom: usableFrom.toISOString() },
      };
    },
  });
};

/** GET /customers/devices. */
const listDevices = (deps: IdentityDeps) => {
  const { db, keys, now } = deps;
  return defineRoute({
    ...declared('GET', '/customers/devices'),
    operationId: 'customerDevices',
    tags,
    headers: bearerHeader,
    summary: "The caller's device keys: label, added, usable from, last used, status",
    responses: {
      200: { description: 'Devices', schema: Type.Object({ devices: Type.Array(DeviceView) }) },
    },
    handler: async (ctx) => {
      const c = await authenticate({ keys, db, now }, ctx);
      const { rows } = await db.query<DeviceRow>(
        `SELECT id, label, created_at, usable_from, notified_at, last_used_at, revoked_at FROM customer_devices
         WHERE tenant_id = $1 AND customer_id = $2 ORDER BY created_at DESC, id DESC LIMIT ${maxListedDevices}`,
        [c.tenantId, c.customerId],
      );
      const t = now();
      return { status: 200, body: { devices: rows.map((r) => viewOf(r, t)) } };
    },
  });
};

/** DELETE /customers/devices/{id}. */
const revokeDevice = (deps: IdentityDeps) => {
  const { db, keys, now } = deps;
  return defineRoute({
    ...declared('DELETE', '/customers/devices/{id}'),
    operationId: 'customerDeviceRevoke',
    tags,
    headers: bearerHeader,
    params: IdParams,
    summary:
      'Remove a device key (a step-up bound to this request); the edge refuses it from the next request',
    responses: { 204: { description: 'Removed' } },
    handler: async (ctx) => {
      const c = await authenticate({ keys, db, now }, ctx);
      const t = now();
      await withBoundStepUp(deps, c, ctx, 'device.revoke', t, async (q) => {
        const { rowCount } = await q.query(
          `UPDATE customer_devices SET revoked_at = to_timestamp($4 / 1000.0), revoke_reason = 'revoked_by_customer'
           WHERE tenant_id = $1 AND customer_id = $2 AND id = $3 AND revoked_at IS NULL`,
          [c.tenantId, c.customerId, ctx.params.id, t],
        );
        if (rowCount !== 1) throw new AppError('DEVICE_NOT_FOUND', 'no such device');
        await notify(
          deps,
          q,
          c,
          'device_removed',
          'A device was removed from your account. If this was not you, call us.',
          t,
        );
        await auditAuth(
          q,
          {
            tenantId: c.tenantId,
            action: 'auth.device_revoke',
            actor: { type: 'customer', id: c.customerId },
            target: { type: 'device', id: ctx.params.id },
            allow: true,
            aal: c.aal,
            attrs: { ip: clientIpOf(ctx) },
            requestId: ctx.requestId,
          },
          t,
        );
      });
      return { status: 204 };
    },
  });
};

export function deviceRoutes(deps: IdentityDeps): RouteSpec[] {
  return [registerDevice(deps), listDevices(deps), revokeDevice(deps)];
}
