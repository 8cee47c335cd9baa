/** Small network helpers shared by the launcher, the test runner and benches. */
import type { Server as HttpServer } from 'node:http';
import { createServer, type Server } from 'node:net';

/** Ask the kernel for a free loopback TCP port. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const addr = srv.address();
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  if (!addr || typeof addr === 'string') throw new Error('could not obtain a free port');
  return addr.port;
}

/** Listen on host:port (0 = any free port) and return the bound port. */
export async function listen(
  server: { listen: Server['listen']; once: Server['once']; address: Server['address'] },
  port: number,
  host = '127.0.0.1',
): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address();
  if (!addr || typeof addr === 'string') throw new Error('server has no TCP address');
  return addr.port;
}

/**
 * Stop an HTTP server without cutting a request (issue 19 item 2, rollouts): no new connections;
 * idle keep-alive connections close now; a connection busy with a request closes as soon as its
 * answer is sent. Node keeps serving requests that arrive on an open keep-alive connection after
 * `close()`, so a proxy with a pooled connection would keep the process busy until the deadline
 * kills it mid-request: such requests are still answered (never dropped), with `connection:
 * close`, and a connection that goes idle closes at once. Resolves when every connection is gone.
 */
export function closeHttpGracefully(server: HttpServer): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.keepAliveTimeout = 1;
  server.prependListener('request', (_req, res) => {
    if (!res.headersSent) res.setHeader('connection', 'close');
  });
  server.closeIdleConnections();
  return closed;
}
