/**
 * Who may call an operation, as the OpenAPI document says it (issue 15 item 3): the security
 * schemes of every credential kind, each operation's `security` derived from the credential the
 * edge's route table declares (supplied by the composition root: core never imports edge/), and
 * the notes a caller needs where Swagger UI cannot do the work (an HMAC signature, a DPoP proof,
 * a request-bound step-up, an intent signature), read from the purpose registry.
 */
import { Type } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';

/**
 * The credential kinds of the edge's route table (shared/routes/types.ts `Credential`), and
 * `staff-person`: a staff access token core verifies itself on a route the edge passes as public.
 */
export type DocCredential =
  | 'public'
  | 'customer'
  | 'agent'
  | 'staff'
  | 'service'
  | 'core-client'
  | 'scim'
  | 'staff-person';

/** What the edge's route table says about one route. */
export interface EdgeAccess {
  credential: DocCredential;
  purpose: string;
  action: string;
}

/** The edge's entry for a method and route template, if it has one. */
export type AccessLookup = (method: string, template: string) => EdgeAccess | undefined;

type Json = Record<string, unknown>;

/** README anchors of the recipes an operation's description points to. */
export const recipes = {
  stepUp: 'README.md#step-up',
  intent: 'README.md#intent-signature',
  apiKey: 'README.md#api-key-signature',
  dpop: 'README.md#dpop',
  docs: 'README.md#docs-page',
  agent: 'README.md#agent',
} as const;

const jwtBearer = (description: string): Json => ({
  type: 'http',
  scheme: 'bearer',
  bearerFormat: 'JWT',
  description,
});
const opaqueBearer = (description: string): Json => ({ type: 'http', scheme: 'bearer', description });
const header = (name: string, description: string): Json => ({
  type: 'apiKey',
  in: 'header',
  name,
  description,
});
const swaggerCannot = 'Swagger UI cannot compute it: use the recipe';

/** `components.securitySchemes`: one per credential kind, with where a newcomer gets one. */
export const securitySchemes: Readonly<Record<string, Json>> = Object.freeze({
  customerBearer: jwtBearer(
    'Customer access token (SPEC 4.2, 5.2). In development: `POST /customers/auth/login` with the `customer` of `DATA_DIR/demo.json` ({tenantId, phone, pin}), then paste `accessToken` here. A DPoP-bound token needs a proof on every call: see `dpop`.',
  ),
  agentBearer: jwtBearer(
    `Agent access token (SPEC 4.5): \`POST /v1/agent/auth/login\` with the demo \`agent\` of demo.json and a device proof (${recipes.agent}); send \`X-Device-Id\` with every call.`,
  ),
  staffBearer: jwtBearer(
    'Staff access token (aud `staff`; SPEC 4.4): from the staff sign-in page `/staff` (passkeys), `GET /auth/callback` (OpenID Connect) or `POST /auth/token` (refresh).',
  ),
  serviceToken: opaqueBearer(
    'Service token of a machine (`svc_...`; roles admin, ops, readonly, ussd): `serviceTokens` in demo.json, or `POST /v1/service-tokens`. Staff routes take it instead of a staff access token.',
  ),
  coreClientBearer: jwtBearer(
    'Core OAuth client token (SPEC 5.1): `POST /oauth2/token` (form: grant_type=client_credentials, client_id, client_secret from demo.json `coreClient`), then paste `access_token` here.',
  ),
  scimBearer: opaqueBearer(
    'SCIM bearer credential of the identity provider (demo.json `scim.token`, or `POST /v1/scim-credentials`).',
  ),
  apiKeyId: header(
    'x-api-key-id',
    `API key id of a signed machine request (SPEC 5.4): sent with x-signature, x-nonce and date. ${swaggerCannot} (${recipes.apiKey}).`,
  ),
  apiKeySignature: header(
    'x-signature',
    `base64url HMAC-SHA256 over the canonical request (${recipes.apiKey}). ${swaggerCannot}.`,
  ),
  apiKeyNonce: header(
    'x-nonce',
    'One-time nonce of a signed request: 16 to 128 of [A-Za-z0-9_-], accepted once per key.',
  ),
  apiKeyDate: header(
    'date',
    'IMF-fixdate within 5 minutes of the edge clock (a browser cannot set this header: signed requests come from machines).',
  ),
  dpop: header(
    'DPoP',
    `DPoP proof (RFC 9449) for a bound token, sent with \`Authorization: DPoP <token>\`: a fresh JWT signed by the client's key for each request (${recipes.dpop}). Swagger UI cannot sign proofs.`,
  ),
});

/** Scheme names of each credential kind; several entries are alternatives (OpenAPI `security`). */
const schemesOf: Record<Exclude<DocCredential, 'public'>, string[]> = {
  customer: ['customerBearer'],
  agent: ['agentBearer'],
  // A staff route takes a person's staff access token or a machine's service token (edge/auth/staff.ts).
  staff: ['staffBearer', 'serviceToken'],
  service: ['serviceToken'],
  'core-client': ['coreClientBearer'],
  scim: ['scimBearer'],
  'staff-person': ['staffBearer'],
};

/** Credentials whose tokens a DPoP proof may bind (issue 17): customers, agents, staff, core clients. */
const bindable: ReadonlySet<DocCredential> = new Set([
  'customer',
  'agent',
  'staff',
  'staff-person',
  'core-client',
]);

/**
 * Headers a credential needs on every call beside Authorization: an agent's session is bound to
 * its device, and a request without that device id is refused (SPEC 4.5; README.md#agent).
 */
