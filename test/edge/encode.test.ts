/**
 * edge/encode.ts writes the Check answer by hand; the generic serialiser (protobufjs through
 * @grpc/proto-loader) is the reference. Every kind of answer the edge gives must decode, with the
 * generic deserialiser, to exactly what the generic serialiser's bytes decode to; a shape the
 * writer does not know goes to the generic serialiser; and an answer crosses a real gRPC call.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { identityHeaders, toCheckResponse, unavailable, viewOf, type Decision } from '../../edge/check.ts';
import { checkResponseSerializer, encodeCheckResponse, writable } from '../../edge/encode.ts';
import { authorizationPackage } from '../../edge/proto.ts';
import { bindEdge, createEdgeServer } from '../../edge/server.ts';
import { buildRouteTable } from '../../edge/routes.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import { routeDeclarations } from '../../shared/routes/index.ts';
import { createLogger } from '../../shared/log.ts';
import { wellFormed } from '../helpers/check-wire.ts';
import { envoyRequest } from '../helpers/edge.ts';

const check = (authorizationPackage().Authorization.service as grpc.ServiceDefinition)
  .Check as grpc.MethodDefinition<CheckRequest, CheckResponse>;
const decode = (b: Buffer) => check.responseDeserialize(b);

const request = (headers: Record<string, string>, path = '/v1/accounts'): CheckRequest =>
  envoyRequest('GET', path, { headers });

/** Header values across every length class of a varint and of UTF-8. */
const values = [
  '',
  'a',
  'é ✓ 💸',
  'x'.repeat(127),
  'y'.repeat(128),
  'z'.repeat(16_384),
  '\ud800 lone surrogate',
];

function answers(): CheckResponse[] {
  const forwarded = Object.fromEntries(
    [...identityHeaders.slice(0, 4), 'x-api-key-secret', 'x-forwarded-client-cert'].map((h) => [
      h,
      'client-sent',
    ]),
  );
  const view = viewOf(request(forwarded));
  const out: CheckResponse[] = [];
  for (const v of values) {
    const allow: Decision = {
      allow: true,
      status: 200,
      set: { 'x-tenant-id': 't1', 'x-principal-id': v, 'x-masking': `{"rule":"${v.slice(0, 50)}"}` },
    };
    out.push(toCheckResponse(view, allow));
    for (const format of ['core', 'problem', 'scim'] as const) {
      out.push(
        toCheckResponse(
          view,
          { allow: false, status: 403, code: 'POLICY_DENIED', message: `denied ${v}` },
          format,
        ),
      );
      out.push(
        toCheckResponse(
          view,
          {
            allow: false,
            status: 429,
            code: 'RATE_LIMITED',
            message: 'slow down',
            responseHeaders: { 'retry-after': '1', 'x-note': v },
          },
          format,
        ),
      );
    }
  }
  out.push(toCheckResponse(viewOf(request({})), { allow: true, status: 200 }));
  out.push(
    toCheckResponse(view, { allow: false, status: 401, code: 'UNAUTHENTICATED', message: 'no token' }),
  );
  out.push(unavailable(undefined, 'authorization is unavailable'));
  out.push(unavailable(view, 'authorization is unavailable', 'scim'));
  return out;
}

describe('the Check answer written by hand (edge/encode.ts)', () => {
  it('decodes to what the generic serialiser writes, for every kind of answer the edge gives', () => {
    const all = answers();
    assert.ok(all.length > 30);
    for (const r of all) {
      assert.ok(writable(r), 'every answer the edge makes is one the writer knows');
      // Byte for byte, once every string is well-formed: a lone surrogate is written as U+FFFD
      // (valid UTF-8, as protobuf requires of a string; protobufjs writes invalid UTF-8 for it,
      // which a strict parser such as Envoy's refuses along with the whole answer).
      const ours = encodeCheckResponse(r);
      assert.deepEqual(ours, check.responseSerialize(wellFormed(r)));
      assert.ok(decode(ours));
    }
  });

  it('leaves a shape it does not know to the generic serialiser, so no field is dropped', () => {
    const base = toCheckResponse(viewOf(request({})), {
      allow: true,
      status: 200,
      set: { 'x-tenant-id': 't1' },
    });
    const extra = {
      ...base,
      ok_response: {
        ...base.ok_response,
        response_headers_to_add: [{ header: { key: 'x-added', value: '1' } }],
      },
    } as unknown as CheckResponse;
    const negative = { ...base, status: { code: -1 } };
    const rawValue = {
      ...base,
      ok_response: {
        headers: [{ header: { key: 'k', value: 'v', raw_value: Buffer.from('v') } }],
        headers_to_remove: [],
      },
    } as unknown as CheckResponse;
    let generic = 0;
    const serialize = checkResponseSerializer((r) => {
      generic++;
      return check.responseSerialize(r);
    });
    for (const r of [extra, negative, rawValue]) {
      assert.equal(writable(r), false);
      const before = generic;
      const bytes = serialize(r);
      assert.equal(generic, before + 1, 'the generic serialiser wrote it');
      assert.deepEqual(decode(bytes), decode(check.responseSerialize(r)));
    }
    const added = decode(serialize(extra)).ok_response as unknown as {
      response_headers_to_add: { header: { key: string } }[];
    };
    assert.equal(added.response_headers_to_add[0]?.header.key, 'x-added');
    serialize(base);
    assert.equal(generic, 4, 'a known shape never reaches the generic serialiser');
  });

  it('crosses a real gRPC call from the edge server', async () => {
    const decisionSet = { 'x-tenant-id': 't1', 'x-principal-id': randomUUID(), 'x-roles': 'ops,readonly' };
    const server = createEdgeServer({
      log: createLogger('silent'),
      decide: () => ({ allow: true, status: 200, set: decisionSet }),
      resolve: buildRouteTable(routeDeclarations),
    });
    const address = `127.0.0.1:${await bindEdge(server, 0)}`;
    const { Authorization } = authorizationPackage();
    const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
      Check(r: CheckRequest, cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void): void;
    };
    try {
      const res = await new Promise<CheckResponse | undefined>((resolve, reject) =>
        client.Check(request({ 'x-tenant-id': 'spoofed' }), (e, r) => (e ? reject(e) : resolve(r))),
      );
      const got = Object.fromEntries(
        (res?.ok_response?.headers ?? []).map((h) => [h.header.key, h.header.value]),
      );
      for (const [k, v] of Object.entries(decisionSet)) assert.equal(got[k], v);
      assert.equal(res?.status.code, 0);
      assert.match(String(res?.dynamic_metadata?.fields.decision_id?.stringValue), /^[0-9a-f-]{36}$/);
    } finally {
      client.close();
      server.forceShutdown();
    }
  });
});
