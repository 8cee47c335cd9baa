/**
 * Replaying recorded decisions against a candidate (issue 22 item 2): the pure part of an impact
 * job, run on core's impact worker thread (impact-thread.ts), never on the event loop that
 * answers requests. Each recorded decision is compared with its own policy version replayed on
 * the same recorded input and folded into a bounded result: counts, groups by change, purpose,
 * route and reason, and a few samples of each flip with both traces.
 */
import { Type, type Static } from '@sinclair/typebox';
import type { PolicyDecision, PolicyRevision } from '../../policy/runtime/bundle.ts';

/** Result bounds: groups kept (the rest counted under `other`), samples per group and in all. */
const maxGroups = 500;
const samplesPerGroup = 3;
const maxSamples = 60;

const Change = Type.Union([
  Type.Literal('unchanged'),
  Type.Literal('allow_to_deny'),
  Type.Literal('deny_to_allow'),
  Type.Literal('error'),
]);
type Change = Static<typeof Change>;
const Trace = Type.Union([
  Type.Object({
    allow: Type.Boolean(),
    code: Type.String(),
    message: Type.String(),
    reasons: Type.Array(Type.Object({ check: Type.String(), ok: Type.Boolean(), detail: Type.Unknown() })),
  }),
  Type.Null(),
]);

export const ImpactResult = Type.Object({
  scanned: Type.Integer(),
  unchanged: Type.Integer(),
  allow_to_deny: Type.Integer(),
  deny_to_allow: Type.Integer(),
  errors: Type.Integer(),
  /** Recorded decisions their own policy version no longer reproduces from the recorded (scrubbed) input. */
  drift: Type.Integer(),
  complete: Type.Boolean(),
  stopped: Type.Optional(Type.Union([Type.Literal('decision_limit'), Type.Literal('time_limit')])),
  run_ms: Type.Integer(),
  groups: Type.Array(
    Type.Object({
      change: Change,
      purpose: Type.String(),
      route: Type.String(),
      reason: Type.String(),
      count: Type.Integer(),
    }),
  ),
  samples: Type.Array(
    Type.Object({
      change: Change,
      purpose: Type.String(),
      route: Type.String(),
      reason: Type.String(),
      decision_id: Type.String(),
      audit_id: Type.String(),
      recorded_at: Type.String({ format: 'date-time' }),
      /** The recorded input: secrets were never recorded; personal identifiers are keyed pseudonyms. */
      input: Type.Unknown(),
      recorded: Type.Object({ allow: Type.Boolean(), code: Type.String(), policy_version: Type.String() }),
      /** The recorded decision's policy replayed with its trace (null when that revision is no longer available). */
      baseline: Trace,
      candidate: Trace,
    }),
  ),
});
export type ImpactResult = Static<typeof ImpactResult>;

export const emptyResult = (): ImpactResult => ({
  scanned: 0,
  unchanged: 0,
  allow_to_deny: 0,
  deny_to_allow: 0,
  errors: 0,
  drift: 0,
  complete: false,
  run_ms: 0,
  groups: [],
  samples: [],
});

/** One recorded decision as read from decision_inputs (migration 0910). */
export interface InputRow {
  recorded_at: Date;
  audit_id: string;
  decision_id: string;
  purpose: string;
  route: string;
  allow: boolean;
  code: string;
  policy_version: string;
  input: unknown;
}

/** NUL and unpaired surrogates: text PostgreSQL's jsonb refuses (`\u0000`, a lone `\ud800`). */
const unstorable = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * What a policy wrote (its codes, messages, check names and details) made storable as jsonb. A
 * candidate's strings are its author's: one holding a NUL failed every write of its job's result,
 * so the job stayed `running`, retried without end, and its candidate could not be deleted.
 */
function storable(v: unknown): unknown {
  if (typeof v === 'string') return v.replace(unstorable, '\uFFFD');
  if (Array.isArray(v)) return v.map(storable);
  if (v && typeof v === 'object')
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [storable(k) as string, storable(x)]));
  return v;
}

/** A sample's trace (JSON characters) past which its checks' details are left out. */
const maxTraceChars = 16_384;
/** A code, message, check name or reason kept at most this long. */
const maxTextChars = 512;
const clip = (s: string) => (s.length > maxTextChars ? `${s.slice(0, maxTextChars)}…` : s);

const failedChecks = (d: PolicyDecision | undefined): string =>
  d
    ? clip(
        storable(
          d.reasons
            .filter((r) => !r.ok)
            .map((r) => r.check)
            .join(','),
        ) as string,
      )
    : '';

/**
 * A decision's trace as a sample keeps it, bounded: a candidate's output is its author's and
 * may be megabytes, which every page's result (stringified and written by core) and every
 * poll of the job would carry.
 */
