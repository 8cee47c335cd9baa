import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';
import { ShadowFeed, shadowSetAsideMs } from '../../edge/shadow.ts';
import { maxJsonTextChars } from '../../policy/runtime/candidate-thread.ts';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';

const log = createLogger('silent');
/**
 * A stand-in for shadow-thread.ts whose answer to a batch is `onEval` and to a list of shadows
 * `onShadows` (CommonJS, evaluated; `post` posts to the feed).
 */
const fakeThread =
  (onEval: string, onShadows = '') =>
  () =>
    new Worker(
      `const { parentPort } = require('node:worker_threads');
   const post = (m) => parentPort.postMessage(m);
   post({ type: 'ready' });
   parentPort.on('message', (m) => {
     if (m.type === 'shadows') { ${onShadows} return; }
     const items = JSON.parse(m.items); ${onEval} });`,
      { eval: true },
    );
/** The thread's answer to a batch it evaluates. */
const answer = `post({ type: 'evaluating', id: m.id }); post({ type: 'evaluated', id: m.id, evaluated: items.length, divergent: 0, errors: 0 });`;
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

/** Flush the feed until `ok` (the thread answers each batch in turn). */
async function flushUntil(f: ShadowFeed, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 80 && !ok(); i++) {
    f.flush();
    await new Promise((r) => setTimeout(r, 25));
  }
}

const twoTenants: [string, string][] = [
  ['ta', 'cand-0000000000000000'],
  ['tb', 'cand-2222222222222222'],
];

