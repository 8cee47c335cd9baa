/**
 * opa-envoy-plugin, the comparison the authorization benchmark runs beside our edge: OPA's own
 * Envoy ext_authz gRPC server, given the same Rego (policy/src and its registry data) behind an
 * adapter (opa-envoy/adapter.rego) that does in Rego what the edge does in code.
 *
 * `go install …@version` cannot fetch it here: the install first reads the module's version list
 * (for deprecation notices) and this machine's module proxy refuses that list (403), while it
 * serves the pinned version itself. So the module is downloaded by version and built from the
 * module cache, once; later runs reuse the binary in GOPATH/bin.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { compileTemplate } from '../../shared/path-template.ts';
import { freePort } from '../../shared/net.ts';
import { policyDir } from '../../policy/build.ts';
import type { EdgeRoute } from '../../edge/routes.ts';

export const opaEnvoyPluginModule = 'github.com/open-policy-agent/opa-envoy-plugin';
export const opaEnvoyPluginVersion = 'v1.15.2-envoy';

const adapterDir = join(dirname(fileURLToPath(import.meta.url)), 'opa-envoy');

function gopathBin(name: string): string {
  return join(execFileSync('go', ['env', 'GOPATH']).toString().trim(), 'bin', name);
}

/** The plugin binary at the pinned version, built on first use (a minute or two, then cached). */
export function ensureOpaEnvoyPlugin(say: (line: string) => void): string {
  const bin = gopathBin('opa-envoy-plugin');
  const wanted = opaEnvoyPluginVersion.replace(/^v/, '').replace(/-envoy.*$/, '');
  if (existsSync(bin)) {
    const version = /Version: (\S+)/.exec(execFileSync(bin, ['version']).toString())?.[1];
    if (version === wanted) return bin;
  }
  say(`building opa-envoy-plugin ${opaEnvoyPluginVersion} (first run only)…`);
  const info = JSON.parse(
    execFileSync('go', [
      'mod',
      'download',
      '-json',
      `${opaEnvoyPluginModule}@${opaEnvoyPluginVersion}`,
    ]).toString(),
  ) as { Dir?: string; Error?: string };
  if (!info.Dir)
    throw new Error(
      `cannot download ${opaEnvoyPluginModule}@${opaEnvoyPluginVersion}: ${info.Error ?? 'no directory'}`,
    );
  execFileSync('go', ['build', '-o', bin, './cmd/opa-envoy-plugin'], {
    cwd: info.Dir,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return bin;
}

/**
 * The edge's route table as the adapter matches it: by method, then segment count, most
 * specific template first; segments are literals, whole-segment parameters, or patterns.
 */
export function routesForRego(routes: readonly EdgeRoute[]): Record<string, Record<string, unknown[]>> {
  const out: Record<string, Record<string, unknown[]>> = {};
  const sorted = routes
    .map((r) => ({ r, specificity: compileTemplate(r.template).specificity }))
    .sort((a, b) => b.specificity - a.specificity);
  for (const { r } of sorted) {
    const segments = r.template
      .split('/')
      .slice(1)
      .map((text) => {
        const whole = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/.exec(text);
        if (whole) return { param: whole[1] };
        if (!text.includes('{')) return { literal: text };
        const t = compileTemplate(text);
        return { pattern: t.source, params: t.paramNames };
      });
    const byCount = (out[r.method] ??= {});
    (byCount[String(segments.length)] ??= []).push({
      segments,
      purpose: r.purpose,
      resource: r.resource,
      action: r.action,
      credential: r.credential,
    });
  }
  return out;
}

/** What the edge reads from PostgreSQL, handed to the plugin as data (it has no database). */
export interface AdapterState {
  routes: Record<string, Record<string, unknown[]>>;
  /** tenant → JWKS JSON text (io.jwt.decode_verify takes the JWKS as a string). */
  jwks: Record<string, string>;
  tenants: Record<string, { status: string; security: Record<string, unknown> }>;
  sessions: Record<
    string,
    { tenant_id: string; subject_type: string; subject_id: string; revoked: boolean; last_seen_ns: number }
  >;
  /** subject id → relationship tuples, as the edge passes them to the policy. */
  tuples: Record<string, unknown[]>;
}

export interface RunningPlugin {
  grpcAddress: string;
  stop(): void;
}

export async function startOpaEnvoyPlugin(
  bin: string,
  dir: string,
  state: AdapterState,
): Promise<RunningPlugin> {
  const grpcPort = await freePort();
  const httpPort = await freePort();
  const dataFile = join(dir, 'bench-data.json');
  const metaFile = join(dir, 'bench-meta.json');
  const configFile = join(dir, 'opa-envoy.yaml');
  await writeFile(dataFile, JSON.stringify({ bench: state }));
  await writeFile(metaFile, JSON.stringify({ meta: { policy_version: 'opa-envoy-plugin' } }));
  // Decision logs off: the plugin's are a debugging aid, not a never-dropped audit trail.
  await writeFile(
    configFile,
    [
      'plugins:',
      '  envoy_ext_authz_grpc:',
      `    addr: 127.0.0.1:${grpcPort}`,
      '    path: envoy/authz/result',
      '    dry-run: false',
      '    enable-reflection: false',
      // Verified tokens are cached as the edge caches them (keyed by token and key).
      'caching:',
      '  inter_query_builtin_value_cache:',
      '    named:',
      '      io_jwt:',
      '        max_num_entries: 10000',
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(
    bin,
    [
      'run',
      '--server',
      '--log-level',
      'error',
      '--addr',
      `127.0.0.1:${httpPort}`,
      '--config-file',
      configFile,
      join(policyDir, 'src', 'authz.rego'),
      join(policyDir, 'data'),
      join(adapterDir, 'adapter.rego'),
      dataFile,
      metaFile,
    ],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const stop = () => child.kill('SIGTERM');
  const pool = new Pool(`http://127.0.0.1:${httpPort}`, { connections: 1 });
  try {
    for (let i = 0; ; i++) {
      try {
        const res = await pool.request({ path: '/health?plugins', method: 'GET' });
        await res.body.dump();
        if (res.statusCode === 200) break;
      } catch {
        // not listening yet
      }
      if (i >= 200 || child.exitCode !== null) throw new Error('opa-envoy-plugin did not become healthy');
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (err) {
    stop();
    throw err;
  } finally {
    await pool.close();
  }
  return { grpcAddress: `127.0.0.1:${grpcPort}`, stop };
}
