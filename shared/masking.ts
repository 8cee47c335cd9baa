/**
 * The `masked` field policy (SPEC 2.5): names and phones masked, a card number keeps only its
 * suffix. A masked phone keeps its first 4 and last 2 characters, the middle becomes `*`.
 */
export function maskPhone(phone: string): string {
  if (phone.length <= 6) return '*'.repeat(phone.length);
  return `${phone.slice(0, 4)}${'*'.repeat(phone.length - 6)}${phone.slice(-2)}`;
}

/** A name keeps its first letter per word: "Amina Wanjiru" → "A**** W******". */
export function maskName(name: string): string {
  return name.replace(
    /(\p{L})(\p{L}*)/gu,
    (_, first: string, rest: string) => `${first}${'*'.repeat(rest.length)}`,
  );
}

/** The full card number is removed; only the last four digits remain. */
export function maskCardNumber(pan: string): string {
  const digits = pan.replace(/\D/g, '');
  return digits.length >= 4 ? `****${digits.slice(-4)}` : '****';
}

/** The rule the edge's obligations give a resource type; absent or unreadable means masked (fail safe). */
export function maskingLevel(
  header: string | undefined,
  resourceType: string,
): 'full' | 'masked' | 'aggregate' {
  if (!header) return 'masked';
  try {
    const rules = JSON.parse(header) as Record<string, { level?: unknown } | undefined>;
    const level = rules[resourceType]?.level;
    return level === 'full' || level === 'aggregate' ? level : 'masked';
  } catch {
    return 'masked';
  }
}
