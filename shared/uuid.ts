/** Time-ordered UUIDs (RFC 9562 version 7) for rows listed by time (DESIGN.md "IDs"). */
import { randomFillSync } from 'node:crypto';

/**
 * Random bytes drawn from the CSPRNG 4 KiB at a time: one draw per UUID cost the ledger's write
 * path about 13 µs per posting (issue 18 item 2's profile); the bytes are the same CSPRNG's.
 */
const pool = Buffer.alloc(4096);
let used = pool.length;
const b = Buffer.alloc(16);

export function uuidv7(now: number = Date.now()): string {
  if (used + 16 > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  pool.copy(b, 0, used, used + 16);
  used += 16;
  b.writeUIntBE(now, 0, 6);
  b[6] = ((b[6] as number) & 0x0f) | 0x70;
  b[8] = ((b[8] as number) & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A UUID's text in any case (RFC 9562 4: read case-insensitively), e.g. before a `uuid` cast. */
export const uuidText = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
