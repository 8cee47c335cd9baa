import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { createServer } from 'node:http';
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { defineRoute } from '../../core/http/route.ts';
import { createHandler } from '../../core/http/server.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { call, serve } from '../helpers/http.ts';
import { testEdgeSecrets } from '../helpers/edge-auth.ts';

const logLines: string[] = [];
const sink = new Writable({
  write(chunk, _enc, cb) {
    logLines.push(String(chunk));
    cb();
  },
});

const Body = Type.Object(
  { name: Type.String({ minLength: 1 }), pin: Type.Optional(Type.String()) },
  { additionalProperties: false },
);
const routes = [
  defineRoute({
    method: 'POST',
    path: '/v1/things',
    operationId: 'createThing',
    summary: 's',
    tags: ['t'],
    body: Body,
    responses: { 201: { description: 'made' } },
    handler: async ({ body }) => ({ status: 201, body: { name: body.name } }),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/things/{id}',
    operationId: 'getThing',
    summary: 's',
    tags: ['t'],
    params: Type.Object({ id: Type.String({ pattern: '^[a-z]+$' }) }),
    query: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10 })) }),
    responses: { 200: { description: 'ok' } },
    handler: async ({ params, query }) => ({
      status: 200,
      body: { id: params.id, limit: query.limit ?? null },
    }),
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/admin/things',
    operationId: 'adminThings',
    summary: 's',
    tags: ['t'],
    errorFormat: 'problem',
    headers: [{ name: 'X-Request-Id', required: true, description: 'required' }],
    responses: { 200: { description: 'ok' } },
    handler: async () => {
      throw new AppError('NOT_FOUND', 'no things');
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/v1/boom',
    operationId: 'boom',
    summary: 's',
    tags: ['t'],
    responses: { 200: { description: 'ok' } },
    handler: async () => {
      throw new Error('secret internal detail at /srv/app.ts:12');
    },
  }),
];

