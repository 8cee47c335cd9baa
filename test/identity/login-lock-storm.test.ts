/**
 * The row locks a sign-in takes (the customer's credential row FOR SHARE at settlement, then the
 * counter rows, then its session; an agent's device row FOR SHARE until its session is open) raced
 * concurrently, repeatedly, through the HTTP API against what writes the same rows: a PIN reset
 * (OTP verification, then pin/set), a device bind, a refresh and a logout. Every request is answered
 * within its deadline with a 2xx or 4xx: a deadlock is retried into an answer, never a 500 or a hang.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Res } from '../helpers/http.ts';
import { broken, timed } from '../helpers/timed.ts';
import { setPinByOtp, startHarness, type Harness } from './harness.ts';

const rounds = 6;
/** Far past any lock wait a retried deadlock costs (deadlock_timeout 1 s, five retries). */
const deadlineMs = 15_000;
const timedBy = (name: string, p: Promise<Res | void>) => timed(name, p, deadlineMs);

describe('customer sign-ins raced against PIN resets, refreshes and logouts', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness([{ id: 'ta' }]);
  });
  after(async () => h?.close());

  it('every request is answered, none 5xx or past its deadline', async () => {
    const all: Awaited<ReturnType<typeof timed>>[] = [];
    for (let i = 0; i < rounds; i++) {
      const phone = `+2547118300${String(i).padStart(2, '0')}`;
      const a = await h.onboard('ta', phone, '4826');
      const b = (await h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' })).json;
      const login = () => h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '4826' });
      const rs = await Promise.all([
        timedBy('login', login()),
        timedBy('login', login()),
        timedBy('reset', setPinByOtp(h.post, h.sms, 'ta', phone, '7391')),
        timedBy('login', login()),
        timedBy(
          'refresh',
          h.post('/customers/auth/token/refresh', { tenantId: 'ta', refreshToken: a.refreshToken }),
        ),
        timedBy('logout', h.post('/customers/auth/logout', {}, { authorization: `Bearer ${b.accessToken}` })),
        timedBy('login-new', h.post('/customers/auth/login', { tenantId: 'ta', phone, pin: '7391' })),
      ]);
      all.push(...rs);
    }
    assert.deepEqual(broken(all), [], JSON.stringify(all.filter((r) => r.status >= 500 || r.status < 0)));
  });
});
