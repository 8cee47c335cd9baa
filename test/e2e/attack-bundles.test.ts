/**
 * Candidate bundles attacked through the dev gateway by a tenant's policy author: what the
 * verifier and the loader thread run before and while they refuse or accept a bundle.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { putServiceToken } from '../../core/platform/service-tokens.ts';
import { wasmCandidate } from '../helpers/candidates.ts';
import { type E2eStack, startE2eStack } from '../helpers/e2e-stack.ts';
import { call, type Res } from '../helpers/http.ts';
import { printingWasm } from '../helpers/probe-wasm.ts';
import { stdoutDuring } from '../helpers/stdout.ts';

describe('attack: candidate bundles through the gateway', () => {
  let e2e: E2eStack;
  let author = '';

  before(async () => {
    e2e = await startE2eStack('atk-bundles');
    author = await putServiceToken(e2e.tdb.db, 'demo', 'e2e-atk-bundles-author', ['policy_author']);
  });
  after(() => e2e?.stop());

  const upload = (body: unknown): Promise<Res> =>
    call(e2e.gw, 'POST', '/v1/policy/candidates', {
      json: body,
      headers: { authorization: `Bearer ${author}`, 'x-request-id': randomUUID() },
    });

  it("writes nothing a candidate prints while it loads (opa_println) to core's log stream", async () => {
    const forged = `{"level":60,"msg":"forged by a candidate ${randomUUID()}"}`;
    let r: Res | undefined;
    const out = await stdoutDuring(async () => {
      r = await upload(await wasmCandidate(printingWasm({ text: forged }), 'atk-printing'));
      await new Promise((res) => setTimeout(res, 300));
    });
    assert.equal(r?.status, 201, r?.text);
    assert.ok(!out.includes(forged), "the candidate's line reached this process's stdout");
  });
});
