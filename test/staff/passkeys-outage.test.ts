/**
 * The WebAuthn library is loaded on the first ceremony (core/staff/webauthn.ts). A load that
 * failed (a process out of file descriptors) was caught with the assertion's own failures: the
 * person was answered 401 INVALID_CREDENTIALS and recorded as presenting an invalid assertion;
 * and the failed load was kept, so every sign-in, step-up and enrolment on that core failed the
 * same way until a restart. Now that sign-in is the service's error (500, no refusal recorded
 * against the person), and the next ceremony loads the library again.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { addPasskey } from '../../core/staff/passkeys.ts';
import { setStaffRoles } from '../../core/staff/store.ts';
import { userHandleOf } from '../../core/staff/webauthn.ts';
import { startTestCore, type TestCore } from '../helpers/core.ts';
import { call } from '../helpers/http.ts';
import { importFailures, type ImportFailures } from '../helpers/import-failure.ts';
import { SoftAuthenticator } from '../helpers/soft-authenticator.ts';

describe('passkey sign-in while the WebAuthn library cannot be loaded', () => {
  let c: TestCore;
  let imports: ImportFailures;

  before(async () => {
    imports = importFailures();
    c = await startTestCore();
    await c.tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ('op', 'op', 'KE', 'KES')`,
    );
  });
  after(async () => {
    imports?.close();
    await c?.close();
  });

  it('is the service failure, not an invalid passkey, and the next sign-in loads it again', async () => {
    const userId = randomUUID();
    await c.tdb.db.query(
      "INSERT INTO staff_users (tenant_id, id, user_name) VALUES ('op', $1, 'ada@example.org')",
      [userId],
    );
    await setStaffRoles(c.tdb.db, 'op', userId, ['admin']);
    // A passkey enrolled earlier (stored as enrolment stores it), so that this process's first
    // ceremony is a sign-in: nothing has loaded the library yet.
    const auth = new SoftAuthenticator('http://localhost');
    auth.register({
      challenge: randomBytes(32).toString('base64url'),
      rp: { id: 'localhost' },
      user: { id: Buffer.from(userHandleOf(userId)).toString('base64url') },
    });
    const cred = auth.credentials[0];
    assert.ok(cred);
    await c.tdb.db.tx((q) =>
      addPasskey(
        q,
        'op',
        userId,
        {
          credentialId: cred.id.toString('base64url'),
          publicKey: cred.publicCose,
          counter: 0,
          transports: ['internal'],
          aaguid: '00000000-0000-0000-0000-000000000000',
          backedUp: false,
        },
        'Laptop',
        Date.now(),
      ),
    );
    const challenge = randomBytes(32).toString('base64url');
    await c.tdb.db.query(
      `INSERT INTO webauthn_challenges (challenge, tenant_id, ceremony, created_at, expires_at)
       VALUES ($1, 'op', 'login', now(), now() + interval '5 minutes')`,
      [challenge],
    );
    const finish = (options: { challenge: string; rpId?: string }) =>
      call(c.origin, 'POST', '/auth/login', {
        json: { method: 'passkey', step: 'finish', tenantId: 'op', response: auth.assert(options) },
      });

    await imports.fail(['@simplewebauthn/server']);
    const during = await finish({ challenge, rpId: 'localhost' });
    await imports.fail([]);
    assert.equal(during.status, 500, during.text);
    assert.equal(during.json.code, 'INTERNAL');
    const refused = await c.tdb.db.query(
      `SELECT 1 FROM audit_log WHERE tenant_id = 'op' AND action = 'staff.login' AND NOT (decision->>'allow')::boolean`,
    );
    assert.equal(refused.rows.length, 0, 'no refusal recorded against the person');

    const begun = await call(c.origin, 'POST', '/auth/login', {
      json: { method: 'passkey', step: 'begin', tenantId: 'op' },
    });
    assert.equal(begun.status, 200, `the next ceremony loads the library: ${begun.text}`);
    const signedIn = await finish(begun.json.options);
    assert.equal(signedIn.status, 200, signedIn.text);
  });
});
