/**
 * Requests raced in a storm, each answered within a deadline or reported: what the lock-storm
 * tests (sign-ins, currencies) assert is that every request gets a 2xx or 4xx in time.
 */
import type { Res } from './http.ts';
import { within } from './within.ts';

export interface Timed {
  name: string;
  /** The answer's status; 200 for work that answers nothing; -1 past the deadline; 599 thrown. */
  status: number;
  ms: number;
  text: string;
}

/** `p`'s answer, named, timed and bounded by `deadlineMs` (its timer cleared once it settles). */
export async function timed(name: string, p: Promise<Res | void>, deadlineMs: number): Promise<Timed> {
  const t0 = Date.now();
  try {
    const r = await within(p, deadlineMs);
    if (r === 'overdue') return { name, status: -1, ms: Date.now() - t0, text: 'hung' };
    return { name, status: r ? r.status : 200, ms: Date.now() - t0, text: r ? r.text.slice(0, 300) : '' };
  } catch (e) {
    return { name, status: 599, ms: Date.now() - t0, text: (e as Error).message };
  }
}

/** The answers that are a break: a 5xx, a throw, or none in time. */
export const broken = (rs: readonly Timed[]): Timed[] => rs.filter((r) => r.status >= 500 || r.status < 0);
