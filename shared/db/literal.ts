/**
 * A string as an SQL literal, as pg's escapeLiteral writes it (quotes doubled; with a backslash,
 * an E'' literal with backslashes doubled) but with two regular-expression replacements instead
 * of a loop over every character (8 % of node's CPU in the ledger profile): for statements sent
 * with the simple query protocol, which takes no parameters (several statements in one round trip).
 */
export function sqlLiteral(text: string): string {
  const quoted = text.replace(/'/g, "''");
  return text.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'` : `'${quoted}'`;
}
