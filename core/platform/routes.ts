/** Platform routes (SPEC 4.6 platform group, 4.5 health): liveness, readiness, metrics, version, docs. */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Type } from '@sinclair/typebox';
import type { Db } from '../../shared/db/pool.ts';
import { schemaHash } from '../db/migrate.ts';
import { withDeadline } from '../../shared/deadline.ts';
import { AppError } from '../../shared/errors.ts';
import { CoreErrorSchema } from '../http/responses.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import type { BuildInfo } from './build-info.ts';
import type { Metrics } from '../../shared/metrics.ts';
import { declared } from '../http/declared.ts';

export interface PlatformDeps {
  db: Db;
  metrics: Metrics;
  build: BuildInfo;
  startedAt: number;
  openapi: () => unknown;
  now?: () => number;
  /** Issue 15 item 9: set when the edge runs in this process; ready only once it is warm. */
  edgeWarm?: () => boolean;
}

const Health = Type.Object({
  status: Type.Literal('ok'),
  build: Type.String(),
  uptime_s: Type.Integer({ minimum: 0 }),
});
const Ready = Type.Object({
  status: Type.Literal('ready'),
  /** What was checked: the database always, the edge when it runs in this process (npm start). */
  checks: Type.Object({ database: Type.Literal('ok'), edge: Type.Optional(Type.Literal('warm')) }),
});
/** The outline of an OpenAPI 3.1 document; its test validates the whole against the OpenAPI schema. */
const OpenApiDocument = Type.Object(
  {
    openapi: Type.Literal('3.1.0'),
    info: Type.Object({ title: Type.String(), version: Type.String() }),
    paths: Type.Record(Type.String(), Type.Object({})),
  },
  { additionalProperties: true },
);
const Version = Type.Object({ commit: Type.String(), version: Type.String(), schema_hash: Type.String() });

/** A readiness probe that hangs is as bad as one that fails. */
const readyTimeoutMs = 1500;

const swaggerDir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
const docAssets: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'swagger-ui-standalone-preset.js': 'text/javascript; charset=utf-8',
  'favicon-32x32.png': 'image/png',
};

const docsPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Payments platform API</title>
<link rel="stylesheet" href="/v1/docs/swagger-ui.css"><link rel="icon" href="/v1/docs/favicon-32x32.png"></head>
<body><div id="ui"></div>
<script src="/v1/docs/swagger-ui-bundle.js"></script>
<script src="/v1/docs/swagger-ui-standalone-preset.js"></script>
<script src="/v1/docs/init.js"></script>
</body></html>`;
/**
 * A filter box over the tags (some 240 operations), pre-set from \`?filter=<tag>\`: a link to one
 * part of the API renders only that part, which a slow machine draws in a moment (issue 15 item 3).
 * Only the filter is read from the address, never a document URL (Swagger UI's queryConfigEnabled
 * would let a link load someone else's document into this origin).
 */
const docsInit = `const filter = new URLSearchParams(window.location.search).get('filter');
window.ui = SwaggerUIBundle({ url: '/v1/openapi.json', dom_id: '#ui', deepLinking: true, filter: filter || true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset], layout: 'StandaloneLayout' });`;

const tags = ['platform'];

const healthRoute = (deps: PlatformDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/health'),
    operationId: 'health',
    summary: 'Liveness, without touching dependencies',
    tags,
    headers: [
      { name: 'X-Device-Id', required: false, description: 'Agent device (SPEC 4.5)' },
      { name: 'X-Agent-Id', required: false, description: 'Agent id (SPEC 4.5)' },
      { name: 'X-Request-Id', required: false, description: 'Echoed back' },
    ],
    responses: { 200: { description: 'Alive', schema: Health } },
    handler: async () => ({
      status: 200,
      body: {
        status: 'ok',
        build: deps.build.build,
        uptime_s: Math.floor(((deps.now ?? Date.now)() - deps.startedAt) / 1000),
      },
    }),
  });

const readyRoute = (deps: PlatformDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/ready'),
    operationId: 'ready',
    summary:
      'Ready when the database answers and is migrated (and, in one process with the edge, the edge is warm)',
    tags,
    responses: {
      200: { description: 'Ready', schema: Ready },
      503: { description: 'Not ready: `{code, message}` says what is missing', schema: CoreErrorSchema },
    },
    handler: async () => {
      let migrated: boolean;
      try {
        const { rows } = await withDeadline(
          deps.db.query<{ t: string | null }>("SELECT to_regclass('public.schema_migrations')::text AS t"),
          readyTimeoutMs,
          `timed out after ${readyTimeoutMs} ms`,
        );
        migrated = rows[0]?.t != null;
      } catch (err) {
        throw new AppError('SERVICE_UNAVAILABLE', `database unavailable: ${(err as Error).message}`);
      }
      if (!migrated) throw new AppError('SERVICE_UNAVAILABLE', 'migrations table missing');
      if (deps.edgeWarm && !deps.edgeWarm()) throw new AppError('SERVICE_UNAVAILABLE', 'edge is warming up');
      return {
        status: 200,
        body: {
          status: 'ready',
          checks: { database: 'ok', ...(deps.edgeWarm ? { edge: 'warm' as const } : {}) },
        },
      };
    },
  });

const metricsRoute = (deps: PlatformDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/metrics'),
    operationId: 'metrics',
    summary: 'Prometheus metrics',
    tags,
    responses: { 200: { description: 'Prometheus text exposition', contentType: 'text/plain' } },
    handler: async () => ({
      status: 200,
      raw: { contentType: deps.metrics.registry.contentType, data: await deps.metrics.registry.metrics() },
    }),
  });

const versionRoute = (deps: PlatformDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/version'),
    operationId: 'version',
    summary: 'Commit, semantic version and schema hash',
    tags,
    responses: { 200: { description: 'Version', schema: Version } },
    handler: async () => {
      const hash = await withDeadline(
        schemaHash(deps.db),
        readyTimeoutMs,
        `timed out after ${readyTimeoutMs} ms`,
      ).catch(() => 'unavailable');
      return {
        status: 200,
        body: { commit: deps.build.commit, version: deps.build.version, schema_hash: hash },
      };
    },
  });

const openapiRoute = (deps: PlatformDeps): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/openapi.json'),
    operationId: 'openapi',
    summary: 'OpenAPI 3.1 description',
    tags,
    responses: { 200: { description: 'OpenAPI document', schema: OpenApiDocument } },
    handler: async () => ({ status: 200, body: deps.openapi() }),
  });

const docsRoute = (): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/docs'),
    operationId: 'docs',
    summary: 'Interactive API description',
    tags,
    responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
    handler: async () => ({
      status: 200,
      raw: { contentType: 'text/html; charset=utf-8', data: docsPage },
    }),
  });

const docsAssetRoute = (): RouteSpec =>
  defineRoute({
    ...declared('GET', '/v1/docs/{asset}'),
    operationId: 'docsAsset',
    summary: 'Docs page assets',
    tags,
    hidden: true,
    params: Type.Object({ asset: Type.String({ maxLength: 64 }) }),
    // Stylesheet, scripts and icon: each asset's own media type.
    responses: { 200: { description: 'Asset', contentType: '*/*' } },
    handler: async ({ params }) => {
      if (params.asset === 'init.js') {
        return { status: 200, raw: { contentType: 'text/javascript; charset=utf-8', data: docsInit } };
      }
      // Own properties only: `__proto__`, `constructor` or `toString` name no asset.
      const type = Object.hasOwn(docAssets, params.asset) ? docAssets[params.asset] : undefined;
      if (!type) throw new AppError('NOT_FOUND', 'no such asset');
      const data = await readFile(join(swaggerDir, params.asset));
      return {
        status: 200,
        headers: { 'cache-control': 'public, max-age=86400' },
        raw: { contentType: type, data },
      };
    },
  });

export function platformRoutes(deps: PlatformDeps): RouteSpec[] {
  return [
    healthRoute(deps),
    readyRoute(deps),
    metricsRoute(deps),
    versionRoute(deps),
    openapiRoute(deps),
    docsRoute(),
    docsAssetRoute(),
  ];
}
