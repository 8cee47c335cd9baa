import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ShadowFeed } from '../../edge/shadow.ts';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';

const log = createLogger('silent');
/** A stand-in for shadow-thread.ts whose answer to a batch is `onEval` (CommonJS, evaluated). */
const fakeThread = (onEval: string) => () =>
  new Worker(
    `const { parentPort } = require('node:worker_threads');
   parentPort.postMessage({ type: 'ready' });
   parentPort.on('message', (m) => { if (m.type !== 'eval') return; const items = JSON.parse(m.items); ${onEval} });`,
    { eval: true },
  );
const item = (i: number) => ({
  t: 'ta',
  input: { n: i },
  allow: true,
  d: `d${i}`,
  p: 'customer.account.view',
  r: 'GET /v1/accounts',
});

async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
}

function feed(onEval: string): ShadowFeed {
  const f = new ShadowFeed({
    db: {} as Db,
    databaseUrl: 'postgres://unused',
    trustedKeys: [],
    log,
    timeoutMs: 300,
    spawn: fakeThread(onEval),
  });
  f.setShadows([['ta', 'cand-0000000000000000']]);
  return f;
}

describe('shadow evaluation is isolated from live decisions (issue 22 item 3)', () => {
  it('offers only the decisions of tenants with a shadow, and counts what the thread reports', async () => {
    const f = feed(
      `parentPort.postMessage({ type: 'evaluated', id: m.id, evaluated: items.length, divergent: 1, errors: 0 });`,
    );
    try {
      assert.equal(f.wants('tb'), false);
      f.offer({ ...item(0), t: 'tb' });
      for (let i = 0; i < 3; i++) f.offer(item(i));
      f.flush();
      await until(() => f.stats.evaluated === 3);
      assert.deepEqual(
        { ...f.stats },
        { evaluated: 3, divergent: 1, errors: 0, dropped: 0, timeouts: 0, active: 1, suspended: 0 },
      );
    } finally {
      await f.stop();
    }
  });

  it('a shadow that loops is terminated, and its tenant set aside until its shadow changes; offering never waits', async () => {
    const f = feed('for (;;) {}');
    try {
      f.offer(item(1));
      f.flush();
      await until(() => f.stats.timeouts === 1);
      assert.equal(f.stats.timeouts, 1);
      assert.equal(f.stats.dropped, 1, 'the batch in flight is counted, not retried');
      assert.equal(f.stats.suspended, 1);
      for (let i = 0; i < 10; i++) f.offer(item(i)); // set aside: counted, never queued
      f.flush();
      assert.equal(f.stats.dropped, 11);
      f.setShadows([['ta', 'cand-1111111111111111']]); // a new candidate is tried again
      assert.equal(f.stats.suspended, 0);
      f.offer(item(20));
      f.flush();
      await until(() => f.stats.timeouts === 2);
      assert.equal(f.stats.timeouts, 2, 'the new candidate loops too, and is set aside in turn');
    } finally {
      await f.stop();
    }
  });

  it("one tenant's looping shadow leaves another tenant's shadow evaluating (batches hold one tenant)", async () => {
    const f = feed(
      `if (items.some((x) => x.t === 'ta')) for (;;) {} parentPort.postMessage({ type: 'evaluated', id: m.id, evaluated: items.length, divergent: 0, errors: 0 });`,
    );
    f.setShadows([
      ['ta', 'cand-0000000000000000'],
      ['tb', 'cand-2222222222222222'],
    ]);
    try {
      f.offer(item(0));
      for (let i = 1; i < 4; i++) f.offer({ ...item(i), t: 'tb' });
      f.flush();
      await until(() => f.stats.timeouts === 1);
      assert.equal(f.stats.dropped, 1, "only ta's decision is lost with the looping batch");
      for (let i = 4; i < 6; i++) {
        f.offer(item(i));
        f.offer({ ...item(i), t: 'tb' });
      }
      for (let i = 0; i < 40 && f.stats.evaluated < 5; i++) {
        f.flush();
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal(f.stats.evaluated, 5, "every tb decision is evaluated after ta's timeout");
      assert.equal(f.stats.timeouts, 1, 'ta is not tried again');
      assert.equal(f.stats.dropped, 3, "ta's later decisions are counted as dropped");
    } finally {
      await f.stop();
    }
  });

  it('a shadow that throws loses its batch and the next batch starts a new thread', async () => {
    const f = feed(
      `if (items[0].d === 'd0') throw new Error('shadow bundle threw'); parentPort.postMessage({ type: 'evaluated', id: m.id, evaluated: items.length, divergent: 0, errors: 0 });`,
    );
    try {
      f.offer(item(0));
      f.flush();
      await until(() => f.stats.dropped === 1);
      f.offer(item(1));
      f.flush();
      await until(() => f.stats.evaluated === 1);
      assert.deepEqual([f.stats.dropped, f.stats.evaluated, f.stats.timeouts], [1, 1, 0]);
    } finally {
      await f.stop();
    }
  });

  it('a full queue drops, never grows', () => {
    const f = new ShadowFeed({
      db: {} as Db,
      databaseUrl: 'postgres://unused',
      trustedKeys: [],
      log,
      maxQueued: 2,
    });
    f.setShadows([['ta', 'cand-0000000000000000']]);
    for (let i = 0; i < 5; i++) f.offer(item(i));
    assert.equal(f.stats.dropped, 3);
  });
});
