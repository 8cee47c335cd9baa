/**
 * Credentials for the OpenAPI fuzz run (test/fuzz/run.sh; issue 13 item 8), from a running
 * stack's development data: for each credential the edge's route table names (edge/routes.ts),
 * the headers that authenticate as it and the operations of `/v1/openapi.json` that need it.
 *
 *   npx tsx test/fuzz/prepare.ts <gateway-url> <data-dir> <out-dir>
 *
 * writes `<out-dir>/<credential>.args`: schemathesis CLI arguments, one a line (`-H`, a header,
 * ..., `--include-operation-id-regex`, a pattern). Customers sign up through the gateway (OTP
 * from the dev SMS inbox), the demo agent signs in with its device key, the core client gets a
 * client-credentials token; staff routes use the admin service token and USSD the ussd one.
 * Access tokens live 10 minutes: run this again before each pass.
 */
import { createPrivateKey, randomInt, sign, type JsonWebKey } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { proofMessage } from '../../core/agents/device.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { callRetrying, signUpCustomer } from '../helpers/gateway.ts';
import type { Res } from '../helpers/http.ts';

type Json = Record<string, any>;

const argv = process.argv.slice(2);
if (argv.length !== 3) throw new Error('usage: prepare.ts <gateway-url> <data-dir> <out-dir>');
const [gw, data, out] = argv as [string, string, string];

function must(r: Res, status: number, what: string): Json {
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${r.text}`);
  return r.json as Json;
}

async function customerHeaders(): Promise<Record<string, string>> {
  const device = 'fuzz-device-1';
  const { accessToken } = await signUpCustomer(
    gw,
    data,
    `+2547${String(randomInt(10_000_000, 99_999_999))}`,
    '482615',
    device,
  );
  return { Authorization: `Bearer ${accessToken}`, 'X-Device-Id': device };
}

async function agentHeaders(demo: Json): Promise<Record<string, string>> {
  const a = demo.agent as Json;
  const key = createPrivateKey({ key: a.devicePrivateJwk as JsonWebKey, format: 'jwk' });
  const timestamp = String(Date.now());
  const signature = sign(
    null,
    Buffer.from(proofMessage('agent-login', a.tenantId, a.agentCode, a.deviceId, timestamp)),
    key,
  ).toString('base64url');
  const login = must(
    await callRetrying(gw, 'POST', '/v1/agent/auth/login', {
      json: {
        tenantId: a.tenantId,
        agentCode: a.agentCode,
        pin: a.pin,
        device: { deviceId: a.deviceId, timestamp, signature },
      },
    }),
    200,
    'agent login',
  );
  return { Authorization: `Bearer ${login.accessToken}`, 'X-Device-Id': a.deviceId };
}

async function coreClientHeaders(demo: Json): Promise<Record<string, string>> {
  const c = demo.coreClient as Json;
  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    client_id: c.clientId,
    client_secret: c.clientSecret,
    scope: (c.scopes as string[]).join(' '),
  });
  const t = must(
    await callRetrying(gw, 'POST', '/oauth2/token', {
      body: form.toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    }),
    200,
    'core client token',
  );
  return { Authorization: `Bearer ${t.access_token}` };
}

/**
 * Operations that end the pass's own session or change its tenant (the fuzzer tries the
 * document's example tenant, `demo`): fuzzed last, in passes of their own.
 */
const late = new Set(['customerLogout', 'agentLogout', 'suspendTenant', 'updateTenant', 'activateTenant']);

async function main(): Promise<void> {
  const demo = JSON.parse(await readFile(join(data, 'demo.json'), 'utf8')) as Json;
  const doc = must(await callRetrying(gw, 'GET', '/v1/openapi.json'), 200, 'openapi document');
  const resolve = buildRouteTable(routeDeclarations);
  const byCredential = new Map<string, string[]>();
  for (const [path, ops] of Object.entries(doc.paths as Json)) {
    for (const [method, op] of Object.entries(ops as Json)) {
      const credential =
        resolve(method.toUpperCase(), path.replace(/\{[^}]+\}/g, 'x')).route?.credential ?? 'public';
      byCredential.set(credential, [
        ...(byCredential.get(credential) ?? []),
        (op as Json).operationId as string,
      ]);
    }
  }
  const headersOf: Record<string, () => Promise<Record<string, string>>> = {
    public: async () => ({}),
    staff: async () => ({ Authorization: `Bearer ${demo.serviceTokens.admin.token}` }),
    service: async () => ({ Authorization: `Bearer ${demo.serviceTokens.ussd.token}` }),
    'core-client': () => coreClientHeaders(demo),
    customer: customerHeaders,
    agent: () => agentHeaders(demo),
    scim: async () => ({ Authorization: `Bearer ${(demo.scim as Json).token}` }),
  };
  await mkdir(out, { recursive: true });
  for (const [credential, all] of byCredential) {
    const make = headersOf[credential];
    if (!make) throw new Error(`no credential for ${credential}`);
    const headers = Object.entries(await make()).flatMap(([k, v]) => ['-H', `${k}: ${v}`]);
    for (const [suffix, ids] of [
      ['', all.filter((id) => !late.has(id))],
      ['-late', all.filter((id) => late.has(id))],
    ] as const) {
      if (ids.length === 0) continue;
      const args = [...headers, '--include-operation-id-regex', `^(${ids.join('|')})$`];
      await writeFile(join(out, `${credential}${suffix}.args`), `${args.join('\n')}\n`, { mode: 0o600 });
      process.stdout.write(`${credential}${suffix}: ${ids.length} operations\n`);
    }
  }
}

await main();
