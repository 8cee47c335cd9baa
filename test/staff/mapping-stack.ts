/**
 * The stack the group-mapping tests (issue 16) share: the dev gateway, the demo tenant's SCIM and
 * service-Admin tokens, and a test OpenID Connect provider configured as the tenant's.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { KeyStore } from '../../core/keys/keys.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { asBearer } from '../helpers/gateway.ts';
import type { Db } from '../../shared/db/pool.ts';
import { stackKeys } from './fixtures.ts';
import { providerSettings, startTestIdp, type TestIdp } from './idp.ts';

export interface MappingStack {
  e2e: E2eStack;
  keys: KeyStore;
  scimToken: string;
  serviceAdmin: string;
  idp: TestIdp;
  stop(): Promise<void>;
}

export async function startMappingStack(name: string): Promise<MappingStack> {
  // The test identity provider listens on loopback: the SSRF guard allows it in these tests only.
  const e2e = await startE2eStack(name, { webhookAllowPrivateTargets: true });
  let idp: TestIdp | undefined;
  try {
    const demo = e2e.demo as { scim: { token: string }; serviceTokens: { admin: { token: string } } };
    idp = await startTestIdp(`${e2e.gw}/auth/callback`);
    const serviceAdmin = demo.serviceTokens.admin.token;
    const put = await asBearer(() => e2e.gw)(serviceAdmin, 'PUT', '/v1/identity-provider', {
      json: providerSettings(idp, e2e.gw),
      headers: { 'idempotency-key': randomUUID() },
    });
    assert.equal(put.status, 200, put.text);
    const provider = idp;
    return {
      e2e,
      keys: await stackKeys(e2e.tdb.db, e2e.dataDir),
      scimToken: demo.scim.token,
      serviceAdmin,
      idp: provider,
      stop: async () => {
        await provider.close();
        await e2e.stop();
      },
    };
  } catch (err) {
    await idp?.close();
    await e2e.stop();
    throw err;
  }
}

/** A member's roles, by name. */
export async function rolesOf(db: Db, tenantId: string, id: string): Promise<string[]> {
  const { rows } = await db.query<{ role: string }>(
    'SELECT role FROM staff_user_roles WHERE tenant_id = $1 AND user_id = $2 ORDER BY role',
    [tenantId, id],
  );
  return rows.map((r) => r.role);
}

/** The demo tenant's staff.role_remove audit records of one member, oldest first. */
export async function roleRemovals(db: Db, id: string) {
  const { rows } = await db.query<{ actor: { type: string; id: string }; attrs: Record<string, unknown> }>(
    `SELECT actor, attrs FROM audit_log WHERE tenant_id = 'demo' AND action = 'staff.role_remove'
       AND target->>'type' = 'staff_user' AND target->>'id' = $1 ORDER BY id`,
    [id],
  );
  return rows;
}
