/**
 * The development gateway: plays Envoy's part where Envoy is not installed. It mirrors
 * deploy/envoy/envoy.yaml: buffer at most 8192 body bytes (413 beyond), call Check with a
 * 100 ms deadline, deny on any Check error or timeout (`authz_unavailable`), apply the allowed
 * response's header mutations and forward to core with undici. A request Check did not allow
 * is never forwarded. Production runs Envoy.
 * Routes marked `disableRequestBodyBuffering` in the edge route table (Envoy's per-route
 * `check_settings`) are checked on headers alone (an empty body) and, once allowed, their body
 * streams to core unbuffered; core enforces its size and type.
 *
 * Several edges and cores (N of each, as Envoy's clusters would): requests are spread round robin;
 * an instance that fails is skipped for `downForMs`. A Check that could not reach one edge is sent
 * to the next within the same deadline (a Check is a read: repeating it is harmless); a request is
 * sent to a second core only when it never reached the first (the connection was refused or could
 * not be made), so nothing is posted twice. Every edge down: 503 `authz_unavailable`, nothing
 * forwarded.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:https';
import { TLSSocket } from 'node:tls';
import type { Duplex } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { Pool } from 'undici';
import { renderRefusal, titleOf, type ErrorFormat } from '../shared/errors.ts';
import { maxCheckBodyBytes } from './check.ts';
import { authorizationPackage } from './proto.ts';
import { routeDeclarations } from '../shared/routes/index.ts';
import { buildRouteTable } from './routes.ts';
import type { CheckRequest, CheckResponse } from './types.ts';

/** envoy.yaml `with_request_body.max_request_bytes` (SPEC 8). */
export const maxRequestBytes = maxCheckBodyBytes;
/** envoy.yaml ext_authz `timeout: 0.1s` (SPEC 8). */
export const checkTimeoutMs = 100;
/** Request line and headers, as Envoy's max_request_headers_kb (deploy/envoy/envoy.yaml); 431 beyond. */
export const maxRequestHeaderBytes = 60 * 1024;

/** Hop-by-hop headers never forwarded (RFC 9110 §7.6.1). */
const hopByHop = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'content-length',
]);

/** How long an instance that failed is skipped before it is tried again. */
export const downForMs = 2000;

export interface GatewayDeps {
  log: Logger;
  /** One edge (`host:port`) or several. */
  authzAddress: string | string[];
  /** One core origin (`http://host:port`) or several. */
  coreOrigin: string | string[];
  checkTimeoutMs?: number;
  /** Whether a request's body bypasses the buffer (default: the edge route table's per-route setting). */
  streamsBody?: (method: string, path: string) => boolean;
  /** The error format of a route's audience (default: the edge route table's `errorFormat`). */
  errorFormat?: (method: string, path: string) => ErrorFormat;
  /**
   * A second, TLS listener for machine clients that requires a client certificate issued by
   * `clientCa` (deploy/envoy/envoy.yaml `machine_mtls`; issue 17 item 4); the certificate goes
   * to the edge in the CheckRequest (`attributes.source.certificate`, URL-encoded PEM), as
   * Envoy's `include_peer_certificate` sends it.
   */
  tls?: { key: string | Buffer; cert: string | Buffer; clientCa: string | Buffer };
}

/**
 * The declarations' `disableRequestBodyBuffering`, looked up by method and path: the gateway
 * plays Envoy, whose per-route settings (deploy/envoy/envoy.yaml) are static configuration
 * written from the declarations, not the edge's decision, which uses the bundle's table.
 */
export function streamsBodyByRouteTable(): (method: string, path: string) => boolean {
  const resolve = buildRouteTable(routeDeclarations);
  return (method, path) => resolve(method, path).route?.disableRequestBodyBuffering === true;
}

/** The route table's `errorFormat`: the gateway's own refusals follow the audience rule too (issue 15 item 5). */
export function errorFormatByRouteTable(): (method: string, path: string) => ErrorFormat {
  const resolve = buildRouteTable(routeDeclarations);
  return (method, path) => resolve(method, path).errorFormat ?? 'core';
}

