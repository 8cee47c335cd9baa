/**
 * Decision inputs recorded for replay (issue 22 item 1). The audit writer's thread calls this
 * after a batch's audit records are committed: each decision's policy input (or a sample) goes
 * to `decision_inputs` (migration 0910, hour partitions) linked to its audit record, with
 * secrets removed and personal identifiers replaced by keyed pseudonyms. Nothing here runs on
 * the thread that answers Checks when the edge runs its audit thread.
 */
import { createHmac } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import { storable, type AuditEntry } from '../shared/audit.ts';
import type { Db } from '../shared/db/pool.ts';

export interface DecisionInputsConfig {
  /** Base of the per-tenant pseudonym keys (derived from the master key; never logged). */
  key: Buffer;
  /** Fraction of decisions recorded, 0..1. */
  sample: number;
  /** Configured window; a purpose's retention_days shortens it. */
  retentionHours: number;
  /** Size cap of the whole table; the oldest hour partitions are dropped past it. */
  maxBytes: number;
}

/** What a decision hands the audit writer for replay: the input as the policy saw it. */
export interface ReplayInput {
  input?: unknown;
  /**
   * The input as JSON text instead of `input`: the text the Check serialised once for its
   * evaluation (policy/runtime/bundle.ts policyInputJson). It is written into the batch's JSON as
   * `input` (recordedEntryJson), so the audit thread reads an `input` either way, and the answering
   * thread neither serialises the input a second time nor keeps its objects queued (issue 18).
   */
  inputJson?: string;
  /** The policy's verdict (an allow can still be refused later, e.g. by an API-key budget). */
  allow: boolean;
  policyVersion: string;
  /**
   * "METHOD template" of the matched route; a request no route matched is labelled without its
   * path, which is the caller's raw text (phone numbers, ids) and would escape the pseudonyms.
   */
  route?: string;
  /** The purpose's retention_days (registry), when known. */
  retentionDays?: number;
}

export type RecordedEntry = AuditEntry & { replay?: ReplayInput };

/**
 * `record`'s JSON with one more member, `key`, whose value is `json` (JSON text, written as is).
 * `record` must not have `key` itself.
 */
export function withJsonMember(
  record: object,
  key: string,
  json: string,
  replacer?: (this: unknown, key: string, value: unknown) => unknown,
): string {
  const head = JSON.stringify(record, replacer);
  return `${head.slice(0, -1)}${head === '{}' ? '' : ','}${JSON.stringify(key)}:${json}}`;
}

/** An entry's JSON, its replay input written from the text it carries when it carries one. */
export function recordedEntryJson(
  entry: RecordedEntry,
  replacer?: (this: unknown, key: string, value: unknown) => unknown,
): string {
  const replay = entry.replay;
  if (replay?.inputJson === undefined) return JSON.stringify(entry, replacer);
  const { replay: _replay, ...rest } = entry;
  const { inputJson, input: _input, ...meta } = replay;
  return withJsonMember(rest, 'replay', withJsonMember(meta, 'input', inputJson, replacer), replacer);
}

/** The input a replay carries, as a value (parsed from its text when it carries text). */
export const replayInputOf = (r: ReplayInput): unknown =>
  r.inputJson === undefined ? r.input : (JSON.parse(r.inputJson) as unknown);

/** Counters reported to the edge's metrics (edge_decision_inputs). */
export interface InputStats {
  recorded: number;
  failed: number;
  expiredRows: number;
  droppedPartitions: number;
  bytes: number;
  partitions: number;
}

export const emptyInputStats = (): InputStats => ({
  recorded: 0,
  failed: 0,
  expiredRows: 0,
  droppedPartitions: 0,
  bytes: 0,
  partitions: 0,
});

/** Per-tenant pseudonym key: one tenant's pseudonyms say nothing about another's. */
export function tenantPseudonymKey(base: Buffer, tenantId: string): Buffer {
  return createHmac('sha256', base).update(`payments/decision-inputs/v1/${tenantId}`).digest();
}

