/**
 * Money (DESIGN.md "Money"): integer micro-units (`bigint`, 10^-6 of a unit) in TypeScript,
 * decimal strings on the wire, numeric(20,6) in SQL (SPEC 8). A JavaScript number never
 * holds an amount: parsing is textual and exact, formatting is textual and exact.
 */

/** SPEC 8: scale 6. */
export const scale = 6;
export const microPerUnit = 1_000_000n;
export type Micro = bigint;

export type ParseResult = { ok: true; micro: Micro } | { ok: false; reason: string };

/** Digits, an optional point and 1–6 fraction digits; no sign, exponent, spaces or leading zeros. */
const wirePattern = /^(0|[1-9][0-9]{0,13})(?:\.([0-9]{1,6}))?$/;

/**
 * Parse a wire amount strictly. Refused: anything not a string, floats in exponent form
 * (`1e3`), `NaN`, signs, more than 6 decimals, more than 14 integer digits, zero (unless
 * `allowZero`) and more decimals than the currency has minor units (when `minorUnits` given).
 */
export function parseAmount(
  text: unknown,
  opts: { minorUnits?: number; allowZero?: boolean } = {},
): ParseResult {
  if (typeof text !== 'string') return { ok: false, reason: 'must be a decimal string such as "12.50"' };
  const m = wirePattern.exec(text);
  if (!m) {
    const frac = /^[0-9]+\.([0-9]+)$/.exec(text)?.[1];
    if (frac !== undefined && frac.length > scale)
      return { ok: false, reason: `has more than ${scale} decimal places` };
    if (text.startsWith('-')) return { ok: false, reason: 'must not be negative' };
    return {
      ok: false,
      reason: 'must be a plain decimal string such as "12.50" (no sign, exponent or spaces)',
    };
  }
  const whole = m[1] as string;
  const frac = m[2] ?? '';
  if (opts.minorUnits !== undefined && frac.replace(/0+$/, '').length > opts.minorUnits) {
    return {
      ok: false,
      reason: `has more decimal places than the currency's ${opts.minorUnits} minor units`,
    };
  }
  const micro = BigInt(whole) * microPerUnit + BigInt(frac.padEnd(scale, '0'));
  if (micro === 0n && !opts.allowZero) return { ok: false, reason: 'must be greater than zero' };
  return { ok: true, micro };
}

/** Parse numeric text as PostgreSQL prints it (`-12.500000`, `0`, `15`); throws on anything else. */
export function fromDb(text: string): Micro {
  const m = /^(-?)([0-9]+)(?:\.([0-9]{1,6}))?$/.exec(text);
  if (!m) throw new TypeError(`not a numeric(20,6) value: ${text}`);
  const v = BigInt(m[2] as string) * microPerUnit + BigInt((m[3] ?? '').padEnd(scale, '0'));
  return m[1] === '-' ? -v : v;
}

/** Numeric text for SQL parameters (always 6 decimals). */
export function toDb(micro: Micro): string {
  return format(micro, scale);
}

/**
 * Wire text: at least `minDecimals` decimals (the currency's minor units), more only when the
 * value has significant digits there. 12500000n, 2 → "12.50"; 12345678n, 2 → "12.345678".
 */
export function format(micro: Micro, minDecimals = 2): string {
  const neg = micro < 0n;
  const abs = neg ? -micro : micro;
  const whole = abs / microPerUnit;
  let frac = (abs % microPerUnit).toString().padStart(scale, '0').replace(/0+$/, '');
  if (frac.length < minDecimals) frac = frac.padEnd(minDecimals, '0');
  return `${neg ? '-' : ''}${whole}${frac.length > 0 ? `.${frac}` : ''}`;
}
