/** Locate the `opa` CLI: on PATH, or where `go install` puts it. */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export function findOpa(): string | undefined {
  try {
    execFileSync('opa', ['version'], { stdio: 'ignore' });
    return 'opa';
  } catch {
    // not on PATH
  }
  let gopath = join(homedir(), 'go');
  try {
    gopath =
      execFileSync('go', ['env', 'GOPATH'], { stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim() || gopath;
  } catch {
    // no go toolchain: fall back to the default GOPATH
  }
  const candidate = join(gopath, 'bin', 'opa');
  return existsSync(candidate) ? candidate : undefined;
}