/**
 * Keys whose values are secrets wherever they appear (defence in depth: the policy input carries
 * none today, but a field added tomorrow must not land in a replay table).
 */
const secretKey =
  /token|secret|password|passcode|signature|challenge|authorization|cookie|api_?key|jwt|assertion|verifier|(^|_)(pin|otp|code)(_|$)/i;
/** Values that look like credentials whatever their key: compact JWS/JWT, bearer headers. */
const secretValue = /^eyJ[\w-]*\.[\w-]*\.|^(bearer|dpop|basic) /i;
/** Keys naming a person, a device or a thing of theirs: replaced by a pseudonym. */
const personalKeys = new Set([
  'id',
  'object_id',
  'subject_id',
  'user_id',
  'customer_id',
  'agent_id',
  'session_id',
  'device_id',
  'phone',
  'msisdn',
  'email',
  'user_name',
  'name',
  'ua',
]);

/** Network part only (/24 for IPv4, /48 for IPv6): keeps ip_ranges caveats replayable for ranges that wide. */
export function truncateIp(ip: string): string {
  const v4 = /^(?:::ffff:)?(\d+\.\d+\.\d+)\.\d+$/i.exec(ip);
  if (v4 && isIPv4(`${v4[1]}.0`)) return `${v4[1]}.0`;
  if (!isIPv6(ip)) return '';
  const [head = '', tail = ''] = ip.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t] : h;
  return `${groups.slice(0, 3).join(':')}::`;
}

export class Scrubber {
  private readonly keys = new Map<string, Buffer>();
  constructor(private readonly base: Buffer) {}

  private keyOf(tenantId: string): Buffer {
    let k = this.keys.get(tenantId);
    if (!k) {
      k = tenantPseudonymKey(this.base, tenantId);
      if (this.keys.size > 10_000) this.keys.clear();
      this.keys.set(tenantId, k);
    }
    return k;
  }

  /** Equal values of one tenant get equal pseudonyms, so decisions comparing ids replay the same. */
  pseudonym(tenantId: string, value: string): string {
    return `p_${createHmac('sha256', this.keyOf(tenantId)).update(value).digest('base64url').slice(0, 22)}`;
  }

  /** The input with secrets removed and personal identifiers pseudonymised under `tenantId`'s key. */
  scrub(tenantId: string, input: unknown): unknown {
    return this.walk(tenantId, input, '');
  }

  private walk(tenantId: string, v: unknown, path: string): unknown {
    if (typeof v === 'string') return secretValue.test(v) ? '[redacted]' : storable(v);
    if (Array.isArray(v)) return v.map((x) => this.walk(tenantId, x, `${path}[]`));
    if (!v || typeof v !== 'object') return v;
    const o = v as Record<string, unknown>;
    // Tenant ids are not personal and the policy compares them (tenant_ok, member): kept as they are.
    const tenantish = path === 'tenant' || o.object_ns === 'tenant' || o.type === 'tenant';
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(o)) {
      if (secretKey.test(k)) continue;
      if (k === 'ip') out[k] = typeof x === 'string' ? truncateIp(x) : '';
      else if (
        personalKeys.has(k) &&
        !(tenantish && (k === 'id' || k === 'object_id')) &&
        (typeof x === 'string' || typeof x === 'number')
      ) {
        out[k] = x === '' ? '' : this.pseudonym(tenantId, String(x));
      } else out[storable(k)] = this.walk(tenantId, x, path ? `${path}.${k}` : k);
    }
    return out;
  }
}

/** Should this decision's input be kept? (`sample` 1 keeps all, 0 none.) */
export const sampled = (sample: number): boolean => sample >= 1 || (sample > 0 && Math.random() < sample);

const hourMs = 3_600_000;
const dayMs = 24 * hourMs;

