/** A core on a fresh database with an injected clock, a capturing SMS sender and agent helpers. */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { randomBytes } from 'node:crypto';
import { buildCore } from '../../core/app.ts';
import { identityDeps, type IdentityOptions } from '../../core/identity/context.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { provisionAgent, type ProvisionedAgent } from '../../core/agents/provision.ts';
import { proofMessage, type ProofPurpose } from '../../core/agents/device.ts';
import { platformAccounts } from '../../core/agents/ledger.ts';
import type { Db } from '../../shared/db/pool.ts';
import { CapturingSender, freshIp } from '../identity/harness.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, serve, type Res } from '../helpers/http.ts';
import { testEdgeSecrets, viaEdge } from '../helpers/edge-auth.ts';

export interface Device {
  id: string;
  key: KeyObject;
  publicX: string;
}

export interface AgentLogin {
  accessToken: string;
  refreshToken: string;
  sessionId: string;
  agentId: string;
}

export interface TestAgent extends ProvisionedAgent {
  code: string;
  phone: string;
  pin: string;
  tenantId: string;
  device?: Device;
}

export interface AgentHarness {
  origin: string;
  tdb: TestDb;
  sms: CapturingSender;
  clock: { t: number };
  post(path: string, json: unknown, headers?: Record<string, string>): Promise<Res>;
  get(path: string, headers?: Record<string, string>): Promise<Res>;
  agent(tenantId: string, code: string, phone: string, opts?: { pin?: string }): Promise<TestAgent>;
  newDevice(): Device;
  proof(
    purpose: ProofPurpose,
    a: TestAgent,
    d: Device,
    at?: number,
  ): { deviceId: string; timestamp: string; signature: string };
  bind(a: TestAgent): Promise<Device>;
  login(a: TestAgent): Promise<AgentLogin>;
  fundFloat(a: TestAgent, amount: string): Promise<void>;
  close(): Promise<void>;
}

