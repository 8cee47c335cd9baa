/**
 * What a relationship tuple written through the API may say (SPEC 2.7; issue 20 item 3). The
 * edge reads a subject's tuples whatever tenant stored them (edge/state/store.ts tuplesOf), so
 * this is where tenant isolation of tuples is decided:
 *  - a tuple of tenant T names only T's customers, agents (`user`), staff, accounts, and T
 *    itself; never another tenant's subject or object;
 *  - `owner` or `admin` over a tenant, and `parent`, are granted by platform admins (the
 *    operator tenant's Admins) only; the one subject that may come from outside T is the
 *    operator's tenant, as `owner`, `admin` or `parent` of T (stored under the operator's
 *    tenant, as POST /v1/tenants stores its owner tuple, so ownedTenants() finds it);
 *  - `parent` is only the operator's read-only view of a tenant it owns (the policy's
 *    `parent_actions`), and `payer` is only one customer paying for another of the same tenant;
 *  - caveats are the keys the policy evaluates (authz.rego tuple_live), well-formed.
 */
import type { Queryable } from '../../../shared/db/pool.ts';
import { AppError } from '../../../shared/errors.ts';
import { accountRef } from '../../ledger/reads.ts';
import { parseCidr, rangeText } from '../../../shared/ip-ranges.ts';

export const namespaces = ['tenant', 'customer', 'user', 'staff', 'account'] as const;
export type Namespace = (typeof namespaces)[number];
export const relations = ['owner', 'admin', 'member', 'editor', 'viewer', 'parent', 'payer'] as const;
export type Relation = (typeof relations)[number];

export interface Ref {
  ns: Namespace;
  id: string;
}
export interface Caveat {
  expires_at?: string;
  hours?: { from: number; to: number };
  ip_ranges?: string[];
}
export interface TupleInput {
  subject: Ref;
  relation: Relation;
  object: Ref;
  caveat?: Caveat;
}

/** Who writes: the caller's tenant, and whether they are a platform admin. */
export interface Writer {
  tenantId: string;
  platformAdmin: boolean;
  operator: string | undefined;
}

/** The table holding each namespace's entities, all keyed (tenant_id, id uuid); accounts are the ledger's. */
const entityTables: Record<Exclude<Namespace, 'tenant' | 'account'>, string> = {
  customer: 'customers',
  user: 'agents',
  staff: 'staff_users',
};

const invalid = (message: string) => new AppError('TUPLE_INVALID', message);
const platformOnly = (message: string) => new AppError('TUPLE_PLATFORM_ONLY', message);
const show = (r: Ref) => `${r.ns}:${r.id}`;

/** Whether `r` is an entity of `tenantId` (a tenant is only itself). */
async function belongs(q: Queryable, tenantId: string, r: Ref): Promise<boolean> {
  if (r.ns === 'tenant') return r.id === tenantId;
  // Exact text, as for the other tables: an upper-case spelling of an account id is not that account.
  if (r.ns === 'account') return (await accountRef(q, tenantId, r.id))?.id === r.id;
  // Compared as text: an id that is not a uuid simply matches nothing (no cast error, no 500).
  const { rows } = await q.query(
    `SELECT 1 FROM ${entityTables[r.ns]} WHERE tenant_id = $1 AND id::text = $2`,
    [tenantId, r.id],
  );
  return rows.length > 0;
}

/** The last instant a UTC `…Z` time with a four-digit year names. */
const lastStorableMs = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

function checkCaveat(c: Caveat | undefined, nowMs: number): void {
  if (!c) return;
  const expires = c.expires_at === undefined ? undefined : Date.parse(c.expires_at);
  if (expires !== undefined && !Number.isFinite(expires))
    throw invalid(`caveat.expires_at: ${c.expires_at} is not a time`);
  // Stored as UTC `…Z` (storedCaveat): an offset can carry 9999-12-31 into year 10000, which
  // toISOString writes `+010000-…`, a time neither the policy nor PostgreSQL reads (every
  // decision on the tuple 503, and the lapsed-payer sweep's cast fails for every tenant).
  if (expires !== undefined && expires > lastStorableMs)
    throw invalid('caveat.expires_at is after 9999-12-31T23:59:59.999Z (UTC)');
  if (expires !== undefined && expires <= nowMs)
    throw invalid('caveat.expires_at is in the past: the tuple would be ignored from the start');
  if (c.hours && c.hours.from >= c.hours.to)
    throw invalid('caveat.hours needs from < to (tenant-local hours, to exclusive)');
  // An IPv6 zone (`%eth0`) is an interface of one host, not part of an address a request comes
  // from: node's isIP takes it, but the policy's net.cidr_contains never matches it (parseCidr).
  for (const cidr of c.ip_ranges ?? [])
    if (!parseCidr(cidr)) throw invalid(`caveat.ip_ranges: ${cidr} is not a CIDR range`);
}

