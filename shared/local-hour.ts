/**
 * The tenant-local hour a relationship tuple's `hours` caveat is judged in (SPEC 2.7; the
 * policy reads it as context.local_hour). Shared: the edge computes it for every decision, and
 * core for the delegated-payer check it repeats (core/payments/payer.ts).
 *
 * Formatting is costly (building a formatter per
 * request was a fifth of a Check's CPU; formatting alone still showed in profiles), and a zone's
 * hour only changes on a minute boundary (offsets are whole minutes), so it is computed once per
 * zone per minute.
 */
const hourFormats = new Map<string, { format: Intl.DateTimeFormat; minute: number; hour: number }>();

export function localHour(nowMs: number, tz: unknown): number {
  const zone = typeof tz === 'string' ? tz : 'UTC';
  const minute = Math.floor(nowMs / 60_000);
  let entry = hourFormats.get(zone);
  if (!entry) {
    let format: Intl.DateTimeFormat;
    try {
      format = new Intl.DateTimeFormat('en-GB', { hour: 'numeric', hourCycle: 'h23', timeZone: zone });
    } catch {
      return new Date(nowMs).getUTCHours();
    }
    entry = { format, minute: Number.NaN, hour: 0 };
    hourFormats.set(zone, entry);
  }
  if (entry.minute !== minute) {
    entry.hour = Number(entry.format.format(nowMs));
    entry.minute = minute;
  }
  return entry.hour;
}
