/**
 * Configuration of the separately deployed processes (`npm run migrate`, `core`, `edge`,
 * `gateway`, `bootstrap`): each reads only its own variables from the environment, validates
 * them at start (every problem listed), then freezes them. `npm start` keeps bin/config.ts.
 *
 * MODE=production refuses to start without its secrets and never writes one; MODE=development
 * (the default) generates any missing secret into DATA_DIR on first use, so processes sharing a
 * DATA_DIR agree (the edge gets its own keys there, never the master key).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseCidr } from '../shared/ip-ranges.ts';
import { parseKey } from '../shared/sealing.ts';
import { developmentRegion } from '../core/residency/cluster.ts';

export type Mode = 'development' | 'production';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export type ServiceKind = 'migrate' | 'core' | 'edge' | 'gateway' | 'bootstrap';

/** A secret given as base64 of 32 bytes (`openssl rand -base64 32`). */
const key32 = /^[A-Za-z0-9+/]{43}=$/;
const logLevels = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

interface Var {
  /** Which processes read it. */
  for: ServiceKind[];
  /** Required in production (development generates or defaults it). */
  productionRequired?: boolean;
  default?: string;
  check?: (value: string) => string | undefined;
  doc: string;
}

const port = (v: string) =>
  /^\d{1,5}$/.test(v) && Number(v) <= 65535 ? undefined : 'must be a port number (0-65535)';
