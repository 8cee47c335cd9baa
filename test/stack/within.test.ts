/**
 * test/helpers/within.ts: a bounded wait in a test leaves no timer pending once it is over. A
 * pending timer keeps the test file's process alive, and the run waits for it: a 30 s bound
 * raced with `sleep` held edge/startup.test.ts's process 25 s after its last test.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { within } from '../helpers/within.ts';

const pendingTimers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('within (a bounded wait in tests)', () => {
  it("answers the work's value and leaves no timer pending", async () => {
    const before = pendingTimers();
    assert.equal(await within(Promise.resolve(7), 60_000), 7);
    assert.equal(pendingTimers(), before);
  });

  it("passes on the work's failure and leaves no timer pending", async () => {
    const before = pendingTimers();
    await assert.rejects(within(Promise.reject(new Error('refused')), 60_000), /refused/);
    assert.equal(pendingTimers(), before);
  });

  it('answers overdue when the work has not settled in time', async () => {
    assert.equal(await within(new Promise<never>(() => undefined), 20), 'overdue');
  });
});
