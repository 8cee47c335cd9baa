/**
 * A bounded wait whose timer does not outlive it. `Promise.race([work, sleep(ms)])` leaves the
 * sleep pending once `work` settles, and a test file's process does not end while a timer is
 * pending: a 30 s bound held its file's process (and a slot of the run) 25 s after its last test.
 */
import { OverdueError, withDeadline } from '../../shared/deadline.ts';

/** `work`'s value, or 'overdue' when it has not settled within `ms` (it is not cancelled). */
export async function within<T>(work: Promise<T>, ms: number): Promise<T | 'overdue'> {
  try {
    return await withDeadline(work, ms, `not settled within ${ms} ms`);
  } catch (err) {
    if (err instanceof OverdueError) return 'overdue';
    throw err;
  }
}
