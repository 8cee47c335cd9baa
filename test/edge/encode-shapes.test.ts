/**
 * edge/encode.ts given answers of a shape toCheckResponse does not make (a bug elsewhere, a future
 * field): each must be written exactly as the generic serialiser writes it, or refused where the
 * generic serialiser refuses it, never written otherwise. A wrong byte in the answer Envoy applies
 * can drop an identity header's removal, or make Envoy refuse the answer (SPEC 5.2.4, SPEC 1).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { toCheckResponse, viewOf } from '../../edge/check.ts';
import { checkResponseSerializer, writable } from '../../edge/encode.ts';
import { authorizationPackage } from '../../edge/proto.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import { createLogger } from '../../shared/log.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { readCheckResponse } from '../helpers/check-wire.ts';
import { Rand } from '../helpers/rand.ts';
import { envoyRequest } from '../helpers/edge.ts';

const method = (authorizationPackage().Authorization.service as grpc.ServiceDefinition)
  .Check as grpc.MethodDefinition<CheckRequest, CheckResponse>;
const generic = (r: CheckResponse) => method.responseSerialize(r);
const serialize = checkResponseSerializer(generic);

type Outcome = { bytes: Buffer } | { threw: string };
function outcome(write: (r: CheckResponse) => Buffer, r: unknown): Outcome {
  try {
    return { bytes: write(r as CheckResponse) };
  } catch (e) {
    return { threw: (e as Error).message };
  }
}

/** The property: what the Check method writes is what the generic serialiser writes, or both refuse. */
function assertAsGeneric(r: unknown, what: string): void {
  const expected = outcome(generic, r);
  const got = outcome(serialize, r);
  if ('threw' in expected) {
    assert.ok('threw' in got, `${what}: the generic serialiser refuses it, but it was written`);
    return;
  }
  assert.ok('bytes' in got, `${what}: threw ${'threw' in got ? got.threw : ''}`);
  assert.equal(got.bytes.toString('hex'), expected.bytes.toString('hex'), what);
}

const option = (key: string, value: string) => ({ header: { key, value }, append: { value: false } });

function allowAnswer(): CheckResponse {
  const view = viewOf(
    envoyRequest('POST', '/v1/transfers', {
      headers: { 'x-tenant-id': 'spoofed', 'x-roles': 'admin', 'x-api-key-secret': 's' },
    }),
  );
  return toCheckResponse(view, { allow: true, status: 200, set: { 'x-tenant-id': 't1' } });
}

/** Values no field of an answer should hold, each made fresh (a shared array would alias two fields). */
const oddValues: (() => unknown)[] = [
  () => undefined,
  () => null,
  () => Number.NaN,
  () => -1,
  () => -0,
  () => 0,
  () => 1.5,
  () => 2 ** 31 - 1,
  () => 2 ** 31,
  () => 2 ** 32,
  () => Number.POSITIVE_INFINITY,
  () => '',
  () => '5',
  () => '__proto__',
  () => true,
  () => false,
  () => [],
  () => ({}),
  () => new String('x'),
  () => Object(5),
  () => [option('x-tenant-id', 'extra')],
];
/** Names protobufjs knows in one message or another, and names every object has. */
const extraNames = [
  'extra',
  '__proto__',
  'constructor',
  'toString',
  'response_headers_to_add',
  'query_parameters_to_remove',
  'raw_value',
  'append_action',
  'keep_empty_value',
  'details',
  'numberValue',
  'dynamic_metadata',
];

function containers(v: unknown, out: object[] = []): object[] {
  if (typeof v !== 'object' || v === null || v instanceof String || v instanceof Number) return out;
  out.push(v);
  for (const k of Object.keys(v)) containers((v as Record<string, unknown>)[k], out);
  return out;
}

/** Sets `c[k]` as a plain data property, whatever it was (a getter, non-enumerable). */
const put = (c: object, k: string, value: unknown) =>
  Object.defineProperty(c, k, { value, enumerable: true, writable: true, configurable: true });