/**
 * The caveat as stored: in the one spelling the policy parses. RFC 3339 allows `t`/`z` and a
 * bare address is a range of one, but the policy's time.parse_rfc3339_ns and net.cidr_contains
 * refuse those (the decision errors: 503 for every request the tuple is judged on), so a time
 * is kept as UTC `…Z` and a range as `address/prefix`. Call after checkTuple.
 */
export function storedCaveat(c: Caveat | undefined): Caveat {
  if (!c) return {};
  return {
    ...c,
    ...(c.expires_at !== undefined ? { expires_at: new Date(Date.parse(c.expires_at)).toISOString() } : {}),
    ...(c.ip_ranges
      ? {
          ip_ranges: c.ip_ranges.map((text) => {
            const r = parseCidr(text);
            return r ? rangeText(r) : text;
          }),
        }
      : {}),
  };
}

/** A relation over the tenant itself that only platform admins grant. */
const tenantGrant = (t: TupleInput, tenantId: string) =>
  t.object.ns === 'tenant' &&
  t.object.id === tenantId &&
  (t.relation === 'owner' || t.relation === 'admin' || t.relation === 'parent');

/**
 * Refuse (TUPLE_INVALID, TUPLE_PLATFORM_ONLY) a tuple tenant `tenantId` may not hold. Returns
 * the tenant that stores it: `tenantId`, or the operator's for the operator's own grants.
 */
export async function checkTuple(
  q: Queryable,
  tenantId: string,
  t: TupleInput,
  w: Writer,
  nowMs: number,
): Promise<string> {
  checkCaveat(t.caveat, nowMs);
  if (t.subject.ns === t.object.ns && t.subject.id === t.object.id)
    throw invalid('a tuple relates two different things');
  if (tenantGrant(t, tenantId) && !w.platformAdmin)
    throw platformOnly(`only platform administrators grant ${t.relation} over a tenant`);
  const operatorSubject = t.subject.ns === 'tenant' && t.subject.id !== tenantId;
  if (
    operatorSubject &&
    !(w.operator !== undefined && t.subject.id === w.operator && tenantGrant(t, tenantId))
  ) {
    throw invalid(
      `${show(t.subject)} is not of tenant ${tenantId}: another tenant appears only as the platform operator's owner, admin or parent of this tenant`,
    );
  }
  if (!operatorSubject && !(await belongs(q, tenantId, t.subject)))
    throw invalid(`${show(t.subject)} is not of tenant ${tenantId}`);
  if (!(await belongs(q, tenantId, t.object)))
    throw invalid(`${show(t.object)} is not of tenant ${tenantId}`);
  relationShape(t, tenantId, w);
  return operatorSubject ? t.subject.id : tenantId;
}

/** What each relation may connect (the policy reads member, owner, parent and payer). */
function relationShape(t: TupleInput, tenantId: string, w: Writer): void {
  if (t.relation === 'member' && !(t.object.ns === 'tenant' && t.subject.ns !== 'tenant')) {
    throw invalid('member relates a customer, agent (user) or staff member to the tenant');
  }
  if (
    t.relation === 'parent' &&
    !(
      t.subject.ns === 'tenant' &&
      t.subject.id === w.operator &&
      t.object.ns === 'tenant' &&
      tenantId !== w.operator
    )
  ) {
    throw invalid(
      "parent is only the platform operator's view of a tenant it owns: subject the operator's tenant, object this tenant",
    );
  }
  if (t.relation === 'payer' && !(t.subject.ns === 'customer' && t.object.ns === 'customer')) {
    throw invalid('payer relates a customer (the delegated payer) to the customer they pay for');
  }
}
