/**
 * Envelope encryption (AES-256-GCM) with a 32-byte key: core seals private token keys and other
 * secrets with the master key; API-key secrets are sealed with their own key, which the edge holds
 * (it needs them to check signatures) and which opens nothing else.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

const ivBytes = 12;
const tagBytes = 16;

/** Encrypt; the output is iv || tag || ciphertext. `aad` binds it to its row (e.g. the kid). */
export function seal(key: Buffer, plaintext: Buffer, aad: string): Buffer {
  const iv = randomBytes(ivBytes);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad));
  const ct = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), ct]);
}

export function open(key: Buffer, sealed: Buffer, aad: string): Buffer {
  const iv = sealed.subarray(0, ivBytes);
  const tag = sealed.subarray(ivBytes, ivBytes + tagBytes);
  const decipher = createDecipheriv('aes-256-gcm', key, iv);
  decipher.setAAD(Buffer.from(aad));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(sealed.subarray(ivBytes + tagBytes)), decipher.final()]);
}

/** A sealing key is 32 random bytes, carried as base64. */
export function parseKey(text: string, name = 'master key'): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length !== 32) throw new Error(`${name} must be 32 bytes, base64-encoded`);
  return key;
}

/** A key from configuration, or (development) the one kept in `file`, created on first use. */
export async function loadOrCreateKey(
  configured: string | undefined,
  file: string,
  name = 'master key',
): Promise<Buffer> {
  const { readFile, writeFile } = await import('node:fs/promises');
  if (configured) return parseKey(configured, name);
  try {
    return parseKey(await readFile(file, 'utf8'), name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const key = randomBytes(32);
  await writeFile(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  return key;
}

/** The master key (see loadOrCreateKey). */
export const loadOrCreateMasterKey = (configured: string | undefined, file: string): Promise<Buffer> =>
  loadOrCreateKey(configured, file);
