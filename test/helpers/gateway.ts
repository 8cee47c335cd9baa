/** Calls through a running stack's dev gateway, as a client on a loaded machine makes them. */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { call, type Res } from './http.ts';

type CallOpts = Parameters<typeof call>[3];

/** A call the edge may fail closed past its deadline (503 authz_unavailable): retried then, as a client would. */
export async function callRetrying(
  gw: string,
  method: string,
  path: string,
  opts: CallOpts = {},
): Promise<Res> {
  let r = await call(gw, method, path, opts);
  for (let i = 0; i < 10 && r.status === 503 && r.json?.code === 'authz_unavailable'; i++) {
    await new Promise((done) => setTimeout(done, 100));
    r = await call(gw, method, path, opts);
  }
  return r;
}

/** `callRetrying` as the holder of `token` (a staff, service or SCIM bearer), each with a fresh x-request-id. */
export function asBearer(gw: () => string) {
  return (
    token: string,
    method: string,
    path: string,
    o: { json?: unknown; headers?: Record<string, string> } = {},
  ): Promise<Res> =>
    callRetrying(gw(), method, path, {
      ...(o.json !== undefined ? { json: o.json } : {}),
      headers: { authorization: `Bearer ${token}`, 'x-request-id': randomUUID(), ...o.headers },
    });
}

/** The newest code the dev SMS inbox (DATA_DIR/dev-sms.jsonl, "the phone") holds for `phone`. */
export async function lastSmsCode(dataDir: string, phone: string): Promise<string> {
  const lines = (await readFile(join(dataDir, 'dev-sms.jsonl'), 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { to: string; code: string });
  const code = lines.filter((l) => l.to === phone).at(-1)?.code;
  assert.equal(typeof code, 'string', `an SMS to ${phone} reached the inbox`);
  return code as string;
}

/** Sign a new customer of the demo tenant up and in: OTP from the inbox, PIN, login from `device`. */
export async function signUpCustomer(
  gw: string,
  dataDir: string,
  phone: string,
  pin: string,
  device: string,
): Promise<{ accessToken: string; refreshToken: string }> {
  const sent = await callRetrying(gw, 'POST', '/customers/auth/otp/send', {
    json: { tenantId: 'demo', phone },
  });
  assert.equal(sent.status, 202, sent.text);
  const verified = await callRetrying(gw, 'POST', '/customers/auth/otp/verify', {
    json: { tenantId: 'demo', phone, otp: await lastSmsCode(dataDir, phone) },
  });
  assert.equal(verified.status, 200, verified.text);
  const set = await callRetrying(gw, 'POST', '/customers/auth/pin/set', {
    json: { tenantId: 'demo', phone, pin, verificationToken: verified.json.verificationToken },
  });
  assert.equal(set.status, 204, set.text);
  const login = await callRetrying(gw, 'POST', '/customers/auth/login', {
    json: { tenantId: 'demo', phone, pin },
    headers: { 'x-device-id': device },
  });
  assert.equal(login.status, 200, login.text);
  return { accessToken: login.json.accessToken, refreshToken: login.json.refreshToken };
}
