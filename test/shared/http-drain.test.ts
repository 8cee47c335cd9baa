import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import { closeHttpGracefully, listen } from '../../shared/net.ts';

/** Everything the server sends on `socket` until it closes the connection. */
function readUntilServerCloses(socket: ReturnType<typeof connect>): Promise<string> {
  let text = '';
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  return new Promise((resolve, reject) => {
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
}

describe('closeHttpGracefully (SIGTERM drain of core, issue 19 item 2)', () => {
  it('answers the request in flight and one arriving on its kept-alive connection, then closes that connection and refuses new ones', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let startedA!: () => void;
    const aStarted = new Promise<void>((r) => (startedA = r));
    const server = createServer((req, res) => {
      if (req.url === '/a') {
        startedA();
        void gate.then(() => res.end('answer-a'));
      } else res.end('answer-b');
    });
    const port = await listen(server, 0);
    const socket = connect(port, '127.0.0.1');
    const received = readUntilServerCloses(socket);
    socket.write('GET /a HTTP/1.1\r\nhost: core\r\n\r\n');
    await aStarted;

    const closed = closeHttpGracefully(server);
    // A proxy's pooled connection sends its next request while the first is still in flight.
    socket.write('GET /b HTTP/1.1\r\nhost: core\r\n\r\n');
    const refused = await new Promise<string>((resolve) => {
      const late = connect(port, '127.0.0.1');
      late.on('connect', () => {
        late.destroy();
        resolve('connected');
      });
      late.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    });
    release();

    const text = await received;
    await closed;
    const answers = text.split(/(?=HTTP\/1\.1 )/);
    assert.equal(answers.length, 2, text);
    assert.match(answers[0] as string, /^HTTP\/1\.1 200[\s\S]*answer-a$/);
    // Still answered (never dropped), but it tells the proxy to reconnect elsewhere; the server
    // then closes the connection itself (the `end` above) instead of keeping it until the deadline.
    assert.match(answers[1] as string, /^HTTP\/1\.1 200[\s\S]*\r\nconnection: close\r\n[\s\S]*answer-b$/i);
    assert.equal(refused, 'ECONNREFUSED');
  });
});
