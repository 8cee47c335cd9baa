/** Wire shapes of the core ledger (TypeBox → validation and the OpenAPI document). */
import { Type, type Static } from '@sinclair/typebox';

export const uuidPattern = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
export const Uuid = Type.String({ pattern: uuidPattern });
/** The same as a RegExp, for ids read from cursors (a non-UUID would reach PostgreSQL as a uuid: 500). */
export const uuidRegex = new RegExp(uuidPattern);
export const IdParams = Type.Object({ id: Uuid });
export const Currency = Type.String({ pattern: '^[A-Z]{3}$', description: 'ISO 4217 code' });
/** Decimal string; checked exactly by shared/money.ts (422 INVALID_AMOUNT). */
export const Amount = Type.String({
  maxLength: 40,
  description:
    'Decimal string, e.g. "12.50": no sign, no exponent, at most 6 decimals and no more than the currency\'s minor units',
  examples: ['12.50'],
});
export const Metadata = Type.Record(Type.String({ maxLength: 64 }), Type.Unknown(), {
  description: 'Free-form, stored with the posting',
});
const Timestamp = Type.String({ description: 'ISO 8601 UTC timestamp' });

/** Legs in one posting: generous for splits and fees, small enough to lock quickly. */
export const maxEntriesPerPosting = 64;

export const Account = Type.Object({
  id: Type.String(),
  owner_type: Type.String(),
  owner_id: Type.String(),
  product_code: Type.String(),
  status: Type.String({ description: 'active or closed' }),
  currency: Type.String(),
  created_at: Timestamp,
  overdraft_limit: Amount,
  debits_must_not_exceed_credits: Type.Boolean(),
});
export type AccountView = Static<typeof Account>;

export const CreateAccount = Type.Object(
  {
    owner_type: Type.String({ pattern: '^[a-z][a-z_]{0,31}$', examples: ['customer'] }),
    owner_id: Type.String({ minLength: 1, maxLength: 128 }),
    product_code: Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$', examples: ['WALLET_MAIN'] }),
    currency: Currency,
  },
  { additionalProperties: false },
);

export const BalanceSet = Type.Object({
  account_id: Type.String(),
  currency: Type.String(),
  posted: Amount,
  pending_debits: Amount,
  pending_credits: Amount,
  available: Amount,
  overdraft_limit: Amount,
});

export const PostingEntry = Type.Object(
  {
    account_id: Uuid,
    side: Type.Union([Type.Literal('debit'), Type.Literal('credit')]),
    amount: Amount,
    currency: Type.Optional(Currency),
  },
  { additionalProperties: false },
);

export const CreatePosting = Type.Object(
  {
    currency: Currency,
    entries: Type.Array(PostingEntry, { minItems: 1, maxItems: maxEntriesPerPosting }),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    metadata: Type.Optional(Metadata),
    transaction_type: Type.Optional(
      Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$', description: 'Defaults to TRANSFER' }),
    ),
  },
  { additionalProperties: false },
);
export type CreatePostingBody = Static<typeof CreatePosting>;

export const Posting = Type.Object({
  id: Type.String(),
  transaction_id: Type.String(),
  status: Type.String({ description: 'POSTED' }),
  kind: Type.String({ description: 'posting, reversal or capture' }),
  type: Type.String(),
  currency: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  metadata: Metadata,
  entries: Type.Array(
    Type.Object({ account_id: Type.String(), side: Type.String(), amount: Amount, currency: Type.String() }),
  ),
  reverses_posting_id: Type.Union([Type.String(), Type.Null()]),
  hold_id: Type.Union([Type.String(), Type.Null()]),
  created_at: Timestamp,
});

export const ReversePosting = Type.Object(
  { description: Type.Optional(Type.String({ maxLength: 500 })) },
  { additionalProperties: false },
);

/** Longest a hold may stay pending before it expires by itself. */
export const maxHoldLifetimeS = 30 * 24 * 3600;
export const defaultHoldLifetimeS = 7 * 24 * 3600;

export const CreateHold = Type.Object(
  {
    debit_account_id: Uuid,
    credit_account_id: Uuid,
    currency: Currency,
    amount: Amount,
    expires_in_s: Type.Optional(Type.Integer({ minimum: 1, maximum: maxHoldLifetimeS })),
    description: Type.Optional(Type.String({ maxLength: 500 })),
    metadata: Type.Optional(Metadata),
    transaction_type: Type.Optional(Type.String({ pattern: '^[A-Z][A-Z0-9_]{1,39}$' })),
  },
  { additionalProperties: false },
);

export const CaptureHold = Type.Object({ amount: Type.Optional(Amount) }, { additionalProperties: false });

export const Hold = Type.Object({
  id: Type.String(),
  transaction_id: Type.String(),
  status: Type.String({ description: 'pending, captured, voided or expired' }),
  debit_account_id: Type.String(),
  credit_account_id: Type.String(),
  currency: Type.String(),
  amount: Amount,
  captured_amount: Type.Union([Amount, Type.Null()]),
  capture_posting_id: Type.Union([Type.String(), Type.Null()]),
  description: Type.Union([Type.String(), Type.Null()]),
  metadata: Metadata,
  expires_at: Timestamp,
  created_at: Timestamp,
  updated_at: Timestamp,
});

export const CoreError = Type.Object({ code: Type.String(), message: Type.String() });