export interface Gateway {
  server: Server;
  /** The mutual-TLS listener, when `tls` was given. */
  tlsServer: TlsServer | undefined;
  /** Resolves once the gRPC channel to the edge is connected (Envoy keeps its channel warm too). */
  ready(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** Where a refusal goes and how it is rendered: the route's audience and the request path. */
interface ReplyTo {
  res: ServerResponse;
  requestId: string;
  format: ErrorFormat;
  path: string;
}

/** The gateway's own refusal (413, 503, 502), rendered as the edge renders its denies. */
function refuse(
  to: ReplyTo,
  status: number,
  code: string,
  message: string,
  extra: Record<string, string> = {},
): void {
  const { contentType, body } = renderRefusal(
    { code, status, title: titleOf(code, status), message },
    to.format,
    to.path,
  );
  to.res.writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    'x-request-id': to.requestId,
    ...extra,
  });
  to.res.end(body);
}

/**
 * A request that cannot be parsed (headers past the limit, bad syntax) is answered 431 or 400
 * and the connection closed after reading what the client still sends: closing with unread
 * data would reset the connection, and the client would see no answer at all.
 */
function answerUnparsable(err: Error & { code?: string }, socket: Duplex): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const status =
    err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
  socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
  socket.on('error', () => socket.destroy());
  socket.resume();
}

/** Read up to `maxRequestBytes`; `undefined` means the body was larger (Envoy answers 413). */
async function bufferBody(req: IncomingMessage): Promise<Buffer | undefined> {
  const declared = Number(req.headers['content-length'] ?? '0');
  if (declared > maxRequestBytes) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxRequestBytes) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The verified client certificate as Envoy forwards it: URL-encoded PEM (RFC 8705 via ext_authz). */
function peerCertificateOf(req: IncomingMessage): string | undefined {
  const socket = req.socket;
  if (!(socket instanceof TLSSocket) || !socket.authorized) return undefined;
  const raw = socket.getPeerCertificate().raw;
  if (!raw) return undefined;
  const pem = `-----BEGIN CERTIFICATE-----\n${raw
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '')}\n-----END CERTIFICATE-----\n`;
  return encodeURIComponent(pem);
}

function checkRequestOf(
  req: IncomingMessage,
  body: Buffer,
  requestId: string,
  size = body.length,
): CheckRequest {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers))
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(',') : v;
  const scheme = req.socket instanceof TLSSocket ? 'https' : 'http';
  const certificate = peerCertificateOf(req);
  // Envoy sets x-forwarded-proto itself (use_remote_address); a client's copy is not believed.
  headers['x-forwarded-proto'] = scheme;
  headers[':method'] = req.method ?? 'GET';
  headers[':path'] = req.url ?? '/';
  headers[':authority'] = req.headers.host ?? '';
  headers['x-request-id'] = requestId;
  return {
    attributes: {
      source: {
        address: {
          socket_address: { address: req.socket.remoteAddress ?? '', port_value: req.socket.remotePort ?? 0 },
        },
        ...(certificate ? { certificate } : {}),
      },
      request: {
        http: {
          id: requestId,
          method: req.method ?? 'GET',
          headers,
          path: req.url ?? '/',
          host: req.headers.host ?? '',
          scheme,
          protocol: `HTTP/${req.httpVersion}`,
          size: String(size),
          raw_body: body,
        },
      },
    },
  };
}

type CheckClient = grpc.Client & {
  Check(
    req: CheckRequest,
    opts: grpc.CallOptions,
    cb: (err: grpc.ServiceError | null, res?: CheckResponse) => void,
  ): void;
};

/** Round robin over instances, skipping one for `downForMs` after it failed. */
export class Instances<T> {
  private next = 0;
  private readonly downUntil: number[];

  constructor(
    readonly items: T[],
    private readonly now: () => number = Date.now,
  ) {
    if (items.length === 0) throw new Error('at least one instance is needed');
    this.downUntil = items.map(() => 0);
  }

  /** Every instance once, starting at the next in turn, those marked down last. */
  order(): T[] {
    const start = this.next;
    this.next = (this.next + 1) % this.items.length;
    const all = this.items.map((_, i) => (start + i) % this.items.length);
    const t = this.now();
    return [
      ...all.filter((i) => (this.downUntil[i] ?? 0) <= t),
      ...all.filter((i) => (this.downUntil[i] ?? 0) > t),
    ].map((i) => this.items[i] as T);
  }

  markDown(item: T): void {
    const i = this.items.indexOf(item);
    if (i >= 0) this.downUntil[i] = this.now() + downForMs;
  }
}

