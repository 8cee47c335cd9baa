/**
 * Agent training (issue 9 item 10): courses, each with one quiz; a submission is scored
 * against the stored answers, passes at the quiz's pass mark, and counts against its attempt
 * limit. Passing a course that `unlocks` a capability makes it allowed (capabilities.ts).
 * Guarantees: attempts are numbered under the agent's row lock (two concurrent submissions
 * cannot both be the last allowed one; UNIQUE (quiz, agent, attempt_no) backs it); a passed
 * quiz takes no more submissions; answers never leave core; every submission is audited and
 * idempotent (Idempotency-Key).
 */
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader, scopeOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import { agentCaller, auditAgent, keyOwnerOf, type AgentDeps } from './context.ts';
import { agentReader } from './profile.ts';
import { declared } from '../http/declared.ts';

const tags = ['agent-training'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };

const StoredQuestion = Type.Object({
  id: Type.String({ minLength: 1 }),
  prompt: Type.String(),
  options: Type.Array(Type.String(), { minItems: 2 }),
  answer: Type.Integer({ minimum: 0 }),
});
const StoredQuestions = TypeCompiler.Compile(Type.Array(StoredQuestion, { minItems: 1 }));
export type Question = Static<typeof StoredQuestion>;

const QuizId = Type.Object({ quiz_id: Type.String({ format: 'uuid' }) });
const SubmitBody = Type.Object(
  {
    answers: Type.Array(
      Type.Object(
        {
          questionId: Type.String({ minLength: 1, maxLength: 64 }),
          choice: Type.Integer({ minimum: 0, maximum: 20 }),
        },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: 100 },
    ),
  },
  { additionalProperties: false },
);
const Progress = Type.Object({
  attemptsUsed: Type.Integer(),
  attemptsLeft: Type.Integer(),
  bestScorePct: Type.Union([Type.Integer(), Type.Null()]),
  passed: Type.Boolean(),
});
const Course = Type.Object({
  id: Type.String(),
  code: Type.String(),
  title: Type.String(),
  summary: Type.String(),
  unlocks: Type.Union([Type.String(), Type.Null()]),
  quiz: Type.Union([
    Type.Null(),
    Type.Object({
      id: Type.String(),
      passMarkPct: Type.Integer(),
      maxAttempts: Type.Integer(),
      questions: Type.Array(
        Type.Object({ id: Type.String(), prompt: Type.String(), options: Type.Array(Type.String()) }),
      ),
      progress: Progress,
    }),
  ]),
});
const Result = Type.Object({
  quizId: Type.String(),
  attemptNo: Type.Integer(),
  scorePct: Type.Integer(),
  passMarkPct: Type.Integer(),
  passed: Type.Boolean(),
  attemptsLeft: Type.Integer(),
  unlocked: Type.Union([Type.String(), Type.Null()]),
  results: Type.Array(Type.Object({ questionId: Type.String(), correct: Type.Boolean() })),
});

interface QuizRow {
  id: string;
  course_id: string;
  pass_mark_pct: number;
  max_attempts: number;
  questions: unknown;
  unlocks: string | null;
}

function questionsOf(raw: unknown): Question[] {
  if (!StoredQuestions.Check(raw)) throw new Error('stored quiz questions have an unexpected shape');
  return raw;
}

/** Score answers; every question must be answered exactly once with an existing option. */
export function score(
  questions: Question[],
  answers: { questionId: string; choice: number }[],
): { scorePct: number; results: { questionId: string; correct: boolean }[] } {
  const given = new Map<string, number>();
  for (const a of answers) {
    if (given.has(a.questionId))
      throw new AppError('VALIDATION_FAILED', `question ${a.questionId} is answered twice`);
    given.set(a.questionId, a.choice);
  }
  for (const id of given.keys())
    if (!questions.some((q) => q.id === id))
      throw new AppError('VALIDATION_FAILED', `question ${id} is not part of this quiz`);
  const results = questions.map((q) => {
    const choice = given.get(q.id);
    if (choice === undefined) throw new AppError('VALIDATION_FAILED', `question ${q.id} is not answered`);
    if (choice >= q.options.length)
      throw new AppError('VALIDATION_FAILED', `question ${q.id} has no option ${choice}`);
    return { questionId: q.id, correct: choice === q.answer };
  });
  const right = results.filter((r) => r.correct).length;
  return { scorePct: Math.floor((right * 100) / questions.length), results };
}

