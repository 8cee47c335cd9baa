/**
 * edge/encode.ts against thousands of random answers built the way edge/check.ts builds them:
 * random client headers, decisions (every field toCheckResponse reads), error formats, and strings
 * of every kind (empty, ASCII, multi-byte, astral, lone surrogates, control characters, lengths at
 * every varint boundary). Each answer must be written byte for byte as the generic serialiser
 * writes it (its strings made well-formed), read cleanly by a strict parser (test/helpers/check-wire.ts),
 * and, when it allows, remove or overwrite every identity header the client sent (SPEC 5.2.4).
 * The seed is fixed so a failure is reproducible; its message names the answer's index.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type * as grpc from '@grpc/grpc-js';
import {
  clientForbiddenHeaders,
  edgeOnlySecretHeaders,
  identityHeaders,
  toCheckResponse,
  unavailable,
  viewOf,
  type Decision,
  type DenyCode,
} from '../../edge/check.ts';
import { checkResponseSerializer, writable } from '../../edge/encode.ts';
import { authorizationPackage } from '../../edge/proto.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import type { ErrorFormat } from '../../shared/errors.ts';
import { headerMutations, readCheckResponse, wellFormed } from '../helpers/check-wire.ts';
import { Rand } from '../helpers/rand.ts';

const method = (authorizationPackage().Authorization.service as grpc.ServiceDefinition)
  .Check as grpc.MethodDefinition<CheckRequest, CheckResponse>;
const generic = (r: CheckResponse) => method.responseSerialize(r);
const decode = (b: Buffer) => method.responseDeserialize(b);
const serialize = checkResponseSerializer(generic);

/** Every length at which a varint (a string's or an enclosing message's length) gains a byte. */
const boundaries = [127, 128, 16_383, 16_384, 2_097_151, 2_097_152];
const pieces = {
  ascii: ['a', 'Z', '0', '-', ' ', '{', '"', '\\', '/', '='],
  multiByte: ['é', 'ß', '✓', '€', '中', '\u07ff', '\u0800', '\uffff'],
  astral: ['💸', '𝄞', '🏦', '\u{10ffff}', '\u{10000}'],
  loneSurrogates: ['\ud800', '\udbff', '\udc00', '\udfff', '\ud83d'],
  control: ['\0', '\n', '\r', '\t', '\x7f', '\x1b'],
};
const allPieces = Object.values(pieces).flat();

function run(r: Rand, from: readonly string[], n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += r.pick(from);
  return s;
}

/** A string whose UTF-8 length is near a varint boundary (the 2 MB ones rarely: they are slow). */
function nearBoundary(r: Rand): string {
  const big = r.chance(0.04);
  const b = r.pick(big ? boundaries.slice(4) : boundaries.slice(0, 4)) + r.int(13) - 6;
  // Two-byte characters too, so the boundary is met by a multi-byte string as well as an ASCII one.
  if (r.chance(0.5)) return 'x'.repeat(b);
  return 'é'.repeat(Math.floor(b / 2)) + 'x'.repeat(b % 2);
}

function text(r: Rand): string {
  switch (r.int(8)) {
    case 0:
      return '';
    case 1:
      return run(r, pieces.ascii, 1 + r.int(40));
    case 2:
      return run(r, pieces.multiByte, 1 + r.int(20));
    case 3:
      return run(r, pieces.astral, 1 + r.int(10));
    case 4:
      return run(r, pieces.loneSurrogates, 1 + r.int(3)) + run(r, pieces.ascii, r.int(4));
    case 5:
      return r.chance(0.15) ? nearBoundary(r) : run(r, pieces.control, 1 + r.int(5));
    default:
      return run(r, allPieces, r.int(60));
  }
}

/** Header names: the edge's own, names that are Object.prototype members, and anything else. */
const specialNames = [
  ...identityHeaders,
  ...edgeOnlySecretHeaders,
  ...clientForbiddenHeaders,
  '__proto__',
  'constructor',
  'toString',
  'hasOwnProperty',
  'X-Tenant-Id',
  'x-request-id',
  'retry-after',
  '',
];
const headerName = (r: Rand) => (r.chance(0.7) ? r.pick(specialNames) : text(r));

/** A record built with own properties only (as JSON.parse builds them): `__proto__` is a key here. */
function record(r: Rand, n: number): Record<string, string> {
  const entries: [string, string][] = [];
  for (let i = 0; i < n; i++) entries.push([headerName(r), text(r)]);
  return Object.fromEntries(entries);
}

const denyCodes: (DenyCode | undefined)[] = [
  'POLICY_DENIED',
  'UNAUTHENTICATED',
  'MFA_REQUIRED',
  'RATE_LIMITED',
  'BUDGET_EXCEEDED',
  'authz_unavailable',
  'MALFORMED_REQUEST',
  'PAYLOAD_TOO_LARGE',
  'NOT_FOUND',
  'METHOD_NOT_ALLOWED',
  'invalid_token',
  'session_revoked',
  'invalid_dpop_proof',
  undefined,
];
/** HTTP statuses a decision carries, and numbers no decision should but a bug could. */
const statuses = [200, 400, 401, 403, 404, 405, 413, 429, 503, 0, 1, 2 ** 31 - 1];
const oddStatuses = [2 ** 31, 2 ** 32, -1, -0, Number.NaN, 403.5, Number.POSITIVE_INFINITY];
const formats: ErrorFormat[] = ['core', 'problem', 'scim'];

