/** Small network helpers shared by the launcher, the test runner and benches. */
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
export async function listen(server: { listen: Server['listen']; once: Server['once']; address: Server['address'] }, port: number, host = '127.0.0.1'): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address();
  if (!addr || typeof addr === 'string') throw new Error('server has no TCP address');
  return addr.port;
}
