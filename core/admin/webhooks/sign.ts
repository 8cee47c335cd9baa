/**
 * Standard Webhooks signing (DESIGN.md "Events"): `webhook-signature: v1,<base64 HMAC-SHA256
 * of "<id>.<timestamp>.<body>">`, keyed with the base64 bytes after `whsec_`. During a rotation
 * grace period the message carries one signature per valid secret, space separated.
 */
import { createHmac, randomBytes } from 'node:crypto';

export const secretPrefix = 'whsec_';

export function newWebhookSecret(): string {
  return `${secretPrefix}${randomBytes(32).toString('base64')}`;
}

export function isWebhookSecret(s: string): boolean {
  return s.startsWith(secretPrefix) && Buffer.from(s.slice(secretPrefix.length), 'base64').length >= 24;
}

export function signatureOf(secret: string, id: string, timestampS: number, body: string): string {
  const key = Buffer.from(secret.slice(secretPrefix.length), 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestampS}.${body}`).digest('base64')}`;
}

export function signedHeaders(
  secrets: string[],
  id: string,
  timestampS: number,
  body: string,
): Record<string, string> {
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(timestampS),
    'webhook-signature': secrets.map((s) => signatureOf(s, id, timestampS, body)).join(' '),
  };
}