/** A feed of the stand-in thread, with ta's shadow (or `o.shadows`). */
function feed(
  onEval: string,
  o: {
    onShadows?: string;
    timeoutMs?: number;
    loadTimeoutMs?: number;
    shadows?: [string, string][];
    now?: () => number;
  } = {},
): ShadowFeed {
  const f = new ShadowFeed({
    db: {} as Db,
    databaseUrl: 'postgres://unused',
    trustedKeys: [],
    log,
    timeoutMs: o.timeoutMs ?? 300,
    ...(o.loadTimeoutMs === undefined ? {} : { loadTimeoutMs: o.loadTimeoutMs }),
    ...(o.now ? { now: o.now } : {}),
    spawn: fakeThread(onEval, o.onShadows),
  });
  f.setShadows(o.shadows ?? [['ta', 'cand-0000000000000000']]);
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
        { evaluated: 3, divergent: 1, errors: 0, dropped: 0, timeouts: 0, ended: 0, active: 1, suspended: 0 },
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
    f.setShadows(twoTenants);
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
      await flushUntil(f, () => f.stats.evaluated >= 5);
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

  it('a candidate that loops while loading is ended past the load deadline, and its tenant alone set aside; it is not loaded again', async () => {
    // ta's candidate loops while it loads, whichever thread loads it; tb's loads.
    const f = feed(answer, {
      onShadows: `for (const [t, ref] of m.list) { post({ type: 'loading', t, ref }); if (t === 'ta') for (;;) {} post({ type: 'loaded', t, ref }); }`,
      timeoutMs: 200,
      loadTimeoutMs: 800,
      shadows: twoTenants,
    });
    try {
      f.offer({ ...item(0), t: 'tb' });
      f.flush();
      await until(() => f.stats.timeouts === 1);
      assert.equal(f.stats.timeouts, 1, 'the load is ended: it held the thread, with no end of its own');
      assert.equal(f.stats.dropped, 1, "tb's batch is lost with the thread, waiting behind ta's load");
      for (let i = 1; i < 4; i++) f.offer({ ...item(i), t: 'tb' });
      f.offer(item(9));
      assert.equal(f.stats.dropped, 2, "ta is set aside: its decision is dropped, tb's are queued");
      await flushUntil(f, () => f.stats.evaluated >= 3);
      assert.equal(f.stats.evaluated, 3, "tb's later decisions are evaluated on a new thread");
      assert.equal(f.stats.timeouts, 1, "ta's candidate is not loaded again, so nothing hangs again");
      assert.equal(f.stats.suspended, 1);
    } finally {
      await f.stop();
    }
  });

  it('a tenant changing its shadow back to a candidate set aside a moment ago does not get it loaded again (for shadowSetAsideMs)', async () => {
    // Each of ta's candidates loops while it loads; ta alternates between two of them.
    const [l1, l2] = ['cand-aaaaaaaaaaaaaaaa', 'cand-bbbbbbbbbbbbbbbb'];
    const tb = twoTenants[1] as [string, string];
    let clock = Date.now();
    const f = feed(answer, {
      onShadows: `for (const [t, ref] of m.list) { post({ type: 'loading', t, ref }); if (t === 'ta') for (;;) {} post({ type: 'loaded', t, ref }); }`,
      loadTimeoutMs: 300,
      shadows: [['ta', l1], tb],
      now: () => clock,
    });
    try {
      for (const [ref, timeouts] of [
        [l1, 1],
        [l2, 2],
      ] as const) {
        f.setShadows([['ta', ref], tb]);
        f.offer({ ...item(timeouts), t: 'tb' });
        await flushUntil(f, () => f.stats.timeouts === timeouts);
        assert.equal(f.stats.timeouts, timeouts, `${ref} loops while it loads and is set aside`);
      }
      f.setShadows([['ta', l1], tb]); // back to the first
      assert.equal(f.stats.suspended, 1, 'ta is still set aside');
      const evaluated = f.stats.evaluated;
      for (let i = 10; i < 13; i++) f.offer({ ...item(i), t: 'tb' });
      await flushUntil(f, () => f.stats.evaluated >= evaluated + 3);
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(f.stats.timeouts, 2, `${l1} is not loaded again: no thread ended for it`);
      assert.equal(f.stats.evaluated, evaluated + 3, "tb's decisions are evaluated");
      clock += shadowSetAsideMs + 1;
      f.setShadows([['ta', l2], tb]);
      f.offer({ ...item(20), t: 'tb' });
      await flushUntil(f, () => f.stats.timeouts === 3);
      assert.equal(f.stats.timeouts, 3, `${shadowSetAsideMs} ms later, ${l2} is tried again`);
    } finally {
      await f.stop();
    }
  });

  it("a batch that hangs while a load awaits is its own tenant's fault, not the loading one's", async () => {
    // tb's load is under way (awaiting) when ta's batch loops.
    const f = feed(
      `if (items[0].t === 'ta') { post({ type: 'evaluating', id: m.id }); for (;;) {} } ${answer}`,
      {
        onShadows: `for (const [t, ref] of m.list) if (t === 'tb') post({ type: 'loading', t, ref });`,
        loadTimeoutMs: 60_000,
        shadows: twoTenants,
      },
    );
    try {
      f.offer(item(0));
      f.flush();
      await until(() => f.stats.timeouts === 1);
      assert.deepEqual([f.stats.timeouts, f.stats.dropped, f.stats.suspended], [1, 1, 1]);
      f.offer(item(1));
      f.offer({ ...item(2), t: 'tb' });
      assert.equal(f.stats.dropped, 2, 'ta is the one set aside');
      await flushUntil(f, () => f.stats.evaluated >= 1);
      assert.equal(f.stats.evaluated, 1, "tb's decision is evaluated");
    } finally {
      await f.stop();
    }
  });

  it('a candidate that ends the thread while evaluating (its heap bound) is set aside; one that ends it while nothing runs is not', async () => {
    // ta's batch ends the thread once it says it evaluates it; tb's ends it before that.
    const f = feed(
      `if (items[0].t === 'tb' && items[0].d === 'd1') process.exit(1); post({ type: 'evaluating', id: m.id }); if (items[0].t === 'ta') process.exit(1); ${answer}`,
      { shadows: twoTenants },
    );
    try {
      f.offer(item(0));
      f.flush();
      await until(() => f.stats.suspended === 1);
      assert.deepEqual([f.stats.ended, f.stats.suspended, f.stats.dropped], [1, 1, 1]);
      f.offer(item(1));
      assert.equal(f.stats.dropped, 2, 'ta is set aside');
      f.offer({ ...item(1), t: 'tb' });
      await flushUntil(f, () => f.stats.dropped === 3);
      f.offer({ ...item(2), t: 'tb' });
      await flushUntil(f, () => f.stats.evaluated >= 1);
      assert.deepEqual(
        [f.stats.evaluated, f.stats.ended, f.stats.suspended],
        [1, 1, 1],
        "tb's thread ended before its batch began: not tb's fault, and its next decision is evaluated",
      );
    } finally {
      await f.stop();
    }
  });

  it('a batch carries at most the JSON text the thread parses; a decision past it alone is dropped', async () => {
    // The stand-in counts a batch past the bound the real thread parses as an error.
    const f = feed(
      `post({ type: 'evaluated', id: m.id, evaluated: items.length, divergent: 0, errors: m.items.length > ${maxJsonTextChars} ? 1 : 0 });`,
      { timeoutMs: 5_000 },
    );
    const big = (i: number, chars: number) => ({ ...item(i), input: { pad: 'x'.repeat(chars) } });
    try {
      for (let i = 0; i < 3; i++) f.offer(big(i, maxJsonTextChars * 0.4));
      f.offer(big(3, maxJsonTextChars));
      await flushUntil(f, () => f.stats.evaluated >= 3);
      assert.deepEqual([f.stats.evaluated, f.stats.errors, f.stats.dropped], [3, 0, 1]);
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