function traceOf(d: PolicyDecision | undefined) {
  if (!d) return null;
  const t = storable({ allow: d.allow, code: d.code, message: d.message, reasons: d.reasons }) as {
    allow: boolean;
    code: string;
    message: string;
    reasons: PolicyDecision['reasons'];
  };
  if (JSON.stringify(t).length <= maxTraceChars) return t;
  return {
    allow: t.allow,
    code: clip(t.code),
    message: clip(t.message),
    reasons: t.reasons.slice(0, 32).map((r) => ({
      check: clip(r.check),
      ok: r.ok,
      detail: '(left out: the trace is too large to keep)',
    })),
  };
}

/** Folds replayed decisions into a result, within its bounds. */
export class Tally {
  private readonly groups = new Map<string, ImpactResult['groups'][number]>();
  private readonly sampled = new Map<string, number>();

  constructor(readonly result: ImpactResult) {
    for (const g of result.groups) this.groups.set(`${g.change}|${g.purpose}|${g.route}|${g.reason}`, g);
    for (const s of result.samples) {
      const k = `${s.change}|${s.purpose}|${s.route}|${s.reason}`;
      this.sampled.set(k, (this.sampled.get(k) ?? 0) + 1);
    }
  }

  count(change: Change, purpose: string, route: string, reason: string): string {
    let key = `${change}|${purpose}|${route}|${reason}`;
    let g = this.groups.get(key);
    if (!g && this.groups.size >= maxGroups) {
      key = `${change}|other|other|other`;
      g = this.groups.get(key);
    }
    if (!g) {
      const [, p = purpose, r = route, why = reason] = key.split('|');
      g = { change, purpose: p, route: r, reason: why, count: 0 };
      this.groups.set(key, g);
      this.result.groups.push(g);
    }
    g.count += 1;
    return key;
  }

  wantsSample(key: string): boolean {
    return this.result.samples.length < maxSamples && (this.sampled.get(key) ?? 0) < samplesPerGroup;
  }

  sample(key: string, s: ImpactResult['samples'][number]): void {
    this.sampled.set(key, (this.sampled.get(key) ?? 0) + 1);
    this.result.samples.push(s);
  }
}

function safely<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch {
    return undefined;
  }
}

/**
 * Replay one recorded decision against the candidate and fold it into the tally. The candidate is
 * compared with the recorded decision's own policy version replayed on the same recorded input, so
 * what scrubbing changed (an address cut to its /24) cancels out; where that replay differs from
 * what was decided it is counted as `drift`, and where the revision is no longer available the
 * recorded verdict stands in for it.
 */
export function replayOne(
  row: InputRow,
  candidate: PolicyRevision,
  baselineOf: (ref: string) => PolicyRevision | undefined,
  tally: Tally,
): void {
  const r = tally.result;
  r.scanned += 1;
  const baseRev = baselineOf(row.policy_version);
  const baseVerdict = baseRev ? safely(() => baseRev.decide(row.input)) : undefined;
  if (baseVerdict && baseVerdict.allow !== row.allow) r.drift += 1;
  const before = baseVerdict?.allow ?? row.allow;
  const verdict = safely(() => candidate.decide(row.input));
  let change: Change;
  if (!verdict) change = 'error';
  else if (verdict.allow === before) change = 'unchanged';
  else change = before ? 'allow_to_deny' : 'deny_to_allow';
  if (change === 'unchanged') {
    r.unchanged += 1;
    tally.count(change, row.purpose, row.route, '');
    return;
  }
  // A candidate that gave no verdict gives no trace either: not evaluated twice (one that
  // allocates to its memory bound takes a while to fail).
  const cand = change === 'error' ? undefined : safely(() => candidate.evaluate(row.input));
  const base = baseRev ? safely(() => baseRev.evaluate(row.input)) : undefined;
  // The reason a flip happened: the checks failing on the side that now (or then) denies.
  const reason =
    change === 'allow_to_deny'
      ? failedChecks(cand)
      : change === 'deny_to_allow'
        ? failedChecks(base) || row.code
        : 'candidate produced no decision';
  if (change === 'allow_to_deny') r.allow_to_deny += 1;
  else if (change === 'deny_to_allow') r.deny_to_allow += 1;
  else r.errors += 1;
  const key = tally.count(change, row.purpose, row.route, reason);
  if (!tally.wantsSample(key)) return;
  tally.sample(key, {
    change,
    purpose: row.purpose,
    route: row.route,
    reason,
    decision_id: row.decision_id,
    audit_id: row.audit_id,
    recorded_at: row.recorded_at.toISOString(),
    input: row.input,
    recorded: { allow: row.allow, code: row.code, policy_version: row.policy_version },
    baseline: traceOf(base),
    candidate: traceOf(cand),
  });
}
