/** A core with identity on a fresh database, an injected clock and a capturing SMS sender. */
import { randomBytes } from 'node:crypto';
import { buildCore } from '../../core/app.ts';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import type { SmsMessage, SmsSender } from '../../core/identity/sms.ts';
import type { IdentityOptions } from '../../core/identity/context.ts';
import { KeyStore } from '../../core/keys/keys.ts';
import { readBuildInfo } from '../../core/platform/build-info.ts';
import { createLogger } from '../../shared/log.ts';
import { createMetrics } from '../../shared/metrics.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call, serve, type Res } from '../helpers/http.ts';
import { testEdgeSecrets, viaEdge } from '../helpers/edge-auth.ts';

/** Test double: keeps every message; the test reads codes from here, never from an API. */
export class CapturingSender implements SmsSender {
  readonly sent: SmsMessage[] = [];
  async send(_q: Queryable, msg: SmsMessage): Promise<void> {
    this.sent.push(msg);
  }
  lastCode(to: string): string {
    const m = [...this.sent].reverse().find((x) => x.to === to && x.code !== undefined);
    if (!m?.code) throw new Error(`no code sent to ${to}`);
    return m.code;
  }
}

export interface Harness {
  origin: string;
  tdb: TestDb;
  keys: KeyStore;
  sms: CapturingSender;
  clock: { t: number };
  post(path: string, json: unknown, headers?: Record<string, string>): Promise<Res>;
  get(path: string, headers?: Record<string, string>): Promise<Res>;
  onboard(tenantId: string, phone: string, pin: string): Promise<Tokens>;
  close(): Promise<void>;
}

export interface Tokens {
  accessToken: string;
  refreshToken: string;
  sessionId: string;
  aal: number;
  expiresIn: number;
}

let ipSeq = 0;
/** A fresh source address, so per-address counters of one test do not leak into another. */
export function freshIp(): string {
  ipSeq++;
  return `10.${(ipSeq >> 16) & 255}.${(ipSeq >> 8) & 255}.${ipSeq & 255}`;
}

export async function startHarness(
  tenants: { id: string; security?: Record<string, unknown> }[] = [{ id: 'ta' }, { id: 'tb' }],
  identity: Omit<IdentityOptions, 'sms'> = {},
  /** The database as core and its key store see it (a test injecting failures wraps it). */
  dbOf: (db: Db) => Db = (db) => db,
): Promise<Harness> {
  const clock = { t: Date.parse('2026-03-01T08:00:00Z') };
  const now = () => clock.t;
  const metrics = createMetrics();
  const tdb = await freshDatabase({ metrics });
  for (const t of tenants) {
    await tdb.db.query(
      `INSERT INTO tenants (id, name, country, base_currency, security) VALUES ($1, $1, 'KE', 'KES', $2)`,
      [t.id, JSON.stringify(t.security ?? {})],
    );
  }
  const db = dbOf(tdb.db);
  const keys = new KeyStore(db, randomBytes(32), { now });
  const sms = new CapturingSender();
  const core = buildCore({
    db,
    log: createLogger('silent'),
    metrics,
    build: readBuildInfo(),
    keys,
    now,
    identity: { ...identity, sms },
    edgeSecrets: testEdgeSecrets,
    checkResponses: true,
  });
  const s = await serve(core.server);
  const post = (path: string, json: unknown, headers: Record<string, string> = {}) =>
    call(s.origin, 'POST', path, { json, headers: viaEdge({ 'x-client-ip': freshIp(), ...headers }) });
  const get = (path: string, headers: Record<string, string> = {}) =>
    call(s.origin, 'GET', path, { headers: viaEdge(headers) });
  const onboard = async (tenantId: string, phone: string, pin: string): Promise<Tokens> => {
    await setPinByOtp(post, sms, tenantId, phone, pin);
    const l = await post('/customers/auth/login', { tenantId, phone, pin });
    if (l.status !== 200) throw new Error(`login ${l.status} ${l.text}`);
    return l.json as Tokens;
  };
  return {
    origin: s.origin,
    tdb,
    keys,
    sms,
    clock,
    post,
    get,
    onboard,
    async close() {
      await s.close();
      await tdb.drop();
    },
  };
}

/** A PIN set (or reset) through `post` by the OTP step: a code sent to the phone and verified, then pin/set. */
export async function setPinByOtp(
  post: (path: string, json: unknown) => Promise<Res>,
  sms: CapturingSender,
  tenantId: string,
  phone: string,
  pin: string,
): Promise<void> {
  const sent = await post('/customers/auth/otp/send', { tenantId, phone });
  if (sent.status !== 202) throw new Error(`otp/send ${sent.status} ${sent.text}`);
  const v = await post('/customers/auth/otp/verify', { tenantId, phone, otp: sms.lastCode(phone) });
  if (v.status !== 200) throw new Error(`otp/verify ${v.status} ${v.text}`);
  const set = await post('/customers/auth/pin/set', {
    tenantId,
    phone,
    pin,
    verificationToken: v.json.verificationToken,
  });
  if (set.status !== 204) throw new Error(`pin/set ${set.status} ${set.text}`);
}

export const bearer = (token: string, extra: Record<string, string> = {}) => ({
  authorization: `Bearer ${token}`,
  ...extra,
});

/** Count rows of a table (for "nothing stored half-way"). */
export async function count(h: Harness, table: string): Promise<number> {
  const { rows } = await h.tdb.db.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${table}`);
  return Number(rows[0]?.n ?? 0);
}

/**
 * Call core; when it answers 403 MFA_REQUIRED, step up by SMS OTP against the challenge it
 * gave (bound to this request) and repeat the request once with the AAL 2 token.
 */
export async function withStepUp(
  h: Harness,
  token: string,
  phone: string,
  method: string,
  path: string,
  json?: unknown,
): Promise<{ first: Res; final: Res; token: string }> {
  const send = (t: string) =>
    call(h.origin, method, path, { ...(json === undefined ? {} : { json }), headers: bearer(t) });
  const first = await send(token);
  if (!(first.status === 403 && first.json?.code === 'MFA_REQUIRED')) return { first, final: first, token };
  const sent = await h.post(
    '/customers/auth/stepup/otp',
    { challengeToken: first.json.challenge },
    bearer(token),
  );
  if (sent.status !== 202) throw new Error(`stepup/otp ${sent.status} ${sent.text}`);
  const up = await h.post(
    '/customers/auth/stepup/complete',
    { challengeToken: first.json.challenge, otp: h.sms.lastCode(phone) },
    bearer(token),
  );
  if (up.status !== 200) throw new Error(`stepup/complete ${up.status} ${up.text}`);
  return { first, final: await send(up.json.accessToken), token: up.json.accessToken };
}
