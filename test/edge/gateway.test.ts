import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../../shared/log.ts';
import { createGateway, maxRequestBytes, type Gateway } from '../../edge/gateway.ts';
import type { Decide } from '../../edge/server.ts';
import { freePort } from '../../shared/net.ts';
import { platformOnly, startTestEdge, type TestEdge } from '../helpers/edge.ts';
import { call, serve } from '../helpers/http.ts';

const log = createLogger('silent');

/** An upstream that records what reached it. */
async function recordingUpstream() {
  const seen: { method: string; url: string; headers: IncomingHttpHeaders; body: string }[] = [];
  const s = await serve(
    createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
        });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      });
    }),
  );
  return { ...s, seen };
}

/** Functional tests use a generous deadline; the deadline itself has its own test below. */
async function gatewayOn(
  authzAddress: string,
  coreOrigin: string,
  checkTimeoutMs = 2000,
): Promise<{ gw: Gateway; origin: string }> {
  const gw = createGateway({ log, authzAddress, coreOrigin, checkTimeoutMs });
  const s = await serve(gw.server);
  return { gw, origin: s.origin };
}

describe('dev gateway', () => {
  let upstream: Awaited<ReturnType<typeof recordingUpstream>>;
  let edge: TestEdge;
  let gw: Gateway;
  let origin: string;
  const allowAll: Decide = (_v, resolved) => ({
    allow: true,
    status: 200,
    set: { 'x-purpose': resolved.purpose, 'x-tenant-id': 'demo' },
  });

  before(async () => {
    upstream = await recordingUpstream();
    edge = await startTestEdge({ log, decide: allowAll });
    ({ gw, origin } = await gatewayOn(edge.address, upstream.origin));
  });
  after(async () => {
    await gw.close();
    await edge.close();
    await upstream.close();
  });

  it('forwards an allowed request with the edge headers, and strips spoofed identity headers', async () => {
    const r = await call(origin, 'POST', '/v1/health?x=1', {
      json: { a: 1 },
      headers: { 'x-purpose': 'fraud.review', 'x-principal-id': 'someone-else', 'x-aal': '2' },
    });
    assert.equal(r.status, 200);
    const got = upstream.seen.at(-1);
    assert.ok(got);
    assert.equal(got.url, '/v1/health?x=1');
    assert.equal(got.body, '{"a":1}');
    assert.equal(got.headers['x-purpose'], 'operational');
    assert.equal(got.headers['x-tenant-id'], 'demo');
    assert.equal(got.headers['x-principal-id'], undefined);
    assert.equal(got.headers['x-aal'], undefined);
    assert.ok(got.headers['x-decision-id']);
  });

  it('answers 413 beyond 8192 body bytes without calling Check or core', async () => {
    const before = upstream.seen.length;
    const ok = await call(origin, 'POST', '/v1/health', {
      body: 'a'.repeat(maxRequestBytes),
      headers: { 'content-type': 'text/plain' },
    });
    assert.equal(ok.status, 200);
    const r = await call(origin, 'POST', '/v1/health', {
      body: 'a'.repeat(maxRequestBytes + 1),
      headers: { 'content-type': 'text/plain' },
    });
    assert.equal(r.status, 413);
    assert.equal(r.json.code, 'PAYLOAD_TOO_LARGE');
    assert.equal(upstream.seen.length, before + 1);
  });

  it('passes the edge deny through and never forwards it', async () => {
    const denyEdge = await startTestEdge({ log, decide: platformOnly });
    const g = await gatewayOn(denyEdge.address, upstream.origin);
    try {
      const before = upstream.seen.length;
      const r = await call(g.origin, 'GET', '/v1/not-mapped');
      assert.equal(r.status, 403);
      assert.equal(r.json.code, 'POLICY_DENIED');
      assert.equal(upstream.seen.length, before);
    } finally {
      await g.gw.close();
      await denyEdge.close();
    }
  });

  it('denies with authz_unavailable when the edge is unreachable', async () => {
    const g = await gatewayOn(`127.0.0.1:${await freePort()}`, upstream.origin);
    try {
      const before = upstream.seen.length;
      const r = await call(g.origin, 'GET', '/v1/health');
      assert.equal(r.status, 503);
      assert.equal(r.json.code, 'authz_unavailable');
      assert.equal(upstream.seen.length, before);
    } finally {
      await g.gw.close();
    }
  });

  it('denies with authz_unavailable when Check misses the 100 ms deadline', async () => {
    const slow = await startTestEdge({
      log,
      decide: () => new Promise((r) => setTimeout(() => r({ allow: true, status: 200 }), 2000)),
      budgetMs: 5000,
    });
    const g = await gatewayOn(slow.address, upstream.origin, 100);
    await g.gw.ready();
    try {
      const before = upstream.seen.length;
      const started = Date.now();
      const r = await call(g.origin, 'GET', '/v1/health');
      assert.equal(r.status, 503);
      assert.equal(r.json.code, 'authz_unavailable');
      // The edge would allow after 2 s; an answer well before that is the gateway's 100 ms deadline.
      assert.ok(Date.now() - started < 1500, 'gateway gave up at its deadline');
      await new Promise((res) => setTimeout(res, 2200));
      assert.equal(upstream.seen.length, before, 'the late allow was not acted on');
    } finally {
      await g.gw.close();
      await slow.close();
    }
  });

  it('answers 502 in JSON when core is down', async () => {
    const g = await gatewayOn(edge.address, `http://127.0.0.1:${await freePort()}`);
    try {
      const r = await call(g.origin, 'GET', '/v1/health');
      assert.equal(r.status, 502);
      assert.equal(r.json.code, 'UPSTREAM_UNAVAILABLE');
    } finally {
      await g.gw.close();
    }
  });
});
