/**
 * The expand/deploy/contract rule for migrations (deploy/README.md "Migrations while old pods
 * serve"; issue 19 item 2). During a rollout the previous release's cores and edges run against
 * the new schema, so a migration of an unreleased version may only add: new tables, nullable
 * columns or columns with a default, indexes, functions, relaxed constraints. What can break a
 * query of the previous release (dropping, renaming or retyping something, making a column NOT
 * NULL or dropping its default, a NOT NULL column without a default, TRUNCATE) waits for a later
 * release, after no running code uses the old shape, and says so in a `-- contract: …` comment.
 * `deploy/released-migrations.json` records the newest migration of the last release.
 */

/** What breaks the previous release's queries, by pattern (checked with comments, strings and function bodies removed). */
const contractPatterns: { what: string; re: RegExp }[] = [
  {
    what: 'DROP of a table, view, type, function, sequence or schema',
    re: /\bDROP\s+(TABLE|VIEW|MATERIALIZED\s+VIEW|TYPE|FUNCTION|PROCEDURE|SEQUENCE|SCHEMA)\b/i,
  },
  {
    what: 'DROP COLUMN',
    re: /\bALTER\s+TABLE\b[^;]*?\bDROP\s+(COLUMN\b|(?!CONSTRAINT\b|DEFAULT\b|NOT\b|IDENTITY\b|EXPRESSION\b)(IF\s+EXISTS\s+)?[a-z_"])/i,
  },
  { what: 'RENAME', re: /\bRENAME\b/i },
  { what: 'ALTER COLUMN … TYPE', re: /\bALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE\b/i },
  { what: 'SET NOT NULL', re: /\bSET\s+NOT\s+NULL\b/i },
  { what: 'DROP DEFAULT', re: /\bDROP\s+DEFAULT\b/i },
  { what: 'TRUNCATE', re: /\bTRUNCATE\b/i },
];

/** A file that contracts says why it is now safe: `-- contract: <what no released code uses any more>`. */
const contractMarker = /^\s*--\s*contract:\s*\S.{9,}$/im;

/** SQL without comments, string literals and dollar-quoted bodies (functions may say anything). */
function statementsOnly(sql: string): string {
  return sql
    .replace(/\$([A-Za-z_]*)\$[\s\S]*?\$\1\$/g, ' ')
    .replace(/'(?:[^']|'')*'/g, "''")
    .replace(/--[^\n]*/g, ' ')
    .replace(/\/\*[\s\S]*?\*\//g, ' ');
}

/** ADD COLUMN clauses declaring NOT NULL without a DEFAULT: the previous release's INSERTs omit them. */
function notNullWithoutDefault(statements: string): string[] {
  const found: string[] = [];
  for (const m of statements.matchAll(
    /\bADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?!CONSTRAINT\b|PRIMARY\b|UNIQUE\b|CHECK\b|FOREIGN\b)([a-z_"][\w"]*)([^;]*?)(?=,\s*(?:ADD|ALTER|DROP)\b|;|$)/gi,
  )) {
    const clause = m[2] ?? '';
    if (/\bNOT\s+NULL\b/i.test(clause) && !/\b(DEFAULT|GENERATED)\b/i.test(clause))
      found.push(`ADD COLUMN ${m[1]} NOT NULL without a DEFAULT`);
  }
  return found;
}

/** The changes in `sql` that break the previous release's queries (empty: additive). */
export function contractChanges(sql: string): string[] {
  const s = statementsOnly(sql);
  return [...contractPatterns.filter((p) => p.re.test(s)).map((p) => p.what), ...notNullWithoutDefault(s)];
}

export interface MigrationText {
  version: string;
  sql: string;
}

/**
 * Migrations after `lastReleased` that contract without saying so: each with what it does.
 * Throws when `lastReleased` is not a migration (a mistyped marker would check nothing).
 */
export function unmarkedContractions(
  migrations: MigrationText[],
  lastReleased: string,
): { version: string; changes: string[] }[] {
  if (!migrations.some((m) => m.version === lastReleased))
    throw new Error(`release marker ${lastReleased} is not a migration`);
  return migrations
    .filter((m) => m.version > lastReleased && !contractMarker.test(m.sql))
    .map((m) => ({ version: m.version, changes: contractChanges(m.sql) }))
    .filter((m) => m.changes.length > 0);
}
