/** Webhook endpoint rows; secrets sealed with the master key and opened only to sign. */
import type { KeyStore } from '../../keys/keys.ts';

export interface WebhookRow {
  id: string;
  tenant_id: string;
  url: string;
  events: string[];
  secret_enc: Buffer;
  previous_enc: Buffer | null;
  previous_until: Date | null;
  status: 'ACTIVE' | 'PAUSED' | 'DELETED';
  version: number;
  created_at: Date;
  updated_at: Date;
}

export const sealWebhookSecret = (keys: KeyStore, id: string, secret: string): Buffer =>
  keys.sealSecret(Buffer.from(secret), `webhook:${id}`);

/** Secrets valid now: the current one, and the previous one while its grace period lasts. */
export function secretsOf(keys: KeyStore, w: WebhookRow, nowMs: number): string[] {
  const out = [keys.openSecret(w.secret_enc, `webhook:${w.id}`).toString()];
  if (w.previous_enc && w.previous_until && w.previous_until.getTime() > nowMs)
    out.push(keys.openSecret(w.previous_enc, `webhook:${w.id}`).toString());
  return out;
}

/** The representation: never a secret. */
export const webhookView = (w: WebhookRow) => ({
  id: w.id,
  url: w.url,
  events: w.events,
  status: w.status,
  previous_secret_valid_until: w.previous_until?.toISOString() ?? null,
  created_at: w.created_at.toISOString(),
  updated_at: w.updated_at.toISOString(),
});
