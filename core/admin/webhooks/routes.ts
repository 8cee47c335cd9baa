/** Webhook endpoints (SPEC 4.6 webhooks): per tenant; PATCH rotates the secret, pauses or resumes; :test sends now. */
import { Type } from '@sinclair/typebox';
import { AppError } from '../../../shared/errors.ts';
import type { RouteSpec } from '../../http/route.ts';
import type { Queryable } from '../../../shared/db/pool.ts';
import { uuidv7 } from '../../../shared/uuid.ts';
import { adminRoute, type AdminDeps } from '../http.ts';
import { Nullable, Page, Timestamp, Uuid, pageQuery } from '../schemas.ts';
import { send } from './dispatcher.ts';
import { isWebhookSecret, newWebhookSecret } from './sign.ts';
import { sealWebhookSecret, secretsOf, webhookView, type WebhookRow } from './store.ts';
import { TargetRefused, type TargetGuard } from './target.ts';
import { declared } from '../../http/declared.ts';

/** SPEC 8 caps the overlap of signing keys at 24 h; rotation grace for webhook secrets follows it. */
const maxGraceS = 24 * 3600;
const Event = Type.String({ pattern: '^(\\*|[a-z_]+(\\.[a-z_]+)+)$', maxLength: 128 });

/** An endpoint as every webhook route shows it (store.ts webhookView): never its secret. */
const Webhook = Type.Object({
  id: Uuid,
  url: Type.String(),
  events: Type.Array(Type.String()),
  status: Type.Union([Type.Literal('ACTIVE'), Type.Literal('PAUSED')]),
  previous_secret_valid_until: Nullable(Timestamp),
  created_at: Timestamp,
  updated_at: Timestamp,
});
const Secret = Type.String({
  pattern: '^whsec_',
  description: 'the signing secret: shown only when created or rotated',
});
const WebhookTest = Type.Object({
  id: Type.String({ pattern: '^msg_' }),
  delivered: Type.Boolean(),
  status: Nullable(Type.Integer()),
  error: Nullable(Type.String()),
  ms: Type.Integer({ minimum: 0 }),
});

/** http(s), no credentials, and a host that is not (and does not resolve to) a private, loopback or metadata address. */
async function checkUrl(guard: TargetGuard, url: string): Promise<string> {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new AppError('WEBHOOK_INVALID', 'url is not a URL');
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:')
    throw new AppError('WEBHOOK_INVALID', 'url must be http(s)');
  if (u.username || u.password) throw new AppError('WEBHOOK_INVALID', 'url must not carry credentials');
  try {
    await guard.check(u);
  } catch (err) {
    if (err instanceof TargetRefused)
      throw new AppError('WEBHOOK_INVALID', err.message, { extra: { reason: err.reason } });
    throw err;
  }
  return u.toString();
}

async function requireHook(q: Queryable, tenantId: string, id: string, lock = false): Promise<WebhookRow> {
  const { rows } = await q.query<WebhookRow>(
    `SELECT * FROM admin_webhooks WHERE tenant_id = $1 AND id = $2 AND status <> 'DELETED'${lock ? ' FOR UPDATE' : ''}`,
    [tenantId, id],
  );
  if (!rows[0]) throw new AppError('WEBHOOK_NOT_FOUND', `no webhook ${id}`);
  return rows[0];
}

const tags = ['admin.webhooks'];
const Params = Type.Object({ id: Uuid });

const listWebhooksRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/webhooks'),
    operationId: 'listWebhooks',
    summary: 'Webhook endpoints of the tenant',
    tags,
    mode: 'read',
    query: Type.Object(pageQuery),
    responses: { 200: { description: 'A page of endpoints (no secrets)', schema: Page(Webhook) } },
    read: async (ctx, caller) => {
      const page = await deps.pages.open(ctx, caller.tenantId, 1);
      const after = page.after?.[0];
      const { rows } = await deps.db.query<WebhookRow>(
        `SELECT * FROM admin_webhooks WHERE tenant_id = $1 AND status <> 'DELETED' AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3`,
        [caller.tenantId, after ?? null, page.limit + 1],
      );
      const { items, next_cursor } = page.finish(rows, (r) => [r.id]);
      return { status: 200, body: { items: items.map(webhookView), next_cursor } };
    },
  });

const createWebhookRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/webhooks'),
    operationId: 'createWebhook',
    summary: 'Create an endpoint (url, events, optional whsec_ secret); the secret is shown only here',
    tags,
    mode: 'create',
    body: Type.Object(
      {
        url: Type.String({ maxLength: 2048 }),
        events: Type.Array(Event, { minItems: 1, maxItems: 100, uniqueItems: true }),
        secret: Type.Optional(Type.String({ maxLength: 200 })),
      },
      { additionalProperties: false },
    ),
    responses: {
      201: {
        description: 'The endpoint and its secret',
        schema: Type.Intersect([Webhook, Type.Object({ secret: Secret })]),
      },
    },
    write: async (ctx, w) => {
      const url = await checkUrl(deps.webhookTargets, ctx.body.url);
      const secret = ctx.body.secret ?? newWebhookSecret();
      if (!isWebhookSecret(secret))
        throw new AppError(
          'WEBHOOK_INVALID',
          'secret must be whsec_ followed by base64 of at least 24 bytes',
        );
      const id = uuidv7();
      const { rows } = await w.q.query<WebhookRow>(
        'INSERT INTO admin_webhooks (id, tenant_id, url, events, secret_enc) VALUES ($1, $2, $3, $4, $5) RETURNING *',
        [id, w.caller.tenantId, url, ctx.body.events, sealWebhookSecret(deps.keys, id, secret)],
      );
      const hook = rows[0];
      if (!hook) throw new AppError('INTERNAL', 'webhook insert returned nothing');
      await w.audit('webhook.create', { type: 'webhook', id }, { url, events: ctx.body.events });
      return { status: 201, body: { ...webhookView(hook), secret } };
    },
  });

const getWebhookRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('GET', '/v1/webhooks/{id}'),
    operationId: 'getWebhook',
    summary: 'One endpoint with delivery counts',
    tags,
    mode: 'read',
    params: Params,
    responses: {
      200: {
        description: 'The endpoint',
        schema: Type.Intersect([
          Webhook,
          Type.Object({ deliveries: Type.Record(Type.String(), Type.Integer({ minimum: 0 })) }),
        ]),
      },
    },
    read: async (ctx, caller) => {
      const hook = await requireHook(deps.db, caller.tenantId, ctx.params.id);
      const { rows } = await deps.db.query<{ status: string; n: string }>(
        'SELECT status, count(*)::text AS n FROM admin_webhook_deliveries WHERE tenant_id = $1 AND webhook_id = $2 GROUP BY status',
        [caller.tenantId, hook.id],
      );
      return {
        status: 200,
        body: {
          ...webhookView(hook),
          deliveries: Object.fromEntries(rows.map((r) => [r.status, Number(r.n)])),
        },
      };
    },
  });

const updateWebhookRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('PATCH', '/v1/webhooks/{id}'),
    operationId: 'updateWebhook',
    summary: 'Rotate the secret (old one valid for graceSeconds), pause or resume, change url or events',
    tags,
    mode: 'write',
    params: Params,
    body: Type.Object(
      {
        rotateSecret: Type.Optional(Type.Boolean()),
        graceSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: maxGraceS })),
        status: Type.Optional(Type.Union([Type.Literal('ACTIVE'), Type.Literal('PAUSED')])),
        url: Type.Optional(Type.String({ maxLength: 2048 })),
        events: Type.Optional(Type.Array(Event, { minItems: 1, maxItems: 100, uniqueItems: true })),
      },
      { additionalProperties: false, minProperties: 1 },
    ),
    responses: {
      200: {
        description: 'The endpoint (and the new secret when rotated)',
        schema: Type.Intersect([Webhook, Type.Object({ secret: Type.Optional(Secret) })]),
      },
    },
    write: async (ctx, w) => {
      const hook = await requireHook(w.q, w.caller.tenantId, ctx.params.id, true);
      const b = ctx.body;
      const url = b.url === undefined ? null : await checkUrl(deps.webhookTargets, b.url);
      let secret: string | undefined;
      if (b.rotateSecret) {
        secret = newWebhookSecret();
        const until = new Date(deps.now() + (b.graceSeconds ?? 3600) * 1000);
        await w.q.query(
          'UPDATE admin_webhooks SET previous_enc = secret_enc, previous_until = $2, secret_enc = $3 WHERE id = $1',
          [hook.id, until, sealWebhookSecret(deps.keys, hook.id, secret)],
        );
      }
      const { rows } = await w.q.query<WebhookRow>(
        'UPDATE admin_webhooks SET status = coalesce($2, status), url = coalesce($3, url), events = coalesce($4, events), version = version + 1, updated_at = now() WHERE id = $1 RETURNING *',
        [hook.id, b.status ?? null, url, b.events ?? null],
      );
      const action = b.rotateSecret
        ? 'webhook.rotate_secret'
        : b.status === 'PAUSED'
          ? 'webhook.pause'
          : b.status === 'ACTIVE'
            ? 'webhook.resume'
            : 'webhook.update';
      await w.audit(action, { type: 'webhook', id: hook.id }, { fields: Object.keys(b) });
      return { status: 200, body: { ...webhookView(rows[0] ?? hook), ...(secret ? { secret } : {}) } };
    },
  });

const deleteWebhookRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('DELETE', '/v1/webhooks/{id}'),
    operationId: 'deleteWebhook',
    summary: 'Delete an endpoint (pending deliveries are dropped)',
    tags,
    mode: 'write',
    params: Params,
    responses: { 204: { description: 'Deleted' } },
    write: async (ctx, w) => {
      const hook = await requireHook(w.q, w.caller.tenantId, ctx.params.id, true);
      await w.q.query(
        `UPDATE admin_webhooks SET status = 'DELETED', version = version + 1, updated_at = now() WHERE id = $1`,
        [hook.id],
      );
      await w.q.query(
        `UPDATE admin_webhook_deliveries SET status = 'DEAD', last_error = 'endpoint deleted' WHERE webhook_id = $1 AND status = 'PENDING'`,
        [hook.id],
      );
      await w.audit('webhook.delete', { type: 'webhook', id: hook.id });
      return { status: 204 };
    },
  });

const testWebhookRoute = (deps: AdminDeps): RouteSpec =>
  adminRoute(deps, {
    ...declared('POST', '/v1/webhooks/{id}:test'),
    operationId: 'testWebhook',
    summary: 'Send a signed webhook.tested event now',
    tags,
    mode: 'write',
    params: Params,
    responses: { 200: { description: '{id, delivered, status, error, ms}', schema: WebhookTest } },
    write: async (ctx, w) => {
      const hook = await requireHook(w.q, w.caller.tenantId, ctx.params.id);
      const id = `msg_${uuidv7()}`;
      const body = JSON.stringify({
        type: 'webhook.tested',
        timestamp: new Date(deps.now()).toISOString(),
        data: { webhookId: hook.id },
      });
      const r = await send(
        deps.webhookTargets,
        hook.url,
        secretsOf(deps.keys, hook, deps.now()),
        id,
        deps.now(),
        body,
        5000,
      );
      await w.audit('webhook.test', { type: 'webhook', id: hook.id }, { delivered: r.ok, status: r.status });
      return { status: 200, body: { id, delivered: r.ok, status: r.status, error: r.error, ms: r.ms } };
    },
  });

export function webhookRoutes(deps: AdminDeps): RouteSpec[] {
  return [
    listWebhooksRoute(deps),
    createWebhookRoute(deps),
    getWebhookRoute(deps),
    updateWebhookRoute(deps),
    deleteWebhookRoute(deps),
    testWebhookRoute(deps),
  ];
}
