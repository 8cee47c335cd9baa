/**
 * Make a test's database refuse audit rows of chosen actions, as a failing audit write would: the
 * statement fails, and with it the transaction that wrote it (SPEC 6.3: a change and its record
 * commit together or not at all).
 */
import type { Db } from '../../shared/db/pool.ts';

export interface AuditRefusal {
  /** Refuse every audit row of `action` from now on. */
  refuse(action: string): Promise<void>;
  /** Accept every audit row again. */
  clear(): Promise<void>;
}

export async function installAuditRefusal(db: Db): Promise<AuditRefusal> {
  await db.query('CREATE TABLE test_refused_audit (action text PRIMARY KEY)');
  await db.query(`CREATE FUNCTION test_refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM test_refused_audit WHERE action = NEW.action) THEN
        RAISE EXCEPTION 'audit refused for %', NEW.action;
      END IF;
      RETURN NEW;
    END $$`);
  await db.query(
    'CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION test_refuse_audit()',
  );
  return {
    refuse: async (action) => {
      await db.query('INSERT INTO test_refused_audit VALUES ($1) ON CONFLICT DO NOTHING', [action]);
    },
    clear: async () => {
      await db.query('DELETE FROM test_refused_audit');
    },
  };
}