/**
 * Write the inputs of `entries` (those carrying `replay`), each linked to the audit id at the
 * same index of `ids` (appendAudit returns them in entry order). One transaction: the hour
 * partitions the rows need, then the rows.
 */
export async function recordDecisionInputs(
  db: Db,
  scrubber: Scrubber,
  cfg: Pick<DecisionInputsConfig, 'retentionHours'>,
  entries: RecordedEntry[],
  ids: number[],
  now = Date.now(),
): Promise<number> {
  const rows: Record<string, unknown>[] = [];
  // The hour partitions the rows need, worked out here so the rows cross to PostgreSQL once.
  const hourStarts = new Set<number>();
  for (const [i, e] of entries.entries()) {
    const r = e.replay;
    const auditId = ids[i];
    if (!r || auditId === undefined) continue;
    const at = e.ts ? new Date(e.ts).getTime() : now;
    hourStarts.add(Math.floor(at / hourMs) * hourMs);
    const keepMs = Math.min(
      cfg.retentionHours * hourMs,
      (r.retentionDays ?? Number.POSITIVE_INFINITY) * dayMs,
    );
    const d = e.decision ?? {};
    rows.push({
      recorded_at: new Date(at).toISOString(),
      tenant_id: storable(e.tenantId),
      audit_id: auditId,
      decision_id: String(d.decision_id ?? ''),
      purpose: String(d.purpose ?? ''),
      route: r.route ?? `${String(e.attrs?.method ?? '')} ${e.target.id}`,
      allow: r.allow,
      code: String(d.code ?? ''),
      policy_version: r.policyVersion,
      expires_at: new Date(at + keepMs).toISOString(),
      input: scrubber.scrub(e.tenantId, replayInputOf(r)),
    });
  }
  if (rows.length === 0) return 0;
  const hours = [...hourStarts].map((h) => new Date(h).toISOString());
  await db.tx(async (q) => {
    // Replay samples, not the audit record (which is committed, synchronously, before these are
    // written): a crash may lose the last moments of samples, never a decision's record. Not
    // waiting for this transaction's WAL flush spares PostgreSQL an fsync per batch (issue 18).
    await q.query('SET LOCAL synchronous_commit = off');
    await q.query('SELECT decision_inputs_partition(h) FROM unnest($1::timestamptz[]) AS h', [hours]);
    await q.query(
      `INSERT INTO decision_inputs (recorded_at, tenant_id, audit_id, decision_id, purpose, route, allow, code, policy_version, expires_at, input)
       SELECT (r->>'recorded_at')::timestamptz, r->>'tenant_id', (r->>'audit_id')::bigint, r->>'decision_id', r->>'purpose', r->>'route',
              (r->>'allow')::boolean, r->>'code', r->>'policy_version', (r->>'expires_at')::timestamptz, r->'input'
       FROM jsonb_array_elements($1::jsonb) r
       ON CONFLICT DO NOTHING`,
      [JSON.stringify(rows)],
    );
  });
  return rows.length;
}

/**
 * Retention (issue 22 item 1): hour partitions wholly past the configured window are dropped;
 * rows past a shorter purpose retention are deleted; past the size cap the oldest partitions go
 * (the newest is always kept). Returns what it removed and what remains.
 */
