/**
 * An attacker guessing an agent's PIN floods the PIN queue so that most of their own guesses are
 * turned away busy: the agent login and the USSD agent menu count an attempt on admission, before
 * the PIN queue, and take it back when the queue turns it away (throttle.ts judgedAttempt). A
 * guess turned away must not have been judged, and one judged wrong must stay counted, so that,
 * however the guesses are mixed and raced, the agent code locks at the fifth PIN judged wrong
 * (SPEC 8), never later. Here the queue holds one check and lets none wait: every guess that
 * meets another in flight is turned away.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Res } from '../helpers/http.ts';
import { startAgentHarness, ussdAgentMenu, type AgentHarness, type TestAgent } from './harness.ts';

describe('PIN guesses raced while the PIN queue turns most of them away', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let session = 0;

  const login = (pin: string): Promise<Res> => {
    if (!a.device) throw new Error('no device bound');
    return h.post('/v1/agent/auth/login', {
      tenantId: a.tenantId,
      agentCode: a.code,
      pin,
      device: h.proof('agent-login', a, a.device),
    });
  };
  /** The USSD agent menu's float balance, which asks for the agent's PIN. */
  const menu = (pin: string): Promise<Res> => ussdAgentMenu(h, a, `1*${pin}`, `pq-${++session}`);
  const counted = async (): Promise<number> => {
    const { rows } = await h.tdb.db.query<{ fails: number }>(
      `SELECT fails FROM auth_throttle WHERE tenant_id = $1 AND scope = 'phone'`,
      [a.tenantId],
    );
    assert.equal(rows.length, 1, "the agent code's counter");
    return rows[0]?.fails ?? 0;
  };

  before(async () => {
    h = await startAgentHarness(['tq'], undefined, { argonConcurrency: 1, argonMaxQueue: 0 });
    a = await h.agent('tq', 'AG7001', '+254711770001');
    await h.bind(a);
    // Binding leaves no count; the counter row is made by the first guess.
    await h.tdb.db.query(`DELETE FROM auth_throttle WHERE tenant_id = 'tq'`);
  });
  after(async () => h?.close());

  it('the fifth guess judged wrong locks the agent code, however many were turned away busy', async () => {
    let judged = 0;
    let busy = 0;
    for (let burst = 0; burst < 30 && judged < 5; burst++) {
      h.clock.t += 1000;
      const answers = await Promise.all([
        login('0000'),
        menu('0000'),
        login('0000'),
        menu('0000'),
        login('0000'),
        menu('0000'),
      ]);
      for (const r of answers) {
        if (r.status === 401 || /^END Wrong PIN/.test(r.text)) judged++;
        else if (r.status === 429 && r.json?.code === 'RATE_LIMITED') busy++;
        else if (/^END Service unavailable/.test(r.text)) busy++;
        else
          assert.ok(
            (r.status === 429 && r.json?.code === 'LOCKED') || /^END Too many wrong PINs/.test(r.text),
            `a guess is judged, turned away busy, or refused locked: ${r.status} ${r.text}`,
          );
      }
      assert.ok(judged <= 5, `no guess is judged past the fifth wrong one (${judged})`);
      assert.equal(await counted(), judged, 'the count is the guesses judged wrong: no more, no less');
    }
    assert.equal(judged, 5);
    assert.ok(busy > 0, 'guesses were turned away busy (else this tests nothing)');
    h.clock.t += 1000;
    const r = await login(a.pin);
    assert.equal(r.status, 429, r.text);
    assert.equal(r.json.code, 'LOCKED');
    assert.match((await menu(a.pin)).text, /^END Too many wrong PINs/);
  });
});