const pgUrl = (v: string) => (/^postgres(ql)?:\/\//.test(v) ? undefined : 'must be a postgres:// URL');
const b64key = (v: string) => (key32.test(v) ? undefined : 'must be base64 of 32 bytes');
const b64keys = (v: string) =>
  v.split(',').every((k) => key32.test(k.trim()))
    ? undefined
    : 'must be base64 of 32 bytes (comma-separated when several)';
const hostPorts = (v: string) =>
  v.split(',').every((a) => /^[A-Za-z0-9.-]+:\d{1,5}$/.test(a.trim()))
    ? undefined
    : 'must be host:port[,host:port…]';
const origins = (v: string) =>
  v.split(',').every((o) => /^https?:\/\/[A-Za-z0-9.-]+(:\d{1,5})?$/.test(o.trim()))
    ? undefined
    : 'must be http://host:port[,…]';
const cidrs = (v: string) =>
  v.split(',').every((c) => parseCidr(c.trim()) !== undefined) ? undefined : 'must be CIDRs, comma-separated';
/**
 * The edge sends the secret as an HTTP header value, which proxies and parsers trim and which
 * cannot carry every character: a secret with spaces or non-ASCII would start and then match
 * nothing, so it is refused at start.
 */
const headerSafe = /^[\x21-\x7e]{32,}$/;
const edgeSecret = (v: string) =>
  headerSafe.test(v) ? undefined : 'must be at least 32 characters, visible ASCII without spaces';
const edgeSecrets = (v: string) =>
  v.split(',').every((s) => headerSafe.test(s.trim()))
    ? undefined
    : 'must be at least 32 characters, visible ASCII without spaces (comma-separated when several)';
const httpUrl = (v: string) => (/^https?:\/\//.test(v) ? undefined : 'must be an http(s) URL');

/** Every variable the services read, with the processes that read it (README "Running it as services"). */
export const serviceVars: Record<string, Var> = {
  MODE: {
    for: ['migrate', 'core', 'edge', 'gateway', 'bootstrap'],
    default: 'development',
    check: (v) =>
      v === 'development' || v === 'production' ? undefined : 'must be development or production',
    doc: '`production` refuses to start without its secrets',
  },
  LOG_LEVEL: {
    for: ['migrate', 'core', 'edge', 'gateway', 'bootstrap'],
    default: 'info',
    check: (v) => (logLevels.has(v) ? undefined : 'must be a pino level'),
    doc: 'log level',
  },
  DATABASE_URL: {
    for: ['migrate', 'core', 'edge', 'bootstrap'],
    productionRequired: true,
    check: pgUrl,
    doc: 'PostgreSQL (session-mode pooling: the edge LISTENs)',
  },
  DATA_DIR: {
    for: ['core', 'edge', 'bootstrap'],
    default: './.data',
    doc: 'development only: generated secrets and the SMS inbox',
  },
  MASTER_KEY: {
    for: ['core', 'bootstrap'],
    productionRequired: true,
    check: b64key,
    doc: 'opens private token keys and sealed secrets (core only)',
  },
  EDGE_SHARED_SECRET: {
    for: ['core', 'edge'],
    productionRequired: true,
    check: edgeSecret,
    doc: 'proves identity headers come from the edge',
  },
  EDGE_SHARED_SECRET_PREVIOUS: {
    for: ['core'],
    check: edgeSecrets,
    doc: 'accepted beside the current one while it rotates',
  },
  CHALLENGE_KEY: {
    for: ['core', 'edge'],
    productionRequired: true,
    check: b64keys,
    doc: 'signs step-up challenges (current first, then previous ones)',
  },
  API_KEY_SEAL_KEY: {
    for: ['core', 'edge'],
    productionRequired: true,
    check: b64key,
    doc: 'seals and opens API-key secrets',
  },
  POLICY_BUNDLE: {
    for: ['core', 'edge'],
    doc: 'signed bundle: directory or http(s) URL (default policy/dist)',
  },
  POLICY_TRUSTED_KEYS: {
    for: ['core', 'edge'],
    doc: 'JWKS file of trusted bundle signers (production: required; the development key is not trusted unless listed)',
    productionRequired: true,
  },
  // Issue 22 item 1: decision inputs recorded for replay by the edge's audit thread.
  DECISION_INPUT_KEY: {
    for: ['edge'],
    check: b64key,
    doc: 'base of the per-tenant keys recorded decision inputs are pseudonymised with (unset in production: nothing is recorded)',
  },
  DECISION_INPUTS_SAMPLE: {
    for: ['edge'],
    default: '1',
    check: (v) => (/^(0(\.[0-9]+)?|1(\.0+)?)$/.test(v) ? undefined : 'must be a fraction from 0 to 1'),
    doc: 'fraction of decisions whose input is recorded (0: none)',
  },
  DECISION_INPUTS_RETENTION_HOURS: {
    for: ['edge'],
    default: '168',
    check: (v) => (/^[1-9][0-9]{0,5}$/.test(v) ? undefined : 'must be a whole number of hours'),
    doc: "hours recorded inputs are kept at most (a purpose's retention_days shortens it)",
  },
  DECISION_INPUTS_MAX_MB: {
    for: ['edge'],
    default: '1024',
    check: (v) => (/^[1-9][0-9]{0,6}$/.test(v) ? undefined : 'must be a whole number of MiB'),
    doc: 'size cap of the recorded inputs; the oldest hours are dropped past it',
  },
  CORE_PORT: { for: ['core'], default: '8080', check: port, doc: 'core HTTP' },
  CORE_HOST: { for: ['core'], default: '127.0.0.1', doc: 'core listen address (0.0.0.0 in a container)' },
  AUTHZ_PORT: { for: ['edge'], default: '9191', check: port, doc: 'edge ext_authz gRPC (and gRPC health)' },
  AUTHZ_HOST: { for: ['edge'], default: '127.0.0.1', doc: 'edge listen address' },
  EDGE_METRICS_PORT: {
    for: ['edge'],
    default: '9464',
    check: port,
    doc: 'edge Prometheus metrics and /ready',
  },
  SMS_WEBHOOK_URL: {
    for: ['core'],
    productionRequired: true,
    check: httpUrl,
    doc: 'the SMS gateway codes are POSTed to',
  },
  SMS_WEBHOOK_SECRET: {
    for: ['core'],
    productionRequired: true,
    check: (v) => (v.startsWith('whsec_') ? undefined : 'must be a whsec_ secret'),
    doc: 'signs SMS webhook calls',
  },
  // Required in production (issue 17 attack): without it the accepted client-assertion `aud`, the
  // DPoP `htu` and the discovery document would follow the Host header a client sends.
  ISSUER_URL: {
    for: ['core', 'edge'],
    productionRequired: true,
    check: (v) =>
      /^https?:\/\/[^\s?#]+[^/\s?#]$/.test(v)
        ? undefined
        : 'must be an http(s) URL without query, fragment or trailing slash',
    doc: 'the public origin clients use, e.g. https://api.example.com: OAuth issuer (RFC 8414), discovery, client-assertion audience, DPoP `htu`, the `iss` of client-credentials tokens',
  },
  // Issue 20 item 2: no default in production, where a wrong guess would place tenants' data in the
  // wrong country; development falls back to developmentRegion (core/residency/cluster.ts).
  DEPLOYMENT_REGION: {
    for: ['migrate', 'core'],
    productionRequired: true,
    check: (v) => (/^[A-Z]{2}$/.test(v) ? undefined : 'must be an ISO 3166 alpha-2 code, e.g. KE'),
    doc: 'the region (ISO 3166 alpha-2) this deployment runs in; `migrate` labels a new database cluster with it, and tenants are placed by that label (README "Where a tenant\'s data lives")',
  },
  PRIVATE_TARGETS_ALLOWED: { for: ['core'], check: cidrs, doc: 'private CIDRs webhooks and SMS may reach' },
  RESPONSE_SCHEMA_CHECK: {
    for: ['core'],
    default: '0',
    check: (v) => (v === '0' || v === '1' ? undefined : 'must be 0 or 1'),
    doc: 'test suites only: answer 500 RESPONSE_SCHEMA_MISMATCH for a response its route does not declare (refused in production)',
  },
  BOOTSTRAP_TENANT_ID: {
    for: ['bootstrap'],
    default: 'operator',
    check: (v) => (/^[a-z0-9][a-z0-9-]{1,62}$/.test(v) ? undefined : 'must be a tenant id (a-z, 0-9, -)'),
    doc: "the platform operator's tenant id",
  },
  BOOTSTRAP_TENANT_NAME: {
    for: ['bootstrap'],
    default: 'Platform operator',
    doc: "the operator tenant's name",
  },
  BOOTSTRAP_COUNTRY: {
    for: ['bootstrap'],
    productionRequired: true,
    check: (v) => (/^[A-Z]{2}$/.test(v) ? undefined : 'must be an ISO 3166 alpha-2 code'),
    doc: "the operator's country",
  },
  BOOTSTRAP_CURRENCY: {
    for: ['bootstrap'],
    productionRequired: true,
    check: (v) => (/^[A-Z]{3}$/.test(v) ? undefined : 'must be an ISO 4217 code'),
    doc: "the operator's base currency",
  },
  WEBAUTHN_RP_ID: {
    for: ['core', 'bootstrap'],
    default: 'localhost',
    check: (v) =>
      /^[a-z0-9.-]{1,253}$/.test(v) && !/^[0-9.]+$/.test(v)
        ? undefined
        : 'must be a domain name (browsers refuse an IP address)',
    doc: "staff passkeys' relying-party ID: the domain staff open the sign-in page on",
  },
  WEBAUTHN_ORIGINS: {
    for: ['core', 'bootstrap'],
    default: 'http://localhost:8000',
    check: origins,
    doc: 'origins staff passkey ceremonies may come from (the public URL of the sign-in page; the bootstrap prints its link under the first)',
  },
  BOOTSTRAP_ADMIN_USER_NAME: {
    for: ['bootstrap'],
    default: 'admin',
    check: (v) => (/^[\x21-\x7e]{1,128}$/.test(v) ? undefined : 'must be 1-128 visible ASCII characters'),
    doc: "the first platform Admin's userName (a staff member; an identity provider's SCIM may provision the same name later)",
  },
  GATEWAY_PORT: { for: ['gateway'], default: '8000', check: port, doc: 'dev gateway' },
  AUTHZ_ADDRESSES: {
    for: ['gateway'],
    default: '127.0.0.1:9191',
    check: hostPorts,
    doc: 'edges the gateway spreads Checks over',
  },
  CORE_ORIGINS: {
    for: ['gateway'],
    default: 'http://127.0.0.1:8080',
    check: origins,
    doc: 'cores the gateway forwards to',
  },
};

export class ServiceConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
  }
}

export interface ServiceConfig {
  kind: ServiceKind;
  mode: Mode;
  /** The variables this process reads, validated; absent ones undefined. */
  values: Readonly<Record<string, string | undefined>>;
}

/** Read the variables of `kind` from `env`; throws ServiceConfigError listing every problem. */
export function loadServiceConfig(
  kind: ServiceKind,
  env: Record<string, string | undefined>,
): Readonly<ServiceConfig> {
  const problems: string[] = [];
  const values: Record<string, string | undefined> = {};
  const rawMode = env.MODE === '' || env.MODE === undefined ? 'development' : env.MODE;
  for (const [name, v] of Object.entries(serviceVars)) {
    if (!v.for.includes(kind)) continue;
    const given = env[name] === '' ? undefined : env[name];
    const value = given ?? v.default;
    if (value === undefined) {
      if (rawMode === 'production' && v.productionRequired)
        problems.push(`${name}: required in production (${v.doc})`);
      continue;
    }
    const why = v.check?.(value);
    if (why) problems.push(`${name}: ${why}`);
    values[name] = value;
  }
  // Issue 15 item 4: the response check turns a drifting response into a 500; a test aid, never production's.
  if (rawMode === 'production' && values.RESPONSE_SCHEMA_CHECK === '1')
    problems.push('RESPONSE_SCHEMA_CHECK: test suites only; refused in production');
  if (problems.length > 0) throw new ServiceConfigError(problems);
  return Object.freeze({ kind, mode: rawMode as Mode, values: Object.freeze(values) });
}

/**
 * A 32-byte secret: configured, or (development only) kept in DATA_DIR/<file>, created on first
 * use and shared by every process using that DATA_DIR. Production never reaches the file.
 */
export async function secretKey(config: ServiceConfig, name: string, file: string): Promise<Buffer> {
  const given = config.values[name];
  if (given) return parseKey(given.split(',')[0] as string, name);
  if (config.mode === 'production') throw new ServiceConfigError([`${name}: required in production`]);
  const dir = resolve(config.values.DATA_DIR ?? './.data');
  await mkdir(dir, { recursive: true });
  const path = join(dir, file);
  try {
    return parseKey(await readFile(path, 'utf8'), name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const key = randomBytes(32);
  await writeFile(path, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' }).catch(
    async (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
    },
  );
  return parseKey(await readFile(path, 'utf8'), name);
}

/** Every key of a comma-separated list (current first); development: the one kept in DATA_DIR. */
export async function secretKeys(config: ServiceConfig, name: string, file: string): Promise<Buffer[]> {
  const given = config.values[name];
  if (given) return given.split(',').map((k) => parseKey(k.trim(), name));
  return [await secretKey(config, name, file)];
}

/** A text secret (EDGE_SHARED_SECRET): configured, or in development kept in DATA_DIR/<file>. */
export async function secretText(config: ServiceConfig, name: string, file: string): Promise<string> {
  const given = config.values[name];
  if (given) return given;
  return (await secretKey(config, name, file)).toString('base64url');
}

/** DEPLOYMENT_REGION: required in production (checked at load), the development region otherwise. */
export function deploymentRegion(config: ServiceConfig): string {
  return config.values.DEPLOYMENT_REGION ?? developmentRegion;
}

/** The comma-separated list of a variable, trimmed, empty entries dropped. */
export function listOf(config: ServiceConfig, name: string): string[] {
  return (config.values[name] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}
