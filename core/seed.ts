/**
 * Idempotent development seed: the demo tenant and every development credential later
 * features create, all listed in DATA_DIR/demo.json so a newcomer, a script or a test harness
 * can find them without reading logs. Running it twice changes nothing.
 */
import { readFile, writeFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { serviceTokenSeeder } from './platform/service-tokens.ts';
import type { Db } from '../shared/db/pool.ts';
import { ledgerSeeder } from './ledger/seed.ts';
import { adminSeeder } from './admin/seed.ts';
import { seedDemoAgent } from './agents/seed.ts';
import type { KeyStore } from './keys/keys.ts';
import { seedAgentContent } from './agents/content.ts';
import { staffSeeder } from './staff/seed.ts';
import { demoCustomerSeeder } from './identity/seed.ts';

export const demoTenant = Object.freeze({
  id: 'demo',
  name: 'Demo Mobile Money',
  country: 'KE',
  baseCurrency: 'KES',
});

export interface SeedContext {
  db: Db;
  tenantId: string;
  /** What the previous run wrote, so a seeder can reuse a secret it cannot read back. */
  previous: Record<string, unknown>;
  /** The master-key store, for seeders that seal or hash with tenant secrets (the demo agent's PIN). */
  keys?: KeyStore | undefined;
}

/** A seeder inserts what it needs (ON CONFLICT DO NOTHING) and returns its part of demo.json. */
export type Seeder = (ctx: SeedContext) => Promise<Record<string, unknown>>;

const tenantSeeder: Seeder = async ({ db }) => {
  await db.query(
    `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
    [demoTenant.id, demoTenant.name, demoTenant.country, demoTenant.baseCurrency],
  );
  return { tenant: { ...demoTenant } };
};

/** Agent announcements and the KYC course (issue 9 item 10). */
const agentContentSeeder: Seeder = ({ db, tenantId }) => seedAgentContent(db, tenantId, Date.now());

/** The demo agent with float and its login credentials (issue 9; core/agents/seed.ts). */
const agentSeeder: Seeder = (ctx) => seedDemoAgent(ctx);

/** Every seeder, in order; domains append theirs here. */
export const seeders: Seeder[] = [
  tenantSeeder,
  ledgerSeeder,
  serviceTokenSeeder,
  adminSeeder,
  agentContentSeeder,
  agentSeeder,
  demoCustomerSeeder,
];

async function readPrevious(path: string): Promise<Record<string, unknown>> {
  try {
    const parsed = JSON.parse(await readFile(path, 'utf8')) as unknown;
    return parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Seed the demo tenant and write `demo.json` (atomically) into `dataDir` when given.
 * `gatewayUrl`: where clients reach the gateway, for demo.json's `scim.baseUrl` (else the path alone).
 */
export async function seedDemo(
  db: Db,
  dataDir?: string,
  opts: { keys?: KeyStore; gatewayUrl?: string } = {},
): Promise<Record<string, unknown>> {
  const file = dataDir ? join(dataDir, 'demo.json') : undefined;
  const previous = file ? await readPrevious(file) : {};
  let out: Record<string, unknown> = {};
  // Demo staff come last: provisioned over SCIM into the tenant the seeders above created.
  for (const seeder of [...seeders, staffSeeder(opts.gatewayUrl)])
    out = { ...out, ...(await seeder({ db, tenantId: demoTenant.id, previous, keys: opts.keys })) };
  if (file) {
    await writeFile(`${file}.tmp`, `${JSON.stringify(out, null, 2)}\n`, { mode: 0o600 });
    await rename(`${file}.tmp`, file);
  }
  return out;
}
