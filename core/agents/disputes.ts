/**
 * Disputes on agent transactions (SPEC 4.5 disputes; issue 9 item 8). An agent opens a case on
 * one of its own transactions (one live case per transaction), reads it, and attaches evidence.
 * Attachments: the edge decides on headers alone and does not buffer the body
 * (shared/routes/agents.ts `disableRequestBodyBuffering`; Envoy per-route check_settings), so
 * core enforces everything: the body limit while reading (413), multipart/form-data (415/400),
 * a file of at most 5 MiB (413 ATTACHMENT_TOO_LARGE) whose magic bytes say PNG, JPEG or PDF
 * (415 ATTACHMENT_TYPE_REFUSED; the declared type and file name prove nothing), stored with its
 * SHA-256. Every write is idempotent and audited.
 */
import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { Queryable, TxClient } from '../../shared/db/pool.ts';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { idempotencyHeader, scopeOf, toReply, withIdempotency } from '../idempotency/idempotency.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import {
  agentCaller,
  auditAgent,
  keyOwnerOf,
  type AgentCaller,
  type AgentDeps,
  type AnyCtx,
} from './context.ts';
import { requireCapability } from './capabilities.ts';
import { boundaryOf, parseMultipart, sniff } from './multipart.ts';
import { declared } from '../http/declared.ts';

/** Issue 9: attachments up to 5 MiB. */
export const attachmentMaxBytes = 5 * 1024 * 1024;
/** Room for the multipart framing around one file (boundaries, part headers, a few small fields). */
const multipartOverheadBytes = 64 * 1024;
export const attachmentBodyLimitBytes = attachmentMaxBytes + multipartOverheadBytes;
export const maxAttachmentsPerCase = 10;

