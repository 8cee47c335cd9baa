/**
 * ISO 4217 currencies the ledger accepts, with their minor units. Reference data, not tenant
 * data: the administration API (SPEC 4.6 currencies) will own it later; until then this list
 * is the one source.
 */
const minorUnits: Readonly<Record<string, number>> = Object.freeze({
  KES: 2,
  UGX: 0,
  TZS: 2,
  RWF: 0,
  BIF: 0,
  ETB: 2,
  SOS: 2,
  SSP: 2,
  CDF: 2,
  ZMW: 2,
  MWK: 2,
  MZN: 2,
  ZAR: 2,
  BWP: 2,
  NAD: 2,
  NGN: 2,
  GHS: 2,
  XOF: 0,
  XAF: 0,
  EGP: 2,
  MAD: 2,
  TND: 3,
  USD: 2,
  EUR: 2,
  GBP: 2,
  CHF: 2,
  JPY: 0,
  CNY: 2,
  INR: 2,
  AED: 2,
  SAR: 2,
  BHD: 3,
  KWD: 3,
  OMR: 3,
  JOD: 3,
  CAD: 2,
  AUD: 2,
});

/** Minor units of a known currency, or undefined. */
export function minorUnitsOf(code: string): number | undefined {
  return Object.hasOwn(minorUnits, code) ? minorUnits[code] : undefined;
}

export function isKnownCurrency(code: string): boolean {
  return minorUnitsOf(code) !== undefined;
}
