/**
 * The common USSD gateway convention (Africa's Talking and most aggregators): the gateway POSTs
 * application/x-www-form-urlencoded `sessionId`, `serviceCode`, `phoneNumber` and `text` (every
 * answer of the session so far joined by `*`), and shows our `text/plain` reply, which starts
 * `CON ` (ask for more) or `END ` (close the session). Whatever the input, the answer is a
 * reply: bad input at any menu level is an `END` with a clear message, never a 500.
 */
import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { AppError, type ErrorCode } from '../../../shared/errors.ts';
import type { Reply } from '../../http/route.ts';
import type { AgentDeps, AnyCtx } from '../context.ts';

export const UssdForm = Type.Object(
  {
    sessionId: Type.String({ minLength: 1, maxLength: 128 }),
    serviceCode: Type.String({ minLength: 1, maxLength: 32 }),
    phoneNumber: Type.String({ minLength: 1, maxLength: 20 }),
    text: Type.Optional(Type.String({ maxLength: 1000 })),
  },
  { additionalProperties: true },
);
export type UssdRequest = Static<typeof UssdForm>;

/** Longest `text` a real session produces (USSD messages are at most 182 characters). */
export const maxTextChars = 182;

export const con = (text: string): string => `CON ${text}`;
export const end = (text: string): string => `END ${text}`;

/** What the gateway sees when the input makes no sense at this level. */
export const invalidChoice = end('Invalid choice. Please dial again.');

export function reply(text: string): Reply {
  return { status: 200, raw: { contentType: 'text/plain; charset=utf-8', data: text } };
}

/** The answers so far; an empty `text` is the first request of a session. */
export function answersOf(text: string | undefined): string[] {
  const t = (text ?? '').trim();
  return t === '' ? [] : t.split('*').map((s) => s.trim());
}

/** E.164 from what a subscriber types or the gateway sends (`+254…`, `254…`). */
export function phoneOf(input: string): string | undefined {
  const digits = input.replace(/[\s-]/g, '');
  const m = /^\+?([1-9][0-9]{6,14})$/.exec(digits);
  return m ? `+${m[1]}` : undefined;
}

export const isPin = (s: string): boolean => /^[0-9]{4,6}$/.test(s);

/** The tenant of the calling USSD gateway: a service credential with role `ussd` (registry purpose ussd.gateway). */
export function gatewayTenant(ctx: AnyCtx): string {
  const id = ctx.identity;
  if (!id.tenantId || !id.principalId || !id.roles.includes('ussd'))
    throw new AppError(
      'FORBIDDEN',
      'only the USSD gateway (a service token with role ussd) may call this route',
    );
  return id.tenantId;
}

/** An idempotency key for the final step of a session: the same gateway retry replays it. */
export function sessionKey(tenantId: string, route: string, sessionId: string, text: string): string {
  return `ussd.${createHash('sha256').update(`${tenantId}\n${route}\n${sessionId}\n${text}`).digest('base64url').slice(0, 43)}`;
}

/** Subscriber-facing wording for the domain refusals a USSD operation can meet. */
const wording: Partial<Record<ErrorCode, string>> = {
  INSUFFICIENT_FUNDS: 'Insufficient balance.',
  LIMIT_EXCEEDED: 'This amount is above your limit.',
  KYC_REQUIRED: 'The customer is not registered (KYC) for mobile money.',
  CUSTOMER_NOT_FOUND: 'That number is not registered for mobile money.',
  DAY_CLOSED: 'The business day is closed for this agent.',
  TXN_EXPIRED: 'This cash-out request has expired.',
  TXN_NOT_AWAITING: 'This cash-out is no longer waiting for approval.',
  LOCKED: 'Too many wrong PINs. Please try again later.',
  VERIFICATION_REQUIRED: 'Too many wrong PINs today. Verify your phone in the app first.',
  FORBIDDEN: 'This account cannot transact right now.',
  VALIDATION_FAILED: 'Invalid input. Please dial again.',
};

export const messageOf = (err: AppError): string =>
  wording[err.code] ?? 'Request refused. Please try again later.';

/** Run a menu; any AppError becomes an END with its wording, anything else is logged and answered END too. */
export async function guarded(
  deps: AgentDeps,
  ctx: AnyCtx,
  form: UssdRequest,
  menu: (text: string) => Promise<string>,
): Promise<Reply> {
  const text = form.text ?? '';
  if (text.length > maxTextChars) return reply(end('Input too long. Please dial again.'));
  try {
    return reply(await menu(text));
  } catch (err) {
    if (err instanceof AppError && err.status < 500) return reply(end(messageOf(err)));
    deps.log.error(
      { reqId: ctx.requestId, err: err instanceof Error ? err.message : String(err) },
      'ussd menu failed',
    );
    return reply(end('Service unavailable. Please try again later.'));
  }
}
