/**
 * Through the dev gateway (the whole stack: the edge's own key caches, told of changes by NOTIFY
 * `keys_changed`): a customer's token stays good while its key is among the tenant's newest
 * `graceKeysMax` keys in grace, and is refused once a further rotation retires that key early
 * (core/keys/keys.ts), as it is at once after a rotation without grace. The rotations are an
 * operator's (bin/rotate-keys.ts does the same), made beside the running stack.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { graceKeysMax, KeyStore } from '../../core/keys/keys.ts';
import { loadOrCreateMasterKey } from '../../shared/sealing.ts';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { signUpCustomer } from '../helpers/gateway.ts';
import { call } from '../helpers/http.ts';
import { sleep } from '../helpers/listening.ts';

/** How long the edge may take to apply a rotation: a NOTIFY's round trip, with room for a loaded machine. */
const appliedWithinMs = 5_000;

describe('a token through the gateway after rotations of its tenant key', () => {
  let e: E2eStack;
  let keys: KeyStore;

  before(async () => {
    e = await startE2eStack('key-grace');
    keys = new KeyStore(e.tdb.db, await loadOrCreateMasterKey(undefined, join(e.dataDir, 'master.key')));
  });
  after(() => e?.stop());

  /** Whether the edge accepts `token` (a customer route: refused 401 only for the token itself). */
  const accepted = async (token: string): Promise<boolean> => {
    const r = await call(e.gw, 'GET', '/customers/sessions', {
      headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID() },
    });
    return r.status !== 401;
  };
  /** Whether the edge refuses `token` within `appliedWithinMs` (polled). */
  const refusedSoon = async (token: string): Promise<boolean> => {
    for (const end = Date.now() + appliedWithinMs; Date.now() < end; await sleep(25))
      if (!(await accepted(token))) return true;
    return false;
  };

  it('accepts it while its key is among the newest in grace, refuses it once a rotation retires the key', async () => {
    const first = await signUpCustomer(e.gw, e.dataDir, '+254700931001', '739146', 'kg-1');
    assert.ok(await accepted(first.accessToken));
    for (let i = 0; i < graceKeysMax; i++) await keys.rotate('demo', 3_600);
    // The edge re-read the set at each rotation's NOTIFY: the first key is the oldest still in grace.
    await sleep(300);
    assert.ok(await accepted(first.accessToken), 'its key is still in grace');

    await keys.rotate('demo', 3_600);
    assert.ok(await refusedSoon(first.accessToken), 'refused once its key is retired early');

    const second = await signUpCustomer(e.gw, e.dataDir, '+254700931002', '739146', 'kg-2');
    assert.ok(await accepted(second.accessToken), 'a token of the active key is accepted');
    await keys.rotate('demo', 0);
    assert.ok(await refusedSoon(second.accessToken), 'refused after a rotation without grace');
  });
});
