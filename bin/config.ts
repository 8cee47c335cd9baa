/**
 * Stack configuration, read once from the environment, validated (every error listed), frozen.
 * With bin/services/common.ts, the only modules that read process.env.
 */
import { resolve } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

const Port = Type.Integer({ minimum: 0, maximum: 65535 });

export const ConfigSchema = Type.Object({
  GATEWAY_PORT: Port,
  CORE_PORT: Port,
  AUTHZ_PORT: Port,
  DATA_DIR: Type.String({ minLength: 1 }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  /** base64 of 32 bytes; encrypts private key material at rest. Development: generated into DATA_DIR. */
  MASTER_KEY: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9+/]{43}=$' })),
  /** Where the edge loads the signed policy bundle from: a directory or an http(s) URL. */
  POLICY_BUNDLE: Type.Optional(Type.String({ minLength: 1 })),
  /**
   * Issue 17 item 5: the OAuth authorization server's issuer (RFC 8414), e.g. https://auth.example.com;
   * client-credentials tokens carry it as `iss`. Unset: discovery names the URL it was asked on
   * and those tokens keep the tenant-scoped issuer.
   */
  ISSUER_URL: Type.Optional(Type.String({ pattern: '^https?://[^\\s?#]+[^/\\s?#]$' })),
  /** Staff passkeys' relying-party ID (default `localhost`: browsers refuse an IP address). */
  WEBAUTHN_RP_ID: Type.Optional(Type.String({ pattern: '^[a-z0-9.-]{1,253}$' })),
  /** Comma-separated origins of the staff page; default `http://localhost:<gateway port>`. */
  WEBAUTHN_ORIGINS: Type.Optional(
    Type.String({
      pattern: '^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(,https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?)*$',
    }),
  ),
  /** Issue 20 item 2: where this deployment runs (ISO 3166 alpha-2); labels a new database cluster. */
  DEPLOYMENT_REGION: Type.String({ pattern: '^[A-Z]{2}$' }),
  /** Issue 22 item 1: fraction of decisions whose policy input is recorded for replay (0 turns it off). */
  DECISION_INPUTS_SAMPLE: Type.String({ pattern: '^(0(\\.[0-9]+)?|1(\\.0+)?)$' }),
  /** Hours recorded inputs are kept at most (a purpose's retention_days shortens it). */
  DECISION_INPUTS_RETENTION_HOURS: Type.String({ pattern: '^[1-9][0-9]{0,5}$' }),
  /** Size cap of the recorded inputs in MiB; the oldest hours are dropped past it. */
  DECISION_INPUTS_MAX_MB: Type.String({ pattern: '^[1-9][0-9]{0,6}$' }),
  LOG_LEVEL: Type.Union([
    Type.Literal('fatal'),
    Type.Literal('error'),
    Type.Literal('warn'),
    Type.Literal('info'),
    Type.Literal('debug'),
    Type.Literal('trace'),
    Type.Literal('silent'),
  ]),
});

export interface Config {
  gatewayPort: number;
  corePort: number;
  authzPort: number;
  dataDir: string;
  databaseUrl: string | undefined;
  masterKey: string | undefined;
  policyBundle: string | undefined;
  issuerUrl: string | undefined;
  logLevel: Static<typeof ConfigSchema>['LOG_LEVEL'];
  webauthnRpId: string;
  /** Empty: the stack allows `http://localhost:<gateway port>` once it listens. */
  webauthnOrigins: string[];
  /** DEPLOYMENT_REGION (default KE, the demo tenant's country): labels the embedded cluster on first start. */
  deploymentRegion: string;
  /** Issue 22 item 1: decision inputs recorded for replay (sample 0: none). */
  decisionInputs: { sample: number; retentionHours: number; maxBytes: number };
}

const defaults = {
  GATEWAY_PORT: '8000',
  CORE_PORT: '8080',
  AUTHZ_PORT: '9191',
  DATA_DIR: './.data',
  LOG_LEVEL: 'info',
  DEPLOYMENT_REGION: 'KE',
  DECISION_INPUTS_SAMPLE: '1',
  DECISION_INPUTS_RETENTION_HOURS: '168',
  DECISION_INPUTS_MAX_MB: '1024',
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
  }
}

/** Read the configuration from `env`; throws ConfigError listing every problem. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Readonly<Config> {
  const raw: Record<string, unknown> = {};
  for (const key of Object.keys(ConfigSchema.properties)) {
    const value = env[key] === '' ? undefined : (env[key] ?? defaults[key as keyof typeof defaults]);
    if (value === undefined) continue;
    raw[key] = key.endsWith('_PORT') && /^\d+$/.test(value) ? Number(value) : value;
  }
  const problems = [...Value.Errors(ConfigSchema, raw)].map(
    (e) => `${e.path.slice(1)}: ${e.message} (got ${JSON.stringify(e.value)})`,
  );
  if (problems.length > 0) throw new ConfigError(problems);
  const c = raw as Static<typeof ConfigSchema>;
  return Object.freeze({
    gatewayPort: c.GATEWAY_PORT,
    corePort: c.CORE_PORT,
    authzPort: c.AUTHZ_PORT,
    dataDir: resolve(c.DATA_DIR),
    databaseUrl: c.DATABASE_URL,
    masterKey: c.MASTER_KEY,
    policyBundle: c.POLICY_BUNDLE,
    issuerUrl: c.ISSUER_URL,
    logLevel: c.LOG_LEVEL,
    webauthnRpId: c.WEBAUTHN_RP_ID ?? 'localhost',
    webauthnOrigins: (c.WEBAUTHN_ORIGINS ?? '').split(',').filter(Boolean),
    deploymentRegion: c.DEPLOYMENT_REGION,
    decisionInputs: {
      sample: Number(c.DECISION_INPUTS_SAMPLE),
      retentionHours: Number(c.DECISION_INPUTS_RETENTION_HOURS),
      maxBytes: Number(c.DECISION_INPUTS_MAX_MB) * 1024 * 1024,
    },
  });
}
