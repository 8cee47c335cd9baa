/**
 * Certificates an attacker or a careless operator brings to a mutual-TLS check, made with
 * Debian's `openssl` (test/helpers/pki.ts makes the ordinary ones): CAs valid for a chosen
 * number of days, a CA cloning another's subject and key identifier under a key of its own (so
 * what it issues names the real CA as issuer, down to the authority key identifier, and only the
 * signature tells them apart), and client certificates under any of them.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyAndRequestArgs, type Issued } from './pki.ts';

export interface Forge {
  /** A CA of `subject` valid `days` from now; with `cloneOf`, that CA's subject key identifier. */
  ca(o: { subject: string; days: number; cloneOf?: string }): Issued;
  /** A client certificate of `subject` issued by `ca`, valid `days` from now. */
  client(ca: Issued, o: { subject: string; days: number }): Issued;
  dispose(): void;
}

export function makeForge(): Forge {
  const dir = mkdtempSync(join(tmpdir(), 'forge-'));
  let n = 0;
  const ssl = (...args: string[]) =>
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }).toString('utf8');
  const file = (name: string, text: string) => writeFileSync(join(dir, name), text);
  const read = (name: string): Issued => ({
    key: readFileSync(join(dir, `${name}.key`), 'utf8'),
    cert: readFileSync(join(dir, `${name}.crt`), 'utf8'),
  });
  const request = (name: string, subject: string) => ssl(...keyAndRequestArgs(name, subject));
  /** Sign `name`.csr into `name`.crt, valid `days`, with the extensions of `name`.ext. */
  const sign = (name: string, days: number, by: string[]) =>
    ssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      ...by,
      '-out',
      `${name}.crt`,
      '-days',
      String(days),
      '-sha256',
      '-extfile',
      `${name}.ext`,
    );
  /** The subject key identifier of a PEM certificate, as openssl's extension syntax takes it. */
  const skiOf = (pem: string): string => {
    file('probe.crt', pem);
    const text = ssl('x509', '-in', 'probe.crt', '-noout', '-ext', 'subjectKeyIdentifier');
    const hex = /([0-9A-F]{2}(?::[0-9A-F]{2})+)/.exec(text)?.[1];
    if (!hex) throw new Error('no subject key identifier');
    return hex;
  };
  return {
    ca({ subject, days, cloneOf }) {
      const name = `ca${++n}`;
      request(name, subject);
      const ski = cloneOf ? skiOf(cloneOf) : 'hash';
      file(
        `${name}.ext`,
        `basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=${ski}\n`,
      );
      sign(name, days, ['-signkey', `${name}.key`]);
      return read(name);
    },
    client(ca, { subject, days }) {
      const name = `c${++n}`;
      file(`${name}.ca.key`, ca.key);
      file(`${name}.ca.crt`, ca.cert);
      request(name, subject);
      file(`${name}.ext`, 'extendedKeyUsage=clientAuth\n');
      sign(name, days, [
        '-CA',
        `${name}.ca.crt`,
        '-CAkey',
        `${name}.ca.key`,
        '-set_serial',
        String(1000 + n),
      ]);
      return read(name);
    },
    dispose: () => rmSync(dir, { recursive: true, force: true }),
  };
}
