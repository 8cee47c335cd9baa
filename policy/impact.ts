/**
 * What would my change flip? (issue 22 item 4) Builds the candidate bundle from policy/src (as
 * build.ts does), signs it with the author's key, uploads it (POST /v1/policy/candidates),
 * starts a replay of the recorded decisions of a window (POST /v1/policy/impact), polls the job
 * and prints the impact table.
 *   npx tsx policy/impact.ts --candidate policy/dist --since 1h --gateway http://127.0.0.1:8000 --token-file ~/.payments-token
 *     --candidate DIR   where the candidate is built (default: a temporary directory)
 *     --no-build        submit the signed bundle already in --candidate as it is
 *     --key FILE        the author's Ed25519 private JWK (default: the development key)
 *     --since 1h|30m|2d|<RFC 3339>   window start; --until <RFC 3339> (default now)
 *     --token-file FILE a staff access token (roles policy_author, ops or admin); never on the command line
 *     --json            print the job as JSON instead of the table
 * Exit status: 0 when the job finished, 1 on any error.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { build } from './build.ts';

function argValue(flag: string): string | undefined {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** `1h`, `30m`, `2d` before `now`, or an RFC 3339 instant. */
export function parseSince(v: string, now = Date.now()): string {
  const rel = /^(\d+)([mhd])$/.exec(v);
  if (rel)
    return new Date(
      now - Number(rel[1]) * { m: 60_000, h: 3_600_000, d: 86_400_000 }[rel[2] as 'm' | 'h' | 'd'],
    ).toISOString();
  if (Number.isNaN(Date.parse(v))) throw new Error(`--since ${v}: use 1h, 30m, 2d or an RFC 3339 time`);
  return new Date(v).toISOString();
}

async function api(
  gateway: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await request(new URL(path, gateway), {
    method: method as 'GET' | 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      'x-request-id': randomUUID(),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.body.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    json = { message: text.slice(0, 200) };
  }
  return { status: res.statusCode, json };
}

interface Group {
  change: string;
  purpose: string;
  route: string;
  reason: string;
  count: number;
}
interface Sample {
  change: string;
  route: string;
  decision_id: string;
  recorded: { allow: boolean; code: string };
  candidate: { allow: boolean; code: string } | null;
}

/** The impact table as text: totals, then the flips by purpose, route and reason, then samples. */
export function formatImpact(job: {
  status: string;
  policy_ref: string;
  since: string;
  until: string;
  result: Record<string, unknown>;
}): string {
  const r = job.result as {
    scanned: number;
    unchanged: number;
    allow_to_deny: number;
    deny_to_allow: number;
    errors: number;
    drift: number;
    complete: boolean;
    stopped?: string;
    groups: Group[];
    samples: Sample[];
  };
  const lines = [
    `candidate ${job.policy_ref}: ${r.scanned} recorded decisions from ${job.since} to ${job.until}${r.complete ? '' : ` (stopped early: ${r.stopped ?? job.status})`}`,
    `  unchanged ${r.unchanged}   allow→deny ${r.allow_to_deny}   deny→allow ${r.deny_to_allow}   no decision ${r.errors}${r.drift ? `   not reproduced by their own version ${r.drift}` : ''}`,
  ];
  const flips = r.groups.filter((g) => g.change !== 'unchanged').sort((a, b) => b.count - a.count);
  if (flips.length > 0) {
    lines.push(
      '',
      `  ${'change'.padEnd(14)}${'count'.padStart(7)}  ${'purpose'.padEnd(28)}${'route'.padEnd(40)}reason`,
    );
    for (const g of flips)
      lines.push(
        `  ${g.change.replace(/_to_/, '→').padEnd(14)}${String(g.count).padStart(7)}  ${g.purpose.padEnd(28)}${g.route.padEnd(40)}${g.reason}`,
      );
  }
  if (r.samples.length > 0) {
    lines.push('', '  samples (inputs pseudonymised; full traces with --json):');
    const verdict = (v: { allow: boolean; code: string } | null) =>
      v ? `${v.allow ? 'allow' : 'deny'} ${v.code}` : 'no decision';
    for (const s of r.samples)
      lines.push(
        `    ${s.decision_id}  ${s.route}  recorded ${verdict(s.recorded)} → candidate ${verdict(s.candidate)}`,
      );
  }
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  const gateway = argValue('--gateway') ?? 'http://127.0.0.1:8000';
  const tokenFile = argValue('--token-file');
  if (!tokenFile)
    throw new Error(
      '--token-file FILE is required (a staff access token with the policy_author, ops or admin role)',
    );
  const token = (await readFile(tokenFile, 'utf8')).trim();
  const since = parseSince(argValue('--since') ?? '1h');
  const until = argValue('--until');
  const given = argValue('--candidate');
  const dir = given ?? (await mkdtemp(join(tmpdir(), 'policy-candidate-')));
  try {
    if (!process.argv.includes('--no-build')) await build(dir, true, false, argValue('--key'));
    const [manifest, registry, wasm] = await Promise.all(
      ['manifest.json', 'registry.json', 'policy.wasm'].map((f) => readFile(join(dir, f))),
    );
    const up = await api(gateway, token, 'POST', '/v1/policy/candidates', {
      manifest: manifest?.toString('utf8'),
      registry: registry?.toString('utf8'),
      wasm: wasm?.toString('base64'),
    });
    if (up.status !== 200 && up.status !== 201)
      throw new Error(
        `upload refused: ${up.status} ${String(up.json.code ?? '')} ${String(up.json.message ?? '')}`,
      );
    const ref = String(up.json.policy_ref);
    const started = await api(gateway, token, 'POST', '/v1/policy/impact', {
      policy_ref: ref,
      since,
      ...(until ? { until: new Date(until).toISOString() } : {}),
    });
    if (started.status !== 202)
      throw new Error(
        `impact refused: ${started.status} ${String(started.json.code ?? '')} ${String(started.json.message ?? '')}`,
      );
    let job = started.json;
    while (job.status === 'queued' || job.status === 'running') {
      await new Promise((r) => setTimeout(r, 500));
      const polled = await api(gateway, token, 'GET', `/v1/policy/impact/${String(started.json.id)}`);
      if (polled.status !== 200)
        throw new Error(`poll failed: ${polled.status} ${String(polled.json.code ?? '')}`);
      job = polled.json;
    }
    if (job.status === 'failed') throw new Error(`impact job failed: ${String(job.error)}`);
    process.stdout.write(
      process.argv.includes('--json')
        ? `${JSON.stringify(job, null, 2)}\n`
        : formatImpact(job as Parameters<typeof formatImpact>[0]),
    );
  } finally {
    if (!given) await rm(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  });
}
