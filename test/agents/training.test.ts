import { randomUUID } from 'node:crypto';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { addAnnouncement } from '../../core/agents/content.ts';
import { seedTraining } from '../../core/agents/training.ts';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

const right = [
  { questionId: 'q1', choice: 1 },
  { questionId: 'q2', choice: 0 },
  { questionId: 'q3', choice: 1 },
  { questionId: 'q4', choice: 1 },
];
const wrong = right.map((a) => ({ ...a, choice: a.choice === 0 ? 1 : 0 }));

describe('agent announcements and training', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let b: TestAgent;
  let la: AgentLogin;
  let lb: AgentLogin;
  let quizId = '';
  let n = 0;
  const idem = () => ({ 'idempotency-key': `training-${++n}-${Date.now()}` });
  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG4001', '+254711000041');
    b = await h.agent('ta', 'AG4002', '+254711000042');
    await h.tdb.db.query(`UPDATE agent_outlets SET region = 'Mombasa' WHERE tenant_id = 'ta' AND id = $1`, [
      b.outletId,
    ]);
    await h.tdb.db.query(`UPDATE agents SET tier = 'basic' WHERE tenant_id = 'ta' AND id = $1`, [b.id]);
    la = await h.login(a);
    lb = await h.login(b);
    ({ quizId } = await h.tdb.db.tx((q) => seedTraining(q, 'ta', h.clock.t)));
  });
  after(() => h.close());

  it('targets announcements by tenant, region and tier; only live ones; paginates', async () => {
    const t = h.clock.t;
    await h.tdb.db.tx(async (q) => {
      await addAnnouncement(
        q,
        'ta',
        { title: 'Everyone', body: 'System upgrade on Sunday', startsAt: t - 3000 },
        t,
      );
      await addAnnouncement(
        q,
        'ta',
        { title: 'Nairobi only', body: 'New float desk', regions: ['Nairobi'], startsAt: t - 2000 },
        t,
      );
      await addAnnouncement(
        q,
        'ta',
        { title: 'Basic tier', body: 'Upgrade your tier', tiers: ['basic'], startsAt: t - 1000 },
        t,
      );
      await addAnnouncement(
        q,
        'ta',
        { title: 'Expired', body: 'old', startsAt: t - 9000, endsAt: t - 5000 },
        t,
      );
      await addAnnouncement(q, 'ta', { title: 'Future', body: 'later', startsAt: t + 60_000 }, t);
      await addAnnouncement(q, 'tb', { title: 'Other tenant', body: 'x', startsAt: t - 1000 }, t);
    });
    const ra = await h.get('/v1/announcements', bearer(la.accessToken));
    assert.equal(ra.status, 200, ra.text);
    assert.deepEqual(
      ra.json.items.map((x: { title: string }) => x.title),
      ['Nairobi only', 'Everyone'],
    );
    const rb = await h.get('/v1/announcements', bearer(lb.accessToken));
    assert.deepEqual(
      rb.json.items.map((x: { title: string }) => x.title),
      ['Basic tier', 'Everyone'],
    );
    const p1 = await h.get('/v1/announcements?limit=1', bearer(lb.accessToken));
    assert.equal(p1.json.items.length, 1);
    // Issue 21 item 2: `next_cursor`, and the old name with the same value for one more release.
    assert.equal(typeof p1.json.next_cursor, 'string');
    assert.equal(p1.json.nextCursor, p1.json.next_cursor);
    const p2 = await h.get(`/v1/announcements?limit=1&cursor=${p1.json.next_cursor}`, bearer(lb.accessToken));
    assert.deepEqual(
      p2.json.items.map((x: { title: string }) => x.title),
      ['Everyone'],
    );
    assert.equal(p2.json.next_cursor, null);
    assert.equal(p2.json.nextCursor, null);
    const [payload, mac] = String(p1.json.next_cursor).split('.');
    const edited = `${Buffer.from(JSON.stringify([0, randomUUID()])).toString('base64url')}.${mac}`;
    assert.notEqual(edited.split('.')[0], payload);
    assert.equal(
      (await h.get(`/v1/announcements?limit=1&cursor=${edited}`, bearer(lb.accessToken))).json.code,
      'CURSOR_INVALID',
      'a cursor is signed: an edited one is refused',
    );
    assert.equal(
      (await h.get('/v1/announcements?cursor=bm9wZQ', bearer(la.accessToken))).json.code,
      'CURSOR_INVALID',
    );
    assert.equal((await h.get('/v1/announcements?limit=500', bearer(la.accessToken))).status, 400);
  });

  it('lists courses with questions but never the answers', async () => {
    const r = await h.get('/v1/training/courses', bearer(la.accessToken));
    assert.equal(r.status, 200, r.text);
    const course = r.json.items[0];
    assert.equal(course.code, 'kyc-basics');
    assert.equal(course.unlocks, 'kyc.register');
    assert.equal(course.quiz.id, quizId);
    assert.equal(course.quiz.questions.length, 4);
    assert.ok(!r.text.includes('"answer"'));
    assert.deepEqual(course.quiz.progress, {
      attemptsUsed: 0,
      attemptsLeft: 3,
      bestScorePct: null,
      passed: false,
    });
  });

  it('refuses malformed submissions without counting an attempt', async () => {
    const submit = (answers: unknown) =>
      h.post(`/v1/training/quizzes/${quizId}/submit`, { answers }, bearer(lb.accessToken, idem()));
    assert.equal((await submit(right.slice(0, 3))).json.code, 'VALIDATION_FAILED', 'unanswered question');
    assert.equal(
      (await submit([...right, { questionId: 'q1', choice: 1 }])).json.code,
      'VALIDATION_FAILED',
      'answered twice',
    );
    assert.equal(
      (await submit([...right.slice(0, 3), { questionId: 'q9', choice: 0 }])).json.code,
      'VALIDATION_FAILED',
      'unknown question',
    );
    assert.equal(
      (await submit([...right.slice(0, 3), { questionId: 'q4', choice: 7 }])).json.code,
      'VALIDATION_FAILED',
      'no such option',
    );
    assert.equal((await submit('all of them')).status, 400);
    const unknown = await h.post(
      '/v1/training/quizzes/00000000-0000-7000-8000-000000000000/submit',
      { answers: right },
      bearer(lb.accessToken, idem()),
    );
    assert.equal(unknown.json.code, 'QUIZ_NOT_FOUND');
    const courses = await h.get('/v1/training/courses', bearer(lb.accessToken));
    assert.equal(courses.json.items[0].quiz.progress.attemptsUsed, 0);
  });

  it('scores, fails below the pass mark, refuses after the attempt limit; replays by key', async () => {
    const key = idem();
    const first = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: wrong },
      bearer(lb.accessToken, key),
    );
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.scorePct, 0);
    assert.equal(first.json.passed, false);
    assert.equal(first.json.attemptsLeft, 2);
    const replay = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: wrong },
      bearer(lb.accessToken, key),
    );
    assert.equal(replay.text, first.text);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    const threeOfFour = [...right.slice(0, 2), ...wrong.slice(2)];
    const second = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: threeOfFour },
      bearer(lb.accessToken, idem()),
    );
    assert.equal(second.json.scorePct, 50);
    assert.equal(second.json.passed, false, 'pass mark is 75');
    assert.equal(
      (
        await h.post(
          `/v1/training/quizzes/${quizId}/submit`,
          { answers: wrong },
          bearer(lb.accessToken, idem()),
        )
      ).json.attemptsLeft,
      0,
    );
    const late = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: right },
      bearer(lb.accessToken, idem()),
    );
    assert.equal(late.status, 409);
    assert.equal(late.json.code, 'QUIZ_ATTEMPTS_EXHAUSTED');
    const { rows } = await h.tdb.db.query(
      'SELECT count(*)::int AS n FROM agent_quiz_attempts WHERE agent_id = $1',
      [b.id],
    );
    assert.equal(rows[0]?.n, 3);
    const caps = await h.get('/v1/agent/capabilities', bearer(lb.accessToken));
    assert.deepEqual(
      caps.json.capabilities
        .find((c: { name: string }) => c.name === 'kyc.register')
        .reasons.map((r: { code: string }) => r.code),
      ['TRAINING_REQUIRED'],
    );
  });

  it('passing unlocks the capability; a passed quiz takes no more submissions', async () => {
    const before = await h.get('/v1/agent/capabilities', bearer(la.accessToken));
    assert.equal(
      before.json.capabilities.find((c: { name: string }) => c.name === 'kyc.register').allowed,
      false,
    );
    const pass = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: right },
      bearer(la.accessToken, idem()),
    );
    assert.equal(pass.status, 200, pass.text);
    assert.equal(pass.json.scorePct, 100);
    assert.equal(pass.json.passed, true);
    assert.equal(pass.json.unlocked, 'kyc.register');
    const caps = await h.get('/v1/agent/capabilities', bearer(la.accessToken));
    assert.equal(
      caps.json.capabilities.find((c: { name: string }) => c.name === 'kyc.register').allowed,
      true,
    );
    assert.deepEqual(caps.json.trainingPassed, ['kyc-basics']);
    const again = await h.post(
      `/v1/training/quizzes/${quizId}/submit`,
      { answers: right },
      bearer(la.accessToken, idem()),
    );
    assert.equal(again.json.code, 'QUIZ_ALREADY_PASSED');
    const { rows } = await h.tdb.db.query(
      `SELECT count(*)::int AS n FROM audit_log WHERE tenant_id = 'ta' AND action = 'agent.training.quiz_submit'`,
    );
    assert.equal(rows[0]?.n, 4);
  });
});
