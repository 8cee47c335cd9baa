/**
 * The dev gateway over several edges and cores (N of each): requests spread, an instance that
 * fails is skipped, a request reaches a second core only when it never reached the first, and with
 * every edge down nothing is forwarded.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { createGateway, Instances, type Gateway } from '../../edge/gateway.ts';
import type { Decide } from '../../edge/server.ts';
import { createLogger } from '../../shared/log.ts';
import { freePort } from '../../shared/net.ts';
import { startTestEdge, type TestEdge } from '../helpers/edge.ts';
import { call, serve } from '../helpers/http.ts';

const log = createLogger('silent');

async function countingCore(name: string) {
  const seen: string[] = [];
  const s = await serve(
    createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push(`${req.method} ${req.url}`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ core: name }));
      });
    }),
  );
  return { ...s, seen };
}

describe('Instances', () => {
  it('goes round robin and puts an instance that failed last until its time is up', () => {
    let now = 0;
    const ins = new Instances(['a', 'b', 'c'], () => now);
    assert.deepEqual(ins.order(), ['a', 'b', 'c']);
    assert.deepEqual(ins.order(), ['b', 'c', 'a']);
    ins.markDown('c');
    assert.deepEqual(ins.order(), ['a', 'b', 'c']);
    assert.deepEqual(ins.order(), ['a', 'b', 'c'], 'c is still down: tried last');
    now = 10_000;
    assert.deepEqual(ins.order(), ['b', 'c', 'a']);
  });
});

describe('dev gateway over two edges and two cores', () => {
  const checks = { e1: 0, e2: 0 };
  const deciding =
    (name: 'e1' | 'e2'): Decide =>
    (_v, resolved) => {
      checks[name]++;
      return { allow: true, status: 200, set: { 'x-purpose': resolved.purpose } };
    };
  let e1: TestEdge;
  let e2: TestEdge;
  let c1: Awaited<ReturnType<typeof countingCore>>;
  let c2: Awaited<ReturnType<typeof countingCore>>;
  let gw: Gateway;
  let origin: string;
  let deadCore: string;
  let deadEdge: string;

  before(async () => {
    e1 = await startTestEdge({ log, decide: deciding('e1') });
    e2 = await startTestEdge({ log, decide: deciding('e2') });
    c1 = await countingCore('c1');
    c2 = await countingCore('c2');
    deadCore = `http://127.0.0.1:${await freePort()}`;
    deadEdge = `127.0.0.1:${await freePort()}`;
    gw = createGateway({
      log,
      authzAddress: [e1.address, deadEdge, e2.address],
      coreOrigin: [c1.origin, deadCore, c2.origin],
      checkTimeoutMs: 2000,
    });
    origin = (await serve(gw.server)).origin;
  });
  after(async () => {
    await gw.close();
    await e1.close();
    await e2.close();
    await c1.close();
    await c2.close();
  });

  it('spreads requests over both live edges and both live cores; a dead one of each is skipped', async () => {
    for (let i = 0; i < 12; i++) {
      const r = await call(origin, 'POST', '/v1/health', {
        body: JSON.stringify({ i }),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(r.status, 200, `request ${i}`);
    }
    assert.ok(checks.e1 > 0 && checks.e2 > 0, `both edges decided (${checks.e1}, ${checks.e2})`);
    assert.ok(
      c1.seen.length > 0 && c2.seen.length > 0,
      `both cores served (${c1.seen.length}, ${c2.seen.length})`,
    );
    assert.equal(c1.seen.length + c2.seen.length, 12, 'every request reached exactly one core once');
  });

  it('with every edge down answers 503 authz_unavailable and forwards nothing', async () => {
    const before = c1.seen.length + c2.seen.length;
    const lone = createGateway({
      log,
      authzAddress: [deadEdge, `127.0.0.1:${await freePort()}`],
      coreOrigin: [c1.origin, c2.origin],
      checkTimeoutMs: 500,
    });
    const o = (await serve(lone.server)).origin;
    try {
      const r = await call(o, 'POST', '/v1/health', {
        body: '{}',
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(r.status, 503);
      assert.equal((r.json as { code: string }).code, 'authz_unavailable');
      assert.equal(c1.seen.length + c2.seen.length, before);
    } finally {
      await lone.close();
    }
  });
});
