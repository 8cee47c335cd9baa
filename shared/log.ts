/**
 * JSON logs (pino) that keep secrets out and tell the truth (issue 13 item 9).
 *
 * Secrets are redacted by path: the fields that carry a PIN, an OTP, a token, a secret, a key or a
 * signature, at the top level, one to three levels down and in any `headers` object (including
 * the authorisation, cookie and API-key secret headers). A field named `code` is an error code
 * (a SQLSTATE, a deny code) and is logged as it is; an OTP is never logged under that name
 * (SMS messages are logged, if ever, as `sms`, whose `code` and `text` are redacted).
 *
 * Phones are masked as SPEC 2.5 masks them (first 4 and last 2 characters kept): the value of
 * any phone field, and any E.164 number inside a logged string (an error message or a
 * PostgreSQL error detail quoting a row). Secrets are redacted in a child logger's bindings too,
 * but phones are not masked there (pino formats child bindings itself): bind components and
 * request ids, log personal data per line.
 */
import { pino, type Logger, type LevelWithSilent } from 'pino';
import { maskPhone } from './masking.ts';

/** Field names that only ever hold secrets (SPEC: PINs, OTPs, tokens, keys, secrets). */
const secretFields = [
  'pin',
  'newPin',
  'currentPin',
  'oldPin',
  'otp',
  'customerCode',
  'password',
  'secret',
  'clientSecret',
  'client_secret',
  'apiKeySecret',
  'token',
  'accessToken',
  'access_token',
  'refreshToken',
  'refresh_token',
  'bindToken',
  'verificationToken',
  'challengeToken',
  'challenge',
  'idToken',
  'id_token',
  'privateKey',
  'private_key',
  'privateJwk',
  'devicePrivateJwk',
  'deviceAssertion',
  'signature',
  'masterKey',
  'otpKey',
];

/** Request and response headers that carry credentials. */
const secretHeaders = [
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-api-key-secret',
  'x-signature',
  'dpop',
  'x-edge-auth',
  'x-intent-signature',
];

/** Where an OTP travels under a generic name: an SMS message's code and its text. */
const otpPaths = ['sms.code', 'sms.text', '*.sms.code', '*.sms.text'];

const segment = (key: string): string => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `.${key}` : `["${key}"]`);

export function redactPaths(): string[] {
  const paths: string[] = [...otpPaths];
  for (const key of secretFields) {
    const seg = segment(key);
    paths.push(key, `*${seg}`, `*.*${seg}`, `*.*.*${seg}`);
  }
  for (const key of secretHeaders) {
    const seg = segment(key);
    paths.push(`headers${seg}`, `*.headers${seg}`, `*.*.headers${seg}`, `set${seg}`);
  }
  return paths;
}

const phoneFields = new Set(['phone', 'phone_e164', 'phoneE164', 'customerPhone', 'msisdn']);
/** An E.164 number (+, or %2B in a URL, and 8 to 15 digits) not part of a longer run of digits. */
const e164 = /(?:\+|%2[Bb])\d{8,15}(?!\d)/g;
const maxDepth = 6;

function maskStrings(value: unknown, key: string, depth: number, seen: WeakSet<object>): unknown {
  if (typeof value === 'string')
    return phoneFields.has(key) ? maskPhone(value) : value.replace(e164, maskPhone);
  if (value === null || typeof value !== 'object' || depth > maxDepth || seen.has(value)) return value;
  seen.add(value);
  if (value instanceof Error) return maskStrings(pino.stdSerializers.err(value), key, depth, seen);
  if (Array.isArray(value)) return value.map((v) => maskStrings(v, key, depth + 1, seen));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = maskStrings(v, k, depth + 1, seen);
  return out;
}

export function createLogger(level: LevelWithSilent, destination?: NodeJS.WritableStream): Logger {
  const options = {
    level,
    base: undefined,
    redact: { paths: redactPaths(), censor: '[redacted]' },
    formatters: {
      log: (obj: Record<string, unknown>) =>
        maskStrings(obj, '', 0, new WeakSet()) as Record<string, unknown>,
    },
    // Errors were serialised (type, message, stack, code, detail) and masked above.
    serializers: { err: (v: unknown) => (v instanceof Error ? pino.stdSerializers.err(v) : v) },
    // The message too: a phone inside it is masked like one in a field.
    hooks: {
      logMethod(this: Logger, args: Parameters<Logger['info']>, method: (...a: unknown[]) => void) {
        method.apply(
          this,
          args.map((a) => (typeof a === 'string' ? a.replace(e164, maskPhone) : a)),
        );
      },
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}