export async function expireDecisionInputs(
  db: Db,
  cfg: Pick<DecisionInputsConfig, 'retentionHours' | 'maxBytes'>,
  now = Date.now(),
): Promise<Omit<InputStats, 'recorded' | 'failed'>> {
  let parts = (
    await db.query<{ name: string; starts: Date; bytes: string }>(
      'SELECT name, starts, bytes FROM decision_inputs_partitions()',
    )
  ).rows;
  let dropped = 0;
  const drop = async (name: string) => {
    // The name comes from the catalogue and matches ^decision_inputs_p[0-9]{10}$ (the function's filter).
    await db.query(`DROP TABLE IF EXISTS "${name}"`);
    dropped += 1;
  };
  const cutoff = now - cfg.retentionHours * hourMs;
  for (const p of parts.filter((x) => x.starts.getTime() + hourMs <= cutoff)) await drop(p.name);
  parts = parts.filter((x) => x.starts.getTime() + hourMs > cutoff);
  let total = parts.reduce((s, p) => s + Number(p.bytes), 0);
  while (total > cfg.maxBytes && parts.length > 1) {
    const oldest = parts.shift() as (typeof parts)[number];
    await drop(oldest.name);
    total -= Number(oldest.bytes);
  }
  const expired = await db.query('DELETE FROM decision_inputs WHERE expires_at <= $1', [new Date(now)]);
  await expireCopies(db, new Date(cutoff));
  return {
    expiredRows: expired.rowCount ?? 0,
    droppedPartitions: dropped,
    bytes: total,
    partitions: parts.length,
  };
}

/**
 * Copies of recorded inputs kept elsewhere (shadow divergences, impact job samples) expire with
 * the configured window too: otherwise pseudonymised personal data outlived the retention issue 22
 * item 1 sets, and a shadow set and cleared again and again grew its table without bound.
 */
async function expireCopies(db: Db, cutoff: Date): Promise<void> {
  await db.query('DELETE FROM policy_shadow_divergences WHERE recorded_at <= $1', [cutoff]);
  await db.query(
    `UPDATE policy_impact_jobs SET result = jsonb_set(result, '{samples}', '[]'::jsonb)
     WHERE finished_at <= $1 AND jsonb_array_length(COALESCE(result->'samples', '[]'::jsonb)) > 0`,
    [cutoff],
  );
}

/** Housekeeping period of the recorder: retention and the size cap are enforced this often. */
export const inputsHousekeepingMs = 60_000;
/** Input batches waiting for their write; past this, batches are counted as failed, not queued. */
const maxPendingBatches = 8;

/**
 * Records inputs after their audit batch committed (on the audit thread, or inline in tests and
 * tools), one batch at a time and never more than `maxPendingBatches` behind: a slow replay
 * table costs samples, never the audit or a Check.
 */
export class InputRecorder {
  readonly stats = emptyInputStats();
  private readonly scrubber: Scrubber;
  private chain: Promise<void> = Promise.resolve();
  private pendingBatches = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    private readonly cfg: Omit<DecisionInputsConfig, 'sample'>,
    private readonly onStats?: (s: InputStats) => void,
  ) {
    this.scrubber = new Scrubber(cfg.key);
  }

  afterAudit(entries: RecordedEntry[], ids: number[]): void {
    const n = entries.reduce((c, e) => c + (e.replay ? 1 : 0), 0);
    if (n === 0) return;
    if (this.pendingBatches >= maxPendingBatches) {
      this.stats.failed += n;
      return;
    }
    this.pendingBatches += 1;
    this.chain = this.chain
      .then(() => recordDecisionInputs(this.db, this.scrubber, this.cfg, entries, ids))
      .then(
        (written) => {
          this.stats.recorded += written;
        },
        () => {
          this.stats.failed += n;
        },
      )
      .finally(() => {
        this.pendingBatches -= 1;
        this.onStats?.(this.stats);
      });
  }

  /** Run retention now (also every `inputsHousekeepingMs` once started). */
  async housekeep(now = Date.now()): Promise<void> {
    try {
      const r = await expireDecisionInputs(this.db, this.cfg, now);
      this.stats.expiredRows += r.expiredRows;
      this.stats.droppedPartitions += r.droppedPartitions;
      this.stats.bytes = r.bytes;
      this.stats.partitions = r.partitions;
    } catch {
      // Retried on the next run; what remains is still bounded by the window and the cap then.
    }
    this.onStats?.(this.stats);
  }

  start(): void {
    this.timer = setInterval(() => void this.housekeep(), inputsHousekeepingMs);
    this.timer.unref();
  }

  /** Wait for the writes under way (stop, tests). */
  async settle(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.chain;
  }
}