describe('HTTP pipeline', () => {
  let origin: string;
  let close: () => Promise<void>;
  before(async () => {
    const s = await serve(
      createServer(
        createHandler({
          routes,
          log: createLogger('info', sink),
          metrics: createMetrics(),
          edgeSecrets: testEdgeSecrets,
        }),
      ),
    );
    origin = s.origin;
    close = s.close;
  });
  after(() => close());

  it('validates and answers a good request', async () => {
    const r = await call(origin, 'POST', '/v1/things', { json: { name: 'a' } });
    assert.equal(r.status, 201);
    assert.deepEqual(r.json, { name: 'a' });
  });

  it('unknown route → 404 in the core error format', async () => {
    const r = await call(origin, 'GET', '/v1/nothing');
    assert.equal(r.status, 404);
    assert.equal(r.json.code, 'NOT_FOUND');
    assert.equal(typeof r.json.message, 'string');
  });

  it('known path, wrong method → 405 with Allow', async () => {
    const r = await call(origin, 'DELETE', '/v1/things');
    assert.equal(r.status, 405);
    assert.equal(r.headers.allow, 'POST');
  });

  it('wrong content type → 415', async () => {
    const r = await call(origin, 'POST', '/v1/things', {
      body: 'name=a',
      headers: { 'content-type': 'text/plain' },
    });
    assert.equal(r.status, 415);
    assert.equal(r.json.code, 'UNSUPPORTED_MEDIA_TYPE');
  });

  it('refuses a non-canonical path before routing (the edge decided on the raw path)', async () => {
    const { request } = await import('node:http');
    const { port, hostname } = new URL(origin);
    const status = await new Promise<number>((resolve, reject) => {
      const r = request(
        { host: hostname, port, method: 'GET', path: '/v1/nowhere/x\\..\\..\\v1\\things\\abc' },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      r.on('error', reject);
      r.end();
    });
    assert.equal(status, 400);
    assert.equal((await call(origin, 'GET', '/v1/things/abc')).status, 200, 'the canonical form is served');
  });

  it('malformed JSON → 400 MALFORMED_JSON', async () => {
    const r = await call(origin, 'POST', '/v1/things', {
      body: '{"name":',
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.status, 400);
    assert.equal(r.json.code, 'MALFORMED_JSON');
  });

  it('schema violations → 400 naming each field', async () => {
    const r = await call(origin, 'POST', '/v1/things', { json: { name: '', extra: 1 } });
    assert.equal(r.status, 400);
    assert.equal(r.json.code, 'VALIDATION_FAILED');
    const paths = r.json.errors.map((e: { path: string }) => e.path);
    assert.ok(paths.includes('body/name'), paths.join());
    assert.ok(paths.includes('body/extra'), paths.join());
  });

  it('missing body on a route that needs one → 400, not 500', async () => {
    const r = await call(origin, 'POST', '/v1/things');
    assert.equal(r.status, 400);
  });

  it('body over the limit → 413', async () => {
    const r = await call(origin, 'POST', '/v1/things', {
      body: 'x'.repeat(1024 * 1024 + 1),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.status, 413);
    assert.equal(r.json.code, 'PAYLOAD_TOO_LARGE');
  });

  it('path and query parameters are validated and converted', async () => {
    assert.deepEqual((await call(origin, 'GET', '/v1/things/abc?limit=5')).json, { id: 'abc', limit: 5 });
    assert.equal((await call(origin, 'GET', '/v1/things/ABC')).status, 400);
    assert.equal((await call(origin, 'GET', '/v1/things/abc?limit=99')).status, 400);
    assert.equal((await call(origin, 'GET', '/v1/things/abc?limit=x')).status, 400);
  });

  it('Problem+JSON routes answer application/problem+json and require X-Request-Id', async () => {
    const missing = await call(origin, 'GET', '/v1/admin/things');
    assert.equal(missing.status, 400);
    assert.equal(missing.json.code, 'MISSING_REQUEST_ID');
    const r = await call(origin, 'GET', '/v1/admin/things', { headers: { 'x-request-id': 'r1' } });
    assert.equal(r.status, 404);
    assert.match(r.headers['content-type'] ?? '', /application\/problem\+json/);
    for (const k of ['type', 'title', 'status', 'detail', 'instance']) assert.ok(k in r.json, k);
    assert.equal(r.json.status, 404);
    assert.equal(r.json.instance, '/v1/admin/things');
  });

  it('an unexpected failure is a 500 without any internal detail', async () => {
    const r = await call(origin, 'GET', '/v1/boom');
    assert.equal(r.status, 500);
    assert.deepEqual(r.json, { code: 'INTERNAL', message: 'internal error' });
    assert.doesNotMatch(r.text, /secret internal detail|app\.ts/);
  });

  it('logs one JSON line per request with secrets redacted', async () => {
    logLines.length = 0;
    await call(origin, 'POST', '/v1/things', {
      json: { name: 'a', pin: '4321' },
      headers: { authorization: 'Bearer abc.def', 'x-request-id': 'log-1' },
    });
    const line = logLines.map((l) => JSON.parse(l)).find((l) => l.reqId === 'log-1');
    assert.ok(line, 'request logged with its id');
    assert.equal(line.status, 201);
    assert.equal(line.route, '/v1/things');
    assert.doesNotMatch(logLines.join(''), /4321|abc\.def/);
  });
});

describe('log redaction', () => {
  it('censors secret fields at any depth we log', () => {
    const out: string[] = [];
    const log = createLogger(
      'info',
      new Writable({
        write(c, _e, cb) {
          out.push(String(c));
          cb();
        },
      }),
    );
    log.info({
      pin: '1',
      body: { otp: '2', refreshToken: '3' },
      headers: { authorization: '4', 'x-api-key-secret': '5' },
      a: { b: { secret: '6' } },
    });
    const line = JSON.parse(out[0] ?? '{}');
    assert.equal(line.pin, '[redacted]');
    assert.equal(line.body.otp, '[redacted]');
    assert.equal(line.body.refreshToken, '[redacted]');
    assert.equal(line.headers.authorization, '[redacted]');
    assert.equal(line.headers['x-api-key-secret'], '[redacted]');
    assert.equal(line.a.b.secret, '[redacted]');
  });
});
