import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { migrate, migrationsDir } from '../../core/db/migrate.ts';
import { AppError } from '../../shared/errors.ts';
import {
  principalOf,
  requestHash,
  withIdempotency,
  type IdemScope,
} from '../../core/idempotency/idempotency.ts';
import { isSecretField, originalBody, storedForm } from '../../core/idempotency/secrets.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

/**
 * Issue 13 items 3 and 7 at the frame: a key belongs to (tenant, principal); a response that
 * carries a secret is sealed at rest and stored redacted; records from before the change are
 * legacy (never replayed, never run again).
 */
describe('idempotency records: scoped to the caller, secrets sealed', () => {
  let t: TestDb;
  let store: { db: TestDb['db']; keys: KeyStore };
  before(async () => {
    t = await freshDatabase();
    await t.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('ta', 'ta', 'KE', 'KES')`,
    );
    store = { db: t.db, keys: new KeyStore(t.db, randomBytes(32)) };
  });
  after(() => t.drop());

  const scope = (principal: string, key: string, body: unknown = { amount: '10.00' }): IdemScope => ({
    tenantId: 'ta',
    principal,
    key,
    method: 'POST',
    path: '/v1/transfers/confirm',
    requestHash: requestHash('POST', '/v1/transfers/confirm', body),
  });
  const alice = principalOf('customer', 'a1b2c3');
  const mallory = principalOf('customer', 'm9m9m9');

  it("another principal's key of the same value is a different key: it runs, sees nothing of the first, and cannot poison it", async () => {
    let runs = 0;
    const first = await withIdempotency(store, scope(alice, 'confirm-key-0001'), async () => ({
      status: 200,
      body: { payee: 'bob', amount: '10.00', run: ++runs },
    }));
    assert.equal(first.replayed, false);
    // M replays A's key with A's very request: M's own request runs, A's answer is not shown.
    const stolen = await withIdempotency(store, scope(mallory, 'confirm-key-0001'), async () => {
      runs++;
      throw new AppError('TRANSFER_NOT_FOUND', 'no such transfer');
    });
    assert.equal(stolen.replayed, false);
    assert.equal(stolen.status, 404);
    assert.doesNotMatch(stolen.body, /bob/);
    // A's retry still gets A's first answer.
    const again = await withIdempotency(store, scope(alice, 'confirm-key-0001'), async () => ({
      status: 200,
      body: { run: ++runs },
    }));
    assert.equal(again.replayed, true);
    assert.equal(JSON.parse(again.body).payee, 'bob');
    // M uses a key A has not used yet, with another body: A's later use of that key is unaffected (no 409).
    await withIdempotency(store, scope(mallory, 'confirm-key-0002', { x: 1 }), async () => ({
      status: 200,
      body: { mine: true },
    }));
    const later = await withIdempotency(store, scope(alice, 'confirm-key-0002'), async () => ({
      status: 200,
      body: { alices: true },
    }));
    assert.equal(later.replayed, false);
    assert.deepEqual(JSON.parse(later.body), { alices: true });
    assert.equal(runs, 2);
    const { rows } = await t.db.query<{ principal: string }>(
      `SELECT principal FROM idempotency_keys WHERE tenant_id = 'ta' AND key = 'confirm-key-0001' ORDER BY principal`,
    );
    assert.deepEqual(
      rows.map((r) => r.principal),
      [alice, mallory],
    );
  });

  it('refuses a write without a principal instead of sharing one record among anonymous callers', () => {
    assert.throws(
      () => principalOf('staff', undefined),
      (e: unknown) => e instanceof AppError && e.code === 'UNAUTHORIZED',
    );
    assert.throws(
      () => principalOf('staff', ''),
      (e: unknown) => e instanceof AppError && e.code === 'UNAUTHORIZED',
    );
  });

  it("stores a secret-bearing response sealed and redacted; the same caller's replay returns the original", async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const staff = principalOf('staff', 'service-token:1');
    const s = scope(staff, 'webhook-key-0001', { url: 'https://x.example/h' });
    const first = await withIdempotency(store, s, async () => ({
      status: 201,
      body: { id: 'w1', nested: { client_secret: 'cs-1' }, list: [{ apiKeySecret: 'ak-1' }], secret },
    }));
    assert.equal(JSON.parse(first.body).secret, secret, 'the first answer shows the secret once');
    const { rows } = await t.db.query<{ response_body: string; response_sealed: Buffer | null }>(
      `SELECT response_body, response_sealed FROM idempotency_keys WHERE tenant_id = 'ta' AND key = 'webhook-key-0001'`,
    );
    const row = rows[0]!;
    assert.deepEqual(JSON.parse(row.response_body), {
      id: 'w1',
      nested: { client_secret: '[redacted]' },
      list: [{ apiKeySecret: '[redacted]' }],
      secret: '[redacted]',
    });
    assert.ok(
      row.response_sealed &&
        !row.response_sealed.includes(Buffer.from(secret)) &&
        !row.response_sealed.includes(Buffer.from('whsec_')),
    );
    const replay = await withIdempotency(store, s, async () => assert.fail('a replay does not run'));
    assert.equal(replay.replayed, true);
    assert.equal(replay.body, first.body);
    // Another caller with the same key value gets nothing of it.
    const other = await withIdempotency(
      store,
      scope(principalOf('staff', 'service-token:2'), 'webhook-key-0001', { url: 'https://x.example/h' }),
      async () => ({ status: 201, body: { id: 'w2' } }),
    );
    assert.doesNotMatch(other.body, /whsec_/);
  });

  it('binds a sealed response to its record and never stores a secret without the master key', () => {
    const keys = new KeyStore(t.db, randomBytes(32));
    const id = { tenantId: 'ta', principal: 'staff:s1', key: 'k-00000001' };
    const form = storedForm(keys, id, JSON.stringify({ token: 't0k3n', status: 'ok' }));
    assert.equal(form.body, JSON.stringify({ token: '[redacted]', status: 'ok' }));
    assert.equal(
      originalBody(keys, id, form.body, form.sealed),
      JSON.stringify({ token: 't0k3n', status: 'ok' }),
    );
    assert.throws(
      () => originalBody(keys, { ...id, principal: 'staff:s2' }, form.body, form.sealed),
      "copied to another principal's record it does not open",
    );
    assert.throws(() => storedForm(undefined, id, JSON.stringify({ secret: 'x' })), /master key/);
    assert.deepEqual(
      storedForm(
        undefined,
        id,
        JSON.stringify({ code: 'IDEMPOTENCY_CONFLICT', previous_secret_valid_until: null }),
      ).sealed,
      null,
      'error codes and timestamps are not secrets',
    );
    for (const name of [
      'secret',
      'client_secret',
      'clientSecret',
      'webhook-secret',
      'SCIM_SECRET',
      'apiKeySecret',
      'privateKey',
      'access_token',
      'refreshToken',
      'password',
    ])
      assert.ok(isSecretField(name), name);
    for (const name of ['code', 'secret_valid_until', 'id', 'status', 'key'])
      assert.ok(!isSecretField(name), name);
  });
});

describe('migration 0710: records from before caller scoping', () => {
  let t: TestDb;
  let dir: string;
  before(async () => {
    t = await freshDatabase({ migrate: false });
    dir = await mkdtemp(join(tmpdir(), 'migrations-before-0710-'));
    for (const name of await readdir(migrationsDir))
      if (name < '0710') await cp(join(migrationsDir, name), join(dir, name));
    await migrate(t.db.pool, `${dir}/`);
    await t.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('ta', 'ta', 'KE', 'KES')`,
    );
    const secretBody = JSON.stringify({
      id: 'w1',
      url: 'https://x.example/h',
      secret: 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0',
      previous_secret_valid_until: null,
    });
    await t.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, method, path, request_hash, response_status, response_body) VALUES
      ('ta', 'old-webhook-key', 'POST', '/v1/webhooks', $1, 201, $2), ('ta', 'old-confirm-key', 'POST', '/v1/transfers/confirm', $3, 200, '{"payee":"bob"}')`,
      [
        requestHash('POST', '/v1/webhooks', {}),
        secretBody,
        requestHash('POST', '/v1/transfers/confirm', { transferId: 't1' }),
      ],
    );
    await migrate(t.db.pool);
  });
  after(async () => {
    await t.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it('marks existing records legacy and redacts the secrets they stored in clear', async () => {
    const { rows } = await t.db.query<{ key: string; principal: string; response_body: string }>(
      `SELECT key, principal, response_body FROM idempotency_keys ORDER BY key`,
    );
    assert.deepEqual(
      rows.map((r) => [r.key, r.principal]),
      [
        ['old-confirm-key', 'legacy'],
        ['old-webhook-key', 'legacy'],
      ],
    );
    const hook = JSON.parse(rows[1]!.response_body);
    assert.equal(hook.secret, '[redacted]');
    assert.equal(hook.url, 'https://x.example/h');
    assert.equal(hook.previous_secret_valid_until, null);
    assert.deepEqual(JSON.parse(rows[0]!.response_body), { payee: 'bob' });
  });

  it('never replays a legacy record to anyone and never runs its key again (409) while it is kept', async () => {
    const store = { db: t.db, keys: new KeyStore(t.db, randomBytes(32)) };
    const s: IdemScope = {
      tenantId: 'ta',
      principal: principalOf('customer', 'c1'),
      key: 'old-confirm-key',
      method: 'POST',
      path: '/v1/transfers/confirm',
      requestHash: requestHash('POST', '/v1/transfers/confirm', { transferId: 't1' }),
    };
    await assert.rejects(
      withIdempotency(store, s, async () => assert.fail('must not run')),
      (e: unknown) =>
        e instanceof AppError &&
        e.code === 'IDEMPOTENCY_CONFLICT' &&
        /before keys were scoped/.test(e.message),
    );
    const fresh = await withIdempotency(store, { ...s, key: 'new-confirm-key' }, async () => ({
      status: 200,
      body: { ok: true },
    }));
    assert.equal(fresh.replayed, false);
  });

  it('still lets the ledger batch claim keys (its function was replaced with the principal)', async () => {
    const { rows } = await t.db.query<{ src: string }>(
      `SELECT prosrc AS src FROM pg_proc WHERE proname = 'ledger_apply_keyed'`,
    );
    assert.match(rows[0]!.src, /principal/);
  });
});
