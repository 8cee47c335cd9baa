/**
 * The Check wire format: reading an Envoy CheckRequest into a RequestView, and turning a
 * Decision (made by edge/authz.ts) into a CheckResponse. Any error while deciding is a deny
 * (`authz_unavailable`).
 */
import { randomUUID } from 'node:crypto';
import type { CheckRequest, CheckResponse, HeaderValueOption } from './types.ts';
import type { CredentialCode } from './auth/bearer.ts';
import { renderRefusal, titleOf, type ErrorFormat } from '../shared/errors.ts';
import { jsonBody, type JsonBody } from '../shared/json-body.ts';

/** Headers only the edge may set; any client-sent copy is removed or overwritten (SPEC 5.2.4). */
/** SPEC 8: the decision inspects at most this many body bytes (Envoy's `max_request_bytes`). */
export const maxCheckBodyBytes = 8192;

export const identityHeaders = [
  'x-req-id',
  'x-tenant-id',
  'x-principal-id',
  'x-session-id',
  'x-client-ip',
  'x-device-id',
  'x-purpose',
  'x-aal',
  'x-masking',
  'x-decision-id',
  'x-roles',
  'x-scopes',
  'x-edge-auth',
  'x-policy-version',
  'x-registry-version',
  // issue 13 item 5: which credential (an API key's budget is counted in core) and what the edge counted
  'x-credential',
  'x-budget-counted',
  // issue 17: the URL the client addressed (DPoP htu) and the client certificate Envoy verified
  'x-public-origin',
  'x-client-certificate',
  // issue 20 item 5: the risk the edge assessed, recorded in core's audit records
  'x-risk',
] as const;

/** Credentials checked here that core never needs: removed from the request on allow. */
export const edgeOnlySecretHeaders = ['x-api-key-secret'] as const;

/** Headers a client may not send at all: a forwarded certificate is Envoy's word, never the client's (issue 17 item 2). */
export const clientForbiddenHeaders = ['x-forwarded-client-cert'] as const;

/** google.rpc.Code values used in CheckResponse.status. */
const rpcOk = 0;
const rpcPermissionDenied = 7;
const rpcUnauthenticated = 16;
const rpcUnavailable = 14;

export type DenyCode =
  | 'POLICY_DENIED'
  | 'UNAUTHENTICATED'
  | 'MFA_REQUIRED'
  | 'RATE_LIMITED'
  | 'BUDGET_EXCEEDED'
  | 'authz_unavailable'
  | 'MALFORMED_REQUEST'
  | 'PAYLOAD_TOO_LARGE'
  | 'NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | CredentialCode;

export interface Decision {
  allow: boolean;
  status: number;
  code?: DenyCode;
  message?: string;
  /** Headers set on the upstream request when allowed. */
  set?: Record<string, string>;
  extraBody?: Record<string, unknown>;
  responseHeaders?: Record<string, string>;
}

export interface RequestView {
  method: string;
  /** Path with the query string, as Envoy sends it. */
  pathWithQuery: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer;
  sourceIp: string;
  requestId: string;
  /** One id per Check: in the audit record, the dynamic metadata and the x-decision-id header. */
  decisionId: string;
  /** The scheme the client used (`:scheme`): part of the URL a DPoP proof names. */
  scheme: string;
  /** The client certificate Envoy verified (URL-encoded PEM), when the connection used mTLS. */
  peerCertificate?: string;
  /** The body parsed on first use (bodyOf): every reader in one Check shares it. */
  parsed?: JsonBody;
  /** SPEC 4.3 rule 2 `orig` of this request, computed on first use (origOfView). */
  orig?: string;
}

/** The Check's body decoded and parsed once, whoever asks first (issue 18 item 1). */
export function bodyOf(view: RequestView): JsonBody {
  return (view.parsed ??= jsonBody(view.body));
}

function option(key: string, value: string): HeaderValueOption {
  return { header: { key, value }, append: { value: false } };
}