/** undici errors raised before any byte of the request reached core: safe to send elsewhere. */
const notSentCodes = new Set([
  'ECONNREFUSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

function neverSent(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } };
  return notSentCodes.has(e.code ?? '') || notSentCodes.has(e.cause?.code ?? '');
}

/** Check on the next edge; an edge that cannot be reached is skipped within the one deadline. */
function checkVia(edges: Instances<CheckClient>, timeoutMs: number) {
  const checkOnce = (client: CheckClient, request: CheckRequest, deadline: number) =>
    new Promise<CheckResponse>((resolve, reject) => {
      client.Check(request, { deadline }, (err, res) =>
        err || !res ? reject(err ?? new Error('empty CheckResponse')) : resolve(res),
      );
    });

  return async (request: CheckRequest): Promise<CheckResponse> => {
    const deadline = Date.now() + timeoutMs;
    let last: unknown;
    for (const client of edges.order()) {
      if (Date.now() >= deadline) break;
      try {
        return await checkOnce(client, request, deadline);
      } catch (err) {
        last = err;
        // Only an edge that could not be reached is skipped; a slow one used the deadline up.
        if ((err as grpc.ServiceError).code !== grpc.status.UNAVAILABLE) throw err;
        edges.markDown(client);
      }
    }
    throw last ?? new Error('no edge answered within the deadline');
  };
}

/** Send to the next core; to another only when the request never reached the one tried. */
function sendVia(cores: Instances<Pool>) {
  return async (options: Parameters<Pool['request']>[0], retryable: boolean) => {
    let last: unknown;
    for (const pool of cores.order()) {
      try {
        return await pool.request(options);
      } catch (err) {
        last = err;
        if (!neverSent(err)) throw err;
        cores.markDown(pool);
        if (!retryable) throw err;
      }
    }
    throw last;
  };
}

/** The edge's deny, passed on as the edge rendered it for the route's audience. */
function answerDenied(to: ReplyTo, decision: CheckResponse): void {
  const { res } = to;
  const denied = decision.denied_response;
  const status =
    typeof denied?.status?.code === 'number' && denied.status.code >= 400 ? denied.status.code : 403;
  if (denied?.body === undefined) return refuse(to, status, 'POLICY_DENIED', 'denied');
  // The edge rendered the deny for the route's audience; its headers carry the content type.
  const headers: Record<string, string> = {};
  for (const h of denied.headers) headers[h.header.key] = h.header.value;
  res.writeHead(status, {
    'content-type': 'application/json',
    ...headers,
    'content-length': Buffer.byteLength(denied.body),
  });
  res.end(denied.body);
}

/** The request's headers for core: hop-by-hop dropped, the edge's removals and additions applied. */
function forwardedHeaders(
  req: IncomingMessage,
  ok: NonNullable<CheckResponse['ok_response']>,
  streaming: boolean,
): Record<string, string> {
  const forward: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined && !hopByHop.has(k)) forward[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  for (const name of ok.headers_to_remove) delete forward[name.toLowerCase()];
  for (const h of ok.headers) forward[h.header.key.toLowerCase()] = h.header.value;
  forward['x-forwarded-for'] = req.socket.remoteAddress ?? '';
  const length = req.headers['content-length'];
  if (streaming && length !== undefined) forward['content-length'] = length;
  return forward;
}

/** The mutual-TLS listener: a client certificate signed by the configured CA is required. */
function mtlsServer(
  tls: NonNullable<GatewayDeps['tls']>,
  serve: (req: IncomingMessage, res: ServerResponse) => void,
) {
  return createTlsServer(
    {
      key: tls.key,
      cert: tls.cert,
      ca: tls.clientCa,
      requestCert: true,
      rejectUnauthorized: true,
      maxHeaderSize: maxRequestHeaderBytes,
    },
    serve,
  );
}

