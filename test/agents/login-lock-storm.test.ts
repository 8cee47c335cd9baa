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
import { startAgentHarness, type AgentHarness } from './harness.ts';

const rounds = 6;
/** Far past any lock wait a retried deadlock costs (deadlock_timeout 1 s, five retries). */
const deadlineMs = 15_000;
const timedBy = (name: string, p: Promise<Res | void>) => timed(name, p, deadlineMs);

describe('agent sign-ins raced against device binds, refreshes and logouts', () => {
  let h: AgentHarness;
  before(async () => {
    h = await startAgentHarness(['ta']);
  });
  after(async () => h?.close());

  it('every request is answered, none 5xx or past its deadline', async () => {
    const all: Awaited<ReturnType<typeof timed>>[] = [];
    for (let i = 0; i < rounds; i++) {
      const a = await h.agent(
        'ta',
        `AG83${String(i).padStart(2, '0')}`,
        `+2547118310${String(i).padStart(2, '0')}`,
      );
      const first = await h.login(a);
      h.clock.t += 1;
      const second = await h.login(a);
      const d = a.device;
      assert.ok(d);
      const login = (dt: number) =>
        h.post('/v1/agent/auth/login', {
          tenantId: 'ta',
          agentCode: a.code,
          pin: a.pin,
          device: h.proof('agent-login', a, d, h.clock.t + dt),
        });
      const rs = await Promise.all([
        timedBy('login', login(10)),
        timedBy('login', login(11)),
        timedBy(
          'bind',
          h.bind(a).then(() => undefined),
        ),
        timedBy('login', login(12)),
        timedBy(
          'refresh',
          h.post('/v1/agent/auth/refresh', {
            tenantId: 'ta',
            refreshToken: first.refreshToken,
            device: h.proof('agent-refresh', a, d, h.clock.t + 13),
          }),
        ),
        timedBy(
          'logout',
          h.post('/v1/agent/auth/logout', {}, { authorization: `Bearer ${second.accessToken}` }),
        ),
      ]);
      all.push(...rs);
    }
    assert.deepEqual(broken(all), [], JSON.stringify(all.filter((r) => r.status >= 500 || r.status < 0)));
  });
});
