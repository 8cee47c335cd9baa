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

  it("an unsigned manifest nested thousands deep in a member of its own is the bundle's fault: 422, not 503", async () => {
    // Within manifestMaxBytes; the schema takes any further member, and the signature's canonical
    // JSON of it recursed past the call stack (a RangeError, answered as ours: 503 with Retry-After).
    const depth = 30_000;
    const manifest = JSON.stringify({
      policy_version: 'p',
      registry_version: 'r',
      entrypoint: 'payments/authz/decision',
      wasm_sha256: '0'.repeat(64),
      registry_sha256: '0'.repeat(64),
      signature: 'A'.repeat(86),
    }).replace(/}$/, `,"build":${'['.repeat(depth)}${']'.repeat(depth)}}`);
    const r = await upload({ manifest, registry: '{}', wasm: 'AAAA' });
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.code, 'BUNDLE_INVALID');
    assert.match(r.json.message, /bundle manifest is nested more than 32 levels deep/);
    assert.equal(r.headers['retry-after'], undefined, 'nothing to retry');
  });
});
