/**
 * An edge's state (edge/state/store.ts) told of changes by NOTIFY, for tests of what a stream of
 * notifications costs it: its reads of sessions are counted, and a client of the test sends.
 */
import pg from 'pg';
import { EdgeState } from '../../edge/state/store.ts';
import type { ApiKeySecrets } from '../../shared/api-key-secrets.ts';
import type { Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import type { TokenVerifier } from '../../shared/token-keys.ts';
import type { TestDb } from './db.ts';
import { sleep, untilHolds } from './listening.ts';

export interface NotifiedEdge {
  state: EdgeState;
  /** A connection of the test's own, to NOTIFY from. */
  sender: pg.Client;
  /** The state's reads of sessions so far (its own pool, not the verifier's). */
  sessionReads(): number;
  stop(): Promise<void>;
}

/** An EdgeState on `tdb`, started and listening, and a sender. */
export async function notifiedEdge(
  tdb: TestDb,
  verifier: TokenVerifier,
  apiKeySecrets: ApiKeySecrets,
): Promise<NotifiedEdge> {
  let sessionReads = 0;
  const edgeDb: Db = {
    ...tdb.db,
    query: ((text: string, params?: unknown[]) => {
      if (text.includes('FROM sessions')) sessionReads++;
      return tdb.db.query(text, params);
    }) as Db['query'],
  };
  const state = new EdgeState(edgeDb, verifier, apiKeySecrets, createLogger('silent'));
  await state.start();
  await untilHolds(() => state.isFresh(), 5_000, 'the edge listener');
  const sender = new pg.Client({ connectionString: tdb.url });
  await sender.connect();
  return {
    state,
    sender,
    sessionReads: () => sessionReads,
    async stop() {
      await sender.end();
      await state.stop();
    },
  };
}

/**
 * Ten sessions of `tenantId` first looked up while `send(i)` runs again and again (i = 0, 1, ...),
 * each looked up a hundred times: the reads of sessions they made (unknown ids: a miss is cached
 * like a row), and how many times `send` ran.
 */
export async function sessionReadsWhile(
  edge: NotifiedEdge,
  tenantId: string,
  send: (i: number) => Promise<unknown>,
): Promise<{ reads: number; sent: number }> {
  const ids = Array.from({ length: 10 }, (_, i) => `00000000-0000-7000-8000-00000000001${i}`);
  let sending = true;
  let sent = 0;
  const stream = (async () => {
    for (; sending; sent++) await send(sent);
  })();
  await sleep(100);
  const before = edge.sessionReads();
  for (let round = 0; round < 100; round++) {
    for (const id of ids) await edge.state.session(tenantId, id);
    await sleep(1);
  }
  sending = false;
  await stream;
  return { reads: edge.sessionReads() - before, sent };
}
