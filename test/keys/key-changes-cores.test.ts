/**
 * Two cores on one database, as operators run N behind a load balancer, each with its own key
 * caches (core/keys/keys.ts): a rotation through core A reaches core B within moments by NOTIFY
 * `keys_changed` (core/keys/key-sync.ts), not when B's cached key set and signer expire (60 s,
 * counted from B's last read: this file is done well before). B then refuses a token of the key
 * retired by a rotation without grace, and signs new tokens with the new key. Text on the channel
 * that names no tenant leaves B serving, and closing a core ends its LISTEN connection.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { decodeProtectedHeader } from 'jose';
import pg from 'pg';
import { buildCore, type Core } from '../../core/app.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { ensureTenantLedger } from '../../core/ledger/catalog.ts';
import { createClient } from '../../core/oauth/clients.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createDb, type Db } from '../../shared/db/pool.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { staffViaEdge, testEdgeSecrets } from '../helpers/edge-auth.ts';
import { call, serve } from '../helpers/http.ts';
import { sleep, untilHolds } from '../helpers/listening.ts';
import { within } from '../helpers/within.ts';

const tenantId = 'kc';
/** How long B may take to apply a change made through A: a NOTIFY's round trip, with room for a loaded machine. */
const appliedWithinMs = 5_000;

interface RunningCore {
  origin: string;
  core: Core;
  db: Db;
  /** What its connections call themselves in pg_stat_activity. */
  appName: string;
  close(): Promise<void>;
}

/** `probe`'s first answer other than undefined (polled), or 'overdue' when none came within `ms`. */
async function promptly<T>(
  probe: () => Promise<T | undefined>,
  ms = appliedWithinMs,
): Promise<T | 'overdue'> {
  let stopped = false;
  const polling = (async () => {
    for (;;) {
      const v = await probe();
      if (v !== undefined || stopped) return v;
      await sleep(25);
    }
  })();
  const outcome = await within(polling, ms);
  stopped = true;
  await polling.catch(() => undefined);
  return outcome as T | 'overdue';
}

