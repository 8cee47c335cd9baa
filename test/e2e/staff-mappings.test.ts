/**
 * Issue 16 through the dev gateway against a real OpenID Connect provider: removing a group
 * mapping takes away, at once, the roles it gave members at their last federated sign-in. Their
 * existing token is refused the role at the next request and a refresh carries the roles left;
 * a role SCIM gave, a role another mapping still gives and another tenant's member with the same
 * group stay; each role taken is audited naming the Admin who changed the mapping.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeJwt } from 'jose';
import { roleGroupId } from '../../core/staff/scim/groups.ts';
import { asBearer, callRetrying } from '../helpers/gateway.ts';
import { eventually } from '../helpers/http.ts';
import { addStaff, addTenant, adminStepUpToken, signIn } from '../staff/fixtures.ts';
import { federatedSignIn } from '../staff/idp.ts';
import {
  type MappingStack,
  roleRemovals,
  rolesOf as tenantRolesOf,
  startMappingStack,
} from '../staff/mapping-stack.ts';

const patchOp = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

describe('group mappings removed take their roles away', () => {
  let setup: MappingStack | undefined;
  const get = (): MappingStack => setup ?? assert.fail('the stack did not start');
  const db = () => get().e2e.tdb.db;
  const as = asBearer(() => get().e2e.gw);
  const write = (token: string, method: string, path: string, json: unknown) =>
    as(token, method, path, { json, headers: { 'idempotency-key': randomUUID() } });
  /** An Admin-only write (flag.put_flag). */
  const putFlag = (token: string) => write(token, 'PUT', '/v1/flags/staff_mappings_flag', { enabled: true });
  const rolesOf = (tenantId: string, id: string) => tenantRolesOf(db(), tenantId, id);
  const removals = (id: string) => roleRemovals(db(), id);

  /** A staff Admin (AAL 2) and their PUT of the mappings. */
  async function mappingAdmin(userName: string) {
    const { keys } = get();
    const adminId = await addStaff(db(), 'demo', userName, ['admin']);
    const session = await signIn(db(), keys, 'demo', adminId, 2);
    // An Admin's mapping change is a step-up write: a token bound to this very request.
    const mappings = async (items: { idp_group: string; role: string }[]) => {
      const s = { tenantId: 'demo', userId: adminId, sessionId: session.sessionId };
      const path = '/v1/staff/group-mappings';
      return write(await adminStepUpToken(keys, s, 'PUT', path, { items }), 'PUT', path, { items });
    };
    return { adminId, mappings };
  }

  before(async () => {
    setup = await startMappingStack('staff-mappings');
  });
  after(async () => {
    await setup?.stop();
  });

  it("a mapping removed ends the member's role at the next request and in the next refresh; other roles, members and tenants stay", async () => {
    const { scimToken, idp: provider, e2e } = get();
    const gw = e2e.gw;
    const { adminId, mappings } = await mappingAdmin('mapping-admin@demo.example');
    const first = await mappings([
      { idp_group: 'everyone', role: 'admin' },
      { idp_group: 'auditors', role: 'readonly' },
      { idp_group: 'ops-team', role: 'admin' },
    ]);
    assert.equal(first.status, 200, first.text);

    // Admin through `everyone` only; Admin through both `everyone` and `ops-team`.
    const memberId = await addStaff(db(), 'demo', 'fed-map@demo.example', [], 'idp-sub-map');
    const both = await addStaff(db(), 'demo', 'fed-map-ops@demo.example', [], 'idp-sub-map-ops');
    const signedIn = await federatedSignIn(gw, provider, {
      sub: 'idp-sub-map',
      preferred_username: 'fed-map@demo.example',
      groups: ['everyone', 'auditors'],
    });
    assert.equal(signedIn.status, 200, signedIn.text);
    const other = await federatedSignIn(gw, provider, {
      sub: 'idp-sub-map-ops',
      preferred_username: 'fed-map-ops@demo.example',
      groups: ['everyone', 'ops-team'],
    });
    assert.equal(other.status, 200, other.text);
    assert.deepEqual(await rolesOf('demo', memberId), ['admin', 'readonly']);
    assert.deepEqual(await rolesOf('demo', both), ['admin']);
    // A role SCIM gives after the sign-in is no mapping's.
    const scim = await as(scimToken, 'PATCH', `/scim/v2/Groups/${roleGroupId('demo', 'support')}`, {
      json: {
        schemas: [patchOp],
        Operations: [{ op: 'add', path: 'members', value: [{ value: memberId }] }],
      },
      headers: { 'content-type': 'application/scim+json' },
    });
    assert.equal(scim.status, 200, scim.text);

    // Another tenant whose member holds Admin through its own `everyone` mapping.
    await addTenant(db(), 'mapother');
    const stranger = await addStaff(db(), 'mapother', 'fed-map@other.example', ['admin']);
    await db().query(
      `UPDATE staff_users SET idp_groups = '{everyone}' WHERE tenant_id = 'mapother' AND id = $1`,
      [stranger],
    );
    await db().query(
      `INSERT INTO staff_group_mappings (tenant_id, idp_group, role) VALUES ('mapother', 'everyone', 'admin')`,
    );

    const token = signedIn.json.accessToken as string;
    const allowed = await putFlag(token);
    assert.ok(allowed.status === 200 || allowed.status === 201, allowed.text);

    const replaced = await mappings([
      { idp_group: 'auditors', role: 'readonly' },
      { idp_group: 'ops-team', role: 'admin' },
      // An added mapping counts from the next sign-in only.
      { idp_group: 'everyone', role: 'fraud' },
    ]);
    assert.equal(replaced.status, 200, replaced.text);

    const refused = await eventually(
      () => putFlag(token),
      (r) => r.status === 403,
    );
    assert.equal(refused.status, 403, `the token minted before the change is no Admin: ${refused.text}`);
    assert.deepEqual(await rolesOf('demo', memberId), ['readonly', 'support']);
    assert.deepEqual(await rolesOf('demo', both), ['admin'], 'ops-team still maps to admin');
    assert.deepEqual(await rolesOf('mapother', stranger), ['admin'], "another tenant's member is untouched");
    // The session stays (as when SCIM takes a role away): the roles left still work.
    assert.equal((await as(token, 'GET', '/v1/staff/group-mappings')).status, 200);

    const refreshed = await callRetrying(gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: signedIn.json.refreshToken },
    });
    assert.equal(refreshed.status, 200, refreshed.text);
    const claims = decodeJwt(refreshed.json.accessToken as string);
    assert.deepEqual([...(claims.org_roles as string[])].sort(), ['readonly', 'support']);

    const audited = await removals(memberId);
    assert.equal(audited.length, 1, JSON.stringify(audited));
    assert.deepEqual(audited[0]?.actor, { type: 'staff', id: `staff:${adminId}` });
    assert.equal(audited[0]?.attrs.role, 'admin');
    assert.deepEqual(audited[0]?.attrs.groups, ['everyone']);
    assert.equal((await removals(both)).length, 0);

    // The same mapping again takes nothing more.
    const again = await mappings([
      { idp_group: 'auditors', role: 'readonly' },
      { idp_group: 'ops-team', role: 'admin' },
      { idp_group: 'everyone', role: 'fraud' },
    ]);
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(await rolesOf('demo', memberId), ['readonly', 'support']);
    assert.equal((await removals(memberId)).length, 1);
  });

  it('a member never signed in through the provider keeps the role SCIM gave when the mapping to it goes', async () => {
    const { serviceAdmin } = get();
    const id = await addStaff(db(), 'demo', 'scim-only@demo.example', ['readonly']);
    const mapped = await write(serviceAdmin, 'PUT', '/v1/staff/group-mappings', {
      items: [{ idp_group: 'auditors', role: 'readonly' }],
    });
    assert.equal(mapped.status, 200, mapped.text);
    const r = await write(serviceAdmin, 'PUT', '/v1/staff/group-mappings', { items: [] });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(await rolesOf('demo', id), ['readonly']);
    assert.equal((await removals(id)).length, 0);
  });

  it('a member the change leaves with no role keeps their session, as when SCIM takes the last role', async () => {
    const { idp: provider, e2e } = get();
    const { mappings } = await mappingAdmin('mapping-admin-2@demo.example');
    assert.equal((await mappings([{ idp_group: 'night-shift', role: 'ops' }])).status, 200);
    const id = await addStaff(db(), 'demo', 'fed-night@demo.example', [], 'idp-sub-night');
    const signedIn = await federatedSignIn(e2e.gw, provider, {
      sub: 'idp-sub-night',
      preferred_username: 'fed-night@demo.example',
      groups: ['night-shift'],
    });
    assert.equal(signedIn.status, 200, signedIn.text);
    const recorded = await db().query<{ idp_groups: string[] | null }>(
      `SELECT idp_groups FROM staff_users WHERE tenant_id = 'demo' AND id = $1`,
      [id],
    );
    assert.deepEqual(recorded.rows[0]?.idp_groups, ['night-shift'], "the sign-in's groups are recorded");
    assert.deepEqual(await rolesOf('demo', id), ['ops']);
    const token = signedIn.json.accessToken as string;
    assert.equal((await as(token, 'GET', '/v1/staff/group-mappings')).status, 200);

    assert.equal((await mappings([])).status, 200);
    assert.deepEqual(await rolesOf('demo', id), []);
    const refused = await eventually(
      () => as(token, 'GET', '/v1/staff/group-mappings'),
      (r) => r.status === 403,
    );
    assert.equal(refused.status, 403, refused.text);
    // The session stays: the person's own routes answer, and a refresh carries no role.
    assert.equal((await as(token, 'GET', '/auth/passkeys')).status, 200);
    const refreshed = await callRetrying(e2e.gw, 'POST', '/auth/token', {
      json: { tenantId: 'demo', refreshToken: signedIn.json.refreshToken },
    });
    assert.equal(refreshed.status, 200, refreshed.text);
    assert.deepEqual(decodeJwt(refreshed.json.accessToken as string).org_roles, []);
  });
});
