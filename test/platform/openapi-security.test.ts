/**
 * The OpenAPI document's security (issue 15 item 3): every operation whose edge route needs a
 * bearer credential names that credential's scheme, `Authorization` is never an ordinary header
 * parameter where a scheme sends it, the registry's step-ups and API-key scopes reach the
 * descriptions, examples are the demo tenant's, and the whole is valid OpenAPI 3.1.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { demoDocExamples, edgeRouteAccess } from '../../bin/docs.ts';
import { buildOpenApi } from '../../core/http/openapi.ts';
import { recipes, securitySchemes } from '../../core/http/openapi-security.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { defaultBundleDir, loadBundle, loadTrustedKeys } from '../../policy/runtime/bundle.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call } from '../helpers/http.ts';

type Json = Record<string, any>;

/** The schemes each bearer credential of the route table must name, alternatives space-separated (edge/auth/principal.ts). */
const expected: Record<string, string> = {
  customer: 'customerBearer',
  agent: 'agentBearer',
  staff: 'staffBearer serviceToken',
  service: 'serviceToken',
  'core-client': 'coreClientBearer',
  scim: 'scimBearer',
};

const demo = {
  tenant: { id: 'demo', country: 'KE', baseCurrency: 'KES' },
  customer: { customerId: '01936f2a-0000-7000-8000-000000000001', phone: '+254700000101', pin: '482615' },
  agent: {
    agentId: '01936f2a-0000-7000-8000-000000000002',
    agentCode: 'DEMO0001',
    deviceId: '01936f2a-0000-7000-8000-000000000003',
  },
  coreClient: { clientId: 'cc_demo_demo', clientSecret: 'secret-never-shown' },
};

