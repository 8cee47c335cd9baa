/**
 * Reference data from maintained packages, never hand-typed (issue 6 item 2): ISO 3166-1
 * countries with UN M49 regions and subregions (`world-countries`), ISO 4217 currencies with
 * their minor units (`currency-codes`, ingested from the ISO XML), each country's IANA zones
 * (`countries-and-timezones`), the runtime's IANA list (`Intl.supportedValuesOf`) and BCP 47
 * locale hints from the runtime's CLDR likely-subtags data (`Intl.Locale#maximize`).
 */
import { createRequire } from 'node:module';
import type { Countries } from 'world-countries';
import currencyCodes from 'currency-codes';
import ct from 'countries-and-timezones';

// world-countries is CommonJS whose typings declare an ES default export; under NodeNext the
// default import would be the module object, so it is required as what it is: the array.
const worldCountries = createRequire(import.meta.url)('world-countries') as Countries;

export interface IsoCountry {
  code: string;
  alpha3: string;
  name: string;
  officialName: string;
  region: string;
  subregion: string;
  currencies: string[];
  timezones: string[];
  locales: string[];
}

export interface IsoCurrency {
  code: string;
  number: string;
  name: string;
  minorUnits: number;
}

/** BCP 47 hints for a country: the CLDR likely locale, then `<lang>-<CC>` for its official languages. */
function localesFor(code: string, languages: string[]): string[] {
  const out = new Set<string>();
  try {
    const likely = new Intl.Locale('und', { region: code }).maximize();
    out.add(`${likely.language}-${code}`);
  } catch {
    // A region the runtime's CLDR does not know: the language list below still answers.
  }
  for (const lang of languages) {
    try {
      // world-countries lists ISO 639-3 codes; Intl canonicalises those with a 639-1 alias.
      const [canonical] = Intl.getCanonicalLocales(`${lang}-${code}`);
      if (canonical) out.add(canonical);
    } catch {
      // not a valid BCP 47 tag: skip it rather than invent one
    }
  }
  return [...out];
}

const countries: ReadonlyMap<string, IsoCountry> = new Map(
  worldCountries
    .filter((c) => /^[A-Z]{2}$/.test(c.cca2))
    .map((c): [string, IsoCountry] => [
      c.cca2,
      Object.freeze({
        code: c.cca2,
        alpha3: c.cca3,
        name: c.name.common,
        officialName: c.name.official,
        region: c.region,
        subregion: c.subregion,
        currencies: Object.keys(c.currencies ?? {}).sort(),
        timezones: ct.getCountry(c.cca2)?.timezones ?? [],
        locales: localesFor(c.cca2, Object.keys(c.languages ?? {})),
      }),
    ])
    .sort((a, b) => a[0].localeCompare(b[0])),
);

const currencies: ReadonlyMap<string, IsoCurrency> = new Map(
  currencyCodes.data
    .map((c): [string, IsoCurrency] => [
      c.code,
      Object.freeze({ code: c.code, number: c.number, name: c.currency, minorUnits: c.digits }),
    ])
    .sort((a, b) => a[0].localeCompare(b[0])),
);

/** The ISO 3166-1 entry for an upper-case alpha-2 code, or undefined. */
export function isoCountry(code: string): IsoCountry | undefined {
  return countries.get(code);
}

export function isoCountries(): IsoCountry[] {
  return [...countries.values()];
}

/** The ISO 4217 entry for an upper-case alphabetic code, or undefined. */
export function isoCurrency(code: string): IsoCurrency | undefined {
  return currencies.get(code);
}

export function isoCurrencies(): IsoCurrency[] {
  return [...currencies.values()];
}

let zones: readonly string[] | undefined;
let known: ReadonlySet<string> | undefined;

/**
 * IANA canonical time-zone names (issue 15 item 8): `Intl.supportedValuesOf` answers CLDR's
 * names, which keep retired aliases (`Asia/Calcutta`, `Europe/Kiev`, `America/Buenos_Aires`);
 * each is replaced by the IANA zone it links to (`countries-and-timezones` records the link),
 * so the list names `Asia/Kolkata`, `Europe/Kyiv`, `America/Argentina/Buenos_Aires`.
 * Computed once: the list is fixed per build.
 */
export function timeZones(): readonly string[] {
  zones ??= Object.freeze([...new Set(Intl.supportedValuesOf('timeZone').map(canonicalTimeZone))].sort());
  return zones;
}

/** The IANA canonical name of a zone or of an alias of one (unchanged when it is canonical). */
export function canonicalTimeZone(name: string): string {
  return ct.getTimezone(name)?.aliasOf ?? name;
}

/** A zone the runtime knows, by its canonical name or by an alias (both stay accepted). */
export function isTimeZone(name: string): boolean {
  known ??= new Set([...Intl.supportedValuesOf('timeZone'), ...timeZones()]);
  return known.has(name);
}

/** region → subregion → country codes (UN M49 names as world-countries gives them). */
export function regionMap(): Record<string, Record<string, string[]>> {
  const out: Record<string, Record<string, string[]>> = {};
  for (const c of countries.values()) {
    const region = (out[c.region] ??= {});
    (region[c.subregion || c.region] ??= []).push(c.code);
  }
  return out;
}