const tags = ['agent-disputes'];
const auth = { name: 'Authorization', required: true, description: 'Bearer <agent access token>' };
const Reason = Type.Union(
  ['WRONG_AMOUNT', 'WRONG_CUSTOMER', 'NOT_RECEIVED', 'DUPLICATE', 'FRAUD_SUSPECTED', 'OTHER'].map((r) =>
    Type.Literal(r),
  ),
);
const OpenBody = Type.Object(
  {
    txnId: Type.String({ format: 'uuid' }),
    reason: Reason,
    description: Type.String({ minLength: 1, maxLength: 2000 }),
  },
  { additionalProperties: false },
);
const CaseId = Type.Object({ case_id: Type.String({ format: 'uuid' }) });
const Attachment = Type.Object({
  id: Type.String(),
  filename: Type.String(),
  mediaType: Type.String(),
  sizeBytes: Type.Integer(),
  sha256: Type.String(),
  createdAt: Type.String(),
});
const Case = Type.Object({
  id: Type.String(),
  txnId: Type.String(),
  agentId: Type.String(),
  reason: Type.String(),
  description: Type.String(),
  state: Type.String(),
  attachments: Type.Array(Attachment),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

interface CaseRow {
  id: string;
  txn_id: string;
  agent_id: string;
  reason: string;
  description: string;
  state: string;
  created_at: Date;
  updated_at: Date;
}
interface AttachmentRow {
  id: string;
  filename: string;
  media_type: string;
  size_bytes: number;
  sha256: string;
  created_at: Date;
}

async function loadCase(q: Queryable, c: AgentCaller, caseId: string, lock = false): Promise<CaseRow> {
  const { rows } = await q.query<CaseRow>(
    `SELECT id, txn_id, agent_id, reason, description, state, created_at, updated_at FROM agent_disputes
      WHERE tenant_id = $1 AND id = $2${lock ? ' FOR UPDATE' : ''}`,
    [c.tenantId, caseId],
  );
  const r = rows[0];
  // Another agent's case is answered exactly like a missing one.
  if (!r || r.agent_id !== c.agentId) throw new AppError('DISPUTE_NOT_FOUND', `dispute ${caseId} not found`);
  return r;
}

async function caseView(q: Queryable, tenantId: string, r: CaseRow): Promise<Record<string, unknown>> {
  const { rows } = await q.query<AttachmentRow>(
    `SELECT id, filename, media_type, size_bytes, sha256, created_at FROM agent_dispute_attachments
      WHERE tenant_id = $1 AND case_id = $2 ORDER BY created_at, id`,
    [tenantId, r.id],
  );
  return {
    id: r.id,
    txnId: r.txn_id,
    agentId: r.agent_id,
    reason: r.reason,
    description: r.description,
    state: r.state,
    attachments: rows.map(attachmentView),
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

const attachmentView = (a: AttachmentRow) => ({
  id: a.id,
  filename: a.filename,
  mediaType: a.media_type,
  sizeBytes: a.size_bytes,
  sha256: a.sha256,
  createdAt: a.created_at.toISOString(),
});

/** A file name fit to show back: its last path segment, control characters removed. */
function cleanName(name: string | undefined): string {
  const last = (name ?? '').split(/[\\/]/).pop() ?? '';
  const clean = [...last]
    .filter((ch) => ch.charCodeAt(0) >= 0x20 && ch.charCodeAt(0) !== 0x7f)
    .join('')
    .trim()
    .slice(0, 255);
  return clean || 'attachment';
}

async function openCase(
  deps: AgentDeps,
  q: TxClient,
  c: AgentCaller,
  b: { txnId: string; reason: string; description: string },
  requestId: string,
) {
  const t = deps.now();
  await requireCapability(q, c.tenantId, c.agentId, 'dispute.create');
  const { rows } = await q.query<{ agent_id: string }>(
    'SELECT agent_id FROM agent_txns WHERE tenant_id = $1 AND id = $2 FOR UPDATE',
    [c.tenantId, b.txnId],
  );
  if (rows[0]?.agent_id !== c.agentId)
    throw new AppError('TXN_NOT_FOUND', `transaction ${b.txnId} not found`);
  const live = await q.query<{ id: string }>(
    `SELECT id FROM agent_disputes WHERE tenant_id = $1 AND txn_id = $2 AND state IN ('OPEN', 'UNDER_REVIEW')`,
    [c.tenantId, b.txnId],
  );
  if (live.rows[0])
    throw new AppError('DISPUTE_EXISTS', `transaction ${b.txnId} already has an open dispute`, {
      extra: { caseId: live.rows[0].id },
    });
  const id = uuidv7(t);
  await q.query(
    `INSERT INTO agent_disputes (tenant_id, id, agent_id, txn_id, reason, description, state, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, 'OPEN', to_timestamp($7 / 1000.0), to_timestamp($7 / 1000.0))`,
    [c.tenantId, id, c.agentId, b.txnId, b.reason, b.description, t],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: { type: 'agent', id: c.agentId },
      action: 'agent.dispute.open',
      target: { type: 'dispute', id },
      attrs: { txn_id: b.txnId, reason: b.reason },
      requestId,
    },
    t,
  );
  return caseView(q, c.tenantId, await loadCase(q, c, id));
}

async function attach(deps: AgentDeps, q: TxClient, c: AgentCaller, caseId: string, ctx: AnyCtx) {
  const t = deps.now();
  const parts = parseMultipart(ctx.rawBody, boundaryOf(ctx.headers['content-type']));
  const files = parts.filter((p) => p.name === 'file');
  if (files.length !== 1 || files[0]?.filename === undefined)
    throw new AppError('MULTIPART_INVALID', 'send exactly one file in a part named "file" with a filename');
  const file = files[0];
  if (file.data.length === 0) throw new AppError('MULTIPART_INVALID', 'the file is empty');
  if (file.data.length > attachmentMaxBytes)
    throw new AppError(
      'ATTACHMENT_TOO_LARGE',
      `attachments are limited to ${attachmentMaxBytes} bytes (5 MiB)`,
    );
  const mediaType = sniff(file.data);
  if (!mediaType)
    throw new AppError(
      'ATTACHMENT_TYPE_REFUSED',
      'only PNG, JPEG and PDF files are accepted (checked by content)',
    );
  const r = await loadCase(q, c, caseId, true);
  if (r.state !== 'OPEN' && r.state !== 'UNDER_REVIEW')
    throw new AppError('DISPUTE_CLOSED', `dispute is ${r.state}`);
  const { rows } = await q.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM agent_dispute_attachments WHERE tenant_id = $1 AND case_id = $2',
    [c.tenantId, caseId],
  );
  if ((rows[0]?.n ?? 0) >= maxAttachmentsPerCase)
    throw new AppError(
      'ATTACHMENT_LIMIT_REACHED',
      `a dispute takes at most ${maxAttachmentsPerCase} attachments`,
    );
  const id = uuidv7(t);
  const sha256 = createHash('sha256').update(file.data).digest('hex');
  const filename = cleanName(file.filename);
  await q.query(
    `INSERT INTO agent_dispute_attachments (tenant_id, id, case_id, filename, media_type, size_bytes, sha256, content, created_by, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, to_timestamp($10 / 1000.0))`,
    [c.tenantId, id, caseId, filename, mediaType, file.data.length, sha256, file.data, c.agentId, t],
  );
  await q.query(
    'UPDATE agent_disputes SET updated_at = to_timestamp($3 / 1000.0) WHERE tenant_id = $1 AND id = $2',
    [c.tenantId, caseId, t],
  );
  await auditAgent(
    q,
    {
      tenantId: c.tenantId,
      actor: { type: 'agent', id: c.agentId },
      action: 'agent.dispute.attach',
      target: { type: 'dispute', id: caseId },
      attrs: { attachment_id: id, sha256, media_type: mediaType, size_bytes: file.data.length },
      requestId: ctx.requestId,
    },
    t,
  );
  return attachmentView({
    id,
    filename,
    media_type: mediaType,
    size_bytes: file.data.length,
    sha256,
    created_at: new Date(t),
  });
}

export function disputeRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('POST', '/v1/disputes'),
      operationId: 'disputeOpen',
      tags,
      headers: [auth, idempotencyHeader],
      body: OpenBody,
      summary: "Open a dispute on one of the caller's transactions (one live case per transaction)",
      responses: { 201: { description: 'Opened', schema: Case } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        return toReply(
          await withIdempotency(deps, scopeOf(ctx, keyOwnerOf(c), ctx.body), async (q) => ({
            status: 201,
            body: await openCase(deps, q, c, ctx.body, ctx.requestId),
          })),
        );
      },
    }),
    defineRoute({
      ...declared('GET', '/v1/disputes/{case_id}'),
      operationId: 'disputeGet',
      tags,
      headers: [auth],
      params: CaseId,
      summary: "One of the caller's disputes with its attachments (metadata and SHA-256)",
      responses: { 200: { description: 'Dispute', schema: Case } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        return {
          status: 200,
          body: await caseView(deps.db, c.tenantId, await loadCase(deps.db, c, ctx.params.case_id)),
        };
      },
    }),
    defineRoute({
      ...declared('POST', '/v1/disputes/{case_id}/attachments'),
      operationId: 'disputeAttach',
      tags,
      headers: [auth, idempotencyHeader],
      params: CaseId,
      bodyKind: 'raw',
      bodyLimitBytes: attachmentBodyLimitBytes,
      rawBody: {
        contentType: 'multipart/form-data',
        schema: {
          type: 'object',
          required: ['file'],
          properties: {
            file: { type: 'string', format: 'binary', description: 'PNG, JPEG or PDF, at most 5 MiB' },
          },
        },
      },
      summary:
        'Attach evidence (multipart/form-data, one part "file": PNG, JPEG or PDF by content, at most 5 MiB); stored with its SHA-256. The edge does not buffer this body.',
      responses: { 201: { description: 'Stored', schema: Attachment } },
      handler: async (ctx) => {
        const c = await agentCaller(deps, ctx);
        const digest = createHash('sha256').update(ctx.rawBody).digest('hex');
        return toReply(
          await withIdempotency(deps, scopeOf(ctx, keyOwnerOf(c), { sha256: digest }), async (q) => ({
            status: 201,
            body: await attach(deps, q, c, ctx.params.case_id, ctx),
          })),
        );
      },
    }),
  ];
}