/** One request: the body buffered (or not, for a streaming route), checked by the edge, relayed to core. */
function handlerOf(p: {
  log: Logger;
  callCheck: ReturnType<typeof checkVia>;
  sendUpstream: ReturnType<typeof sendVia>;
  streamsBody: NonNullable<GatewayDeps['streamsBody']>;
  replyTo: (req: IncomingMessage, res: ServerResponse, requestId: string) => ReplyTo;
}) {
  const { callCheck, sendUpstream, streamsBody, replyTo } = p;
  return async (req: IncomingMessage, res: ServerResponse) => {
    const given = req.headers['x-request-id'];
    const requestId =
      typeof given === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(given) ? given : randomUUID();
    const to = replyTo(req, res, requestId);
    const streaming = streamsBody(req.method ?? 'GET', to.path);
    // Streaming routes: Check gets the headers and an empty body; nothing is read before it allows.
    const body = streaming ? Buffer.alloc(0) : await bufferBody(req);
    if (body === undefined) {
      return refuse(to, 413, 'PAYLOAD_TOO_LARGE', `request body exceeds ${maxRequestBytes} bytes`, {
        connection: 'close',
      });
    }
    let decision: CheckResponse;
    try {
      const declared = Number(req.headers['content-length'] ?? '0');
      decision = await callCheck(
        checkRequestOf(
          req,
          body,
          requestId,
          streaming && Number.isSafeInteger(declared) ? declared : body.length,
        ),
      );
    } catch (err) {
      p.log.warn({ reqId: requestId, err: (err as Error).message }, 'authz check failed; denying');
      return refuse(to, 503, 'authz_unavailable', 'authorization is unavailable');
    }
    if (!decision.ok_response || decision.status?.code !== 0) return answerDenied(to, decision);
    const forward = forwardedHeaders(req, decision.ok_response, streaming);
    try {
      // A streamed body may have been read by the failed attempt: it goes to one core only.
      const up = await sendUpstream(
        {
          path: req.url ?? '/',
          method: (req.method ?? 'GET') as 'GET',
          headers: forward,
          body: streaming ? req : body.length > 0 ? body : undefined,
        },
        !streaming,
      );
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !hopByHop.has(k)) out[k] = v;
      const data = Buffer.from(await up.body.arrayBuffer());
      out['content-length'] = String(data.length);
      res.writeHead(up.statusCode, out);
      res.end(data);
    } catch (err) {
      p.log.error({ reqId: requestId, err: (err as Error).message }, 'upstream core unavailable');
      refuse(to, 502, 'UPSTREAM_UNAVAILABLE', 'core service is unavailable');
    }
  };
}

export function createGateway(deps: GatewayDeps): Gateway {
  const { Authorization } = authorizationPackage();
  const edges = new Instances(
    [deps.authzAddress]
      .flat()
      .map((a) => new Authorization(a, grpc.credentials.createInsecure()) as unknown as CheckClient),
  );
  const cores = new Instances(
    [deps.coreOrigin].flat().map((o) => new Pool(o, { connections: 64, pipelining: 1 })),
  );
  const timeoutMs = deps.checkTimeoutMs ?? checkTimeoutMs;
  const streamsBody = deps.streamsBody ?? streamsBodyByRouteTable();
  const errorFormat = deps.errorFormat ?? errorFormatByRouteTable();
  const callCheck = checkVia(edges, timeoutMs);
  const sendUpstream = sendVia(cores);

  const replyTo = (req: IncomingMessage, res: ServerResponse, requestId: string): ReplyTo => {
    const path = new URL(req.url ?? '/', 'http://gateway.invalid').pathname;
    return { res, requestId, format: errorFormat(req.method ?? 'GET', path), path };
  };

  const handle = handlerOf({ log: deps.log, callCheck, sendUpstream, streamsBody, replyTo });

  const serve = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((err: unknown) => {
      deps.log.error({ err: (err as Error).message }, 'gateway error');
      if (!res.headersSent)
        refuse(replyTo(req, res, randomUUID()), 502, 'UPSTREAM_UNAVAILABLE', 'gateway error');
      else res.destroy();
    });
  };
  const server = createServer({ maxHeaderSize: maxRequestHeaderBytes }, serve);
  server.on('clientError', answerUnparsable);
  const tlsServer = deps.tls ? mtlsServer(deps.tls, serve) : undefined;
  tlsServer?.on('clientError', answerUnparsable);
  return {
    server,
    tlsServer,
    /** Resolves once a channel to at least one edge is connected. */
    ready: (waitMs = 5000) =>
      Promise.any(
        edges.items.map(
          (client) =>
            new Promise<void>((resolve, reject) =>
              client.waitForReady(Date.now() + waitMs, (err) => (err ? reject(err) : resolve())),
            ),
        ),
      ),
    async close() {
      for (const s of [server, tlsServer]) {
        if (!s?.listening) continue;
        s.closeAllConnections();
        await new Promise<void>((r) => s.close(() => r()));
      }
      for (const client of edges.items) client.close();
      await Promise.all(cores.items.map((p) => p.close()));
    },
  };
}