export async function startAgentHarness(
  tenants: string[] = ['ta', 'tb'],
  /** The database as core and its key store see it (a test injecting failures wraps it). */
  dbOf: (db: Db) => Db = (db) => db,
  /** Identity options beyond the SMS sender (say, a smaller PIN queue). */
  identity: Omit<IdentityOptions, 'sms'> = {},
): Promise<AgentHarness> {
  const clock = { t: Date.parse('2026-03-02T08:00:00Z') };
  const now = () => clock.t;
  const metrics = createMetrics();
  const tdb = await freshDatabase({ metrics });
  for (const id of tenants)
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency) VALUES ($1, $1, 'KE', 'KES')`,
      [id],
    );
  const db = dbOf(tdb.db);
  const keys = new KeyStore(db, randomBytes(32), { now });
  const sms = new CapturingSender();
  const log = createLogger('silent');
  const core = buildCore({
    db,
    log,
    metrics,
    build: readBuildInfo(),
    keys,
    now,
    identity: { ...identity, sms },
    edgeSecrets: testEdgeSecrets,
    checkResponses: true,
  });
  const s = await serve(core.server);
  const idDeps = identityDeps({ db: tdb.db, keys, log, now }, { sms });
  const post = (path: string, json: unknown, headers: Record<string, string> = {}) =>
    call(s.origin, 'POST', path, { json, headers: viaEdge({ 'x-client-ip': freshIp(), ...headers }) });
  const get = (path: string, headers: Record<string, string> = {}) =>
    call(s.origin, 'GET', path, { headers: viaEdge(headers) });
  const newDevice = (): Device => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const x = publicKey.export({ format: 'jwk' }).x as string;
    return { id: '', key: privateKey, publicX: x };
  };
  const proof = (purpose: ProofPurpose, a: TestAgent, d: Device, at = clock.t) => {
    const timestamp = String(at);
    const signature = sign(
      null,
      Buffer.from(proofMessage(purpose, a.tenantId, a.code, d.id, timestamp)),
      d.key,
    ).toString('base64url');
    return { deviceId: d.id, timestamp, signature };
  };
  const h: AgentHarness = {
    origin: s.origin,
    tdb,
    sms,
    clock,
    post,
    get,
    newDevice,
    proof,
    async agent(tenantId, code, phone, opts = {}) {
      const pin = opts.pin ?? '4826';
      const p = await provisionAgent(
        tdb.db,
        idDeps,
        { tenantId, code, phone, name: `Agent ${code}`, pin, currency: 'KES' },
        clock.t,
      );
      return { ...p, code, phone, pin, tenantId };
    },
    async bind(a) {
      const r1 = await post('/v1/agent/auth/otp/request', { tenantId: a.tenantId, agentCode: a.code });
      if (r1.status !== 202) throw new Error(`otp/request ${r1.status} ${r1.text}`);
      const r2 = await post('/v1/agent/auth/otp/verify', {
        tenantId: a.tenantId,
        agentCode: a.code,
        otp: sms.lastCode(a.phone),
      });
      if (r2.status !== 200) throw new Error(`otp/verify ${r2.status} ${r2.text}`);
      const d = newDevice();
      const r3 = await post('/v1/agent/auth/device-bind', {
        tenantId: a.tenantId,
        agentCode: a.code,
        bindToken: r2.json.bindToken,
        publicKey: d.publicX,
      });
      if (r3.status !== 201) throw new Error(`device-bind ${r3.status} ${r3.text}`);
      d.id = r3.json.deviceId;
      a.device = d;
      return d;
    },
    async login(a) {
      const d = a.device ?? (await h.bind(a));
      const r = await post('/v1/agent/auth/login', {
        tenantId: a.tenantId,
        agentCode: a.code,
        pin: a.pin,
        device: proof('agent-login', a, d),
      });
      if (r.status !== 200) throw new Error(`login ${r.status} ${r.text}`);
      return r.json as AgentLogin;
    },
    async fundFloat(a, amount) {
      // Test fixture: money enters from the tenant settlement account through the ledger.
      await tdb.db.tx(async (q) => {
        const pa = await platformAccounts(q, a.tenantId, 'KES', clock.t);
        const { rows } = await q.query<{ r: unknown }>('SELECT ledger_apply($1::jsonb) AS r', [
          JSON.stringify([
            {
              op: 'post',
              tenant: a.tenantId,
              id: crypto.randomUUID(),
              transaction_id: crypto.randomUUID(),
              type: 'FUNDING',
              currency: 'KES',
              entries: [
                { account_id: pa.settlement, side: 'debit', amount, currency: 'KES' },
                { account_id: a.floatAccountId, side: 'credit', amount, currency: 'KES' },
              ],
              description: 'test float',
              metadata: {},
            },
          ]),
        ]);
        const r = (rows[0]?.r as { ok: boolean }[] | undefined)?.[0];
        if (!r?.ok) throw new Error(`funding failed ${JSON.stringify(rows[0]?.r)}`);
      });
    },
    async close() {
      await s.close();
      await tdb.drop();
    },
  };
  return h;
}

export const bearer = (token: string, extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${token}`,
  ...extra,
});

/** The USSD agent menu, as the USSD gateway calls it for the agent's phone (`text`: the answers so far). */
export const ussdAgentMenu = (h: AgentHarness, a: TestAgent, text: string, sessionId: string): Promise<Res> =>
  call(h.origin, 'POST', '/v1/ussd/agent/menu', {
    body: new URLSearchParams({ sessionId, serviceCode: '*384*7#', phoneNumber: a.phone, text }).toString(),
    headers: viaEdge({
      'content-type': 'application/x-www-form-urlencoded',
      'x-tenant-id': a.tenantId,
      'x-principal-id': 'service-token:ussd-gw',
      'x-roles': 'ussd',
    }),
  });