/** One change to one object of the answer, of a kind a bug elsewhere could make. */
function mutate(r: Rand, answer: object): void {
  const c = r.pick(containers(answer)) as Record<string, unknown>;
  const keys = Object.keys(c);
  const k = keys.length > 0 ? r.pick(keys) : undefined;
  const odd = () => (r.pick(oddValues) as () => unknown)();
  switch (r.int(8)) {
    case 0:
      if (k !== undefined) put(c, k, odd());
      return;
    case 1:
      if (k !== undefined) delete c[k];
      return;
    case 2:
      Object.defineProperty(c, r.pick(extraNames), {
        value: odd(),
        enumerable: r.chance(0.7),
        configurable: true,
        writable: true,
      });
      return;
    case 3:
      if (k !== undefined) {
        const v = c[k];
        Object.defineProperty(c, k, { get: () => v, enumerable: true, configurable: true });
      }
      return;
    case 4:
      if (k !== undefined) Object.defineProperty(c, k, { enumerable: false });
      return;
    case 5:
      if (Array.isArray(c)) c.length += 1;
      else if ('key' in c) put(c, 'key', r.pick(['__proto__', 'constructor', 'x-tenant-id', '']));
      return;
    case 6:
      Object.setPrototypeOf(c, r.chance(0.5) ? null : { [r.pick(extraNames)]: odd() });
      return;
    default:
      if (k !== undefined && Array.isArray(c[k]))
        put(c, k, { ...(c[k] as unknown[]), length: (c[k] as unknown[]).length });
  }
}

function baseAnswers(): CheckResponse[] {
  const view = viewOf({
    attributes: {
      request: {
        http: {
          id: 'r-2',
          method: 'GET',
          path: '/v1/accounts',
          headers: { 'x-tenant-id': 'x', 'x-roles': 'y' },
        },
      },
    },
  });
  return [
    allowAnswer(),
    toCheckResponse(view, { allow: true, status: 200, set: { 'x-principal-id': 'p1', 'x-masking': '{}' } }),
    toCheckResponse(view, { allow: false, status: 403, code: 'POLICY_DENIED', message: 'no' }, 'problem'),
    toCheckResponse(view, { allow: false, status: 429, responseHeaders: { 'retry-after': '1' } }, 'scim'),
    toCheckResponse(view, { allow: false, status: 401, code: 'UNAUTHENTICATED' }),
  ];
}

