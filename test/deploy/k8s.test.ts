/**
 * deploy/k8s, the Dockerfile and the on-call rules (issue 19 items 1, 3, 4, 6):
 * - every manifest validates strictly and offline against the Kubernetes API schemas
 *   (`kubernetes-validate`, one run for all files; `.ci/run` installs it into .venv-deploy), and a
 *   misspelt field or an unknown kind in the same run is refused;
 * - what the manifests name exists: the entry points, the variables each process reads
 *   (`serviceVars`, read from the code so new variables are caught after merges), the ports and
 *   probes the processes serve (started here, production mode), the Services and Envoy clusters,
 *   the Secret keys deploy/README.md lists;
 * - the Dockerfile passes hadolint and copies no development keys or data;
 * - the Grafana dashboard and the Prometheus alerts name only metrics core's /v1/metrics and the
 *   edge's metrics port expose.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parse, parseAllDocuments } from 'yaml';
import { shutdownDeadlineMs } from '../../bin/services/common.ts';
import { serviceVars, type ServiceKind } from '../../bin/service-config.ts';
import { envoyConfigMap, currentEnvoyYaml } from '../../deploy/k8s/envoy-config.ts';
import { healthService, servedServices, ServingStatus } from '../../edge/health.ts';
import { freePort } from '../../shared/net.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';
import { productionEnv, runService, until, type Service } from '../helpers/services.ts';

type Obj = Record<string, any>;
const root = fileURLToPath(new URL('../../', import.meta.url));
const k8sDir = join(root, 'deploy/k8s');
/** The oldest Kubernetes the manifests support (preStop `sleep` is on by default from 1.30). */
const kubernetesVersion = '1.31.0';
const venvBin = join(root, '.venv-deploy/bin');
const toolsMissing =
  !existsSync(join(venvBin, 'kubernetes-validate')) || !existsSync(join(venvBin, 'hadolint'));
const skipTools = !toolsMissing
  ? false
  : process.env.CI === 'true'
    ? false
    : 'kubernetes-validate/hadolint not installed in .venv-deploy (.ci/run installs them)';

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const full = join(dir, name);
      if (statSync(full).isDirectory()) return yamlFiles(full);
      return name.endsWith('.yaml') ? [full] : [];
    })
    .sort();
}
/** Every Kubernetes manifest (kustomization.yaml is kustomize's, not the API's). */
const manifestFiles = yamlFiles(k8sDir).filter((f) => !f.endsWith('/kustomization.yaml'));
const docsOf = (file: string): Obj[] =>
  parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS() as Obj)
    .filter(Boolean);
const resources: Obj[] = manifestFiles.flatMap(docsOf);
const byKind = (kind: string): Obj[] => resources.filter((r) => r.kind === kind);
const named = (kind: string, name: string): Obj => {
  const r = byKind(kind).find((x) => x.metadata.name === name);
  assert.ok(r, `${kind}/${name} is in deploy/k8s`);
  return r;
};
const workloads = (): Obj[] => [...byKind('Deployment'), ...byKind('Job')];
const containersOf = (w: Obj): Obj[] => w.spec.template.spec.containers;

/** The service a container runs, from its command `node --import tsx bin/services/<kind>.ts`. */
function serviceKindOf(c: Obj): ServiceKind | undefined {
  const script = (c.command ?? []).find((a: string) => /^bin\/services\/[a-z]+\.ts$/.test(a));
  return script ? (/bin\/services\/([a-z]+)\.ts/.exec(script)?.[1] as ServiceKind) : undefined;
}
const ourContainers = (): { w: Obj; c: Obj; kind: ServiceKind }[] =>
  workloads().flatMap((w) =>
    containersOf(w).flatMap((c) => {
      const kind = serviceKindOf(c);
      return kind ? [{ w, c, kind }] : [];
    }),
  );
const envValue = (c: Obj, name: string): string | undefined =>
  c.env?.find((e: Obj) => e.name === name)?.value;
