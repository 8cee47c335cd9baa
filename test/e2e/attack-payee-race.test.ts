import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { journey, type Customer, type Journey } from '../helpers/journey.ts';

/**
 * Issue 13 item 8 ("no input answers 500") for a race through the gateway: a customer adds the
 * same payee twice at once, each request with its own step-up (two taps on "add"). One adds the
 * payee, the other answers "already a payee"; neither answers 500.
 */
describe('the same payee added twice at once (through the gateway)', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let j: Journey;
  let alice: Customer;
  let bob: Customer;

  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-attack-payee-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    j = journey(gw, dataDir, tdb.db, JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')));
    alice = await j.signUp('+254733000601');
    bob = await j.signUp('+254733000602');
  });
  after(async () => {
    await stack?.stop();
    await tdb?.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('one 201, the other 200 with the same payee; never a 500', async () => {
    // Several rounds: each is one race of two requests that both passed their step-up.
    for (let round = 0; round < 4; round++) {
      const body = { phone: bob.phone };
      const challenges = await Promise.all(
        [1, 2].map(() => call(gw, 'POST', '/v1/beneficiaries', { json: body, headers: j.bearer(alice) })),
      );
      const tokens = [];
      for (const c of challenges) {
        assert.equal(c.json?.code, 'MFA_REQUIRED', c.text);
        tokens.push(await j.stepUp(alice, c.json.challenge, 'device'));
      }
      const results = await Promise.all(
        tokens.map((t) => call(gw, 'POST', '/v1/beneficiaries', { json: body, headers: j.bearer(alice, t) })),
      );
      assert.deepEqual(
        results.map((r) => r.status).sort(),
        [200, 201],
        results.map((r) => r.text).join(' | '),
      );
      assert.equal(results[0]?.json.id, results[1]?.json.id, 'both answers name the one payee');
      const { rows } = await tdb.db.query(
        'SELECT 1 FROM beneficiaries WHERE customer_id = $1 AND removed_at IS NULL',
        [alice.id],
      );
      assert.equal(rows.length, 1);
      // Remove it again (its own step-up) so the next round races a fresh add.
      const removed = await j.withStepUp(
        alice,
        'DELETE',
        `/v1/beneficiaries/${results[0]?.json.id}`,
        undefined,
        {},
        'device',
      );
      assert.equal(removed.final.status, 204, removed.final.text);
    }
  });
});
