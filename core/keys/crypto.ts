/** Envelope encryption of private key material with the master key (AES-256-GCM). */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';

const ivBytes = 12;
const tagBytes = 16;

/** Encrypt; the output is iv || tag || ciphertext. `aad` binds it to its row (e.g. the kid). */
export function seal(masterKey: Buffer, plaintext: Buffer, aad: string): Buffer {
  const iv = randomBytes(ivBytes);
  const cipher = createCipheriv('aes-256-gcm', masterKey, iv);
  cipher.setAAD(Buffer.from(aad));
  const ct = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), ct]);
}

export function open(masterKey: Buffer, sealed: Buffer, aad: string): Buffer {
  const iv = sealed.subarray(0, ivBytes);
  const tag = sealed.subarray(ivBytes, ivBytes + tagBytes);
  const decipher = createDecipheriv('aes-256-gcm', masterKey, iv);
  decipher.setAAD(Buffer.from(aad));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(sealed.subarray(ivBytes + tagBytes)), decipher.final()]);
}

/** A master key is 32 random bytes, carried as base64. */
export function parseMasterKey(text: string): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length !== 32) throw new Error('master key must be 32 bytes, base64-encoded');
  return key;
}

/** The master key from configuration, or (development) the one kept in `file`, created on first use. */
export async function loadOrCreateMasterKey(configured: string | undefined, file: string): Promise<Buffer> {
  const { readFile, writeFile } = await import('node:fs/promises');
  if (configured) return parseMasterKey(configured);
  try {
    return parseMasterKey(await readFile(file, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const key = randomBytes(32);
  await writeFile(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  return key;
}
