import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { buildCore } from '../../core/app.ts';
import { createDb } from '../../shared/db/pool.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { bundleRouteTable, buildRouteTable } from '../../edge/routes.ts';
import { defaultBundleDir, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { PolicyStore } from '../../policy/runtime/store.ts';
import { routeDeclarations, routeTableDocument } from '../../shared/routes/index.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';

const key = (m: string, p: string) => `${m} ${p}`;

describe('route declarations and core (issue 21 item 1)', () => {
  const log = createLogger('silent');
  const metrics = createMetrics();
  // Routes are plain data; building them opens no connection.
  const db = createDb({ connectionString: 'postgres://unused@127.0.0.1:1/none', metrics, log });
  const core = buildCore({
    db,
    log,
    metrics,
    build: readBuildInfo(),
    keys: new KeyStore(db, randomBytes(32)),
    edgeSecrets: testEdgeSecrets,
  });

  it('declares every route core serves, and nothing core does not serve', async () => {
    const coreSet = new Set(core.routes.map((r) => key(r.method, r.path)));
    const declared = new Set(routeDeclarations.map((r) => key(r.method, r.template)));
    assert.deepEqual(
      [...coreSet].filter((k) => !declared.has(k)),
      [],
      'core routes missing from shared/routes/',
    );
    assert.deepEqual(
      [...declared].filter((k) => !coreSet.has(k)),
      [],
      'declared routes core does not serve',
    );
    await db.close();
  });

  it("core's routes take money movement, error format and roles from their declaration", () => {
    const byKey = new Map(routeDeclarations.map((d) => [key(d.method, d.template), d]));
    const differ = core.routes
      .map((r) => ({ r, d: byKey.get(key(r.method, r.path)) }))
      .filter(
        ({ r, d }) =>
          r.movesMoney !== d?.money ||
          (r.errorFormat ?? 'core') !== (d?.errorFormat ?? 'core') ||
          (r.roles ?? []).join() !== (d?.roles ?? []).join(),
      )
      .map(({ r }) => key(r.method, r.path));
    assert.deepEqual(differ, []);
    // The ledger's routes that move money by id are counted by the ledger; by amount, at the edge.
    const ledger = Object.fromEntries(
      core.routes
        .filter((r) => r.path.startsWith('/v1/core/') && r.movesMoney)
        .map((r) => [key(r.method, r.path), r.movesMoney]),
    );
    assert.deepEqual(ledger, {
      'POST /v1/core/postings': 'request',
      'POST /v1/core/postings/{id}/reverse': 'ledger',
      'POST /v1/core/holds': 'request',
      'POST /v1/core/holds/{id}/capture': 'ledger',
    });
    const problem = core.routes.filter((r) => r.errorFormat === 'problem').map((r) => key(r.method, r.path));
    assert.ok(problem.includes('POST /v1/products') && !problem.includes('GET /v1/accounts'));
  });

  it('every declaration names a purpose, a resource type and an action', () => {
    for (const r of routeDeclarations) {
      assert.ok(r.purpose && r.resource && r.action, key(r.method, r.template));
    }
  });
});

interface RegistryPurpose {
  name: string;
  resources: string[];
  actions: string[];
  required_roles?: string[];
  role_actions?: Record<string, string[]>;
  public_actions?: string[];
}

/**
 * Registry entries no route declares, each with why. The decision and simulation API (SPEC 4.4)
 * answers for any purpose and action, and SPEC 2.5 grants these staff purposes reads that no
 * route of this platform offers yet; a new entry here is a decision to make, not a default.
 */
const decisionApiOnly = 'SPEC 2.5 grant reached through /authz/decision and simulate only; no route yet';
const undeclaredInRegistry: Record<string, string> = {
  'customer.transact action cashout.create': decisionApiOnly,
  'customer.transact resource beneficiary': decisionApiOnly,
  'customer.transact resource limit': decisionApiOnly,
  'support.investigate action account.read': decisionApiOnly,
  'support.investigate action transaction.read': decisionApiOnly,
  'support.investigate action beneficiary.list': decisionApiOnly,
  'support.investigate action session.read': decisionApiOnly,
  'support.investigate resource account': decisionApiOnly,
  'support.investigate resource transaction': decisionApiOnly,
  'support.investigate resource beneficiary': decisionApiOnly,
  'support.investigate resource session': decisionApiOnly,
  'fraud.review action account.read': decisionApiOnly,
  'fraud.review action transaction.read': decisionApiOnly,
  'fraud.review action session.read': decisionApiOnly,
  'fraud.review action session.revoke': decisionApiOnly,
  'fraud.review action device.read': decisionApiOnly,
  'fraud.review resource account': decisionApiOnly,
  'fraud.review resource transaction': decisionApiOnly,
  'fraud.review resource session': decisionApiOnly,
  'fraud.review resource device': decisionApiOnly,
  'compliance.kyc action watchlist.screen': decisionApiOnly,
  'compliance.kyc resource kyc_document': decisionApiOnly,
  'compliance.kyc resource watchlist': decisionApiOnly,
  'marketing.personalize action profile.read': decisionApiOnly,
  'marketing.personalize resource customer_profile': decisionApiOnly,
  // Staff sign-in's route action is auth.staff_login; staff.login names its audit records.
  'operational action staff.login': 'a public action no route uses (sign-in is auth.staff_login)',
  'operational resource device': "customers' devices are resource customer_auth on their routes",
};

describe('route declarations and the purpose registry (issue 21 item 1)', async () => {
  const registry = JSON.parse(
    await readFile(join(import.meta.dirname, '../../policy/data/registry/data.json'), 'utf8'),
  ) as { purposes: RegistryPurpose[] };
  const purposes = new Map(registry.purposes.map((p) => [p.name, p]));
  const rolesOf = (p: RegistryPurpose, action: string) =>
    [...(p.required_roles ?? p.role_actions?.[action] ?? [])].sort();

  it('names only purposes, resources and actions the registry has, with the roles it grants', () => {
    const wrong: string[] = [];
    for (const d of routeDeclarations) {
      const at = key(d.method, d.template);
      const p = purposes.get(d.purpose);
      if (!p) {
        wrong.push(`${at}: purpose ${d.purpose} is not in the registry`);
        continue;
      }
      if (!p.actions.includes(d.action)) wrong.push(`${at}: ${d.purpose} has no action ${d.action}`);
      if (!p.resources.includes(d.resource)) wrong.push(`${at}: ${d.purpose} has no resource ${d.resource}`);
      const want = rolesOf(p, d.action).join(', ');
      const have = [...(d.roles ?? [])].sort().join(', ');
      if (want !== have) wrong.push(`${at}: roles [${have}], the registry grants [${want}]`);
      const isPublic = p.public_actions?.includes(d.action) ?? false;
      if (isPublic !== (d.credential === 'public'))
        wrong.push(`${at}: credential ${d.credential}, registry public action: ${isPublic}`);
    }
    assert.deepEqual(wrong, []);
  });

  it('has no action, resource or role grant that no declaration names', () => {
    const declared = new Set(routeDeclarations.map((d) => `${d.purpose} action ${d.action}`));
    for (const d of routeDeclarations) declared.add(`${d.purpose} resource ${d.resource}`);
    const extra: string[] = [];
    for (const p of registry.purposes) {
      for (const a of p.actions) extra.push(`${p.name} action ${a}`);
      for (const r of p.resources) extra.push(`${p.name} resource ${r}`);
      for (const a of Object.keys(p.role_actions ?? {})) extra.push(`${p.name} action ${a}`);
      for (const a of p.public_actions ?? []) extra.push(`${p.name} action ${a}`);
    }
    const missing = [...new Set(extra)].filter((e) => !declared.has(e) && !(e in undeclaredInRegistry));
    assert.deepEqual(missing, []);
    // An entry that a declaration now names, or that left the registry, leaves the list too.
    const stale = Object.keys(undeclaredInRegistry).filter((e) => declared.has(e) || !extra.includes(e));
    assert.deepEqual(stale, []);
  });
});

describe("the edge's route table is the signed bundle's (issue 21 item 1)", () => {
  it('the committed bundle carries the declarations as its route table', async () => {
    const store = new PolicyStore(await loadTrustedKeys());
    const rev = await store.load(defaultBundleDir);
    assert.deepEqual(rev.routes, routeTableDocument().routes);
    const resolve = bundleRouteTable(store);
    const transfer = resolve('POST', '/v1/transfers');
    assert.equal(transfer.purpose, 'customer.transact');
    assert.equal(transfer.route?.money, 'request');
    assert.deepEqual(resolve('GET', '/v1/countries/KE').params, { code: 'KE' });
  });

  it('without a bundle carrying a table the edge resolves nothing (the Check fails closed)', async () => {
    const store = new PolicyStore(await loadTrustedKeys());
    assert.throws(() => bundleRouteTable(store)('GET', '/v1/health'), /carries no route table/);
  });

  it('no module of the edge but the dev gateway (playing Envoy) imports the declarations', async () => {
    const edgeDir = join(import.meta.dirname, '../../edge');
    const importers: string[] = [];
    for (const name of await readdir(edgeDir, { recursive: true })) {
      if (!name.endsWith('.ts')) continue;
      const text = await readFile(join(edgeDir, name), 'utf8');
      // The types are no declarations: the edge may name them.
      if (/from '[^']*shared\/routes\/(?!types\.ts')[^']*'/.test(text)) importers.push(name);
    }
    assert.deepEqual(importers, ['gateway.ts']);
  });

  it('derives the purpose from method and template; unmapped paths get operational', () => {
    const resolve = buildRouteTable(routeDeclarations);
    assert.equal(resolve('GET', '/v1/health').purpose, 'operational');
    const unmapped = resolve('DELETE', '/v1/anything/else');
    assert.equal(unmapped.route, undefined);
    assert.equal(unmapped.purpose, 'operational');
  });
});
