/**
 * Announcements for agents (issue 9 item 10), targeted by tenant (the row's tenant), the
 * region of the agent's outlet and the agent's tier; only those live now (starts_at ≤ now <
 * ends_at). Newest first, cursor-paginated (SPEC "Pagination": limit and cursor, stable order).
 */
import { Type } from '@sinclair/typebox';
import type { Db, Queryable } from '../../shared/db/pool.ts';
import { cursorParam, cursorsOf, LegacyNextCursor, NextCursor, withLegacyName } from '../http/cursor.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { uuidv7 } from '../../shared/uuid.ts';
import type { AgentDeps } from './context.ts';
import { agentReader } from './profile.ts';
import { seedTraining } from './training.ts';
import { declared } from '../http/declared.ts';

const defaultPageSize = 20;
const maxPageSize = 50;

const Query = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: maxPageSize, default: defaultPageSize })),
    cursor: Type.Optional(cursorParam),
  },
  { additionalProperties: false },
);
const Announcement = Type.Object({
  id: Type.String(),
  title: Type.String(),
  body: Type.String(),
  regions: Type.Array(Type.String()),
  tiers: Type.Array(Type.String()),
  startsAt: Type.String(),
  endsAt: Type.Union([Type.String(), Type.Null()]),
});

interface Row {
  id: string;
  title: string;
  body: string;
  regions: string[];
  tiers: string[];
  starts_at: Date;
  ends_at: Date | null;
}

export function contentRoutes(deps: AgentDeps): RouteSpec[] {
  return [
    defineRoute({
      ...declared('GET', '/v1/announcements'),
      operationId: 'agentAnnouncements',
      tags: ['agent-content'],
      query: Query,
      headers: [{ name: 'Authorization', required: true, description: 'Bearer <agent access token>' }],
      summary: "Live announcements for the caller's tenant, outlet region and tier, newest first",
      responses: {
        200: {
          description: 'Announcements',
          schema: Type.Object({
            items: Type.Array(Announcement),
            next_cursor: NextCursor,
            nextCursor: LegacyNextCursor,
          }),
        },
      },
      handler: async (ctx) => {
        const { tenantId, agent } = await agentReader(deps, ctx);
        const page = await cursorsOf(deps.db, deps.keys).open(ctx, tenantId, 2, defaultPageSize);
        const after = page.after;
        const { rows } = await deps.db.query<Row>(
          `SELECT a.id, a.title, a.body, a.regions, a.tiers, a.starts_at, a.ends_at FROM agent_announcements a
             JOIN agent_outlets o ON o.tenant_id = a.tenant_id AND o.id = $2
            WHERE a.tenant_id = $1 AND a.starts_at <= to_timestamp($4 / 1000.0) AND (a.ends_at IS NULL OR a.ends_at > to_timestamp($4 / 1000.0))
              AND (cardinality(a.regions) = 0 OR o.region = ANY (a.regions)) AND (cardinality(a.tiers) = 0 OR $3 = ANY (a.tiers))
              AND ($5::double precision IS NULL OR (a.starts_at, a.id) < (to_timestamp($5 / 1000.0), $6::uuid))
            ORDER BY a.starts_at DESC, a.id DESC LIMIT $7`,
          [
            tenantId,
            agent.outlet_id,
            agent.tier,
            deps.now(),
            after?.[0] ?? null,
            after?.[1] ?? null,
            page.limit + 1,
          ],
        );
        const { items, next_cursor } = page.finish(rows, (r) => [r.starts_at.getTime(), r.id]);
        return {
          status: 200,
          body: withLegacyName({
            items: items.map((r) => ({
              id: r.id,
              title: r.title,
              body: r.body,
              regions: r.regions,
              tiers: r.tiers,
              startsAt: r.starts_at.toISOString(),
              endsAt: r.ends_at?.toISOString() ?? null,
            })),
            next_cursor,
          }),
        };
      },
    }),
  ];
}

export interface NewAnnouncement {
  title: string;
  body: string;
  regions?: string[];
  tiers?: string[];
  startsAt: number;
  endsAt?: number;
}

/** Insert an announcement (seed, tests; an admin route is a follow-up). */
export async function addAnnouncement(
  q: Queryable,
  tenantId: string,
  a: NewAnnouncement,
  now: number,
): Promise<string> {
  const id = uuidv7(now);
  await q.query(
    `INSERT INTO agent_announcements (tenant_id, id, title, body, regions, tiers, starts_at, ends_at, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7 / 1000.0), CASE WHEN $8::double precision IS NULL THEN NULL ELSE to_timestamp($8 / 1000.0) END, to_timestamp($9 / 1000.0))`,
    [tenantId, id, a.title, a.body, a.regions ?? [], a.tiers ?? [], a.startsAt, a.endsAt ?? null, now],
  );
  return id;
}

/** Demo seed (core/seed.ts): one announcement for every agent and the KYC course with its quiz. */
export async function seedAgentContent(
  db: Db,
  tenantId: string,
  now: number,
): Promise<Record<string, unknown>> {
  return db.tx(async (q) => {
    const { rows } = await q.query('SELECT 1 FROM agent_announcements WHERE tenant_id = $1 LIMIT 1', [
      tenantId,
    ]);
    if (rows.length === 0) {
      await addAnnouncement(
        q,
        tenantId,
        {
          title: 'Welcome to the agent network',
          body: 'Pass the KYC basics quiz to start registering customers.',
          startsAt: now,
        },
        now,
      );
    }
    const { quizId } = await seedTraining(q, tenantId, now);
    return { agentContent: { kycQuizId: quizId } };
  });
}
