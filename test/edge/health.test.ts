/** The gRPC health protocol on the edge's port (what Envoy and Kubernetes probe). */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import { addHealthService, healthService, ServingStatus } from '../../edge/health.ts';
import { buildEdge, type Edge } from '../../edge/main.ts';
import { bindEdge } from '../../edge/server.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

type HealthClient = grpc.Client & {
  Check(
    r: { service: string },
    o: grpc.CallOptions,
    cb: (e: grpc.ServiceError | null, r?: { status: number }) => void,
  ): void;
  Watch(r: { service: string }): grpc.ClientReadableStream<{ status: number }>;
};

function client(address: string): HealthClient {
  const Health = healthService();
  return new Health(address, grpc.credentials.createInsecure()) as unknown as HealthClient;
}

const check = (c: HealthClient, service: string) =>
  new Promise<number>((resolve, reject) =>
    c.Check({ service }, { deadline: Date.now() + 3000 }, (e, r) =>
      e ? reject(e) : resolve(r?.status ?? -1),
    ),
  );

describe('gRPC health protocol', () => {
  let server: grpc.Server;
  let c: HealthClient;
  let up = true;

  before(async () => {
    server = new grpc.Server();
    addHealthService(server, () => up);
    c = client(`127.0.0.1:${await bindEdge(server, 0)}`);
  });
  after(() => {
    c.close();
    server.forceShutdown();
  });

  it('answers SERVING or NOT_SERVING for the process and the Authorization service', async () => {
    assert.equal(await check(c, ''), ServingStatus.SERVING);
    assert.equal(await check(c, 'envoy.service.auth.v3.Authorization'), ServingStatus.SERVING);
    up = false;
    assert.equal(await check(c, ''), ServingStatus.NOT_SERVING);
    up = true;
  });

  it('answers NOT_FOUND for a service it does not serve', async () => {
    await assert.rejects(check(c, 'some.Other'), (e: grpc.ServiceError) => e.code === grpc.status.NOT_FOUND);
  });

  it('streams status changes to a watcher', async () => {
    const stream = c.Watch({ service: '' });
    const seen: number[] = [];
    await new Promise<void>((resolve) => {
      stream.on('data', (m: { status: number }) => {
        seen.push(m.status);
        if (seen.length === 1) up = false;
        if (seen.length === 2) resolve();
      });
    });
    stream.cancel();
    stream.on('error', () => undefined);
    up = true;
    assert.deepEqual(seen, [ServingStatus.SERVING, ServingStatus.NOT_SERVING]);
  });
});

describe('the edge process serves health', () => {
  let t: TestDb;
  let edge: Edge;
  let c: HealthClient;
  before(async () => {
    t = await freshDatabase();
    edge = await buildEdge({
      db: t.db,
      apiKeySealKey: randomBytes(32),
      challengeKeys: [randomBytes(32)],
      log: createLogger('silent'),
      edgeSecret: 's',
    });
    c = client(`127.0.0.1:${await edge.listen(0)}`);
  });
  after(async () => {
    c.close();
    await edge.stop();
    await t.drop();
  });

  it('is SERVING once warmed, with a policy loaded and fresh state, and stops serving when it drains', async () => {
    assert.equal(edge.state.isFresh(), true, 'policy and state are there before the warm-up');
    assert.equal(await check(c, ''), ServingStatus.NOT_SERVING, 'not before its warm-up');
    await edge.warm();
    assert.equal(await check(c, ''), ServingStatus.SERVING);
    assert.equal(edge.serving(), true);
    await edge.drain(1000);
    assert.equal(edge.serving(), false);
    await assert.rejects(check(c, ''), 'a drained edge takes no new calls');
  });
});
