/**
 * Build the policy bundle into policy/dist/: compile the Rego in policy/src/ to WASM with the
 * `opa` CLI (entry points payments/authz/decision and, untraced, payments/authz/verdict), sign the purpose registry, write
 * the edge's route table from the route declarations (routes.json; shared/routes/, issue 21 item 1), and write a
 * signed manifest naming the hash of every source, the WASM, the registry and the route table.
 *   npx tsx policy/build.ts            build (needs opa)
 *   npx tsx policy/build.ts --check    exit 1 when dist/ is stale against the sources (no opa needed)
 *   npx tsx policy/build.ts --keep-revision
 *                                      also keep the bundle in dist/revisions/<policy_version>/, where
 *                                      cores find an older policy_ref to simulate (git-ignored here:
 *                                      a release keeps every revision in the bundle source it serves)
 *   npx tsx policy/build.ts --key release.private.jwk --out /srv/bundles/current [--keep-revision]
 *                                      a release: signed with its own Ed25519 key (a private JWK
 *                                      file), written where edges and cores read POLICY_BUNDLE
 * The default signing key is policy/keys/dev-signing.private.jwk (development only). Production
 * trusts only the keys in POLICY_TRUSTED_KEYS (a JWKS file with the release key's public half).
 */
import { execFileSync } from 'node:child_process';
import { createHash, createPrivateKey } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { routeTableDocument } from '../shared/routes/index.ts';
import { signDocument } from '../shared/signing.ts';
import { findOpa } from './opa.ts';

export const policyDir = fileURLToPath(new URL('./', import.meta.url));
export const distDir = join(policyDir, 'dist');
export const entrypoint = 'payments/authz/decision';
/** The same decision without the `reasons` trace: what the edge evaluates per Check (issue 18 item 1). */
export const verdictEntrypoint = 'payments/authz/verdict';
const registrySource = join(policyDir, 'data', 'registry', 'data.json');

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

/** The manifest's `sources` name the route declarations by this key (the hash of the table they make). */
export const routesSourceKey = '../shared/routes';

/** routes.json: the route declarations as data, written the same way every time. */
export function routeTableText(): string {
  return `${JSON.stringify(routeTableDocument(), null, 2)}\n`;
}

/** Every input of the bundle, path (relative to policy/) → sha256. */
export async function sourceHashes(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const src = join(policyDir, 'src');
  for (const name of (await readdir(src)).sort()) {
    if (!name.endsWith('.rego') || name.endsWith('_test.rego')) continue;
    out[relative(policyDir, join(src, name))] = sha256(await readFile(join(src, name)));
  }
  out[relative(policyDir, registrySource)] = sha256(await readFile(registrySource));
  // The table the declarations make, not their files' text: a reformatted file is not a new bundle.
  out[routesSourceKey] = sha256(routeTableText());
  return out;
}

/** The policy version is content-addressed: the same sources always give the same version. */
export function policyVersionOf(sources: Record<string, string>): string {
  const lines = Object.entries(sources)
    .filter(([p]) => p.endsWith('.rego'))
    .map(([p, h]) => `${p}:${h}\n`)
    .join('');
  return sha256(lines).slice(0, 16);
}

/** Names of sources whose hash differs from the committed manifest (empty when fresh). */
export async function staleSources(): Promise<string[]> {
  let manifest: { sources?: Record<string, string> };
  try {
    manifest = JSON.parse(await readFile(join(distDir, 'manifest.json'), 'utf8')) as typeof manifest;
  } catch {
    return ['dist/manifest.json missing'];
  }
  const now = await sourceHashes();
  const built = manifest.sources ?? {};
  const names = new Set([...Object.keys(now), ...Object.keys(built)]);
  return [...names].filter((n) => now[n] !== built[n]).sort();
}

/** Build the bundle into `outDir` (policy/dist by default). */
export async function build(
  outDir = distDir,
  quiet = false,
  keepRevision = false,
  keyFile = join(policyDir, 'keys', 'dev-signing.private.jwk'),
): Promise<{ policyVersion: string }> {
  const opa = findOpa();
  if (!opa)
    throw new Error(
      'the opa CLI is needed to build the bundle (go install github.com/open-policy-agent/opa@v1.22.2)',
    );
  const tmp = await mkdtemp(join(tmpdir(), 'policy-build-'));
  try {
    const tarball = join(tmp, 'bundle.tar.gz');
    // Relative source paths (cwd = policy/): the WASM embeds them, so a checkout anywhere builds the same bytes.
    execFileSync(
      opa,
      [
        'build',
        '-t',
        'wasm',
        '-e',
        entrypoint,
        '-e',
        verdictEntrypoint,
        '--ignore',
        '*_test.rego',
        'src',
        '-o',
        tarball,
      ],
      { cwd: policyDir, stdio: quiet ? 'ignore' : 'inherit' },
    );
    execFileSync('tar', ['-xzf', tarball, '-C', tmp], { stdio: 'ignore' });
    const wasm = await readFile(join(tmp, 'policy.wasm'));
    const key = createPrivateKey({
      key: JSON.parse(await readFile(keyFile, 'utf8')) as import('node:crypto').JsonWebKey,
      format: 'jwk',
    });
    const registry = JSON.parse(await readFile(registrySource, 'utf8')) as Record<string, unknown>;
    if (typeof registry.version !== 'string')
      throw new Error('registry needs a version (ISO 8601 timestamp)');
    const registryText = `${JSON.stringify(signDocument(registry, key), null, 2)}\n`;
    const sources = await sourceHashes();
    const routesText = routeTableText();
    const opaVersion = /Version: (\S+)/.exec(execFileSync(opa, ['version']).toString())?.[1] ?? 'unknown';
    const manifest = signDocument(
      {
        policy_version: policyVersionOf(sources),
        registry_version: registry.version,
        entrypoint,
        opa_version: opaVersion,
        sources,
        wasm_sha256: sha256(wasm),
        registry_sha256: sha256(registryText),
        routes_sha256: sha256(routesText),
      },
      key,
    );
    await mkdir(outDir, { recursive: true });
    await writeFile(join(outDir, 'policy.wasm'), wasm);
    await writeFile(join(outDir, 'registry.json'), registryText);
    await writeFile(join(outDir, 'routes.json'), routesText);
    await writeFile(join(outDir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    if (keepRevision) {
      const kept = join(outDir, 'revisions', manifest.policy_version);
      await mkdir(kept, { recursive: true });
      for (const name of ['policy.wasm', 'registry.json', 'routes.json', 'manifest.json'])
        await writeFile(join(kept, name), await readFile(join(outDir, name)));
    }
    if (!quiet)
      process.stdout.write(
        `built policy ${manifest.policy_version} (registry ${String(registry.version)}) into ${outDir}\n`,
      );
    return { policyVersion: manifest.policy_version };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** The value after a `--flag` on the command line. */
function argValue(flag: string): string | undefined {
  const i = process.argv.indexOf(flag);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const run = process.argv.includes('--check')
    ? staleSources().then((stale) => {
        if (stale.length > 0) {
          process.stderr.write(
            `policy/dist is stale; rebuild with \`npx tsx policy/build.ts\`: ${stale.join(', ')}\n`,
          );
          process.exit(1);
        }
        process.stdout.write('policy/dist is up to date\n');
      })
    : build(
        argValue('--out') ?? distDir,
        false,
        process.argv.includes('--keep-revision'),
        argValue('--key'),
      ).then(() => undefined);
  run.catch((err: unknown) => {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(1);
  });
}
