/** A logger (shared/log.ts, as the services make it) whose lines are kept in `lines`, as written. */
import { Writable } from 'node:stream';
import type { LevelWithSilent, Logger } from 'pino';
import { createLogger } from '../../shared/log.ts';

export function loggerInto(lines: string[], level: LevelWithSilent = 'info'): Logger {
  return createLogger(
    level,
    new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  );
}
