import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { attachmentMaxBytes } from '../../core/agents/disputes.ts';
import { call } from '../helpers/http.ts';
import { bearer, startAgentHarness, type AgentHarness, type AgentLogin, type TestAgent } from './harness.ts';

const png = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  Buffer.from('IHDR fake image data'),
]);
const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.from('JFIF')]);
const pdf = Buffer.from('%PDF-1.7\n1 0 obj << >> endobj\n%%EOF\n');
const boundary = 'agentUpload7MA4YWxkTrZu0gW';

function multipart(
  parts: { name: string; filename?: string; type?: string; data: Buffer | string }[],
  b = boundary,
): Buffer {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const disp = `form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}`;
    chunks.push(
      Buffer.from(
        `--${b}\r\nContent-Disposition: ${disp}\r\n${p.type ? `Content-Type: ${p.type}\r\n` : ''}\r\n`,
      ),
      Buffer.from(p.data),
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${b}--\r\n`));
  return Buffer.concat(chunks);
}

describe('agent disputes and attachments', () => {
  let h: AgentHarness;
  let a: TestAgent;
  let la: AgentLogin;
  let lb: AgentLogin;
  let txnId = '';
  let caseId = '';
  let n = 0;
  const idem = () => ({ 'idempotency-key': `dispute-${++n}-${Date.now()}` });
  const upload = (
    body: Buffer,
    opts: { token?: string; type?: string; key?: Record<string, string>; id?: string } = {},
  ) =>
    call(h.origin, 'POST', `/v1/disputes/${opts.id ?? caseId}/attachments`, {
      body,
      headers: bearer(opts.token ?? la.accessToken, {
        'content-type': opts.type ?? `multipart/form-data; boundary=${boundary}`,
        ...(opts.key ?? idem()),
      }),
    });

  before(async () => {
    h = await startAgentHarness();
    a = await h.agent('ta', 'AG5001', '+254711000051');
    la = await h.login(a);
    lb = await h.login(await h.agent('ta', 'AG5002', '+254711000052'));
    await h.fundFloat(a, '1000.00');
    const phone = '+254722000051';
    await h.post('/customers/auth/otp/send', { tenantId: 'ta', phone });
    await h.post('/customers/auth/otp/verify', { tenantId: 'ta', phone, otp: h.sms.lastCode(phone) });
    const kyc = await h.post(
      '/v1/kyc/customers',
      {
        phone,
        fullName: 'Amina Otieno',
        idType: 'NATIONAL_ID',
        idNumber: 'B7654321',
        dateOfBirth: '1988-02-03',
      },
      bearer(la.accessToken, idem()),
    );
    assert.equal(kyc.status, 201, kyc.text);
    const cashin = await h.post(
      '/v1/txns/cashin',
      { customerPhone: phone, amount: '100.00' },
      bearer(la.accessToken, idem()),
    );
    assert.equal(cashin.status, 201, cashin.text);
    txnId = cashin.json.id;
  });
  after(() => h.close());

  it("opens one live case per transaction, only on the caller's own transactions", async () => {
    const body = { txnId, reason: 'WRONG_AMOUNT', description: 'Customer says she handed over 150, not 100' };
    const foreign = await h.post('/v1/disputes', body, bearer(lb.accessToken, idem()));
    assert.equal(foreign.status, 404);
    assert.equal(foreign.json.code, 'TXN_NOT_FOUND');
    assert.equal(
      (await h.post('/v1/disputes', { ...body, reason: 'BECAUSE' }, bearer(la.accessToken, idem()))).status,
      400,
    );
    assert.equal(
      (await h.post('/v1/disputes', { ...body, description: '' }, bearer(la.accessToken, idem()))).status,
      400,
    );
    const key = idem();
    const ok = await h.post('/v1/disputes', body, bearer(la.accessToken, key));
    assert.equal(ok.status, 201, ok.text);
    assert.equal(ok.json.state, 'OPEN');
    assert.equal(ok.json.txnId, txnId);
    caseId = ok.json.id;
    const replay = await h.post('/v1/disputes', body, bearer(la.accessToken, key));
    assert.equal(replay.text, ok.text);
    const twice = await h.post('/v1/disputes', body, bearer(la.accessToken, idem()));
    assert.equal(twice.status, 409);
    assert.equal(twice.json.code, 'DISPUTE_EXISTS');
    assert.equal(twice.json.caseId, caseId);
  });

  it("reads the caller's case; another agent's is not found", async () => {
    const r = await h.get(`/v1/disputes/${caseId}`, bearer(la.accessToken));
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.attachments, []);
    const other = await h.get(`/v1/disputes/${caseId}`, bearer(lb.accessToken));
    assert.equal(other.status, 404);
    assert.equal(other.json.code, 'DISPUTE_NOT_FOUND');
    assert.equal((await h.get('/v1/disputes/not-a-uuid', bearer(la.accessToken))).status, 400);
  });

  it('stores PNG, JPEG and PDF with their SHA-256, typed by content; replays by key', async () => {
    const key = idem();
    const first = multipart([
      { name: 'note', data: 'receipt photo' },
      { name: 'file', filename: '../../etc/receipt.png', type: 'image/png', data: png },
    ]);
    const r = await upload(first, { key });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.mediaType, 'image/png');
    assert.equal(r.json.filename, 'receipt.png');
    assert.equal(r.json.sizeBytes, png.length);
    assert.equal(r.json.sha256, createHash('sha256').update(png).digest('hex'));
    assert.equal((await upload(first, { key })).text, r.text, 'replay');
    assert.equal(
      (await upload(multipart([{ name: 'file', filename: 'other.png', data: png }]), { key })).json.code,
      'IDEMPOTENCY_CONFLICT',
      'same key, other file',
    );
    // The declared type and extension prove nothing; the bytes do.
    const j = await upload(
      multipart([{ name: 'file', filename: 'scan.bin', type: 'application/octet-stream', data: jpeg }]),
    );
    assert.equal(j.json.mediaType, 'image/jpeg');
    const p = await upload(multipart([{ name: 'file', filename: 'statement.pdf', data: pdf }]));
    assert.equal(p.json.mediaType, 'application/pdf');
    const { rows } = await h.tdb.db.query<{ sha256: string; ok: boolean }>(
      `SELECT sha256, encode(sha256(content), 'hex') = sha256 AS ok FROM agent_dispute_attachments WHERE case_id = $1`,
      [caseId],
    );
    assert.equal(rows.length, 3);
    assert.ok(
      rows.every((x) => x.ok),
      'stored bytes hash to the stored SHA-256',
    );
    const got = await h.get(`/v1/disputes/${caseId}`, bearer(la.accessToken));
    assert.deepEqual(got.json.attachments.map((x: { mediaType: string }) => x.mediaType).sort(), [
      'application/pdf',
      'image/jpeg',
      'image/png',
    ]);
  });

  it('refuses a file of another type, whatever it claims to be', async () => {
    for (const data of [
      Buffer.from('MZ\x90\x00 windows executable'),
      Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>'),
      Buffer.from('GIF89a....'),
    ]) {
      const r = await upload(multipart([{ name: 'file', filename: 'photo.png', type: 'image/png', data }]));
      assert.equal(r.status, 415, r.text);
      assert.equal(r.json.code, 'ATTACHMENT_TYPE_REFUSED');
    }
  });

  it('refuses a file over 5 MiB, and a body over the route limit before reading it all', async () => {
    const big = Buffer.concat([png, Buffer.alloc(attachmentMaxBytes - png.length + 1, 0)]);
    const r = await upload(multipart([{ name: 'file', filename: 'big.png', data: big }]));
    assert.equal(r.status, 413, r.text);
    assert.equal(r.json.code, 'ATTACHMENT_TOO_LARGE');
    const exact = await upload(
      multipart([{ name: 'file', filename: 'max.png', data: big.subarray(0, attachmentMaxBytes) }]),
    );
    assert.equal(exact.status, 201, '5 MiB exactly is accepted');
    const huge = await upload(
      multipart([
        { name: 'file', filename: 'huge.png', data: Buffer.concat([png, Buffer.alloc(6 * 1024 * 1024)]) },
      ]),
    );
    assert.equal(huge.status, 413);
    assert.equal(huge.json.code, 'PAYLOAD_TOO_LARGE');
  });

  it('refuses malformed uploads with 400/415, never 500', async () => {
    const cases: [Buffer, string | undefined, number, string][] = [
      [Buffer.from('{"file":"x"}'), 'application/json', 415, 'UNSUPPORTED_MEDIA_TYPE'],
      [
        multipart([{ name: 'file', filename: 'a.png', data: png }]),
        'multipart/form-data',
        400,
        'MULTIPART_INVALID',
      ],
      [
        multipart([{ name: 'file', filename: 'a.png', data: png }], 'otherBoundary'),
        undefined,
        400,
        'MULTIPART_INVALID',
      ],
      [
        multipart([{ name: 'file', filename: 'a.png', data: png }]).subarray(0, 120),
        undefined,
        400,
        'MULTIPART_INVALID',
      ],
      [multipart([{ name: 'note', data: 'no file here' }]), undefined, 400, 'MULTIPART_INVALID'],
      [multipart([{ name: 'file', data: png }]), undefined, 400, 'MULTIPART_INVALID'],
      [
        multipart([
          { name: 'file', filename: 'a.png', data: png },
          { name: 'file', filename: 'b.png', data: png },
        ]),
        undefined,
        400,
        'MULTIPART_INVALID',
      ],
      [multipart([{ name: 'file', filename: 'empty.png', data: '' }]), undefined, 400, 'MULTIPART_INVALID'],
      [Buffer.alloc(0), undefined, 400, 'MULTIPART_INVALID'],
    ];
    for (const [body, type, status, code] of cases) {
      const r = await upload(body, type ? { type } : {});
      assert.equal(r.status, status, `${code}: ${r.text}`);
      assert.equal(r.json.code, code);
    }
    const other = await upload(multipart([{ name: 'file', filename: 'a.png', data: png }]), {
      token: lb.accessToken,
    });
    assert.equal(other.json.code, 'DISPUTE_NOT_FOUND');
    assert.equal(
      (
        await call(h.origin, 'POST', `/v1/disputes/${caseId}/attachments`, {
          body: multipart([{ name: 'file', filename: 'a.png', data: png }]),
          headers: bearer(la.accessToken, { 'content-type': `multipart/form-data; boundary=${boundary}` }),
        })
      ).json.code,
      'IDEMPOTENCY_KEY_REQUIRED',
    );
  });

  it('takes at most 10 attachments per case', async () => {
    const { rows } = await h.tdb.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM agent_dispute_attachments WHERE case_id = $1',
      [caseId],
    );
    for (let i = rows[0]?.n ?? 0; i < 10; i++)
      assert.equal(
        (await upload(multipart([{ name: 'file', filename: `p${i}.png`, data: png }]))).status,
        201,
      );
    const r = await upload(multipart([{ name: 'file', filename: 'one-too-many.png', data: png }]));
    assert.equal(r.status, 409);
    assert.equal(r.json.code, 'ATTACHMENT_LIMIT_REACHED');
    const audit = await h.tdb.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit_log WHERE tenant_id = 'ta' AND action = 'agent.dispute.attach'`,
    );
    assert.equal(audit.rows[0]?.n, 10);
  });
});
