/**
 * Login benchmark (issue 3 item 10; SPEC 8: PIN verification p99 < 300 ms). Prints, never asserts.
 *   npx tsx bench/identity/login.ts [logins=320] [clients=16]
 * Starts its own embedded PostgreSQL in a temporary directory, onboards customers through the
 * real routes, then runs `clients` concurrent login loops over HTTP. Also times PIN
 * verification alone: one at a time (the argon2 cost) and at the same concurrency (cost plus
 * the bounded queue in front of argon2).
 */
import { randomBytes } from 'node:crypto';
import { availableParallelism, tmpdir } from 'node:os';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { buildCore } from '../../core/app.ts';
import { startEmbedded } from '../../core/db/embedded.ts';
import { migrate } from '../../core/db/migrate.ts';
import { createDb, type Queryable } from '../../shared/db/pool.ts';
import { PinHasher, kdfVersions, currentKdfVersion } from '../../core/identity/pin.ts';
import type { SmsMessage } from '../../core/identity/sms.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freePort, listen } from '../../shared/net.ts';
import { request } from 'undici';

const total = Number(process.argv[2] ?? 320);
const clients = Number(process.argv[3] ?? 16);
const customers = 32;

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}
const fmt = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${pct(s, 50).toFixed(1)} ms  p99 ${pct(s, 99).toFixed(1)} ms  max ${(s.at(-1) ?? NaN).toFixed(1)} ms  (n=${s.length})`;
};

async function post(origin: string, path: string, json: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await request(`${origin}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-client-ip': `10.9.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}` }, body: JSON.stringify(json) });
  const text = await res.body.text();
  return { status: res.statusCode, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-identity-'));
  const pg = await startEmbedded({ dir: join(dir, 'pg'), port: await freePort() });
  const metrics = createMetrics();
  const log = createLogger('silent');
  const db = createDb({ connectionString: pg.url('postgres'), metrics, log, max: 20 });
  try {
    await migrate(db.pool);
    await db.query(`INSERT INTO tenants (id, name, country, base_currency) VALUES ('bench', 'Bench', 'KE', 'KES')`);
    const codes = new Map<string, string>();
    const sms = { async send(_q: Queryable, m: SmsMessage) { if (m.code) codes.set(m.to, m.code); } };
    const keys = new KeyStore(db, randomBytes(32));
    const core = buildCore({ db, log, metrics, build: readBuildInfo(), keys, identity: { sms }, edgeSecrets: [randomBytes(32).toString('base64url')] });
    const origin = `http://127.0.0.1:${await listen(core.server, 0)}`;
    const phones = Array.from({ length: customers }, (_, i) => `+2547${String(10_000_000 + i)}`);
    for (const phone of phones) {
      await post(origin, '/customers/auth/otp/send', { tenantId: 'bench', phone });
      const v = await post(origin, '/customers/auth/otp/verify', { tenantId: 'bench', phone, otp: codes.get(phone) });
      await post(origin, '/customers/auth/pin/set', { tenantId: 'bench', phone, pin: '482915', verificationToken: v.body.verificationToken });
    }
    // Warm-up: keys, secrets, connections.
    for (const phone of phones.slice(0, 4)) await post(origin, '/customers/auth/login', { tenantId: 'bench', phone, pin: '482915' });

    const latencies: number[] = [];
    let next = 0;
    let failures = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: clients }, async () => {
      while (next < total) {
        const phone = phones[next++ % phones.length] as string;
        const t0 = performance.now();
        const r = await post(origin, '/customers/auth/login', { tenantId: 'bench', phone, pin: '482915' });
        latencies.push(performance.now() - t0);
        if (r.status !== 200) failures++;
      }
    }));
    const seconds = (performance.now() - started) / 1000;

    const hasher = new PinHasher();
    const pepper = randomBytes(32);
    const stored = await hasher.hash('482915', pepper);
    const alone: number[] = [];
    for (let i = 0; i < 30; i++) {
      const t0 = performance.now();
      await hasher.verify('482915', pepper, stored);
      alone.push(performance.now() - t0);
    }
    const loaded: number[] = [];
    await Promise.all(Array.from({ length: clients }, async () => {
      for (let i = 0; i < 8; i++) {
        const t0 = performance.now();
        await hasher.verify('482915', pepper, stored);
        loaded.push(performance.now() - t0);
      }
    }));
    const p = kdfVersions[currentKdfVersion];
    process.stdout.write([
      `identity login bench: ${total} logins, ${clients} concurrent clients, ${availableParallelism()} CPUs, argon2id m=${p?.memoryKiB} KiB t=${p?.timeCost} p=${p?.parallelism}, ${hasher.gate.limit} concurrent hashes`,
      `  login (HTTP, full path incl. lockout counters, session, audit): ${fmt(latencies)}  ${(total / seconds).toFixed(1)} logins/s  failures ${failures}`,
      `  PIN verification alone, one at a time:       ${fmt(alone)}`,
      `  PIN verification, ${clients} concurrent (incl. queue): ${fmt(loaded)}`,
      `  SPEC 8 target: PIN verification p99 < 300 ms`,
      '',
    ].join('\n'));
    core.server.close();
  } finally {
    await db.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${(err as Error).stack}\n`);
  process.exit(1);
});
