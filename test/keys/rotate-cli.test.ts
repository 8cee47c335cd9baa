import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, it } from 'node:test';
import { verifyChain } from '../../shared/audit.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { freshDatabase } from '../helpers/db.ts';

const run = promisify(execFile);

describe('bin/rotate-keys.ts', () => {
  it("rotates a tenant's key (old one in grace) and audits the rotation in the same transaction", async () => {
    const t = await freshDatabase();
    const dir = await mkdtemp(join(tmpdir(), 'rotate-cli-'));
    try {
      await t.db.query(
        `INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES')`,
      );
      const master = randomBytes(32);
      const keys = new KeyStore(t.db, master);
      await keys.ensureActive('t1');
      const [before] = (await keys.jwks('t1')).keys.map((k) => k.kid);
      const env = {
        ...process.env,
        DATABASE_URL: t.url,
        MASTER_KEY: master.toString('base64'),
        DATA_DIR: dir,
      };
      const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bin/rotate-keys.ts', 't1', '600'], {
        env,
      });
      const out = JSON.parse(stdout) as {
        tenantId: string;
        active: string;
        grace: string;
        graceSeconds: number;
      };
      assert.equal(out.grace, before);
      assert.equal(out.graceSeconds, 600);
      const { rows } = await t.db.query<{ kid: string; state: string }>(
        `SELECT kid, state FROM signing_keys WHERE tenant_id = 't1' ORDER BY created_at`,
      );
      assert.deepEqual(
        rows.map((r) => [r.kid, r.state]),
        [
          [before, 'grace'],
          [out.active, 'active'],
        ],
      );
      const audit = await t.db.query<{
        actor: { type: string };
        target: { id: string };
        attrs: Record<string, unknown>;
      }>(`SELECT actor, target, attrs FROM audit_log WHERE tenant_id = 't1' AND action = 'keys.rotate'`);
      assert.equal(audit.rows.length, 1);
      assert.equal(audit.rows[0]?.actor.type, 'operator');
      assert.equal(audit.rows[0]?.target.id, out.active);
      assert.equal(audit.rows[0]?.attrs.previous, before);
      assert.equal((await verifyChain(t.db, 't1')).ok, true);
      await assert.rejects(
        run(process.execPath, ['--import', 'tsx', 'bin/rotate-keys.ts', 't1', '999999'], { env }),
        /graceSeconds must be an integer/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
      await t.drop();
    }
  });
});
