/**
 * The demo seed provisions staff through the SCIM code path (issue 14 item 7): a SCIM
 * credential in demo.json (`scim: {baseUrl, token}`), an Admin and an Ops member whose audit
 * records name that credential, stable across runs, with the machine service tokens kept.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { hashScimToken } from '../../core/staff/credentials.ts';
import { seedDemo } from '../../core/seed.ts';
import { staffUserById } from '../../core/staff/store.ts';
import { freshDatabase } from '../helpers/db.ts';

describe('demo staff seed', () => {
  it('issues a SCIM credential and provisions an Admin and an Ops member over SCIM, idempotently', async () => {
    const t = await freshDatabase();
    const dir = await mkdtemp(join(tmpdir(), 'seed-staff-'));
    try {
      const first = await seedDemo(t.db, dir, { gatewayUrl: 'http://127.0.0.1:8000' });
      const second = await seedDemo(t.db, dir, { gatewayUrl: 'http://127.0.0.1:8000' });
      assert.deepEqual(second, first, 'a second run changes nothing');
      const file = JSON.parse(await readFile(join(dir, 'demo.json'), 'utf8')) as {
        scim: { baseUrl: string; token: string };
        staff: { members: { id: string; userName: string; roles: string[] }[] };
        serviceTokens: Record<string, unknown>;
      };
      assert.equal(file.scim.baseUrl, 'http://127.0.0.1:8000/scim/v2');
      assert.match(file.scim.token, /^scim_[A-Za-z0-9_-]{43}$/);
      assert.deepEqual(Object.keys(file.serviceTokens).sort(), ['admin', 'ops', 'readOnly', 'ussd']);
      const { rows: creds } = await t.db.query<{ id: string }>(
        'SELECT id FROM scim_credentials WHERE tenant_id = $1 AND token_hash = $2',
        ['demo', hashScimToken(file.scim.token)],
      );
      assert.equal(creds.length, 1);
      // The demo Admin also has a passkey enrolment link (issue 16 item 4), audited as such.
      const link = await t.db.query(
        `SELECT 1 FROM audit_log WHERE action = 'staff.enrolment_link.create' AND target->>'id' = $1`,
        [file.staff.members[0]?.id],
      );
      assert.equal(link.rows.length, 1);
      assert.deepEqual(
        file.staff.members.map((s) => [s.userName, s.roles]),
        [
          ['ada.admin@demo.example', ['admin']],
          ['otto.ops@demo.example', ['ops']],
        ],
      );
      for (const s of file.staff.members) {
        assert.deepEqual((await staffUserById(t.db, 'demo', s.id))?.roles, s.roles);
        const { rows } = await t.db.query<{ action: string; actor: { id: string } }>(
          `SELECT action, actor FROM audit_log WHERE target->>'id' = $1 AND action LIKE 'staff.%' AND action <> 'staff.enrolment_link.create' ORDER BY id`,
          [s.id],
        );
        assert.deepEqual(
          rows.map((r) => [r.action, r.actor.id]),
          [
            ['staff.provision', `scim-credential:${creds[0]?.id}`],
            ['staff.role_add', `scim-credential:${creds[0]?.id}`],
          ],
        );
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      await t.drop();
    }
  });
});
