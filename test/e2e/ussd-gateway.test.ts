import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../bin/config.ts';
import { startStack, type Stack } from '../../bin/stack.ts';
import { freshDatabase, type TestDb } from '../helpers/db.ts';
import { call } from '../helpers/http.ts';

/** The USSD gateway is a machine client: the seeded `ussd` service token through the real edge. */
describe('USSD through the gateway', () => {
  let tdb: TestDb;
  let dataDir: string;
  let stack: Stack;
  let gw: string;
  let tokens: Record<string, { token: string }>;
  before(async () => {
    tdb = await freshDatabase({ migrate: false });
    dataDir = await mkdtemp(join(tmpdir(), 'e2e-ussd-'));
    const config = loadConfig({
      GATEWAY_PORT: '0',
      CORE_PORT: '0',
      AUTHZ_PORT: '0',
      DATA_DIR: dataDir,
      DATABASE_URL: tdb.url,
      LOG_LEVEL: 'silent',
    });
    stack = await startStack(config, { checkResponses: true, checkTimeoutMs: 3000 });
    gw = `http://127.0.0.1:${stack.ports.gateway}`;
    tokens = JSON.parse(await readFile(join(dataDir, 'demo.json'), 'utf8')).serviceTokens;
  });
  after(async () => {
    await stack.stop();
    await tdb.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  const session = (token: string | undefined, text: string) =>
    call(gw, 'POST', '/v1/ussd/session', {
      body: new URLSearchParams({
        sessionId: 'gw-1',
        serviceCode: '*384*7#',
        phoneNumber: '+254733000001',
        text,
      }).toString(),
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
    });

  it('answers the seeded USSD gateway token in the gateway convention', async () => {
    assert.ok(tokens.ussd?.token, 'demo.json lists the USSD gateway token');
    const r = await session(tokens.ussd?.token, '');
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers['content-type'] ?? '', /^text\/plain/);
    assert.match(r.text, /^(CON|END) /);
  });

  it('refuses other callers at the edge', async () => {
    assert.equal((await session(undefined, '')).status, 401);
    assert.equal((await session(tokens.admin?.token, '')).status, 403);
  });
});
