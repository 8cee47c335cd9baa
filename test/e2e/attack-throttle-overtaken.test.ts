/**
 * Attacks on the PIN lockout through the dev gateway (core/identity/throttle.ts settleSuccess: a
 * right PIN overtaken by attempts counted after its admission is answered their refusal), as an
 * outsider who knows a phone number would make them, each kept so it stays closed:
 * - a right PIN held after its admission while the phone's window runs out and wrong PINs lock it
 *   or make it need an OTP: answered exactly as an attempt refused on admission then (status,
 *   code, message, header names), with no session, its refusal audited naming the customer;
 * - another tenant's (or no tenant's) wrong PINs for the same phone and device: no lock, no OTP
 *   requirement and no refusal for the customer of this tenant.
 * The hold is the database's: a trigger makes the right PIN's settlement wait (an advisory lock
 * the test holds) at its device counter, the first row it locks, once its admission counted it.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { startE2eStack, type E2eStack } from '../helpers/e2e-stack.ts';
import { callRetrying, signUpCustomer } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';
import { addTenant } from '../staff/fixtures.ts';

const pin = '482913';
const holdLock = 73_114;

describe('attacks on the PIN lockout through the gateway', () => {
  let s: E2eStack;

  const login = (tenantId: string, phone: string, p: string, device?: string): Promise<Res> =>
    callRetrying(s.gw, 'POST', '/customers/auth/login', {
      json: { tenantId, phone, pin: p },
      headers: { 'x-request-id': randomUUID(), ...(device ? { 'x-device-id': device } : {}) },
    });
  const phoneKeys = async (tenantId: string): Promise<Set<string>> =>
    new Set(
      (
        await s.tdb.db.query<{ k: string }>(
          `SELECT encode(key, 'hex') AS k FROM auth_throttle WHERE tenant_id = $1 AND scope = 'phone'`,
          [tenantId],
        )
      ).rows.map((r) => r.k),
    );
  /** A customer of `demo` signed up now, and the key its phone is counted under. */
  const customer = async (phone: string): Promise<string> => {
    const before = await phoneKeys('demo');
    await signUpCustomer(s.gw, s.dataDir, phone, pin, `d-${randomUUID()}`);
    const added = [...(await phoneKeys('demo'))].filter((k) => !before.has(k));
    assert.equal(added.length, 1, 'one new phone counter');
    return added[0] as string;
  };
  const counter = async (key: string) => {
    const { rows } = await s.tdb.db.query<{
      fails: number;
      day: number;
      needs_otp: boolean;
      locked: boolean;
    }>(
      `SELECT fails, day_fails AS day, needs_otp, coalesce(locked_until > now(), false) AS locked
         FROM auth_throttle WHERE tenant_id = 'demo' AND scope = 'phone' AND key = decode($1, 'hex')`,
      [key],
    );
    return rows[0];
  };
  const sessionsOf = async (phone: string): Promise<number> =>
    Number(
      (
        await s.tdb.db.query<{ n: string }>(
          `SELECT count(*)::text AS n FROM sessions s JOIN customers c ON c.tenant_id = s.tenant_id AND c.id::text = s.subject_id
            WHERE c.tenant_id = 'demo' AND c.phone_e164 = $1`,
          [phone],
        )
      ).rows[0]?.n,
    );

  /**
   * `right` admitted and held at its settlement (the second update of a device counter once armed:
   * its admission's count, then its settlement's lock); `meanwhile` runs; then it is released.
   */
  async function heldWhile(right: () => Promise<Res>, meanwhile: () => Promise<void>): Promise<Res> {
    await s.tdb.db.query('UPDATE atk_hold SET n = 0');
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let taken = () => {};
    const lockTaken = new Promise<void>((r) => {
      taken = r;
    });
    const holding = s.tdb.db.tx(async (q) => {
      await q.query('SELECT pg_advisory_xact_lock($1)', [holdLock]);
      taken();
      await gate;
    });
    await lockTaken;
    const answer = right();
    for (;;) {
      const { rows } = await s.tdb.db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory'`,
      );
      if (rows.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    try {
      await meanwhile();
    } finally {
      release();
      await holding;
      await s.tdb.db.query('UPDATE atk_hold SET n = -1000000');
    }
    return answer;
  }
  /** The phone's window runs out (its start a day back): the next attempt opens a new one. */
  const windowRunsOut = (key: string) =>
    s.tdb.db.query(
      `UPDATE auth_throttle SET window_start = window_start - interval '1 day'
        WHERE tenant_id = 'demo' AND scope = 'phone' AND key = decode($1, 'hex')`,
      [key],
    );
  /** `n` wrong PINs judged (401), each lock waited out by moving the database on (not the clock). */
  const wrongPins = async (phone: string, key: string, n: number) => {
    for (let i = 0; i < n; i++) {
      await s.tdb.db.query(
        `UPDATE auth_throttle SET locked_until = NULL WHERE tenant_id = 'demo' AND scope = 'phone' AND key = decode($1, 'hex')`,
        [key],
      );
      const r = await login('demo', phone, '000000');
      assert.equal(r.status, 401, `wrong PIN ${i + 1}: ${r.text}`);
    }
  };
  /** Status, code, message and header names: all an answer says, but its ids, date and wait. */
  const shape = (r: Res) => ({
    status: r.status,
    code: r.json?.code,
    message: r.json?.message,
    body: Object.keys(r.json ?? {}).sort(),
    headers: Object.keys(r.headers)
      .filter((h) => !['date', 'x-request-id', 'x-req-id', 'content-length'].includes(h))
      .sort(),
  });

  before(async () => {
    s = await startE2eStack('attack-throttle');
    await addTenant(s.tdb.db, 'other');
    await s.tdb.db.query(`
      CREATE TABLE atk_hold (n integer NOT NULL);
      INSERT INTO atk_hold VALUES (-1000000);
      CREATE FUNCTION atk_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      DECLARE k integer;
      BEGIN
        IF NEW.scope = 'device' THEN
          UPDATE atk_hold SET n = n + 1 RETURNING n INTO k;
          IF k = 2 THEN PERFORM pg_advisory_xact_lock(${holdLock}); END IF;
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER atk_hold BEFORE UPDATE ON auth_throttle FOR EACH ROW EXECUTE FUNCTION atk_hold();
    `);
  });
  after(async () => s?.stop());

  /**
   * A customer's right PIN, from a device of its own, held after its admission while the window
   * runs out and `wrong` wrong PINs are judged; then the right PIN is sent again (refused on
   * admission) and the held one released. Both answers, and what the phone's counter holds.
   */
  async function overtakenBy(phone: string, wrong: number) {
    const key = await customer(phone);
    const sessions = await sessionsOf(phone);
    let refused: Res | undefined;
    const r = await heldWhile(
      () => login('demo', phone, pin, `d-${randomUUID()}`),
      async () => {
        await windowRunsOut(key);
        await wrongPins(phone, key, wrong);
        refused = await login('demo', phone, pin);
      },
    );
    assert.ok(refused);
    assert.deepEqual(shape(r), shape(refused), 'the overtaken right PIN answers as an attempt refused then');
    assert.equal(await sessionsOf(phone), sessions, 'no session opened');
    return { r, refused, counter: await counter(key) };
  }
  /** The refusals `outcome` recorded naming a customer (not an anonymous phone). */
  const customerRefusals = async (outcome: string) =>
    (
      await s.tdb.db.query<{ allow: boolean }>(
        `SELECT (decision->>'allow')::boolean AS allow FROM audit_log WHERE tenant_id = 'demo'
            AND action = 'auth.login' AND attrs->>'outcome' = $1 AND actor->>'type' = 'customer'`,
        [outcome],
      )
    ).rows;

  it("a right PIN held across the window's end while five wrong PINs lock the phone: answered 429 LOCKED like any attempt then, no session", async () => {
    const { r, refused, counter: c } = await overtakenBy('+254700114001', 5);
    assert.equal(r.status, 429, r.text);
    assert.equal(r.json.code, 'LOCKED');
    const wait = Number(r.headers['retry-after']);
    assert.ok(wait > 0 && wait <= Number(refused.headers['retry-after']), `no longer than the lock: ${wait}`);
    assert.deepEqual(c, { fails: 5, day: 5, needs_otp: false, locked: true }, 'the lock stays');
    assert.deepEqual(await customerRefusals('locked'), [{ allow: false }], 'its refusal names the customer');
  });

  it("a right PIN held across the window's end while ten wrong PINs are judged: answered 403 VERIFICATION_REQUIRED like any attempt then", async () => {
    const { r, counter: c } = await overtakenBy('+254700114002', 10);
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.code, 'VERIFICATION_REQUIRED');
    assert.equal(c?.needs_otp, true, 'the requirement stays');
    assert.deepEqual(await customerRefusals('verification_required'), [{ allow: false }]);
  });

  it("another tenant's and an unknown tenant's wrong PINs for the same phone and device change nothing here", async () => {
    const phone = '+254700114003';
    const device = `d-${randomUUID()}`;
    const key = await customer(phone);
    const start = await counter(key);
    for (const tenantId of ['other', 'no-such-tenant'])
      for (let i = 0; i < 12; i++) {
        const r = await login(tenantId, phone, '000000', device);
        assert.ok(
          r.status === 401 || (r.status === 429 && r.json?.code === 'LOCKED') || r.status === 403,
          `${tenantId} ${i + 1}: ${r.status} ${r.text}`,
        );
      }
    const other = await s.tdb.db.query<{ needs_otp: boolean }>(
      `SELECT needs_otp FROM auth_throttle WHERE tenant_id = 'other' AND scope = 'phone'`,
    );
    assert.equal(other.rows.length, 1, 'the other tenant counts its own guesses');
    const unknown = await s.tdb.db.query(`SELECT 1 FROM auth_throttle WHERE tenant_id = 'no-such-tenant'`);
    assert.equal(unknown.rows.length, 0, 'no tenant: nothing counted');
    assert.deepEqual(await counter(key), start, "this tenant's counter is untouched");
    const r = await login('demo', phone, pin, device);
    assert.equal(r.status, 200, `the customer signs in from the same device: ${r.text}`);
  });
});