describe('the Check answer writer given shapes the edge does not make (edge/encode.ts)', () => {
  it('writes an array with holes as the generic serialiser does, never throwing on it', () => {
    const remove = ['x-roles', 'x-api-key-secret'];
    delete remove[0];
    const headers = [option('x-tenant-id', 't1'), option('x-principal-id', 'p1')];
    delete headers[1];
    const base = allowAnswer();
    assertAsGeneric(
      { ...base, ok_response: { headers: [], headers_to_remove: remove } },
      'hole in headers_to_remove',
    );
    assertAsGeneric({ ...base, ok_response: { headers, headers_to_remove: [] } }, 'hole in headers');
  });

  it('never writes an allow without its header changes when ok_response is not an object', () => {
    // Status OK and no ok_response: Envoy forwards the request untouched, the client's x-tenant-id with it.
    for (const notObject of [false, 0, '', Number.NaN])
      assertAsGeneric({ status: { code: 0 }, ok_response: notObject }, `ok_response ${String(notObject)}`);
    for (const notObject of [false, 0, ''])
      assertAsGeneric(
        { status: { code: 7, message: 'denied' }, denied_response: notObject },
        `denied_response ${String(notObject)}`,
      );
  });

  it('writes the fields a message holds through its prototype or as non-enumerable properties', () => {
    const base = allowAnswer();
    const ok = base.ok_response as NonNullable<CheckResponse['ok_response']>;
    const added = [{ header: { key: 'x-tenant-id', value: 'from-prototype' } }];
    const inherited = Object.assign(Object.create({ response_headers_to_add: added }), ok);
    assertAsGeneric({ ...base, ok_response: inherited }, 'an OkHttpResponse field on the prototype');
    const hidden = { ...ok };
    Object.defineProperty(hidden, 'query_parameters_to_remove', { value: ['tenant'], enumerable: false });
    assertAsGeneric({ ...base, ok_response: hidden }, 'a non-enumerable OkHttpResponse field');
    const rawValue = { key: 'x-tenant-id', value: '' };
    Object.defineProperty(rawValue, 'raw_value', { value: Buffer.from('t2'), enumerable: false });
    assertAsGeneric(
      { ...base, ok_response: { headers: [{ header: rawValue }], headers_to_remove: [] } },
      'a non-enumerable raw_value',
    );
    const details = Object.create({ details: [{ type_url: 'x', value: Buffer.from('y') }] });
    details.code = 7;
    assertAsGeneric({ status: details }, 'a Status field on the prototype');
  });

  it('writes the elements an array holds, not what its iterator yields', () => {
    const base = allowAnswer();
    const headers = [option('x-tenant-id', 't1')];
    Object.defineProperty(headers, Symbol.iterator, {
      value: function* () {
        yield option('x-tenant-id', 't9');
      },
    });
    assertAsGeneric({ ...base, ok_response: { headers, headers_to_remove: [] } }, 'an overridden iterator');
  });

  it('never writes framing that disagrees with its content, whatever a getter returns', () => {
    /** A header value that changes length on its seventh read: the writer reads a value more than once. */
    function drifting(key: string, steady: string, last: string) {
      let reads = 0;
      return {
        key,
        get value() {
          reads++;
          return reads >= 7 ? last : steady;
        },
      };
    }
    const r = {
      status: { code: 0 },
      ok_response: {
        headers: [
          { header: drifting('x-tenant-id', 'aa', 'aaa'), append: { value: false } },
          { header: drifting('x-principal-id', 'bb', 'b'), append: { value: false } },
        ],
        headers_to_remove: ['x-roles'],
      },
    } as unknown as CheckResponse;
    let fallbacks = 0;
    const bytes = checkResponseSerializer(generic, () => fallbacks++)(r);
    assert.doesNotThrow(() => readCheckResponse(bytes), 'Envoy can parse the answer');
    assert.equal(fallbacks, 1, 'the refusal is told (the edge logs it)');
    assert.ok(method.responseDeserialize(bytes));
  });

  it('writes thousands of randomly broken answers as the generic serialiser does, or refuses them as it does', () => {
    const r = new Rand(0xbad_5ea);
    const bases = baseAnswers();
    let handWritten = 0;
    for (let i = 0; i < 5000; i++) {
      const answer = structuredClone(r.pick(bases));
      const changes = 1 + r.int(3);
      for (let n = 0; n < changes; n++) mutate(r, answer);
      if (writable(answer)) handWritten++;
      assertAsGeneric(answer, `broken answer ${i}`);
    }
    // Many changes leave a shape the writer knows (a getter, an extra key, an odd string): it is tested too.
    assert.ok(handWritten > 500, `${handWritten} broken answers written by hand`);
  });

  it('writes __proto__ and constructor as header keys and metadata field names', () => {
    const base = allowAnswer();
    const fields = JSON.parse('{"__proto__": {"stringValue": "a"}, "constructor": {"stringValue": "b"}}');
    const answer = {
      ...base,
      ok_response: {
        headers: [option('__proto__', 'a'), option('constructor', 'b')],
        headers_to_remove: ['__proto__', 'constructor'],
      },
      dynamic_metadata: { fields },
    };
    assertAsGeneric(answer, '__proto__ and constructor');
    const read = readCheckResponse(serialize(answer as CheckResponse));
    assert.equal(read.dynamic_metadata?.length, 1);
  });

  it('leaves an answer that is an array to the generic serialiser, which refuses it', () => {
    const answer = Object.assign([], {
      status: { code: 0 },
      ok_response: { headers: [], headers_to_remove: [] },
    });
    assertAsGeneric(answer, 'an array holding an answer');
  });

  it('answers every Check even when the answer cannot be serialised, and keeps serving', async () => {
    let poison = true;
    const unprintable = {
      toString(): string {
        throw new Error('unprintable');
      },
    };
    const server = createEdgeServer({
      log: createLogger('silent'),
      decide: () =>
        poison
          ? {
              allow: false,
              status: 429,
              code: 'RATE_LIMITED',
              responseHeaders: { 'retry-after': unprintable as unknown as string },
            }
          : { allow: true, status: 200, set: { 'x-tenant-id': 't1' } },
      resolve: buildRouteTable(routeDeclarations),
    });
    const address = `127.0.0.1:${await bindEdge(server, 0)}`;
    const { Authorization } = authorizationPackage();
    const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
      Check(r: CheckRequest, cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void): void;
    };
    const call = () =>
      new Promise<{ error: grpc.ServiceError | null; answer?: CheckResponse }>((resolve) =>
        client.Check(
          {
            attributes: {
              request: {
                http: { id: 'r-1', method: 'GET', path: '/v1/accounts', headers: { 'x-tenant-id': 'x' } },
              },
            },
          },
          (error, answer) => resolve({ error, answer }),
        ),
      );
    try {
      const failed = await call();
      // Envoy fails closed on a gRPC error (failure_mode_allow false); an answer must be a deny.
      if (failed.error) assert.equal(failed.error.code, grpc.status.INTERNAL);
      else assert.notEqual(failed.answer?.status.code, 0, 'never an allow');
      poison = false;
      const next = await call();
      assert.equal(next.error, null);
      assert.equal(next.answer?.status.code, 0, 'the server still answers');
    } finally {
      client.close();
      server.forceShutdown();
    }
  });
});