function decision(r: Rand): Decision {
  const d: Decision = {
    allow: r.chance(0.5),
    status: r.chance(0.05) ? r.pick(oddStatuses) : r.pick(statuses),
  };
  const code = r.pick(denyCodes);
  if (code) d.code = code;
  if (r.chance(0.7)) d.message = text(r);
  if (r.chance(0.8)) d.set = record(r, r.int(14));
  if (r.chance(0.3)) d.extraBody = { retryAfter: r.int(100), note: text(r), nested: { list: [text(r)] } };
  if (r.chance(0.4)) d.responseHeaders = record(r, r.int(4));
  return d;
}

function clientRequest(r: Rand): CheckRequest {
  const headers: Record<string, string> = record(r, r.int(10));
  for (const h of specialNames) if (r.chance(0.3)) headers[h] = text(r);
  return {
    attributes: {
      source: { address: { socket_address: { address: r.chance(0.9) ? '203.0.113.9' : text(r) } } },
      request: {
        http: {
          id: r.chance(0.8) ? `r-${r.int(1e9)}` : '',
          method: r.pick(['GET', 'POST', 'DELETE']),
          path: `/v1/${run(r, pieces.ascii, r.int(12))}`,
          headers,
        },
      },
    },
  };
}

const isSmallInt = (n: number) => Number.isInteger(n) && n >= 0 && n < 2 ** 31;

/**
 * SPEC 5.2.4: every identity header the client sent is removed, or overwritten (never appended to)
 * with the value the answer sets, as Envoy reads the bytes.
 */
function assertIdentityStripped(clientSent: Record<string, string>, bytes: Buffer, answer: CheckResponse) {
  const { set: applied, remove } = headerMutations(readCheckResponse(bytes));
  const set = new Map(answer.ok_response?.headers.map((h) => [h.header.key, h.header.value]));
  for (const h of [...identityHeaders, ...edgeOnlySecretHeaders, ...clientForbiddenHeaders]) {
    if (!(h in clientSent)) continue;
    const written = applied.get(h);
    if (remove.includes(h)) continue;
    assert.ok(written, `client-sent ${h} is neither removed nor overwritten`);
    assert.equal(written.append, false, `${h} is appended to the client's copy`);
    assert.equal(written.value, wellFormed(set.get(h)), `${h} is overwritten with what the edge set`);
  }
}

describe('the Check answer written by hand, against random answers (edge/encode.ts)', () => {
  it('writes every answer toCheckResponse makes byte for byte as the generic serialiser does', () => {
    const r = new Rand(0x5eed_c0de);
    const answers = 3000;
    let handWritten = 0;
    for (let i = 0; i < answers; i++) {
      const req = clientRequest(r);
      const view = viewOf(req);
      const d = decision(r);
      const format = r.pick(formats);
      const answer = r.chance(0.05)
        ? unavailable(r.chance(0.5) ? view : undefined, text(r), format)
        : toCheckResponse(view, d, format);
      const at = `answer ${i}`;
      const mine = writable(answer);
      if (isSmallInt(d.status)) assert.ok(mine, `${at}: an answer the edge gives is one the writer knows`);
      if (mine) handWritten++;
      const bytes = serialize(answer);
      // Where the hand-written path wrote it, lone surrogates are U+FFFD; the generic path is unchanged.
      const expected = mine ? generic(wellFormed(answer)) : generic(answer);
      assert.ok(bytes.equals(expected), `${at}: bytes differ from the generic serialiser's`);
      assert.deepEqual(decode(bytes), decode(expected), at);
      if (!mine) continue;
      const read = readCheckResponse(bytes);
      assert.ok(read.status, `${at}: a status`);
      if (d.allow && answer.ok_response) assertIdentityStripped(view.headers, bytes, answer);
    }
    assert.ok(handWritten > answers * 0.9, `most answers are written by hand (${handWritten})`);
  });

  it('writes an answer whose lengths sit at every varint boundary, at every level of nesting', () => {
    const view = viewOf({
      attributes: {
        request: {
          http: { id: 'r-1', method: 'GET', path: '/v1/accounts', headers: { 'x-tenant-id': 'spoofed' } },
        },
      },
    });
    for (const b of boundaries)
      for (let delta = -40; delta <= 8; delta++) {
        const v = 'v'.repeat(b + delta);
        for (const answer of [
          toCheckResponse(view, { allow: true, status: 200, set: { 'x-principal-id': v } }),
          toCheckResponse(view, { allow: false, status: 403, message: v }),
          toCheckResponse(view, { allow: false, status: 429, responseHeaders: { 'x-note': v } }),
        ]) {
          assert.ok(writable(answer));
          const bytes = serialize(answer);
          assert.ok(bytes.equals(generic(answer)), `length ${b + delta}`);
          readCheckResponse(bytes);
        }
      }
  });
});
