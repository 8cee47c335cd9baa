/**
 * `npm start`'s stack (bin/stack.ts) warms core's pool as the edge warms its own (edge/warm.ts):
 * connects that time out on a loaded machine are tried again. Core's warm-up was one attempt, and
 * one connect over its 2 s deadline ended the start ("warming up failed"), seen in CI at load 12.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack } from '../../bin/stack.ts';
import { connectTimeoutMs } from '../../shared/db/pool.ts';
import { freshDatabase } from '../helpers/db.ts';
import { Relay, throughRelay } from '../helpers/pg-relay.ts';

it('starts when the connections warm-up opens time out at first, and answers through the gateway', async () => {
  const tdb = await freshDatabase({ migrate: false });
  const relay = new Relay();
  const dataDir = await mkdtemp(join(tmpdir(), 'warm-retry-'));
  try {
    const url = await throughRelay(relay, tdb.url);
    // The first two connections (migrations, seed) as they come; the next twenty, which warm-up
    // opens (core's pool, the edge's, their listeners), held past the connect deadline.
    const held = Array.from({ length: 20 }, () => ({ delayMs: connectTimeoutMs + 500 }));
    relay.plan.push({}, {}, ...held);
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: url,
      LOG_LEVEL: 'silent',
    });
    const stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    try {
      assert.equal(relay.plan.length, 0, 'every held connection was asked for: warm-up met the timeouts');
      const res = await fetch(`http://127.0.0.1:${stack.ports.gateway}/v1/health`);
      assert.equal(res.status, 200);
    } finally {
      await stack.stop();
    }
  } finally {
    await relay.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  }
});
