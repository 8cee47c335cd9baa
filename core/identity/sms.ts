/**
 * SMS delivery behind one interface (DESIGN.md "OTP/SMS"). The default writes a
 * `notification.sms_requested` outbox event in the caller's transaction; in development
 * (`npm start`, DATA_DIR set) a file inbox `DATA_DIR/dev-sms.jsonl` receives one JSON line per
 * message — that file is the phone. Tests inject a capturing sender. No API ever reveals a code.
 */
import { appendFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Queryable } from '../../shared/db/pool.ts';
import { enqueue } from '../outbox/outbox.ts';

export interface SmsMessage {
  tenantId: string;
  to: string;
  /** The one-time code, for codes; notifications carry none. */
  code?: string;
  text: string;
  /** 'verify' (phone verification), 'stepup', or a notification: 'device_added', 'device_removed', 'pin_changed' (issue 13 item 1). */
  purpose: string;
}

export interface SmsSender {
  /** Called inside the transaction that stored the code: a throw rolls the code back. */
  send(q: Queryable, msg: SmsMessage, now: number): Promise<void>;
}

/**
 * Production default: the event a notification worker turns into an SMS. The payload carries
 * the code because the worker must send it; the outbox is internal (never exposed by a route
 * that returns payloads to customers) and rows are purged after delivery.
 */
export const outboxSmsSender: SmsSender = {
  async send(q, msg) {
    await enqueue(q, {
      tenantId: msg.tenantId,
      aggregate: 'notification',
      aggregateId: msg.purpose,
      event: 'notification.sms_requested',
      payload: { to: msg.to, text: msg.text, purpose: msg.purpose },
      headers: { 'content-class': 'secret' },
    });
  },
};

/** Development: one JSON line per message in `DATA_DIR/dev-sms.jsonl`. */
export function fileInboxSender(dataDir: string): SmsSender {
  const file = join(dataDir, 'dev-sms.jsonl');
  return {
    async send(_q, msg, now) {
      const line = JSON.stringify({
        to: msg.to,
        code: msg.code,
        text: msg.text,
        at: new Date(now).toISOString(),
      });
      await appendFile(file, `${line}\n`, { mode: 0o600 });
    },
  };
}

/** The sender for a deployment: the dev inbox when a data directory is set, else the outbox. */
export function defaultSmsSender(dataDir: string | undefined): SmsSender {
  return dataDir ? fileInboxSender(dataDir) : outboxSmsSender;
}