const portNumber = (c: Obj, name: string): number | undefined =>
  c.ports?.find((p: Obj) => p.name === name)?.containerPort;

function runTool(bin: string, args: string[], input?: string): { code: number | null; out: string } {
  const r = spawnSync(join(venvBin, bin), args, { encoding: 'utf8', input, timeout: 120_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

/** Metric names a PromQL expression reads: identifiers that are not functions, keywords or labels. */
function metricNamesIn(expr: string): string[] {
  const keywords = new Set([
    'by',
    'without',
    'on',
    'ignoring',
    'group_left',
    'group_right',
    'bool',
    'and',
    'or',
    'unless',
    'offset',
    'inf',
    'nan',
  ]);
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const after = bare.slice((m.index ?? 0) + m[0].length);
    if (/^\s*\(/.test(after) || keywords.has(m[0].toLowerCase())) continue;
    names.add(m[0]);
  }
  return [...names];
}

/** Every sample name a Prometheus text exposition can carry (histograms: _bucket, _sum, _count). */
function exposedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      const [, name, kind] = type as unknown as [string, string, string];
      names.add(name);
      if (kind === 'histogram' || kind === 'summary')
        for (const s of ['_bucket', '_sum', '_count']) names.add(`${name}${s}`);
    } else if (/^[A-Za-z_:]/.test(line)) names.add(line.split(/[{ ]/)[0] as string);
  }
  return names;
}

function dashboardExprs(v: unknown): string[] {
  if (Array.isArray(v)) return v.flatMap(dashboardExprs);
  if (v && typeof v === 'object')
    return Object.entries(v).flatMap(([k, x]) =>
      k === 'expr' && typeof x === 'string' ? [x] : dashboardExprs(x),
    );
  return [];
}
const ruleExprs = (): string[] =>
  (parse(readFileSync(join(root, 'deploy/prometheus/alerts.yaml'), 'utf8')) as Obj).groups.flatMap((g: Obj) =>
    g.rules.map((r: Obj) => r.expr as string),
  );
const grafanaFiles = readdirSync(join(root, 'deploy/grafana'))
  .filter((f) => f.endsWith('.json'))
  .map((f) => join(root, 'deploy/grafana', f));

/**
 * The Prometheus names Envoy's admin (`/stats/prometheus`) gives the statistics the dashboard
 * uses: `http.<stat_prefix>.downstream_rq_time` (histogram), `http.<stat_prefix>.ext_authz.*`
 * (counters of the ext_authz filter), `cluster.<name>.upstream_rq_time` (histogram), with the
 * prefix and cluster name as labels (Envoy's documented statistics; Envoy is not installed here).
 */
function envoyStatNames(): string[] {
  const histograms = ['envoy_http_downstream_rq_time', 'envoy_cluster_upstream_rq_time'];
  const counters = ['ok', 'denied', 'error', 'disabled', 'failure_mode_allowed'].map(
    (c) => `envoy_http_ext_authz_${c}`,
  );
  return [
    ...histograms.flatMap((h) => ['_bucket', '_sum', '_count'].map((x) => `${h}${x}`)),
    ...counters,
    'envoy_http_downstream_rq_total',
    'envoy_cluster_upstream_rq_total',
  ];
}

/** The Secret keys deploy/README.md "Secrets" lists: `| \`secret\` | \`key\` | …`. */
function readmeSecretKeys(): Set<string> {
  const readme = readFileSync(join(root, 'deploy/README.md'), 'utf8');
  const section = /\n## Secrets\n([\s\S]*?)(\n## |$)/.exec(readme)?.[1] ?? '';
  return new Set(
    [...section.matchAll(/^\| `([a-z0-9-]+)` \| `([a-z0-9.-]+)` \|/gm)].map((m) => `${m[1]}/${m[2]}`),
  );
}

describe('deploy/k8s manifests', () => {
  it('validate strictly against the Kubernetes API schemas; a misspelt field and an unknown kind in the same run are refused', {
    skip: skipTools,
  }, () => {
    const bad = mkdtempSync(join(tmpdir(), 'k8s-bad-'));
    // Our own core Deployment with one misspelt field deep inside the pod template.
    const core = structuredClone(named('Deployment', 'core'));
    core.spec.template.spec.containers[0].readinessProbe.httpGett =
      core.spec.template.spec.containers[0].readinessProbe.httpGet;
    writeFileSync(join(bad, 'misspelt.yaml'), JSON.stringify(core));
    writeFileSync(
      join(bad, 'unknown-kind.yaml'),
      'apiVersion: apps/v1\nkind: Deploymnet\nmetadata: { name: x }\n',
    );
    const files = [...manifestFiles, join(bad, 'misspelt.yaml'), join(bad, 'unknown-kind.yaml')];
    const { out } = runTool('kubernetes-validate', [
      '--strict',
      '--quiet',
      '-k',
      kubernetesVersion,
      ...files,
    ]);
    // A file with no schema is only a warning to the tool: here it is a failure like an error.
    const problems = out.split('\n').filter((l) => /^(ERROR|WARN)/.test(l));
    const about = (f: string) => problems.filter((l) => l.includes(` ${f} `));
    for (const f of manifestFiles) assert.deepEqual(about(f), [], relative(root, f));
    assert.match(about(join(bad, 'misspelt.yaml')).join('\n'), /^ERROR .*'httpGett' was unexpected/);
    assert.match(
      about(join(bad, 'unknown-kind.yaml')).join('\n'),
      /Couldn't find schema for kind Deploymnet/,
    );
  });

  it('kustomization.yaml applies every manifest except the Jobs, which run on their own', () => {
    const k = parse(readFileSync(join(k8sDir, 'kustomization.yaml'), 'utf8')) as Obj;
    const top = manifestFiles
      .filter((f) => !f.includes('/jobs/'))
      .map((f) => relative(k8sDir, f))
      .sort();
    assert.deepEqual([...k.resources].sort(), top);
    assert.deepEqual(
      byKind('Job')
        .map((j) => j.metadata.name)
        .sort(),
      ['bootstrap', 'migrate-0-1-0'],
    );
    assert.deepEqual(byKind('Secret'), [], 'no Secret values are committed');
  });

  it('runs each process through its npm entry point and sets only variables that process reads, every one it requires in production, each valid', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    const config = named('ConfigMap', 'payments-config').data as Record<string, string>;
    const kinds = new Set<string>();
    for (const { w, c, kind } of ourContainers()) {
      const where = `${w.kind}/${w.metadata.name}`;
      kinds.add(kind);
      assert.ok(
        pkg.scripts[kind]?.includes(`bin/services/${kind}.ts`),
        `${where}: npm run ${kind} runs the same file`,
      );
      assert.ok(existsSync(join(root, `bin/services/${kind}.ts`)), where);
      const set = new Set<string>();
      for (const e of c.env ?? []) {
        const v = serviceVars[e.name];
        assert.ok(
          v?.for.includes(kind),
          `${where}: ${e.name} is not read by ${kind} (bin/service-config.ts serviceVars)`,
        );
        set.add(e.name);
        const ref = e.valueFrom?.configMapKeyRef;
        const value: string | undefined = e.value ?? (ref ? config[ref.key] : undefined);
        if (ref)
          assert.ok(
            ref.name === 'payments-config' && value !== undefined,
            `${where}: ${e.name} from payments-config/${ref.key}`,
          );
        if (value !== undefined) assert.equal(v?.check?.(value), undefined, `${where}: ${e.name}=${value}`);
      }
      for (const [name, v] of Object.entries(serviceVars)) {
        if (v.for.includes(kind) && v.productionRequired)
          assert.ok(set.has(name), `${where}: ${name} is required in production`);
      }
      assert.equal(envValue(c, 'MODE') ?? config.MODE, 'production', where);
    }
    assert.deepEqual([...kinds].sort(), ['bootstrap', 'core', 'edge', 'migrate']);
  });

  it('ports: the variables, container ports, Services and Envoy clusters agree; edge and core Services are headless', () => {
    const portVars: Record<string, string> = {
      CORE_PORT: 'http',
      AUTHZ_PORT: 'grpc',
      EDGE_METRICS_PORT: 'metrics',
    };
    for (const { w, c } of ourContainers().filter((x) => x.w.kind === 'Deployment')) {
      for (const [v, port] of Object.entries(portVars)) {
        const value = envValue(c, v);
        if (value !== undefined)
          assert.equal(
            portNumber(c, port),
            Number(value),
            `${w.metadata.name}: ${v} is container port ${port}`,
          );
      }
    }
    const envoyConfig = parse(currentEnvoyYaml()) as Obj;
    const clusters: Obj[] = envoyConfig.static_resources.clusters;
    for (const [cluster, service] of [
      ['edge_authz', 'edge-authz'],
      ['core', 'core'],
    ] as const) {
      const svc = named('Service', service);
      assert.equal(svc.spec.clusterIP, 'None', `${service} is headless`);
      const c = clusters.find((x) => x.name === cluster) as Obj;
      assert.equal(c.type, 'STRICT_DNS', `${cluster} resolves every pod`);
      const addr = c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
      assert.equal(addr.address, service);
      assert.ok(
        svc.spec.ports.some((p: Obj) => p.port === addr.port_value),
        `${service} serves port ${addr.port_value}`,
      );
    }
    // Every Service's targetPort is a named port of the pods it selects.
    for (const svc of byKind('Service')) {
      const pods = byKind('Deployment').filter((d) =>
        Object.entries(svc.spec.selector).every(([k, v]) => d.spec.template.metadata.labels[k] === v),
      );
      assert.equal(pods.length, 1, `Service ${svc.metadata.name} selects one Deployment`);
      for (const p of svc.spec.ports)
        assert.ok(
          portNumber(containersOf(pods[0] as Obj)[0] as Obj, p.targetPort),
          `${svc.metadata.name}: ${p.targetPort}`,
        );
    }
    const envoy = containersOf(named('Deployment', 'envoy'))[0] as Obj;
    const listenerPort = (name: string) =>
      envoyConfig.static_resources.listeners.find((l: Obj) => l.name === name).address.socket_address
        .port_value;
    assert.equal(portNumber(envoy, 'http'), listenerPort('public'));
    assert.equal(portNumber(envoy, 'ready'), listenerPort('ready'));
    assert.equal(envoy.readinessProbe.httpGet.path, '/ready');
  });

  it('the envoy-config ConfigMap is deploy/envoy/envoy.yaml byte for byte (npx tsx deploy/k8s/envoy-config.ts)', () => {
    assert.equal(readFileSync(join(k8sDir, 'envoy-config.yaml'), 'utf8'), envoyConfigMap(currentEnvoyYaml()));
    assert.equal(named('ConfigMap', 'envoy-config').data['envoy.yaml'], currentEnvoyYaml());
  });

  it('rolls without dropping requests: ≥2 replicas, PDBs, HPAs, preStop then a drain that fits the grace period', () => {
    for (const d of byKind('Deployment')) {
      const name = d.metadata.name;
      assert.ok(d.spec.replicas >= 2, `${name} replicas`);
      assert.equal(d.spec.strategy.rollingUpdate.maxUnavailable, 0, name);
      const matches = (sel: Obj) =>
        Object.entries(sel.matchLabels).every(([k, v]) => d.spec.template.metadata.labels[k] === v);
      assert.ok(
        byKind('PodDisruptionBudget').some((p) => matches(p.spec.selector)),
        `${name} has a PDB`,
      );
      const hpa = byKind('HorizontalPodAutoscaler').find(
        (h) => h.spec.scaleTargetRef.kind === 'Deployment' && h.spec.scaleTargetRef.name === name,
      );
      assert.ok(hpa && hpa.spec.minReplicas >= 2, `${name} has an HPA keeping ≥2`);
      const c = containersOf(d)[0] as Obj;
      const preStop = c.lifecycle?.preStop?.sleep?.seconds as number;
      assert.ok(preStop > 0, `${name} preStop sleep`);
      const drain = serviceKindOf(c) ? Math.ceil(shutdownDeadlineMs / 1000) : 0;
      assert.ok(
        d.spec.template.spec.terminationGracePeriodSeconds > preStop + drain,
        `${name}: grace > preStop ${preStop} s + drain ${drain} s`,
      );
      assert.equal(d.spec.template.spec.securityContext.runAsNonRoot, true, name);
      assert.ok(
        c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory,
        `${name} resources`,
      );
      assert.ok(c.readinessProbe && c.livenessProbe, `${name} probes`);
    }
  });

  it('references exactly the Secret keys deploy/README.md lists', () => {
    const referenced = new Set(
      workloads().flatMap((w) =>
        containersOf(w).flatMap((c) =>
          (c.env ?? []).flatMap((e: Obj) => {
            const ref = e.valueFrom?.secretKeyRef;
            return ref ? [`${ref.name}/${ref.key}`] : [];
          }),
        ),
      ),
    );
    const listed = readmeSecretKeys();
    assert.ok(listed.size > 0, 'deploy/README.md has a Secrets table');
    assert.deepEqual([...referenced].sort(), [...listed].sort());
    // The edge never sees core's Secret (it would hold the master key).
    const edge = containersOf(named('Deployment', 'edge'))[0] as Obj;
    assert.ok(edge.env.every((e: Obj) => e.valueFrom?.secretKeyRef?.name !== 'payments-core'));
  });

  it('NetworkPolicies: only Envoy reaches edge and core; Prometheus reaches only the metrics ports', () => {
    const policyFor = (app: string) =>
      byKind('NetworkPolicy').find(
        (p) => p.spec.podSelector.matchLabels?.['app.kubernetes.io/name'] === app,
      ) as Obj;
    assert.deepEqual(named('NetworkPolicy', 'default-deny').spec, {
      podSelector: {},
      policyTypes: ['Ingress', 'Egress'],
    });
    for (const [app, apiPort, metricsPort] of [
      ['edge', 9191, 9464],
      ['core', 8080, 8080],
    ] as const) {
      for (const rule of policyFor(app).spec.ingress) {
        const from = rule.from as Obj[];
        assert.ok(from?.length > 0, `${app}: no ingress rule open to all`);
        const envoyOnly = from.every(
          (f) => f.podSelector?.matchLabels?.['app.kubernetes.io/name'] === 'envoy' && !f.namespaceSelector,
        );
        const prometheus = from.every(
          (f) =>
            f.podSelector?.matchLabels?.['app.kubernetes.io/name'] === 'prometheus' && f.namespaceSelector,
        );
        assert.ok(envoyOnly || prometheus, `${app}: ingress from Envoy or Prometheus only`);
        assert.deepEqual(
          rule.ports.map((p: Obj) => p.port),
          [envoyOnly ? apiPort : metricsPort],
        );
      }
    }
  });
});

