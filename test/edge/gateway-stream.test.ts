import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../../shared/log.ts';
import { createGateway, maxRequestBytes, streamsBodyByRouteTable, type Gateway } from '../../edge/gateway.ts';
import type { Decide } from '../../edge/server.ts';
import { startTestEdge, type TestEdge } from '../helpers/edge.ts';
import { call, serve } from '../helpers/http.ts';

const log = createLogger('silent');
const uploadPath = '/v1/disputes/0190a1b2-0000-7000-8000-000000000001/attachments';

describe('dev gateway: routes whose body the edge does not buffer', () => {
  const seen: { url: string; size: number; sha: string; length: string | undefined }[] = [];
  const checked: { path: string; bodyBytes: number }[] = [];
  let upstream: Awaited<ReturnType<typeof serve>>;
  let edge: TestEdge;
  let gw: Gateway;
  let origin: string;
  let allow = true;
  const decide: Decide = (v, resolved) => {
    checked.push({ path: v.path, bodyBytes: v.body.length });
    return allow
      ? { allow: true, status: 200, set: { 'x-purpose': resolved.purpose } }
      : { allow: false, status: 403, code: 'POLICY_DENIED', message: 'no' };
  };

  before(async () => {
    upstream = await serve(
      createServer((req, res) => {
        const h = createHash('sha256');
        let size = 0;
        req.on('data', (c: Buffer) => {
          size += c.length;
          h.update(c);
        });
        req.on('end', () => {
          seen.push({
            url: req.url ?? '',
            size,
            sha: h.digest('hex'),
            length: req.headers['content-length'],
          });
          res.writeHead(201, { 'content-type': 'application/json' });
          res.end('{"ok":true}');
        });
      }),
    );
    edge = await startTestEdge({ log, decide });
    gw = createGateway({
      log,
      authzAddress: edge.address,
      coreOrigin: upstream.origin,
      checkTimeoutMs: 2000,
    });
    origin = (await serve(gw.server)).origin;
  });
  after(async () => {
    await gw.close();
    await edge.close();
    await upstream.close();
  });

  it('takes the per-route setting from the edge route table', () => {
    const streams = streamsBodyByRouteTable();
    assert.equal(streams('POST', uploadPath), true);
    assert.equal(streams('POST', '/v1/disputes'), false);
    assert.equal(streams('GET', uploadPath), false);
    assert.equal(streams('POST', '/v1/txns/cashin'), false);
  });

  it('checks on headers alone, then streams a body far beyond 8192 bytes to core intact', async () => {
    const body = Buffer.alloc(3 * 1024 * 1024 + 7, 0x61);
    const r = await call(origin, 'POST', uploadPath, {
      body,
      headers: { 'content-type': 'multipart/form-data; boundary=x' },
    });
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(checked.at(-1), { path: uploadPath, bodyBytes: 0 });
    const got = seen.at(-1);
    assert.equal(got?.url, uploadPath);
    assert.equal(got?.size, body.length);
    assert.equal(got?.sha, createHash('sha256').update(body).digest('hex'));
    assert.equal(got?.length, String(body.length), 'content-length passed through so core can refuse early');
  });

  it('never forwards a streaming request Check denied', async () => {
    allow = false;
    try {
      const before = seen.length;
      const r = await call(origin, 'POST', uploadPath, {
        body: Buffer.alloc(100_000, 1),
        headers: { 'content-type': 'multipart/form-data; boundary=x' },
      });
      assert.equal(r.status, 403);
      assert.equal(seen.length, before);
    } finally {
      allow = true;
    }
  });

  it('still buffers (and refuses past 8192 bytes) every other route', async () => {
    const before = checked.length;
    const r = await call(origin, 'POST', '/v1/disputes', {
      body: 'a'.repeat(maxRequestBytes + 1),
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(r.status, 413);
    assert.equal(checked.length, before, 'no Check for a refused body');
  });
});
