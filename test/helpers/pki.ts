/**
 * A throw-away PKI for mutual-TLS tests, made with Debian's `openssl`: a CA, a server
 * certificate for 127.0.0.1 and client certificates under that CA (or self-signed).
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Issued {
  key: string;
  cert: string;
}
export interface Pki {
  ca: Issued;
  server: Issued;
  client(subject: string): Promise<Issued>;
  selfSigned(subject: string): Promise<Issued>;
  dispose(): Promise<void>;
}

/**
 * openssl arguments for a new P-256 key `name`.key and its signing request `name`.csr of
 * `subject`; with `selfSignedDays`, a self-signed certificate `name`.crt valid that long instead.
 */
export const keyAndRequestArgs = (name: string, subject: string, selfSignedDays?: number): string[] => [
  'req',
  selfSignedDays === undefined ? '-new' : '-x509',
  '-newkey',
  'ec',
  '-pkeyopt',
  'ec_paramgen_curve:P-256',
  '-nodes',
  '-keyout',
  `${name}.key`,
  '-out',
  ...(selfSignedDays === undefined ? [`${name}.csr`] : [`${name}.crt`, '-days', String(selfSignedDays)]),
  '-subj',
  subject,
];

export async function makePki(): Promise<Pki> {
  const dir = await mkdtemp(join(tmpdir(), 'pki-'));
  let n = 0;
  const ssl = (...args: string[]) =>
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const read = async (name: string): Promise<Issued> => ({
    key: await readFile(join(dir, `${name}.key`), 'utf8'),
    cert: await readFile(join(dir, `${name}.crt`), 'utf8'),
  });
  const issue = async (subject: string, ext?: string): Promise<Issued> => {
    const name = `c${++n}`;
    ssl(...keyAndRequestArgs(name, subject));
    const extArgs: string[] = [];
    if (ext) {
      await writeFile(join(dir, `${name}.ext`), ext);
      extArgs.push('-extfile', `${name}.ext`);
    }
    ssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.crt`,
      '-days',
      '2',
      '-sha256',
      ...extArgs,
    );
    return read(name);
  };
  ssl(...keyAndRequestArgs('ca', '/O=Test/CN=Test client CA', 2));
  const ca = await read('ca');
  const server = await issue('/CN=127.0.0.1', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  return {
    ca,
    server,
    client: (subject) => issue(subject, 'extendedKeyUsage=clientAuth\n'),
    async selfSigned(subject) {
      const name = `s${++n}`;
      ssl(...keyAndRequestArgs(name, subject, 2));
      return read(name);
    },
    dispose: () => rm(dir, { recursive: true, force: true }),
  };
}