async function progressOf(
  q: Queryable,
  tenantId: string,
  agentId: string,
): Promise<Map<string, { used: number; best: number; passed: boolean }>> {
  const { rows } = await q.query<{ quiz_id: string; used: number; best: number; passed: boolean }>(
    `SELECT quiz_id, count(*)::int AS used, max(score_pct)::int AS best, bool_or(passed) AS passed FROM agent_quiz_attempts
      WHERE tenant_id = $1 AND agent_id = $2 GROUP BY quiz_id`,
    [tenantId, agentId],
  );
  return new Map(rows.map((r) => [r.quiz_id, { used: r.used, best: r.best, passed: r.passed }]));
}

async function submit(
  deps: AgentDeps,
  q: TxClient,
  c: { tenantId: string; agentId: string },
  quizId: string,
  answers: Static<typeof SubmitBody>['answers'],
  requestId: string,
) {
  const t = deps.now();
  // The agent row lock serialises this agent's submissions (attempt numbering).
  // NO KEY: serialises this agent's attempts without blocking foreign-key checks on the agent row.
  await q.query('SELECT 1 FROM agents WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE', [
    c.tenantId,
    c.agentId,
  ]);
  const { rows } = await q.query<QuizRow>(
    `SELECT z.id, z.course_id, z.pass_mark_pct, z.max_attempts, z.questions, c.unlocks FROM agent_quizzes z
       JOIN agent_courses c ON c.tenant_id = z.tenant_id AND c.id = z.course_id WHERE z.tenant_id = $1 AND z.id = $2`,
    [c.tenantId, quizId],
  );
  const quiz = rows[0];
  if (!quiz) throw new AppError('QUIZ_NOT_FOUND', `quiz ${quizId} not found`);
  const p = (await progressOf(q, c.tenantId, c.agentId)).get(quiz.id) ?? { used: 0, best: 0, passed: false };
  if (p.passed) throw new AppError('QUIZ_ALREADY_PASSED', 'this quiz is already passed');
  if (p.used >= quiz.max_attempts)
    throw new AppError(
      'QUIZ_ATTEMPTS_EXHAUSTED',
      `all ${quiz.max_attempts} attempts are used; ask your supervisor to reset them`,
    );
  const s = score(questionsOf(quiz.questions), answers);
  const passed = s.scorePct >= quiz.pass_mark_pct;
  const attemptNo = p.used + 1;
  await q.query(
    `INSERT INTO agent_quiz_attempts (tenant_id, id, quiz_id, agent_id, attempt_no, score_pct, passed, answers, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_timestamp($9 / 1000.0))`,
    [c.tenantId, uuidv7(t), quiz.id, c.agentId, attemptNo, s.scorePct, passed, JSON.stringify(answers), t],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: { type: 'agent', id: c.agentId },
      action: 'agent.training.quiz_submit',
      target: { type: 'quiz', id: quiz.id },
      attrs: { attempt_no: attemptNo, score_pct: s.scorePct, passed },
      requestId,
    },
    t,
  );
  return {
    quizId: quiz.id,
    attemptNo,
    scorePct: s.scorePct,
    passMarkPct: quiz.pass_mark_pct,
    passed,
    attemptsLeft: passed ? 0 : quiz.max_attempts - attemptNo,
    unlocked: passed ? quiz.unlocks : null,
    results: s.results,
  };
}