describe('Dockerfile', () => {
  const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');

  it('passes hadolint, which would refuse an untagged base and unpinned packages', {
    skip: skipTools,
  }, () => {
    assert.deepEqual(runTool('hadolint', ['--no-color', join(root, 'Dockerfile')]), { code: 0, out: '' });
    const bad = runTool(
      'hadolint',
      ['--no-color', '-'],
      'FROM node\nRUN apt-get update && apt-get install -y curl\n',
    );
    assert.notEqual(bad.code, 0);
    assert.match(bad.out, /DL3006/);
    assert.match(bad.out, /DL3008/);
  });

  it('is multi-stage, installs production dependencies only, runs as a numeric non-root user, copies no development keys or data', () => {
    assert.ok((dockerfile.match(/^FROM /gm) ?? []).length >= 2);
    assert.match(dockerfile, /npm ci --omit=dev/);
    assert.match(dockerfile, /^USER [1-9]\d*:[1-9]\d*$/m);
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) =>
      (m[1] as string).split(/\s+/),
    );
    for (const s of sources) assert.doesNotMatch(s, /^(policy\/(keys|dist|src)|test|bench|\.data|\.venv)/, s);
    // .dockerignore keeps everything else out of the build context.
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    assert.equal(ignore[0], '**');
    const allowed = ignore.slice(1).map((l) => l.replace(/^!/, '').replace(/\/$/, ''));
    for (const s of sources)
      assert.ok(allowed.includes(s.replace(/\/$/, '')), `${s} is in .dockerignore's allow list`);
    for (const a of allowed) assert.doesNotMatch(a, /policy\/keys|policy\/dist|\.data|test|bench/);
  });
});

