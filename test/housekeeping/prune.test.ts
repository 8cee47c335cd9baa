import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { idempotencyRetention, pruneOnce, pruneRules } from '../../core/housekeeping/prune.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';

describe('housekeeping', () => {
  let t: TestDb;
  before(async () => {
    t = await freshDatabase();
  });
  after(() => t.drop());

  const q = (sql: string, params: unknown[] = []) => t.db.query(sql, params);
  const names = async (sql: string) => (await t.db.query<{ n: string }>(sql)).rows.map((r) => r.n).sort();

  it('deletes only rows that can no longer change an answer, in batches', async () => {
    await q(`INSERT INTO tenants (id, name, country, base_currency) VALUES ('ta', 'ta', 'KE', 'KES')`);
    const customer = randomUUID();
    const session = randomUUID();
    await q(
      `INSERT INTO customers (id, tenant_id, phone_e164, created_at) VALUES ($1, 'ta', '+254700000001', now())`,
      [customer],
    );
    await q(
      `INSERT INTO sessions (id, tenant_id, subject_type, subject_id, jti, aal, ip, created_at, last_seen) VALUES ($1, 'ta', 'customer', $2, 'j', 1, '127.0.0.1', now(), now())`,
      [session, customer],
    );

    for (const [value, at] of [
      ['old-1', '-10 minutes'],
      ['old-2', '-1 day'],
      ['old-3', '-6 minutes'],
      ['recent', '-1 minute'],
      ['live', '+5 minutes'],
    ] as [string, string][]) {
      await q(`INSERT INTO edge_replay (kind, value, expires_at) VALUES ('dpop', $1, now() + $2::interval)`, [
        value,
        at,
      ]);
      await q(
        `INSERT INTO used_challenges (tenant_id, jti, used_at, expires_at) VALUES ('ta', $1, now(), now() + $2::interval)`,
        [value, at],
      );
      await q(
        `INSERT INTO stepup_uses (tenant_id, grant_jti, session_id, customer_id, orig, action, used_at, expires_at)
               VALUES ('ta', $1, $2, $3, 'o', 'transfer.create', now(), now() + $4::interval)`,
        [value, session, customer, at],
      );
    }
    for (const [name, at] of [
      ['two-days-past', '-2 days'],
      ['an-hour-past', '-1 hour'],
      ['live', '+5 minutes'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO otp_codes (id, tenant_id, phone_key, purpose, code_hash, created_at, expires_at) VALUES ($1, 'ta', $2, 'verify', $3, now(), now() + $4::interval)`,
        [randomUUID(), Buffer.from(name), randomBytes(32), at],
      );
      await q(
        `INSERT INTO phone_verifications (id, tenant_id, customer_id, token_hash, created_at, expires_at) VALUES ($1, 'ta', $2, $3, now(), now() + $4::interval)`,
        [randomUUID(), customer, Buffer.from(name), at],
      );
    }
    for (const [name, at] of [
      ['eight-days-past', '-8 days'],
      ['two-days-past', '-2 days'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO refresh_tokens (id, tenant_id, session_id, family_id, token_hash, created_at, expires_at) VALUES ($1, 'ta', $2, $3, $4, now(), now() + $5::interval)`,
        [randomUUID(), session, randomUUID(), Buffer.from(name), at],
      );
    }
    const throttle: [string, string, string | null, boolean][] = [
      ['stale', '-2 days', null, false],
      ['stale-lock-over', '-2 days', '-1 hour', false],
      ['stale-but-locked', '-2 days', '+1 hour', false],
      ['stale-but-needs-otp', '-2 days', null, true],
      ['fresh', '-1 hour', null, false],
    ];
    for (const [key, window, locked, needsOtp] of throttle) {
      // Address counters (scope 'ip') with a delay progression (strikes): inert after a quiet day too.
      await q(
        `INSERT INTO auth_throttle (tenant_id, scope, key, fails, window_start, locked_until, needs_otp, strikes)
               VALUES ('ta', 'ip', $1, 3, now() + $2::interval, now() + $3::interval, $4, 2)`,
        [Buffer.from(key), window, locked, needsOtp],
      );
    }

    for (const [scope, at] of [
      ['ip:old', '-10 minutes'],
      ['tenant:old', '-6 minutes'],
      ['ip:current', '-1 minute'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO admin_rate_counters (window_start, scope, count) VALUES (date_trunc('minute', now() + $2::interval), $1, 3)`,
        [scope, at],
      );
    }

    for (const [key, at] of [
      ['fed-old', '-6 minutes'],
      ['fed-recent', '-1 minute'],
      ['fed-live', '+5 minutes'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO staff_federation_states (state_hash, tenant_id, verifier_enc, nonce, idp_version, expires_at) VALUES ($1, 'ta', '\\x00', 'n', 1, now() + $2::interval)`,
        [Buffer.from(key), at],
      );
    }

    // A passkey ceremony's challenge: gone five minutes past its expiry, kept before.
    for (const [challenge, at] of [
      ['wa-old', '-10 minutes'],
      ['wa-live', '+1 minute'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO webauthn_challenges (challenge, tenant_id, ceremony, expires_at) VALUES ($1, 'ta', 'login', now() + $2::interval)`,
        [challenge, at],
      );
    }

    const counts = await pruneOnce(t.db, 2);
    assert.deepEqual(counts, {
      edge_replay: 3,
      used_challenges: 3,
      stepup_uses: 3,
      otp_codes: 1,
      phone_verifications: 1,
      refresh_tokens: 1,
      auth_throttle: 2,
      idempotency_keys: 0,
      admin_rate_counters: 2,
      staff_federation_states: 1,
      webauthn_challenges: 1,
    });
    assert.deepEqual(
      Object.keys(counts),
      pruneRules.map((r) => r.table),
    );

    assert.deepEqual(
      await names('SELECT value AS n FROM edge_replay'),
      ['live', 'recent'],
      'expired a minute ago: kept for clock skew',
    );
    assert.deepEqual(await names('SELECT jti AS n FROM used_challenges'), ['live', 'recent']);
    assert.deepEqual(await names('SELECT grant_jti AS n FROM stepup_uses'), ['live', 'recent']);
    assert.deepEqual(await names(`SELECT convert_from(phone_key, 'UTF8') AS n FROM otp_codes`), [
      'an-hour-past',
      'live',
    ]);
    assert.deepEqual(await names(`SELECT convert_from(token_hash, 'UTF8') AS n FROM phone_verifications`), [
      'an-hour-past',
      'live',
    ]);
    assert.deepEqual(await names(`SELECT convert_from(token_hash, 'UTF8') AS n FROM refresh_tokens`), [
      'two-days-past',
    ]);
    assert.deepEqual(await names(`SELECT convert_from(key, 'UTF8') AS n FROM auth_throttle`), [
      'fresh',
      'stale-but-locked',
      'stale-but-needs-otp',
    ]);
    assert.deepEqual(
      await names('SELECT scope AS n FROM admin_rate_counters'),
      ['ip:current'],
      'the current window is kept',
    );
    assert.deepEqual(
      await names(`SELECT convert_from(state_hash, 'UTF8') AS n FROM staff_federation_states`),
      ['fed-live', 'fed-recent'],
      'a sign-in state lives its 10 minutes plus skew',
    );
    assert.deepEqual(
      await names('SELECT challenge AS n FROM webauthn_challenges'),
      ['wa-live'],
      'a ceremony still in flight keeps its challenge',
    );

    assert.deepEqual(
      await pruneOnce(t.db),
      {
        edge_replay: 0,
        used_challenges: 0,
        stepup_uses: 0,
        otp_codes: 0,
        phone_verifications: 0,
        refresh_tokens: 0,
        auth_throttle: 0,
        idempotency_keys: 0,
        admin_rate_counters: 0,
        staff_federation_states: 0,
        webauthn_challenges: 0,
      },
      'a second run finds nothing',
    );
  });

  it('keeps idempotency records for the retention (7 days), sealed secrets included, then deletes them', async () => {
    assert.equal(idempotencyRetention, '7 days');
    for (const [key, age] of [
      ['kept-six-days', '6 days 23 hours'],
      ['gone-eight-days', '8 days'],
      ['gone-legacy-8d', '8 days'],
      ['kept-fresh-key', '1 minute'],
    ] as [string, string][]) {
      await q(
        `INSERT INTO idempotency_keys (tenant_id, key, principal, method, path, request_hash, response_status, response_body, response_sealed, created_at)
               VALUES ('ta', $1, $2, 'POST', '/v1/webhooks', 'h', 201, '{"secret":"[redacted]"}', '\\x00', now() - $3::interval)`,
        [key, key.includes('legacy') ? 'legacy' : 'staff:s1', age],
      );
    }
    const counts = await pruneOnce(t.db);
    assert.equal(counts.idempotency_keys, 2);
    assert.deepEqual(await names(`SELECT key AS n FROM idempotency_keys WHERE tenant_id = 'ta'`), [
      'kept-fresh-key',
      'kept-six-days',
    ]);
  });
});
