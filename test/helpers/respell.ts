/**
 * Second spellings of a compact JWS that base64url decoders reading leniently (atob on Node 20,
 * under jose and openid-client) take for the same token: its signature padded with `=`, or its
 * last character changed only in bits past the last whole byte (shared/jws.ts refuses both).
 */
const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

const split = (token: string) => {
  const dot = token.lastIndexOf('.');
  return { head: token.slice(0, dot + 1), sig: token.slice(dot + 1) };
};

/** The token with its signature segment padded as base64 would pad it. */
export function paddedSignature(token: string): string {
  const { sig } = split(token);
  const pad = '='.repeat((4 - (sig.length % 4)) % 4);
  if (!pad) throw new Error('a signature of 3n bytes has no padding to add');
  return `${token}${pad}`;
}

/** The token with a spare low bit of its signature's last character set: the same bytes, another text. */
export function spareBitsSignature(token: string): string {
  const { head, sig } = split(token);
  if (sig.length % 4 === 0) throw new Error('a signature of 3n bytes has no spare bits');
  const last = alphabet.indexOf(sig.at(-1) ?? '');
  return `${head}${sig.slice(0, -1)}${alphabet[last | 1]}`;
}

/** Both second spellings, by name. */
export const respellings = (token: string): [string, string][] => [
  ['a padded signature', paddedSignature(token)],
  ['a signature with spare bits set', spareBitsSignature(token)],
];

/**
 * Second spellings of a detached base64url signature (a bundle manifest's or registry's, a device
 * assertion's) that Node's base64url decoder reads as the same bytes: padded with `=`, in the
 * `+` `/` alphabet (when it has a `-` or `_` to respell), and with a spare low bit set.
 */
export function detachedRespellings(sig: string): [string, string][] {
  const out: [string, string][] = [
    ['a padded signature', paddedSignature(`.${sig}`).slice(1)],
    ['a signature with spare bits set', spareBitsSignature(`.${sig}`).slice(1)],
  ];
  if (/[-_]/.test(sig))
    out.push(['a signature in the base64 alphabet', sig.replaceAll('-', '+').replaceAll('_', '/')]);
  return out;
}
