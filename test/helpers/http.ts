/** Start servers on 127.0.0.1:0 and call them with undici. */
import type { Server } from 'node:http';
import { request, type Dispatcher } from 'undici';
import { listen } from '../../shared/net.ts';

export async function serve(server: Server): Promise<{ origin: string; close(): Promise<void> }> {
  const port = await listen(server, 0);
  return {
    origin: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

export interface Res {
  status: number;
  headers: Record<string, string>;
  text: string;
  json: any;
}

export async function call(
  origin: string,
  method: string,
  path: string,
  opts: {
    body?: string | Buffer;
    json?: unknown;
    headers?: Record<string, string>;
    dispatcher?: Dispatcher;
  } = {},
): Promise<Res> {
  const headers: Record<string, string> = { ...opts.headers };
  let body = opts.body;
  if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers['content-type'] ??= 'application/json';
  }
  const res = await request(`${origin}${path}`, {
    method: method as 'GET',
    headers,
    body,
    ...(opts.dispatcher ? { dispatcher: opts.dispatcher } : {}),
  });
  const text = await res.body.text();
  const flat: Record<string, string> = {};
  for (const [k, v] of Object.entries(res.headers))
    if (v !== undefined) flat[k] = Array.isArray(v) ? v.join(', ') : v;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: flat, text, json };
}

/** Poll (an edge learns of changes by NOTIFY) until `ok` holds or 5 s pass; the last answer either way. */
export async function eventually(probe: () => Promise<Res>, ok: (r: Res) => boolean): Promise<Res> {
  const until = Date.now() + 5000;
  for (;;) {
    const r = await probe();
    if (ok(r) || Date.now() > until) return r;
    await new Promise((res) => setTimeout(res, 50));
  }
}
