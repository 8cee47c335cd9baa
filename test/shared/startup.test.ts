/**
 * Start-up steps (shared/startup.ts): a step is tried again until it succeeds, each attempt within
 * its deadline; a failure that is not to be waited out ends it at once; what is awaited, with its
 * last error, is said at warn once it lasts, and the end of the wait at info. Which database
 * errors are waited out (shared/db/pool.ts databaseUnreachable): not answering, yes; refusing, no.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { databaseUnreachable } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { OverdueError } from '../../shared/deadline.ts';
import { reportNotReady, StartupSteps } from '../../shared/startup.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A logger at info whose lines are parsed into `lines`. */
function capture(): { log: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { log: createLogger('info', sink), lines };
}

const pgError = (code: string, message = 'refused') => Object.assign(new Error(message), { code });

describe('start-up steps', () => {
  it('tries a step again until it succeeds, and says meanwhile what it waits for and why', async () => {
    const steps = new StartupSteps(createLogger('silent'), { pauseMs: 200 });
    let calls = 0;
    const run = steps.run('the thing', async () => {
      calls++;
      if (calls < 3) throw new Error(`refused ${calls}`);
      return 'done';
    });
    // Within the pause after the first attempt (timers fire in order: this one first).
    await sleep(50);
    assert.deepEqual(steps.waiting(), [{ what: 'the thing', lastError: 'refused 1' }]);
    assert.equal(await run, 'done');
    assert.equal(calls, 3);
    assert.deepEqual(steps.waiting(), []);
  });

  it('gives up an attempt past its deadline and starts another', async () => {
    const steps = new StartupSteps(createLogger('silent'), { pauseMs: 10, deadlineMs: 50 });
    let calls = 0;
    const value = await steps.run('a silent peer', () =>
      ++calls === 1 ? new Promise<string>(() => undefined) : Promise.resolve('answered'),
    );
    assert.equal(value, 'answered');
    assert.equal(calls, 2);
  });

  it('throws at once what is not to be waited out, and stops trying once stopped', async () => {
    const steps = new StartupSteps(createLogger('silent'), { pauseMs: 10 });
    let calls = 0;
    await assert.rejects(
      steps.run(
        'the database',
        async () => {
          calls++;
          throw pgError('28P01', 'password authentication failed for user "edge"');
        },
        databaseUnreachable,
      ),
      /password authentication failed/,
    );
    assert.equal(calls, 1);
    const forever = steps.run('never', async () => {
      throw new Error('no');
    });
    steps.stop();
    await assert.rejects(forever, /stopped while waiting for never/);
  });

  it('says at warn what is awaited once it lasts, and at info when it is ready', async () => {
    const { log, lines } = capture();
    let waiting = [{ what: 'database listener', lastError: 'timeout expired' }];
    const stop = reportNotReady(log, 'edge', () => waiting, { quietMs: 100, repeatMs: 10_000 });
    try {
      await sleep(50);
      assert.equal(lines.length, 0, 'quiet at first: a normal start takes a moment');
      await sleep(250);
      assert.equal(lines.length, 1, 'said once, not at every check');
      assert.equal(lines[0]?.level, 40);
      assert.equal(lines[0]?.msg, 'edge not ready: waiting for database listener');
      assert.deepEqual(lines[0]?.waiting, waiting);
      waiting = [];
      await sleep(250);
      assert.equal(lines.length, 2);
      assert.equal(lines[1]?.level, 30);
      assert.equal(lines[1]?.msg, 'edge is ready');
    } finally {
      stop();
    }
  });
});

describe('databaseUnreachable', () => {
  it('waits out a database that does not answer', () => {
    for (const err of [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
      new Error('timeout expired'),
      new Error('Connection terminated unexpectedly'),
      new Error('Connection terminated due to connection timeout'),
      new Error('timeout exceeded when trying to connect'),
      new OverdueError('no answer within 10000 ms'),
      pgError('57P03', 'the database system is starting up'),
      pgError('53300', 'sorry, too many clients already'),
      pgError('08006'),
    ])
      assert.equal(databaseUnreachable(err), true, err.message);
  });

  it('does not wait out a database that answers with a refusal, or a fault of ours', () => {
    for (const err of [
      pgError('28P01', 'password authentication failed'),
      pgError('3D000', 'database "x" does not exist'),
      pgError('42P01', 'relation "x" does not exist'),
      new TypeError('x is not a function'),
      undefined,
    ])
      assert.equal(databaseUnreachable(err), false, String(err));
  });
});
