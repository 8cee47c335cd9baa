import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defaultBundleDir, loadBundle, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';

/** The committed policy bundle allows the profile, content, training, dispute and USSD routes to the right callers only. */
describe('agent routes (profile, disputes, content, training, USSD) against the committed policy bundle', () => {
  const member = [{ relation: 'member', object_ns: 'tenant', object_id: 'demo', caveat: {} }];
  const agent = {
    id: 'a1',
    type: 'user',
    roles: ['agent'],
    aal: 2,
    amr: ['pin', 'device'],
    tuples: member,
    stepup_bound: false,
  };
  const ussd = {
    id: 'service-token:gw',
    type: 'service',
    roles: ['ussd'],
    scopes: [],
    aal: 1,
    tuples: member,
  };
  const admin = { ...ussd, roles: ['admin'] };
  const resolve = buildRouteTable(routeDeclarations);
  const decide = async (method: string, path: string, subject: Record<string, unknown>) => {
    const rev = await loadBundle(defaultBundleDir, await loadTrustedKeys());
    const r = resolve(method, path);
    return rev.evaluate({
      tenant: { id: 'demo', status: 'ACTIVE', security: {} },
      subject,
      resource: { type: r.resource, id: '', tenant_id: 'demo', attrs: {} },
      action: r.action,
      purpose: r.purpose,
      context: {
        ip: '10.0.0.1',
        ua: '',
        risk: 'low',
        time: '2026-03-02T08:00:00Z',
        now_ns: Date.parse('2026-03-02T08:00:00Z') * 1e6,
        local_hour: 10,
      },
    }).allow;
  };
  const agentRoutes: [string, string][] = [
    ['GET', '/v1/agent/me'],
    ['PATCH', '/v1/agent/me'],
    ['GET', '/v1/agent/outlet'],
    ['GET', '/v1/agent/capabilities'],
    ['GET', '/v1/announcements'],
    ['GET', '/v1/training/courses'],
    ['POST', '/v1/training/quizzes/0190a1b2-0000-7000-8000-000000000001/submit'],
    ['POST', '/v1/disputes'],
    ['GET', '/v1/disputes/0190a1b2-0000-7000-8000-000000000001'],
    ['POST', '/v1/disputes/0190a1b2-0000-7000-8000-000000000001/attachments'],
  ];

  it('allows an agent (AAL 2, role agent) on each, and refuses a USSD gateway token', async () => {
    for (const [m, p] of agentRoutes) {
      assert.equal(await decide(m, p, agent), true, `${m} ${p}`);
      assert.equal(await decide(m, p, ussd), false, `${m} ${p} (service)`);
    }
  });

  it('allows the USSD routes only to a service token with role ussd', async () => {
    for (const p of ['/v1/ussd/session', '/v1/ussd/agent/menu']) {
      assert.equal(await decide('POST', p, ussd), true, p);
      assert.equal(await decide('POST', p, admin), false, `${p} (admin token)`);
      assert.equal(await decide('POST', p, agent), false, `${p} (agent)`);
    }
  });
});