describe('a signing key changed through one core is used at once by another', () => {
  let tdb: TestDb;
  let client: { clientId: string; clientSecret: string };
  const master = randomBytes(32);
  const cores: Record<'A' | 'B', RunningCore> = {} as Record<'A' | 'B', RunningCore>;

  /** A core of its own (its pool, its key caches) on the test's database. */
  async function startCore(name: string): Promise<RunningCore> {
    const metrics = createMetrics();
    const appName = `${tdb.name}_${name}`;
    const url = new URL(tdb.url);
    url.searchParams.set('application_name', appName);
    const db = createDb({ connectionString: url.toString(), metrics, log: createLogger('silent') });
    const core = buildCore({
      db,
      log: createLogger('silent'),
      metrics,
      build: readBuildInfo(),
      keys: new KeyStore(db, master),
      edgeSecrets: testEdgeSecrets,
      checkResponses: true,
    });
    const s = await serve(core.server);
    let closed: Promise<void> | undefined;
    return {
      origin: s.origin,
      core,
      db,
      appName,
      close() {
        closed ??= s.close().then(() => db.close());
        return closed;
      },
    };
  }

  /** An access token issued by core `at` (signed with its idea of the tenant's active key), and that key's id. */
  async function tokenFrom(at: 'A' | 'B'): Promise<{ token: string; kid: string }> {
    const r = await call(cores[at].origin, 'POST', '/oauth2/token', {
      json: {
        grant_type: 'client_credentials',
        client_id: client.clientId,
        client_secret: client.clientSecret,
      },
    });
    assert.equal(r.status, 200, r.text);
    const token = r.json.access_token as string;
    return { token, kid: decodeProtectedHeader(token).kid as string };
  }

  /** The status core `at` answers a ledger read with `token`: 404 (no such account) once it accepts the token. */
  const readWith = async (at: 'A' | 'B', token: string): Promise<number> =>
    (
      await call(cores[at].origin, 'GET', `/v1/core/accounts/${randomUUID()}`, {
        headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID() },
      })
    ).status;

  /** Rotate the tenant's keys through core A, as its Admin would through the edge. */
  async function rotateThroughA(graceSeconds: number): Promise<{ active: string; grace: string | null }> {
    const r = await call(cores.A.origin, 'POST', '/v1/admin/rotate-keys', {
      json: { graceSeconds },
      headers: staffViaEdge('admin', tenantId, { 'idempotency-key': randomUUID() }),
    });
    assert.equal(r.status, 200, r.text);
    return r.json as { active: string; grace: string | null };
  }

  /** B signs with `kid` and accepts what it signed, and A accepts that too, within the bound. */
  async function bSignsWith(kid: string): Promise<string> {
    const signed = await promptly(async () => {
      const t = await tokenFrom('B');
      return t.kid === kid ? t.token : undefined;
    });
    assert.notEqual(
      signed,
      'overdue',
      `core B still signs with the previous key after ${appliedWithinMs} ms`,
    );
    assert.equal(await readWith('B', signed as string), 404);
    assert.equal(await readWith('A', signed as string), 404);
    return signed as string;
  }

  before(async () => {
    tdb = await freshDatabase();
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
      [tenantId],
    );
    await ensureTenantLedger(tdb.db, tenantId);
    client = await createClient(tdb.db, { tenantId, scopes: ['core:read', 'core:write'] });
    cores.A = await startCore('a');
    cores.B = await startCore('b');
    for (const c of Object.values(cores))
      await untilHolds(() => c.core.keyChanges.listening, appliedWithinMs, 'the key listener');
  });

  after(async () => {
    for (const c of Object.values(cores)) await c.close();
    await tdb?.drop();
  });

  it('refuses a token of the key retired through the other core, and signs with its new key', async () => {
    // B's caches hold the first key: it signed a token with it and verified that token.
    const old = await tokenFrom('B');
    assert.equal(await readWith('B', old.token), 404);
    assert.equal(await readWith('A', old.token), 404);

    const rotated = await rotateThroughA(0);
    assert.equal(rotated.grace, old.kid);
    assert.equal(await readWith('A', old.token), 401, 'A refuses the retired key at once');

    const refused = await promptly(async () => ((await readWith('B', old.token)) === 401 ? true : undefined));
    assert.equal(refused, true, `core B still accepts the retired key after ${appliedWithinMs} ms`);
    await bSignsWith(rotated.active);
  });

  it('signs with the key rotated in through the other core while the previous one verifies in its grace', async () => {
    // Signed by A, which rotated last and so holds the current key.
    const before = await tokenFrom('A');
    assert.equal(await readWith('B', before.token), 404);
    const rotated = await rotateThroughA(600);
    assert.equal(rotated.grace, before.kid);
    await bSignsWith(rotated.active);
    assert.equal(await readWith('B', before.token), 404, 'the previous key verifies during its grace');
  });

  it('keeps serving after notifications that name no tenant, and applies a later rotation at once', async () => {
    const fresh = await tokenFrom('A');
    // Any session may NOTIFY the channel with any text (a NOTIFY payload is under 8000 bytes).
    const sender = new pg.Client({ connectionString: tdb.url });
    await sender.connect();
    const garbage = ['', ' ', 'KC', 'kc;DROP', '{"tenantId":"kc"}', 'é'.repeat(100), 'x'.repeat(7_900)];
    for (let i = 0; i < 100; i++)
      for (const payload of garbage) await sender.query(`SELECT pg_notify('keys_changed', $1)`, [payload]);
    await sender.end();
    await sleep(200);

    assert.ok(cores.B.core.keyChanges.listening, 'still listening');
    assert.equal(await readWith('B', fresh.token), 404, 'B verifies as before');
    const again = await tokenFrom('B');
    assert.equal(await readWith('B', again.token), 404, 'B signs tokens it accepts');

    const rotated = await rotateThroughA(0);
    const refused = await promptly(async () =>
      (await readWith('B', fresh.token)) === 401 ? true : undefined,
    );
    assert.equal(refused, true, 'B applied the rotation announced after the garbage');
    await bSignsWith(rotated.active);
  });

  it("closing a core's server ends its LISTEN connections", async () => {
    const b = cores.B;
    const sessions = async () =>
      (
        await tdb.db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
          [tdb.name, b.appName],
        )
      ).rows[0]?.n ?? 0;
    assert.ok(b.core.keyChanges.listening);
    assert.ok((await sessions()) > 0);
    await b.close();
    // The pool is closed: what remains would be a listener left open (an open handle).
    const gone = await promptly(async () => ((await sessions()) === 0 ? true : undefined));
    assert.equal(gone, true, `core B left ${await sessions()} connection(s) open`);
    assert.equal(b.core.keyChanges.listening, false);
  });
});
