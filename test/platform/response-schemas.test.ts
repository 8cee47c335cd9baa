/**
 * Issue 15 item 4: every route declares a schema for each success response, and under the test
 * suite core holds every response to its declaration (core/http/response-check.ts).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { Type } from '@sinclair/typebox';
import { loadServiceConfig, ServiceConfigError } from '../../bin/service-config.ts';
import { undescribedSuccesses } from '../../core/http/responses.ts';
import { defineRoute } from '../../core/http/route.ts';
import { createHandler } from '../../core/http/server.ts';
import { AppError } from '../../shared/errors.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';
import { call, serve } from '../helpers/http.ts';

describe('every route of core', () => {
  let t: TestCore;
  before(async () => {
    t = await startTestCore();
  });
  after(() => t.close());

  it('declares a schema for every success response (a list of the routes that do not, which must be empty)', () => {
    const lacking = t.core.routes
      .map((r) => ({ route: `${r.method} ${r.path}`, statuses: undescribedSuccesses(r) }))
      .filter((r) => r.statuses.length > 0)
      .map((r) => `${r.route}: ${r.statuses.join(', ')} without a schema`);
    assert.deepEqual(lacking, [], `routes lacking a response schema:\n  ${lacking.join('\n  ')}`);
  });

  it("documents every error status in the route's own format and media type", async () => {
    const doc = (await call(t.origin, 'GET', '/v1/openapi.json')).json as {
      paths: Record<
        string,
        Record<string, { responses: Record<string, { content?: Record<string, unknown> }> }>
      >;
    };
    const admin = doc.paths['/v1/countries']?.get?.responses;
    const customer = doc.paths['/v1/accounts']?.get?.responses;
    assert.deepEqual(Object.keys(admin?.['404']?.content ?? {}), ['application/problem+json']);
    assert.deepEqual(Object.keys(customer?.['404']?.content ?? {}), ['application/json']);
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        for (const [status, r] of Object.entries(op.responses)) {
          if (status === 'default' || Number(status) < 400) continue;
          assert.ok(
            r.content && Object.keys(r.content).length > 0,
            `${method.toUpperCase()} ${path} ${status} names its content type`,
          );
        }
      }
    }
  });
});

const Thing = Type.Object(
  { id: Type.String({ pattern: '^t_' }), amount: Type.String() },
  { additionalProperties: false },
);
let answer: { status: number; body?: unknown } = { status: 200, body: { id: 't_1', amount: '1.00' } };
const routes = [
  defineRoute({
    method: 'GET',
    path: '/v1/things/{id}',
    operationId: 'getThing',
    summary: 's',
    tags: ['t'],
    responses: { 200: { description: 'a thing', schema: Thing }, 204: { description: 'nothing' } },
    handler: async () => answer,
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/admin/things',
    operationId: 'adminThings',
    summary: 's',
    tags: ['t'],
    errorFormat: 'problem',
    responses: { 200: { description: 'a thing', schema: Thing } },
    handler: async () => {
      throw new AppError('CONFLICT', 'taken');
    },
  }),
];

describe('the response check', () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  const servers: { origin: string; close(): Promise<void> }[] = [];
  const start = async (checkResponses: boolean) => {
    const s = await serve(
      createServer(
        createHandler({
          routes,
          log: createLogger('info', sink),
          metrics: createMetrics(),
          edgeSecrets: testEdgeSecrets,
          checkResponses,
        }),
      ),
    );
    servers.push(s);
    return s.origin;
  };
  after(async () => {
    for (const s of servers) await s.close();
  });

  it("passes a response that matches its declaration, and the route's declared errors", async () => {
    const origin = await start(true);
    answer = { status: 200, body: { id: 't_1', amount: '1.00' } };
    assert.equal((await call(origin, 'GET', '/v1/things/1')).status, 200);
    answer = { status: 204 };
    assert.equal((await call(origin, 'GET', '/v1/things/1')).status, 204);
    const refused = await call(origin, 'GET', '/v1/admin/things');
    assert.equal(refused.status, 409);
    assert.equal(refused.json.code, 'CONFLICT');
  });

  it('turns a body that breaks its schema into a 500 RESPONSE_SCHEMA_MISMATCH and logs route, status and errors', async () => {
    const origin = await start(true);
    lines.length = 0;
    answer = { status: 200, body: { id: 'x_1', amount: 100 } };
    const r = await call(origin, 'GET', '/v1/things/1');
    assert.equal(r.status, 500);
    assert.equal(r.json.code, 'RESPONSE_SCHEMA_MISMATCH');
    assert.match(r.json.message, /GET \/v1\/things\/\{id\} answered 200/);
    assert.match(r.json.message, /\/id/);
    const logged = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === 'response does not match its declared schema');
    assert.ok(logged, 'the mismatch is logged');
    assert.equal(logged.route, 'GET /v1/things/{id}');
    assert.equal(logged.status, 200);
    assert.ok(Array.isArray(logged.errors) && logged.errors.length >= 2, 'both wrong fields are named');
  });

  it('refuses an undeclared status and a declared body left out', async () => {
    const origin = await start(true);
    answer = { status: 201, body: { id: 't_1', amount: '1.00' } };
    const undeclared = await call(origin, 'GET', '/v1/things/1');
    assert.equal(undeclared.status, 500);
    assert.match(undeclared.json.message, /status 201 is not declared/);
    answer = { status: 200 };
    const missing = await call(origin, 'GET', '/v1/things/1');
    assert.equal(missing.json.code, 'RESPONSE_SCHEMA_MISMATCH');
  });

  it('is off unless asked for: without it the same wrong body goes out as the handler wrote it', async () => {
    const origin = await start(false);
    answer = { status: 200, body: { id: 'x_1', amount: 100 } };
    const r = await call(origin, 'GET', '/v1/things/1');
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { id: 'x_1', amount: 100 });
  });

  it('is refused by a production core and taken by a development one', () => {
    assert.throws(
      () => loadServiceConfig('core', { MODE: 'production', RESPONSE_SCHEMA_CHECK: '1' }),
      (err: unknown) =>
        err instanceof ServiceConfigError &&
        err.problems.some((p) => p.startsWith('RESPONSE_SCHEMA_CHECK: test suites only')),
    );
    assert.equal(loadServiceConfig('core', { RESPONSE_SCHEMA_CHECK: '1' }).values.RESPONSE_SCHEMA_CHECK, '1');
    assert.equal(loadServiceConfig('core', {}).values.RESPONSE_SCHEMA_CHECK, '0');
  });
});
