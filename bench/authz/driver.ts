/**
 * Load driver for the edge Check, run as a separate process by bench/authz/signed.ts: sends
 * CheckRequests at a fixed rate and prints one JSON line of latencies (ns). Mode `signed`
 * signs every request with a fresh nonce (as a real API-key client must); mode `jwt` reuses
 * one bearer token.
 *   tsx bench/authz/driver.ts <address> <mode> <rps> <count> <keyId|token> [secret]
 */
import * as grpc from '@grpc/grpc-js';
import { authorizationPackage } from '../../edge/proto.ts';
import type { CheckRequest, CheckResponse } from '../../edge/types.ts';
import { signRequest } from '../../shared/api-key-signing.ts';

const [address, mode, rpsText, countText, credential, secret] = process.argv.slice(2);
if (!address || !credential || (mode !== 'signed' && mode !== 'jwt')) {
  process.stderr.write('usage: driver.ts <address> <signed|jwt> <rps> <count> <keyId|token> [secret]\n');
  process.exit(2);
}
const rps = Number(rpsText ?? '1000');
const count = Number(countText ?? '10000');
const tickMs = 10;

const { Authorization } = authorizationPackage();
const client = new Authorization(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
  Check(
    r: CheckRequest,
    o: grpc.CallOptions,
    cb: (e: grpc.ServiceError | null, r?: CheckResponse) => void,
  ): void;
};

const path = '/v1/transactions?limit=20';
function request(): CheckRequest {
  const headers: Record<string, string> = {
    ':method': 'GET',
    ':path': path,
    ':authority': 'api.example',
    'user-agent': 'bench',
  };
  if (mode === 'signed')
    Object.assign(
      headers,
      signRequest({ method: 'GET', path, keyId: credential as string, secret: secret ?? '' }),
    );
  else headers.authorization = `Bearer ${credential}`;
  return {
    attributes: {
      source: { address: { socket_address: { address: '127.0.0.1', port_value: 40000 } } },
      request: { http: { id: 'b', method: 'GET', path, headers, raw_body: Buffer.alloc(0) } },
    },
  };
}

const latencies: number[] = [];
const outcomes: Record<string, number> = {};
let sent = 0;
let done = 0;
const started = process.hrtime.bigint();

await new Promise<void>((resolve) => client.waitForReady(Date.now() + 5000, () => resolve()));
await new Promise<void>((resolve) => {
  const perTick = Math.max(1, Math.round((rps * tickMs) / 1000));
  const timer = setInterval(() => {
    for (let i = 0; i < perTick && sent < count; i++, sent++) {
      const t0 = process.hrtime.bigint();
      client.Check(request(), { deadline: Date.now() + 1000 }, (err, res) => {
        latencies.push(Number(process.hrtime.bigint() - t0));
        const key = err
          ? `error:${err.code}`
          : res?.ok_response
            ? 'allow'
            : `deny:${res?.denied_response?.status.code ?? '?'}`;
        outcomes[key] = (outcomes[key] ?? 0) + 1;
        if (++done === count) {
          clearInterval(timer);
          resolve();
        }
      });
    }
  }, tickMs);
});
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
latencies.sort((a, b) => a - b);
const at = (p: number) =>
  latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? 0;
process.stdout.write(
  `${JSON.stringify({ mode, count, rps: count / seconds, p50: at(50), p99: at(99), p999: at(99.9), outcomes })}\n`,
);
client.close();
