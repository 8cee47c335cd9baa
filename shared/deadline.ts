/** Work with a deadline it may not outlast (start-up steps, readiness checks). */

/** The error of work that did not finish within its deadline. */
export class OverdueError extends Error {}

/** `work`, rejected with an OverdueError if it has not settled within `ms` (it is not cancelled). */
export function withDeadline<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const overdue = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new OverdueError(message)), ms);
  });
  return Promise.race([work, overdue]).finally(() => clearTimeout(timer));
}