describe('probes, dashboards and alerts against the running processes', () => {
  let t: TestDb;
  let core: Service;
  let edge: Service;
  const ports = { core: 0, authz: 0, metrics: 0 };
  let coreMetrics = '';
  let edgeMetrics = '';

  before(async () => {
    t = await freshDatabase();
    [ports.core, ports.authz, ports.metrics] = [await freePort(), await freePort(), await freePort()];
    const env = productionEnv(t.url);
    core = runService('core', { ...env, CORE_PORT: String(ports.core) });
    edge = runService('edge', {
      ...env,
      AUTHZ_PORT: String(ports.authz),
      EDGE_METRICS_PORT: String(ports.metrics),
    });
    await until(
      async () =>
        (await call(`http://127.0.0.1:${ports.core}`, 'GET', '/v1/ready')).status === 200 ? true : undefined,
      60_000,
      () => `core (${core.output()})`,
    );
    await until(
      async () =>
        (await call(`http://127.0.0.1:${ports.metrics}`, 'GET', '/ready')).status === 200 ? true : undefined,
      60_000,
      () => `edge (${edge.output()})`,
    );
    coreMetrics = (await call(`http://127.0.0.1:${ports.core}`, 'GET', '/v1/metrics')).text;
    edgeMetrics = (await call(`http://127.0.0.1:${ports.metrics}`, 'GET', '/metrics')).text;
  });
  after(async () => {
    for (const s of [core, edge]) {
      s?.child.kill('SIGTERM');
      await s?.exited;
    }
    await t?.drop();
  });

  it('every HTTP probe path answers 200 on the port it names, and the gRPC probe service is SERVING', async () => {
    const portOf: Record<string, Record<string, number>> = {
      core: { http: ports.core },
      edge: { metrics: ports.metrics },
    };
    let checked = 0;
    for (const { w, c, kind } of ourContainers().filter((x) => x.w.kind === 'Deployment')) {
      for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
        const p = c[probe] as Obj | undefined;
        if (p?.httpGet) {
          const port = portOf[kind]?.[p.httpGet.port];
          assert.ok(port, `${w.metadata.name} ${probe}: port ${p.httpGet.port}`);
          assert.equal(
            (await call(`http://127.0.0.1:${port}`, 'GET', p.httpGet.path)).status,
            200,
            `${w.metadata.name} ${probe} ${p.httpGet.path}`,
          );
          checked++;
        }
        if (p?.grpc) {
          assert.equal(p.grpc.port, Number(envValue(c, 'AUTHZ_PORT')));
          assert.ok(servedServices.has(p.grpc.service ?? ''));
          const Health = healthService();
          const client = new Health(
            `127.0.0.1:${ports.authz}`,
            grpc.credentials.createInsecure(),
          ) as unknown as grpc.Client & {
            Check(
              r: { service: string },
              o: grpc.CallOptions,
              cb: (e: grpc.ServiceError | null, r?: { status: number }) => void,
            ): void;
          };
          const status = await new Promise<number>((resolve, reject) =>
            client.Check({ service: p.grpc.service ?? '' }, { deadline: Date.now() + 5000 }, (e, r) =>
              e ? reject(e) : resolve(r?.status ?? -1),
            ),
          );
          client.close();
          assert.equal(status, ServingStatus.SERVING);
          checked++;
        }
      }
    }
    assert.equal(checked, 6, 'core: startup, liveness, readiness; edge: startup, liveness, readiness');
  });

  it('the dashboard and the alert rules name only metrics core, the edge and Envoy (as envoy.yaml configures it) expose', () => {
    const exposed = new Set([
      ...exposedNames(coreMetrics),
      ...exposedNames(edgeMetrics),
      ...envoyStatNames(),
    ]);
    // `up` is Prometheus' own series per scraped target.
    exposed.add('up');
    const exprs = [
      ...ruleExprs(),
      ...grafanaFiles.flatMap((f) => dashboardExprs(JSON.parse(readFileSync(f, 'utf8')))),
    ];
    assert.ok(exprs.length >= 20, `${exprs.length} expressions`);
    const used = new Set(exprs.flatMap(metricNamesIn));
    for (const signal of [
      'edge_fail_closed_total',
      'edge_state_stale_denials_total',
      'edge_audit_unrecorded',
      'webhook_deliveries_dead_lettered_total',
      'edge_decision_duration_seconds_bucket',
      'http_request_duration_seconds_bucket',
    ]) {
      assert.ok(used.has(signal), `the on-call signal ${signal} is shown`);
    }
    assert.deepEqual(
      [...used].filter((n) => !exposed.has(n)),
      [],
    );
    assert.ok(used.has('envoy_http_downstream_rq_time_bucket'), "the front door's own p99 is shown");
    // Envoy's series are told apart by labels naming its listeners' stat prefixes and its clusters.
    const config = parse(currentEnvoyYaml()) as Obj;
    const prefixes = new Set(
      config.static_resources.listeners.flatMap((l: Obj) =>
        l.filter_chains.flatMap((c: Obj) => c.filters.map((f: Obj) => f.typed_config.stat_prefix)),
      ),
    );
    const clusters = new Set(config.static_resources.clusters.map((c: Obj) => c.name));
    for (const e of exprs) {
      for (const m of e.matchAll(/envoy_http_conn_manager_prefix="([^"]*)"/g))
        assert.ok(prefixes.has(m[1]), `${m[1]} is a stat_prefix of envoy.yaml`);
      for (const m of e.matchAll(/envoy_cluster_name="([^"]*)"/g))
        assert.ok(clusters.has(m[1]), `${m[1]} is a cluster of envoy.yaml`);
    }
    // Prometheus scrapes Envoy where envoy.yaml serves its stats: the ready listener's route.
    const envoyPod = named('Deployment', 'envoy').spec.template.metadata.annotations as Record<
      string,
      string
    >;
    const ready = config.static_resources.listeners.find((l: Obj) => l.name === 'ready');
    assert.equal(Number(envoyPod['prometheus.io/port']), ready.address.socket_address.port_value);
    const routes = ready.filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0]
      .routes as Obj[];
    assert.ok(
      routes.some(
        (r) => r.match.path === envoyPod['prometheus.io/path'] && r.route.cluster === 'envoy_admin',
      ),
      'the scraped path is routed to the admin',
    );
    // The check itself: a misspelt name is found and is not exposed.
    assert.deepEqual(metricNamesIn('sum by (reason) (rate(edge_fail_closed_totl{reason="x"}[5m])) > 0.5'), [
      'edge_fail_closed_totl',
    ]);
    assert.equal(exposed.has('edge_fail_closed_totl'), false);
  });
});
