/**
 * Logins past the PIN queue's capacity (issue 18 item 4): the answer is an immediate 429 with
 * Retry-After, never a timeout or a 503, and routes that need no PIN keep answering meanwhile.
 * With every database connection taken, a login waits for one only as long as the pool allows
 * and is then refused 503 with Retry-After, never 500.
 * The core here runs one argon2 hash at a time with one waiter, so a burst is certain to pass
 * its capacity; nothing is timed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startHarness, type Harness } from './harness.ts';

describe('sign-in past the PIN queue capacity', () => {
  let h: Harness;
  const phone = '+254711500001';

  before(async () => {
    h = await startHarness([{ id: 'ta' }], { argonConcurrency: 1, argonMaxQueue: 1 });
    await h.onboard('ta', phone, '4826');
  });
  after(async () => h?.close());

  it('answers a burst of logins 200 or 429 RATE_LIMITED with Retry-After, never 503, while other routes answer', async () => {
    const logins = Array.from({ length: 24 }, () =>
      h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' }),
    );
    const unrelated = Array.from({ length: 6 }, () => h.get('/v1/health'));
    const answers = await Promise.all(logins);
    const statuses = answers.map((r) => r.status);
    assert.deepEqual(
      answers.filter((r) => r.status !== 200 && r.status !== 429).map((r) => r.text),
      [],
      `only 200 and 429: ${statuses.join(',')}`,
    );
    assert.ok(statuses.includes(200), 'the logins within capacity succeed');
    const refused = answers.filter((r) => r.status === 429);
    assert.ok(refused.length > 0, 'a burst of 24 past a capacity of 2 is refused in part');
    for (const r of refused) {
      assert.equal(r.json.code, 'RATE_LIMITED');
      assert.equal(r.headers['retry-after'], '1');
    }
    for (const r of await Promise.all(unrelated))
      assert.equal(r.status, 200, 'a route without a PIN is not refused for the PIN queue');
  });

  it('answers 503 with Retry-After, never 500, while every database connection is taken, and signs in once one frees', async () => {
    const pool = h.tdb.db.pool;
    const held = await Promise.all(Array.from({ length: pool.options.max }, () => pool.connect()));
    let answers;
    try {
      // Each waits for a connection until the pool gives up (connectTimeoutMs), then is refused.
      answers = await Promise.all(
        Array.from({ length: 3 }, () =>
          h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' }),
        ),
      );
    } finally {
      for (const c of held) c.release();
    }
    for (const r of answers) {
      assert.equal(r.status, 503, r.text);
      assert.equal(r.json.code, 'SERVICE_UNAVAILABLE');
      assert.equal(r.headers['retry-after'], '1');
    }
    const r = await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' });
    assert.equal(r.status, 200, r.text);
  });

  it('does not count a busy refusal toward the lockout: the customer signs in afterwards', async () => {
    // More refusals than the phone's lockout threshold would allow failures.
    for (let round = 0; round < 3; round++) {
      await Promise.all(
        Array.from({ length: 12 }, () =>
          h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' }),
        ),
      );
    }
    const r = await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' });
    assert.equal(r.status, 200, r.text);
  });
});