/** Read the parts of a CheckRequest the decision needs; throws on a request without HTTP attributes. */
export function viewOf(req: CheckRequest): RequestView {
  const http = req.attributes?.request?.http;
  if (!http?.method || !http.path) throw new Error('CheckRequest without HTTP method and path');
  const headers: Record<string, string> = {};
  if (http.headers && Object.keys(http.headers).length > 0) {
    for (const [k, v] of Object.entries(http.headers)) headers[k.toLowerCase()] = v;
  } else {
    for (const h of http.header_map?.headers ?? []) {
      headers[h.key.toLowerCase()] =
        h.value ?? (h.raw_value ? Buffer.from(h.raw_value).toString('utf8') : '');
    }
  }
  const body =
    http.raw_body && http.raw_body.length > 0
      ? Buffer.from(http.raw_body)
      : Buffer.from(http.body ?? '', 'utf8');
  const pathWithQuery = http.path;
  const path = pathWithQuery.split('?')[0] ?? pathWithQuery;
  return {
    method: http.method.toUpperCase(),
    pathWithQuery,
    path,
    scheme: http.scheme === 'http' ? 'http' : 'https',
    headers,
    body,
    sourceIp: req.attributes?.source?.address?.socket_address?.address ?? '',
    requestId: http.id || headers['x-request-id'] || randomUUID(),
    decisionId: randomUUID(),
    ...(req.attributes?.source?.certificate ? { peerCertificate: req.attributes.source.certificate } : {}),
  };
}

/**
 * Turn a decision into Envoy's CheckResponse, stripping client copies of identity headers. A
 * deny is rendered for the route's audience (issue 15 item 5): Problem+JSON on administration
 * routes (`format` from the route table), `{code, message}` elsewhere.
 */
export function toCheckResponse(view: RequestView, d: Decision, format: ErrorFormat = 'core'): CheckResponse {
  const decisionId = view.decisionId;
  const metadata = { fields: { decision_id: { stringValue: decisionId } } };
  if (d.allow) {
    const set: Record<string, string> = {
      'x-req-id': view.requestId,
      'x-request-id': view.requestId,
      'x-client-ip': view.sourceIp,
      'x-decision-id': decisionId,
      ...d.set,
    };
    const remove = [
      ...identityHeaders.filter((h) => !(h in set) && h in view.headers),
      ...edgeOnlySecretHeaders.filter((h) => h in view.headers),
      ...clientForbiddenHeaders.filter((h) => h in view.headers),
    ];
    return {
      status: { code: rpcOk },
      ok_response: {
        headers: Object.entries(set).map(([k, v]) => option(k, v)),
        headers_to_remove: [...remove],
      },
      dynamic_metadata: metadata,
    };
  }
  const code = d.code ?? 'POLICY_DENIED';
  const refusal = {
    code,
    status: d.status,
    title: titleOf(code, d.status),
    message: d.message ?? 'denied',
    extra: d.extraBody,
  };
  const { contentType, body } = renderRefusal(refusal, format, view.path);
  const headers = [
    option('content-type', contentType),
    option('x-request-id', view.requestId),
    ...Object.entries(d.responseHeaders ?? {}).map(([k, v]) => option(k, v)),
  ];
  const rpc =
    d.status === 401
      ? rpcUnauthenticated
      : d.code === 'authz_unavailable'
        ? rpcUnavailable
        : rpcPermissionDenied;
  return {
    status: { code: rpc, message: d.code ?? 'denied' },
    denied_response: { status: { code: d.status }, headers, body },
    dynamic_metadata: metadata,
  };
}

/** The fail-closed answer: used for every error, timeout or missing dependency. */
export function unavailable(
  view: RequestView | undefined,
  reason: string,
  format: ErrorFormat = 'core',
): CheckResponse {
  const v = view ?? {
    method: '',
    pathWithQuery: '',
    path: '',
    scheme: 'https',
    headers: {},
    body: Buffer.alloc(0),
    sourceIp: '',
    requestId: randomUUID(),
    decisionId: randomUUID(),
  };
  return toCheckResponse(
    v,
    { allow: false, status: 503, code: 'authz_unavailable', message: reason },
    format,
  );
}
