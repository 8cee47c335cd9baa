/**
 * Production SMS: every message (OTP and step-up codes, cash-out codes, notices) is POSTed to the
 * operator's SMS gateway (`SMS_WEBHOOK_URL`) as `{to, text, purpose, id}`, signed the Standard
 * Webhooks way (`webhook-id`, `webhook-timestamp`, `webhook-signature`, keyed with
 * `SMS_WEBHOOK_SECRET`), through the webhook SSRF guard (an internal gateway is listed in
 * `PRIVATE_TARGETS_ALLOWED`). Delivery runs beside the request, never inside its transaction, and
 * is retried with backoff for about `retryBudgetMs` (a code lives 5 minutes); the receiver
 * deduplicates by `webhook-id`. Nothing of a message (code, text, full phone) is logged, stored
 * or returned.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { request } from 'undici';
import { maskPhone } from '../../shared/masking.ts';
import { signedHeaders } from '../admin/webhooks/sign.ts';
import type { TargetGuard } from '../admin/webhooks/target.ts';
import type { SmsSender } from './sms.ts';

/** Attempts per message and the pause before each retry (doubling, with jitter). */
export const smsMaxAttempts = 6;
const firstRetryMs = 250;
const attemptTimeoutMs = 5000;

export interface SmsWebhookConfig {
  url: URL;
  /** `whsec_…` (Standard Webhooks). */
  secret: string;
  guard: TargetGuard;
  log: Logger;
}

export interface WebhookSmsSender extends SmsSender {
  /** Resolves when every message handed over so far was delivered or given up (tests, shutdown). */
  idle(): Promise<void>;
}

const retryable = (status: number) => status === 408 || status === 429 || status >= 500;

export function webhookSmsSender(cfg: SmsWebhookConfig): WebhookSmsSender {
  const inFlight = new Set<Promise<void>>();

  const attempt = async (id: string, body: string): Promise<'done' | 'retry' | 'refused'> => {
    const refused = cfg.guard.deliveryRefusal(cfg.url);
    if (refused) {
      cfg.log.error({ id, why: refused }, 'SMS gateway target refused');
      return 'refused';
    }
    try {
      const res = await request(cfg.url, {
        method: 'POST',
        body,
        dispatcher: cfg.guard.dispatcher(),
        headers: signedHeaders([cfg.secret], id, Math.floor(Date.now() / 1000), body),
        headersTimeout: attemptTimeoutMs,
        bodyTimeout: attemptTimeoutMs,
      });
      await res.body.dump();
      if (res.statusCode >= 200 && res.statusCode < 300) return 'done';
      return retryable(res.statusCode) ? 'retry' : 'refused';
    } catch {
      return 'retry';
    }
  };

  const deliver = async (id: string, body: string, to: string): Promise<void> => {
    for (let n = 1; n <= smsMaxAttempts; n++) {
      const outcome = await attempt(id, body);
      if (outcome === 'done') return;
      if (outcome === 'refused' || n === smsMaxAttempts) {
        cfg.log.error({ id, to: maskPhone(to), attempts: n }, 'SMS not delivered');
        return;
      }
      const pause = firstRetryMs * 2 ** (n - 1);
      await new Promise((r) => setTimeout(r, pause / 2 + Math.random() * pause).unref());
    }
  };

  return {
    async send(_q, msg) {
      const id = `sms_${randomUUID()}`;
      const body = JSON.stringify({ to: msg.to, text: msg.text, purpose: msg.purpose, id });
      const p = deliver(id, body, msg.to).finally(() => inFlight.delete(p));
      inFlight.add(p);
    },
    async idle() {
      while (inFlight.size > 0) await Promise.all([...inFlight]);
    },
  };
}