describe('OpenAPI security and examples', () => {
  let t: TestCore;
  let doc: Json;
  const op = (method: string, path: string): Json => {
    const found = doc.paths[path]?.[method.toLowerCase()];
    assert.ok(found, `${method} ${path} is documented`);
    return found as Json;
  };

  before(async () => {
    t = await startTestCore();
    const bundle = await loadBundle(defaultBundleDir, await loadTrustedKeys());
    doc = buildOpenApi(t.core.routes, {
      version: '1.0.0',
      access: edgeRouteAccess(),
      registry: bundle.registry,
      examples: demoDocExamples(demo),
    }) as Json;
  });
  after(() => t.close());

  it('names the scheme of the credential the edge requires on every operation', () => {
    let checked = 0;
    for (const r of routeDeclarations) {
      const want = expected[r.credential];
      const o = doc.paths[r.template]?.[r.method.toLowerCase()] as Json | undefined;
      if (!o) continue;
      if (!want) {
        // Public at the edge: no scheme, unless core verifies a staff token itself.
        if (o.security)
          assert.deepEqual(
            o.security.map((s: Json) => Object.keys(s)[0]).filter((n: string) => n !== 'staffBearer'),
            [],
            `${r.method} ${r.template}`,
          );
        continue;
      }
      const alternatives = (o.security ?? []) as Json[];
      const single = alternatives.filter((s) => Object.keys(s).length === 1).map((s) => Object.keys(s)[0]);
      assert.deepEqual(single, want.split(' '), `${r.method} ${r.template} (${r.credential})`);
      for (const p of o.parameters as Json[])
        assert.notEqual(
          String(p.name).toLowerCase(),
          'authorization',
          `${r.method} ${r.template}: Authorization is a scheme's, not a parameter`,
        );
      checked++;
    }
    assert.ok(checked > 150, `checked ${checked} bearer operations`);
  });

  it('names only schemes it defines, one per credential kind', () => {
    assert.deepEqual(doc.components.securitySchemes, securitySchemes);
    for (const name of [
      'customerBearer',
      'agentBearer',
      'staffBearer',
      'serviceToken',
      'coreClientBearer',
      'apiKeyId',
      'apiKeySignature',
      'apiKeyNonce',
      'apiKeyDate',
      'dpop',
    ]) {
      assert.ok(doc.components.securitySchemes[name], name);
    }
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const o of Object.values(item as Json) as Json[]) {
        for (const req of (o.security ?? []) as Json[]) {
          for (const name of Object.keys(req))
            assert.ok(doc.components.securitySchemes[name], `${path}: ${name}`);
        }
      }
    }
  });

  it('is valid OpenAPI 3.1 with the schemes, examples and form bodies', async () => {
    const result = await new Validator().validate(doc);
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
  });

  it('says where a step-up, an intent signature, an API-key signature or a DPoP proof is needed', () => {
    const transfer = op('POST', '/v1/transfers');
    assert.match(transfer.description, /Step-up bound to this request/);
    assert.match(transfer.description, /Intent signature/);
    assert.ok(transfer.description.includes(recipes.intent) && transfer.description.includes(recipes.stepUp));
    assert.match(op('GET', '/v1/beneficiaries').description, /Needs AAL 2/);
    assert.doesNotMatch(op('GET', '/v1/accounts').description, /Step-up|AAL 2/);
    assert.match(op('POST', '/v1/admin/rotate-keys').description, /auth\/mfa\/challenge/);
    // core.banking reads take an API key with scope core:read (registry action_scopes).
    const balances = op('GET', '/v1/core/accounts/{id}/balances');
    assert.ok(
      (balances.security as Json[]).some(
        (s) =>
          s.apiKeyId?.[0] === 'core:read' &&
          'apiKeySignature' in s &&
          'apiKeyNonce' in s &&
          'apiKeyDate' in s,
      ),
    );
    assert.ok(balances.description.includes(recipes.apiKey));
    assert.ok((balances.security as Json[]).some((s) => 'coreClientBearer' in s && 'dpop' in s));
    // Staff passkey routes: core verifies the staff token itself (the edge passes them as public).
    assert.deepEqual(op('GET', '/auth/passkeys').security[0], { staffBearer: [] });
  });

  it('every README anchor a description points to exists', async () => {
    const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
    for (const link of Object.values(recipes)) {
      const anchor = link.split('#')[1] as string;
      assert.ok(readme.includes(`<a id="${anchor}"></a>`), `README has #${anchor}`);
    }
  });

  it('pre-fills the demo tenant, its customer and its core client, never a secret', () => {
    const send = op('POST', '/customers/auth/otp/send').requestBody.content['application/json'].schema;
    assert.equal(send.properties.tenantId.example, 'demo');
    assert.equal(send.properties.phone.example, demo.customer.phone);
    const tenant = (op('GET', '/v1/tenants/{tenantId}').parameters as Json[]).find(
      (p) => p.name === 'tenantId',
    );
    assert.equal(tenant?.example, 'demo');
    const form = op('POST', '/oauth2/token').requestBody.content['application/x-www-form-urlencoded'].schema;
    assert.equal(form.properties.grant_type.const, 'client_credentials');
    assert.equal(form.properties.client_id.example, demo.coreClient.clientId);
    assert.equal(form.properties.client_secret.example, undefined);
    const text = JSON.stringify(doc);
    assert.ok(
      !text.includes(demo.coreClient.clientSecret) && !text.includes(demo.customer.pin),
      'no secret in the document',
    );
  });

  it('documents the simulate input document (SPEC 2.6) with an example', () => {
    const body = op('POST', '/v1/auth/simulate').requestBody.content['application/json'].schema;
    const input = body.properties.input;
    for (const field of ['tenant', 'subject', 'resource', 'action', 'purpose', 'context'])
      assert.ok(input.properties[field], field);
    assert.equal(input.example.purpose, 'customer.transact');
    const get = (op('GET', '/v1/auth/simulate').parameters as Json[]).find((p) => p.name === 'input');
    assert.deepEqual(JSON.parse(get?.schema.example), input.example, 'the GET form carries the same example');
  });

  it('serves the document with security through core (the route access core was given)', async () => {
    const r = await call(t.origin, 'GET', '/v1/openapi.json');
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.paths['/v1/accounts'].get.security[0], { customerBearer: [] });
  });
});
