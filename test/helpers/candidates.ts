/**
 * Candidate policy bundles for issue 22's tests, signed with the development key (trusted in
 * development) like a real release: the development bundle with its registry changed, or a
 * bundle compiled here from Rego with `opa build -t wasm`.
 */
import { execFile } from 'node:child_process';
import { createHash, createPrivateKey, type JsonWebKey, type KeyObject } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { entrypoint, verdictEntrypoint } from '../../policy/build.ts';
import { findOpa } from '../../policy/opa.ts';
import { defaultBundleDir } from '../../policy/runtime/bundle.ts';
import { signDocument } from '../../shared/signing.ts';

const run = promisify(execFile);
const sha256 = (b: string | Buffer) => createHash('sha256').update(b).digest('hex');

/** A candidate as POST /v1/policy/candidates takes it. */
export interface CandidateUpload {
  manifest: string;
  registry: string;
  wasm: string;
}

async function devKey(): Promise<KeyObject> {
  const jwk = JSON.parse(
    await readFile(new URL('../../policy/keys/dev-signing.private.jwk', import.meta.url), 'utf8'),
  ) as JsonWebKey;
  return createPrivateKey({ key: jwk, format: 'jwk' });
}

const distJson = async (name: string) =>
  JSON.parse(await readFile(join(defaultBundleDir, name), 'utf8')) as Record<string, unknown>;

/**
 * The development bundle with its registry changed by `change` and given `version`, signed again
 * (`resign: false` keeps the old registry signature: a forgery).
 */
export async function registryCandidate(
  change: (registry: Record<string, unknown>) => void,
  version: string,
  resign = true,
): Promise<CandidateUpload> {
  const key = await devKey();
  const { signature: oldSignature, ...registry } = await distJson('registry.json');
  change(registry);
  registry.version = version;
  const registryText = resign
    ? `${JSON.stringify(signDocument(registry, key), null, 2)}\n`
    : `${JSON.stringify({ ...registry, signature: oldSignature }, null, 2)}\n`;
  const { signature: _m, ...manifest } = await distJson('manifest.json');
  const signed = signDocument(
    { ...manifest, registry_version: version, registry_sha256: sha256(registryText) },
    key,
  );
  return {
    manifest: `${JSON.stringify(signed, null, 2)}\n`,
    registry: registryText,
    wasm: (await readFile(join(defaultBundleDir, 'policy.wasm'))).toString('base64'),
  };
}

/** Customers must sign in at AAL 3 to read balances: every allowed balance read flips. */
export const tightenAccountView = (registry: Record<string, unknown>) => {
  for (const p of registry.purposes as { name: string; min_aal: number }[])
    if (p.name === 'customer.account.view') p.min_aal = 3;
};

/**
 * A bundle compiled from `rego` (package payments.authz, defining `decision` and `verdict`) with
 * the development registry, named `policyVersion`, signed with the development key.
 */
export async function regoCandidate(rego: string, policyVersion: string): Promise<CandidateUpload> {
  const opa = findOpa();
  if (!opa) throw new Error('the opa CLI is needed (go install github.com/open-policy-agent/opa@v1.22.2)');
  const dir = await mkdtemp(join(tmpdir(), 'candidate-rego-'));
  try {
    await writeFile(join(dir, 'policy.rego'), rego);
    const tarball = join(dir, 'bundle.tar.gz');
    await run(
      opa,
      ['build', '-t', 'wasm', '-e', entrypoint, '-e', verdictEntrypoint, 'policy.rego', '-o', tarball],
      {
        cwd: dir,
      },
    );
    await run('tar', ['-xzf', tarball, '-C', dir, '/policy.wasm']);
    return await wasmCandidate(await readFile(join(dir, 'policy.wasm')), policyVersion);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A bundle of `wasm`, whatever it holds, with the development registry, named `policyVersion`, signed with the development key. */
export async function wasmCandidate(wasm: Buffer, policyVersion: string): Promise<CandidateUpload> {
  const registryText = await readFile(join(defaultBundleDir, 'registry.json'), 'utf8');
  const registry = JSON.parse(registryText) as { version: string };
  const manifest = signDocument(
    {
      policy_version: policyVersion,
      registry_version: registry.version,
      entrypoint,
      wasm_sha256: sha256(wasm),
      registry_sha256: sha256(registryText),
    },
    await devKey(),
  );
  return {
    manifest: `${JSON.stringify(manifest, null, 2)}\n`,
    registry: registryText,
    wasm: wasm.toString('base64'),
  };
}
