/**
 * The platform operator (issue 23 item 5): the tenant whose Admins run the platform. Created
 * once by the bootstrap (bin/services/bootstrap.ts; development: the demo seed); only its Admins
 * may create tenants, and the bootstrap refuses to run twice.
 */
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { appendAudit } from '../../shared/audit.ts';
import { enableCountry } from '../admin/seed.ts';
import { isoCountry } from '../admin/reference/iso.ts';
import { knownCurrency } from '../ledger/commands.ts';
import { putServiceToken } from './service-tokens.ts';
import { createEnrolmentLink, type EnrolmentLink } from '../staff/enrolment.ts';
import { setStaffRoles } from '../staff/store.ts';
import { uuidv7 } from '../../shared/uuid.ts';

/** The first platform-admin credential lives this long: enough to sign in and set up staff. */
export const bootstrapTokenTtlHours = 24;

export async function operatorTenant(q: Queryable): Promise<string | undefined> {
  const { rows } = await q.query<{ tenant_id: string }>('SELECT tenant_id FROM platform_operator');
  return rows[0]?.tenant_id;
}

/**
 * Refuse unless `tenantId` is the platform operator's tenant: tenant creation, and writes to
 * platform-wide data every tenant depends on (the currency table, the ledger's minor units).
 */
export async function requirePlatformAdminTenant(
  q: Queryable,
  tenantId: string,
  what = 'create tenants',
): Promise<void> {
  if ((await operatorTenant(q)) !== tenantId) {
    throw new AppError('FORBIDDEN', `only platform administrators (the operator tenant's Admins) ${what}`);
  }
}

/** Make `tenantId` the operator when there is none yet (the development seed). */
export async function markOperatorIfNone(q: Queryable, tenantId: string): Promise<void> {
  await q.query('INSERT INTO platform_operator (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING', [tenantId]);
}

export interface BootstrapInput {
  tenantId: string;
  name: string;
  country: string;
  currency: string;
  /** The first platform Admin's userName (a staff member who registers a passkey from the link). */
  adminUserName?: string;
}

export class AlreadyBootstrapped extends Error {}

/**
 * Create the operator's tenant (its country enabled from ISO data with its base currency), mark
 * it the platform operator, create its first Admin as a staff member with a one-time passkey
 * enrolment link (issue 14 item 6, issue 16), and issue a short-lived Admin service token for
 * machine set-up, in one transaction with the audit records; the link's token and the service
 * token are shown once and stored only as hashes.
 */
export async function bootstrapPlatform(
  q: TxClient,
  input: BootstrapInput,
): Promise<{
  token: string;
  expiresAt: Date;
  admin: { userId: string; userName: string; link: EnrolmentLink };
}> {
  await q.query('LOCK TABLE platform_operator IN EXCLUSIVE MODE');
  if (await operatorTenant(q)) throw new AlreadyBootstrapped('the platform is already bootstrapped');
  if (!isoCountry(input.country))
    throw new AppError('VALIDATION_FAILED', `${input.country} is not an ISO 3166 alpha-2 country code`);
  knownCurrency(input.currency);
  await enableCountry(q, input.country, input.currency);
  await q.query('INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $2, $3, $4)', [
    input.tenantId,
    input.name,
    input.country,
    input.currency,
  ]);
  await q.query('INSERT INTO platform_operator (tenant_id) VALUES ($1)', [input.tenantId]);
  const token = await putServiceToken(q, input.tenantId, 'bootstrap-admin', ['admin']);
  const { rows } = await q.query<{ expires_at: Date }>(
    `UPDATE service_tokens SET expires_at = now() + make_interval(hours => $2) WHERE tenant_id = $1 AND name = 'bootstrap-admin' RETURNING expires_at`,
    [input.tenantId, bootstrapTokenTtlHours],
  );
  await appendAudit(q, [
    {
      tenantId: input.tenantId,
      actor: { type: 'operator', id: 'bootstrap' },
      action: 'platform.bootstrap',
      target: { type: 'tenant', id: input.tenantId },
      decision: { allow: true },
      attrs: { country: input.country, currency: input.currency, token_ttl_h: bootstrapTokenTtlHours },
    },
  ]);
  const userName = input.adminUserName ?? 'admin';
  const userId = uuidv7();
  await q.query('INSERT INTO staff_users (tenant_id, id, user_name, display_name) VALUES ($1, $2, $3, $4)', [
    input.tenantId,
    userId,
    userName,
    'Platform Admin',
  ]);
  await setStaffRoles(q, input.tenantId, userId, ['admin']);
  const link = await createEnrolmentLink(q, input.tenantId, userId, { type: 'operator', id: 'bootstrap' });
  return { token, expiresAt: rows[0]?.expires_at ?? new Date(), admin: { userId, userName, link } };
}
