/**
 * Signed-request (API key) Check latency beside the JWT path (issue 8 bench): the edge runs
 * here on an embedded PostgreSQL; a separate process (bench/authz/driver.ts) sends 1,000 req/s,
 * signing each request with a fresh nonce. Also prints what the shared nonce store costs per
 * request (one INSERT into an unlogged table). Prints; asserts nothing.
 *   npx tsx bench/authz/signed.ts [--requests 10000] [--rps 1000]
 */
import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ApiKeys } from '../../core/apikeys/store.ts';
import { KeyStore, deriveApiKeySealKey, deriveChallengeKey } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { buildEdge } from '../../edge/main.ts';
import { option, percentile, runBench, withDatabase } from '../lib/harness.ts';
import { benchCustomer } from './customer.ts';

const execFileAsync = promisify(execFile);
const requests = option('requests', 10_000);
const rps = option('rps', 1000);
const root = fileURLToPath(new URL('../../', import.meta.url));

interface Report {
  mode: string;
  rps: number;
  p50: number;
  p99: number;
  p999: number;
  outcomes: Record<string, number>;
}
const ms = (ns: number) => (ns / 1e6).toFixed(3).padStart(8);

async function drive(
  address: string,
  mode: 'signed' | 'jwt',
  credential: string,
  secret = '',
): Promise<Report> {
  const { stdout } = await execFileAsync(
    process.execPath,
    [
      '--import',
      'tsx',
      'bench/authz/driver.ts',
      address,
      mode,
      String(rps),
      String(requests),
      credential,
      secret,
    ],
    { cwd: root, maxBuffer: 1 << 24 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Report;
}

async function main(): Promise<void> {
  const log = createLogger('silent');
  await withDatabase('signed', async (db) => {
    await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ('t1', 't1', 'KE', 'KES')`);
    const masterKey = randomBytes(32);
    const keys = new KeyStore(db, masterKey);
    const edge = await buildEdge({
      db,
      apiKeySealKey: deriveApiKeySealKey(masterKey),
      challengeKeys: [deriveChallengeKey(masterKey)],
      log,
      edgeSecret: 'bench',
    });
    const address = `127.0.0.1:${await edge.listen(0)}`;
    const { key, secret } = await new ApiKeys(db, keys).create('t1', 'bench', {
      name: 'bench',
      scopes: ['payments:read'],
      budget: {},
      ipAllowlist: [],
      expiresAt: undefined,
    });
    const { token } = await benchCustomer(db, keys, 't1', { phone: '+254700000009', aal: 1, amr: ['pin'] });

    await drive(address, 'signed', key.id, secret); // warm-up
    const signed = await drive(address, 'signed', key.id, secret);
    const jwt = await drive(address, 'jwt', token);
    process.stdout.write(`edge Check from a separate process, ${requests} requests at ${rps} req/s\n`);
    for (const r of [signed, jwt]) {
      process.stdout.write(
        `${(r.mode === 'signed' ? 'API key, HMAC-signed, fresh nonce' : 'customer JWT + session').padEnd(36)} p50 ${ms(r.p50)} ms  p99 ${ms(r.p99)} ms  p99.9 ${ms(r.p999)} ms  ${r.rps.toFixed(0).padStart(5)} req/s  ${JSON.stringify(r.outcomes)}\n`,
      );
    }
    const nonce: number[] = [];
    for (let i = 0; i < 2000; i++) {
      const t0 = process.hrtime.bigint();
      await edge.state.firstUse('nonce', `${key.id}:${randomUUID()}`, 600_000);
      nonce.push(Number(process.hrtime.bigint() - t0));
    }
    nonce.sort((a, b) => a - b);
    process.stdout.write(
      `nonce store alone (one INSERT … ON CONFLICT into an unlogged table)  p50 ${ms(percentile(nonce, 50))} ms  p99 ${ms(percentile(nonce, 99))} ms\n`,
    );
    await edge.stop();
  });
}

runBench(main);