export function trainingRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('GET', '/v1/training/courses'),
      operationId: 'trainingCourses',
      tags,
      headers: [auth],
      summary: "The tenant's courses with their quiz (questions without answers) and the caller's progress",
      responses: { 200: { description: 'Courses', schema: Type.Object({ items: Type.Array(Course) }) } },
      handler: async (ctx) => {
        const { tenantId, agent } = await agentReader(deps, ctx);
        const { rows } = await deps.db.query<{
          id: string;
          code: string;
          title: string;
          summary: string;
          unlocks: string | null;
          quiz_id: string | null;
          pass_mark_pct: number | null;
          max_attempts: number | null;
          questions: unknown;
        }>(
          `SELECT c.id, c.code, c.title, c.summary, c.unlocks, z.id AS quiz_id, z.pass_mark_pct, z.max_attempts, z.questions
             FROM agent_courses c LEFT JOIN agent_quizzes z ON z.tenant_id = c.tenant_id AND z.course_id = c.id
            WHERE c.tenant_id = $1 ORDER BY c.position, c.code`,
          [tenantId],
        );
        const progress = await progressOf(deps.db, tenantId, agent.id);
        const items = rows.map((r) => {
          const p = r.quiz_id ? progress.get(r.quiz_id) : undefined;
          const max = r.max_attempts ?? 0;
          const quiz =
            r.quiz_id === null
              ? null
              : {
                  id: r.quiz_id,
                  passMarkPct: r.pass_mark_pct ?? 100,
                  maxAttempts: max,
                  questions: questionsOf(r.questions).map((x) => ({
                    id: x.id,
                    prompt: x.prompt,
                    options: x.options,
                  })),
                  progress: {
                    attemptsUsed: p?.used ?? 0,
                    attemptsLeft: p?.passed ? 0 : Math.max(0, max - (p?.used ?? 0)),
                    bestScorePct: p?.best ?? null,
                    passed: p?.passed ?? false,
                  },
                };
          return { id: r.id, code: r.code, title: r.title, summary: r.summary, unlocks: r.unlocks, quiz };
        });
        return { status: 200, body: { items } };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/training/quizzes/{quiz_id}/submit'),
      operationId: 'trainingQuizSubmit',
      tags,
      headers: [auth, idempotencyHeader],
      params: QuizId,
      body: SubmitBody,
      summary:
        'Submit answers: scored against the pass mark; counts one attempt (409 QUIZ_ATTEMPTS_EXHAUSTED past the limit, QUIZ_ALREADY_PASSED after a pass)',
      responses: { 200: { description: 'Scored attempt', schema: Result } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        const stored = await withIdempotency(deps, scopeOf(ctx, keyOwnerOf(c), ctx.body), async (q) => ({
          status: 200,
          body: await submit(deps, q, c, ctx.params.quiz_id, ctx.body.answers, ctx.requestId),
        }));
        return toReply(stored);
      },
    }),
  ];
}

/** Demo/test content: a KYC course whose quiz unlocks `kyc.register` (idempotent by code). */
export async function seedTraining(
  q: Queryable,
  tenantId: string,
  now: number,
): Promise<{ courseId: string; quizId: string }> {
  const courseId = uuidv7(now);
  await q.query(
    `INSERT INTO agent_courses (tenant_id, id, code, title, summary, unlocks, position, created_at)
     VALUES ($1, $2, 'kyc-basics', 'KYC basics', 'Checking identity documents, age and the watch-list before registering a customer.', 'kyc.register', 1, to_timestamp($3 / 1000.0))
     ON CONFLICT (tenant_id, code) DO NOTHING`,
    [tenantId, courseId, now],
  );
  const { rows } = await q.query<{ id: string }>(
    `SELECT id FROM agent_courses WHERE tenant_id = $1 AND code = 'kyc-basics'`,
    [tenantId],
  );
  const course = rows[0]?.id ?? courseId;
  const questions: Question[] = [
    { id: 'q1', prompt: 'The minimum age to register a customer is', options: ['16', '18', '21'], answer: 1 },
    {
      id: 'q2',
      prompt: 'Before level 1 KYC the customer must have',
      options: ['a verified phone', 'a bank account', 'a passport'],
      answer: 0,
    },
    {
      id: 'q3',
      prompt: 'A watch-list match means you',
      options: ['register anyway', 'stop and escalate', 'ask for a second ID'],
      answer: 1,
    },
    {
      id: 'q4',
      prompt: 'A customer asks you for their one-time code. You',
      options: ['read it to them', 'never ask for or read codes', 'write it down'],
      answer: 1,
    },
  ];
  await q.query(
    `INSERT INTO agent_quizzes (tenant_id, id, course_id, pass_mark_pct, max_attempts, questions, created_at)
     VALUES ($1, $2, $3, 75, 3, $4, to_timestamp($5 / 1000.0)) ON CONFLICT (tenant_id, course_id) DO NOTHING`,
    [tenantId, uuidv7(now), course, JSON.stringify(questions), now],
  );
  const quiz = await q.query<{ id: string }>(
    'SELECT id FROM agent_quizzes WHERE tenant_id = $1 AND course_id = $2',
    [tenantId, course],
  );
  return { courseId: course, quizId: quiz.rows[0]?.id ?? '' };
}
