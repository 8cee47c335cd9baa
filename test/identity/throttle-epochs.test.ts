/**
 * An attempt taken back after its counter was reset (migration 1090; core/identity/throttle.ts):
 * the take-back subtracts from a count only while it is in the epoch the admission counted in.
 * Each race is played in order on the real table: attempt A admitted, the reset (a success, the
 * window running out, an OTP verification, housekeeping deleting the row), attempt B admitted,
 * then A's service failure. B's count must survive A's take-back; without epochs it did not.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import {
  type Admitted,
  admitAll,
  type Check,
  clearOtpRequirement,
  judgedAttempt,
  phonePolicy,
  settleSuccess,
  settleUnanswered,
} from '../../core/identity/throttle.ts';
import { createLogger } from '../../shared/log.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

const tenant = 'te';
const log = createLogger('silent');

describe('a take-back after a counter reset takes back nothing of a later attempt', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  const phone = (): Check[] => [{ scope: 'phone', key: randomBytes(16), policy: phonePolicy }];
  /** Admit one attempt against `checks` at `at` (it must be admitted). */
  const admitted = async (checks: Check[], at: number): Promise<Admitted> => {
    const gate = await t.db.tx((q) => admitAll(q, tenant, checks, at));
    assert.ok(gate.ok, 'admitted');
    return { tenantId: tenant, checks, at, epochs: gate.epochs };
  };
  const counts = async (checks: Check[]) => {
    const { rows } = await t.db.query<{ fails: number; day_fails: number }>(
      'SELECT fails, day_fails FROM auth_throttle WHERE tenant_id = $1 AND key = $2',
      [tenant, checks[0]?.key],
    );
    return rows[0] && { fails: rows[0].fails, day: rows[0].day_fails };
  };
  /** A's service failure, through judgedAttempt as login runs it, after `meanwhile`. */
  const failAfter = async (a: Admitted, at: number, meanwhile: () => Promise<void>) => {
    await assert.rejects(
      judgedAttempt({ db: t.db, log, now: () => at }, a, async () => {
        await meanwhile();
        throw new Error('the PIN queue is full');
      }),
      /PIN queue/,
    );
  };

  it('a success between the count and the take-back', async () => {
    const checks = phone();
    const t0 = Date.UTC(2026, 0, 5, 10);
    const a = await admitted(checks, t0);
    await failAfter(a, t0 + 3, async () => {
      const s = await admitted(checks, t0 + 1);
      await t.db.tx((q) => settleSuccess(q, s, t0 + 1));
      await admitted(checks, t0 + 2);
    });
    // B's consecutive failure stays; A's and B's day counts were one each, A's is taken back.
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 });
  });

  it('the window running out between the count and the take-back', async () => {
    const checks = phone();
    const t0 = Date.UTC(2026, 0, 6, 10);
    const a = await admitted(checks, t0);
    await admitted(checks, t0);
    const later = t0 + phonePolicy.windowMs;
    await failAfter(a, later, () => admitted(checks, later).then(() => undefined));
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 }, "the new window's attempt stays counted");
  });

  it("an OTP verification clearing the day's count between the count and the take-back", async () => {
    const checks = phone();
    const t0 = Date.UTC(2026, 0, 7, 10);
    const a = await admitted(checks, t0);
    await failAfter(a, t0 + 2, async () => {
      await t.db.tx((q) => clearOtpRequirement(q, tenant, checks[0]?.key as Buffer));
      await admitted(checks, t0 + 1);
    });
    // A's consecutive failure is taken back; the day's count is B's alone now.
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 });
  });

  it('the row deleted by housekeeping and made again between the count and the take-back', async () => {
    const checks = phone();
    const t0 = Date.UTC(2026, 0, 8, 10);
    const a = await admitted(checks, t0);
    await failAfter(a, t0 + 2, async () => {
      await t.db.query('DELETE FROM auth_throttle WHERE tenant_id = $1 AND key = $2', [
        tenant,
        checks[0]?.key,
      ]);
      await admitted(checks, t0 + 1);
    });
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 });
  });

  it("a success's own take-back after a reset leaves the later attempt's count too", async () => {
    const checks: Check[] = [{ scope: 'device', key: randomBytes(16), policy: phonePolicy }];
    const t0 = Date.UTC(2026, 0, 9, 10);
    const s = await admitted(checks, t0);
    const later = t0 + phonePolicy.windowMs;
    await admitted(checks, later);
    await t.db.tx((q) => settleSuccess(q, s, later));
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 });
  });

  it('with no reset in between, the take-back is whole', async () => {
    const checks = phone();
    const t0 = Date.UTC(2026, 0, 10, 10);
    await admitted(checks, t0);
    const a = await admitted(checks, t0);
    await failAfter(a, t0 + 1, async () => undefined);
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 });
    await t.db.tx((q) => settleUnanswered(q, { ...a, epochs: new Map() }, t0 + 2));
    assert.deepEqual(await counts(checks), { fails: 1, day: 1 }, 'no recorded epochs: nothing taken back');
  });
});