export function credentialHeaders(
  credential: DocCredential,
): { name: string; required: boolean; description: string }[] {
  return credential === 'agent'
    ? [
        {
          name: 'X-Device-Id',
          required: true,
          description: "The device the agent's session is bound to (demo.json `agent.deviceId`)",
        },
      ]
    : [];
}

/** The registry facts the document needs (policy/data/registry), narrowed from the verified bundle. */
const PurposeFacts = Type.Object(
  {
    name: Type.String(),
    min_aal: Type.Integer(),
    subject_types: Type.Optional(Type.Array(Type.String())),
    action_scopes: Type.Optional(Type.Record(Type.String(), Type.String())),
    request_bound_actions: Type.Optional(Type.Array(Type.String())),
    staff_aal2_actions: Type.Optional(Type.Array(Type.String())),
  },
  { additionalProperties: true },
);
const checkPurpose = TypeCompiler.Compile(PurposeFacts);

export interface ActionFacts {
  minAal: number;
  /** A step-up for this one request (customer `request_bound_actions`, staff `staff_aal2_actions`). */
  requestBound: boolean;
  /** The scope an API key needs to call it, when a machine client may. */
  apiKeyScope: string | undefined;
}

/** (purpose, action) → facts, from a registry document; undefined for one it does not know. */
export function registryFacts(
  registry: unknown,
): (purpose: string, action: string) => ActionFacts | undefined {
  const purposes = new Map<string, typeof PurposeFacts.static>();
  const list =
    registry && typeof registry === 'object' ? (registry as { purposes?: unknown }).purposes : undefined;
  for (const p of Array.isArray(list) ? list : []) if (checkPurpose.Check(p)) purposes.set(p.name, p);
  return (purpose, action) => {
    const p = purposes.get(purpose);
    if (!p) return undefined;
    const scope = p.action_scopes?.[action];
    return {
      minAal: p.min_aal,
      requestBound:
        (p.request_bound_actions ?? []).includes(action) || (p.staff_aal2_actions ?? []).includes(action),
      apiKeyScope: scope !== undefined && (p.subject_types ?? []).includes('service') ? scope : undefined,
    };
  };
}

/**
 * The scope an API key needs here, if one may call it: the registry must grant the action to a
 * service with a scope, and core must take a signed request's identity, which only the core
 * banking routes do (core/oauth/bearer.ts); customer routes verify a customer token in core.
 */
function apiKeyScopeOf(credential: DocCredential, facts: ActionFacts | undefined): string | undefined {
  return credential === 'core-client' ? facts?.apiKeyScope : undefined;
}

/** The API-key signature headers as one requirement (all four together), naming the scope. */
function apiKeyRequirement(scope: string): Json {
  return { apiKeyId: [scope], apiKeySignature: [], apiKeyNonce: [], apiKeyDate: [] };
}

/** An operation's `security`: undefined for a public route (no credential). */
export function securityOf(credential: DocCredential, facts: ActionFacts | undefined): Json[] | undefined {
  if (credential === 'public') return undefined;
  const out: Json[] = schemesOf[credential].map((name) => ({ [name]: [] }));
  if (bindable.has(credential)) out.push({ [schemesOf[credential][0] as string]: [], dpop: [] });
  const scope = apiKeyScopeOf(credential, facts);
  if (scope) out.push(apiKeyRequirement(scope));
  return out;
}

/** What Swagger UI cannot do for the caller on this operation, each pointing to its recipe. */
export function accessNotes(
  credential: DocCredential,
  facts: ActionFacts | undefined,
  intentSigned: boolean,
): string[] {
  const notes: string[] = [];
  const staffLike = credential === 'staff' || credential === 'staff-person';
  const stepUp = staffLike
    ? '`POST /auth/mfa/challenge`, then `/auth/mfa/complete`'
    : '`/customers/auth/stepup/otp`, then `/customers/auth/stepup/complete`';
  if (facts?.requestBound) {
    notes.push(
      `**Step-up bound to this request**: below AAL 2 this answers 403 MFA_REQUIRED with a challenge; complete it (${stepUp}) and repeat this exact request (method, path with query, body) with the AAL 2 token, good for it once (${recipes.stepUp}).`,
    );
  } else if ((facts?.minAal ?? 0) >= 2 && credential !== 'agent') {
    // An agent's sign-in (PIN and device proof) is already AAL 2 (core/agents/auth.ts).
    notes.push(
      `**Needs AAL 2**: an AAL 1 token is answered 403 MFA_REQUIRED with a challenge; complete it (${stepUp}) and repeat with the AAL 2 token (${recipes.stepUp}).`,
    );
  }
  if (intentSigned)
    notes.push(
      `**Intent signature**: \`X-Intent-Device-Id\` and \`X-Intent-Signature\` (Ed25519 by a registered device over {amount, beneficiary, currency, orig}); ${swaggerCannot} (${recipes.intent}).`,
    );
  const scope = apiKeyScopeOf(credential, facts);
  if (scope)
    notes.push(
      `**Or an API key's HMAC signature** (scope \`${scope}\`; headers x-api-key-id, x-signature, x-nonce, date); ${swaggerCannot} (${recipes.apiKey}).`,
    );
  if (bindable.has(credential))
    notes.push(
      `A DPoP-bound token (or a tenant with \`require_dpop\`) needs \`Authorization: DPoP <token>\` and a fresh \`DPoP\` proof per call; Swagger UI cannot sign proofs (${recipes.dpop}).`,
    );
  return notes;
}
