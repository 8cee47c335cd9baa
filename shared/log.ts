/** JSON logs (pino) with every secret-bearing field redacted, wherever it appears. */
import { pino, type Logger, type LevelWithSilent } from 'pino';

/** Field names that never reach a log line in clear (SPEC: PINs, OTPs, tokens, secrets). */
const secretKeys = [
  'authorization', 'cookie', 'set-cookie', 'pin', 'newPin', 'otp', 'code', 'secret', 'password',
  'token', 'accessToken', 'refreshToken', 'verificationToken', 'challengeToken', 'challenge',
  'clientSecret', 'client_secret', 'apiKeySecret', 'x-api-key-secret', 'x-signature', 'dpop',
  'privateKey', 'private_key', 'deviceAssertion',
];

/** Each key at the top level, one and two levels down, and under any `headers` object. */
function redactPaths(): string[] {
  const paths: string[] = [];
  for (const key of secretKeys) {
    const seg = /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `.${key}` : `["${key}"]`;
    paths.push(key, `*${seg}`, `*.*${seg}`, `headers${seg}`, `req.headers${seg}`);
  }
  return paths;
}

export function createLogger(level: LevelWithSilent, destination?: NodeJS.WritableStream): Logger {
  const options = {
    level,
    base: undefined,
    redact: { paths: redactPaths(), censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}
