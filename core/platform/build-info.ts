/** What this build is: semantic version from package.json, commit SHA from git when present. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface BuildInfo {
  version: string;
  commit: string;
  /** `<version>+<short sha>`: the build identifier health reports (SPEC 2.3). */
  build: string;
}

const root = fileURLToPath(new URL('../../', import.meta.url));

function commitSha(): string {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 2000,
    })
      .toString()
      .trim();
  } catch {
    return 'unknown';
  }
}

export function readBuildInfo(): BuildInfo {
  const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8')) as { version?: unknown };
  const version = typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  const commit = commitSha();
  return { version, commit, build: `${version}+${commit.slice(0, 12)}` };
}
