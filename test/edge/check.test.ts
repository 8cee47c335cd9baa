import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../../shared/log.ts';
import type { Decide, FailClosed } from '../../edge/server.ts';
import { envoyRequest, headerOf, platformOnly, startTestEdge, type TestEdge } from '../helpers/edge.ts';

const log = createLogger('silent');

describe('edge Check wire format (stand-in decision)', () => {
  let edge: TestEdge;
  before(async () => {
    edge = await startTestEdge({ log, decide: platformOnly });
  });
  after(() => edge.close());

  it('allows a public platform route and sets identity headers, removing spoofed copies', async () => {
    const res = await edge.check(
      envoyRequest('GET', '/v1/health?verbose=1', {
        headers: {
          'x-purpose': 'customer.transact',
          'x-tenant-id': 'evil',
          'x-principal-id': 'admin',
          'x-aal': '3',
        },
      }),
    );
    assert.equal(res.status.code, 0);
    assert.ok(res.ok_response);
    assert.equal(headerOf(res, 'x-purpose'), 'operational');
    assert.equal(headerOf(res, 'x-client-ip'), '203.0.113.9');
    assert.equal(headerOf(res, 'x-req-id'), 'req-1');
    assert.deepEqual([...res.ok_response.headers_to_remove].sort(), [
      'x-aal',
      'x-principal-id',
      'x-tenant-id',
    ]);
    assert.ok(res.dynamic_metadata?.fields.decision_id?.stringValue);
  });

  it('denies an unmapped route (operational) with a JSON body', async () => {
    const res = await edge.check(envoyRequest('GET', '/v1/unknown/thing'));
    assert.equal(res.ok_response, undefined);
    assert.equal(res.denied_response?.status.code, 403);
    assert.equal(headerOf(res, 'content-type'), 'application/json');
    assert.equal(JSON.parse(res.denied_response?.body ?? '{}').code, 'POLICY_DENIED');
  });

  it('denies a mapped route the skeleton does not authorise', async () => {
    const res = await edge.check(envoyRequest('POST', '/v1/health'));
    assert.equal(res.denied_response?.status.code, 403);
  });

  it('decides a Check whose 64-bit fields are past 2^53 or negative (body size, request time), as Envoy or a client could send them', async () => {
    for (const [size, seconds] of [
      ['9223372036854775807', '9223372036854775807'],
      ['-1', '-9223372036854775808'],
      ['9007199254740993', '253402300799'],
    ] as const) {
      const req = envoyRequest('GET', '/v1/health');
      const http = req.attributes?.request?.http;
      assert.ok(http);
      http.size = size;
      // `time` (google.protobuf.Timestamp) is not in CheckRequest's type: nothing on the edge reads it.
      Object.assign(req.attributes?.request ?? {}, { time: { seconds, nanos: 999_999_999 } });
      const res = await edge.check(req);
      assert.equal(res.status.code, 0, `size ${size}, time ${seconds}`);
      assert.equal(headerOf(res, 'x-purpose'), 'operational');
    }
    const denied = envoyRequest('GET', '/v1/unknown/thing');
    if (denied.attributes?.request?.http) denied.attributes.request.http.size = '9223372036854775807';
    assert.equal((await edge.check(denied)).denied_response?.status.code, 403);
  });

  it('fails closed on a malformed CheckRequest', async () => {
    const res = await edge.check({ attributes: {} });
    assert.equal(res.denied_response?.status.code, 503);
    assert.equal(JSON.parse(res.denied_response?.body ?? '{}').code, 'authz_unavailable');
  });
});

describe('edge Check fails closed on decision faults', () => {
  const cases: [string, Decide, RegExp][] = [
    [
      'a throwing policy',
      () => {
        throw new Error('policy crashed');
      },
      /policy crashed/,
    ],
    [
      'a rejecting dependency',
      async () => {
        throw new Error('database gone');
      },
      /database gone/,
    ],
    [
      'a decision slower than the budget',
      // Unref'd: the slow decision's timer does not hold the test file's process 3 s after its tests.
      () => new Promise((r) => setTimeout(() => r({ allow: true, status: 200 }), 3000).unref()),
      /exceeded 50 ms/,
    ],
  ];
  for (const [name, decide, reason] of cases) {
    it(`denies with authz_unavailable on ${name}, and reports it for the audit`, async () => {
      const reported: { path: string | undefined; purpose: string | undefined; reason: string }[] = [];
      const failClosed: FailClosed = (view, resolved, why) =>
        reported.push({ path: view?.path, purpose: resolved?.purpose, reason: why });
      const edge = await startTestEdge({ log, decide, budgetMs: 50, failClosed });
      try {
        const started = Date.now();
        const res = await edge.check(envoyRequest('GET', '/v1/health'));
        assert.equal(res.ok_response, undefined);
        assert.equal(res.denied_response?.status.code, 503);
        assert.equal(JSON.parse(res.denied_response?.body ?? '{}').code, 'authz_unavailable');
        // The slow decision takes 3 s; an answer well before that came from the 50 ms budget.
        assert.ok(Date.now() - started < 2000, 'answered within the budget, not after the slow dependency');
        assert.equal(reported.length, 1);
        assert.equal(reported[0]?.path, '/v1/health');
        assert.equal(reported[0]?.purpose, 'operational');
        assert.match(reported[0]?.reason ?? '', reason);
      } finally {
        await edge.close();
      }
    });
  }

  it('reports a malformed CheckRequest, which has no view to report', async () => {
    const reported: (string | undefined)[] = [];
    const edge = await startTestEdge({
      log,
      decide: platformOnly,
      failClosed: (view) => reported.push(view?.path),
    });
    try {
      assert.equal(
        JSON.parse((await edge.check({ attributes: {} })).denied_response?.body ?? '{}').code,
        'authz_unavailable',
      );
      assert.deepEqual(reported, [undefined]);
    } finally {
      await edge.close();
    }
  });

  it('tells a decision that finishes past the budget that its answer was already given', async () => {
    // The decision finishes when the test lets it, after the edge has answered: no timed waits.
    let release = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    let finished: (expired: boolean) => void = () => {};
    const expiredWhenDone = new Promise<boolean>((r) => {
      finished = r;
    });
    const decide: Decide = async (_view, _resolved, deadline) => {
      await released;
      finished(deadline.expired);
      return { allow: true, status: 200 };
    };
    const edge = await startTestEdge({ log, decide, budgetMs: 50 });
    try {
      assert.equal(
        JSON.parse((await edge.check(envoyRequest('GET', '/v1/health'))).denied_response?.body ?? '{}').code,
        'authz_unavailable',
      );
      release();
      assert.equal(await expiredWhenDone, true);
    } finally {
      await edge.close();
    }
  });

  it('still answers when the fail-closed report itself throws', async () => {
    const edge = await startTestEdge({
      log,
      decide: () => {
        throw new Error('policy crashed');
      },
      failClosed: () => {
        throw new Error('audit gone');
      },
    });
    try {
      assert.equal(
        JSON.parse((await edge.check(envoyRequest('GET', '/v1/health'))).denied_response?.body ?? '{}').code,
        'authz_unavailable',
      );
    } finally {
      await edge.close();
    }
  });
});
