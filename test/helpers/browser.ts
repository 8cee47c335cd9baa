/**
 * The one browser harness of the suite (issue 16 item 3): Debian's headless chromium driven by
 * playwright-core, with a CDP virtual authenticator (CTAP2, internal transport, resident keys,
 * user verification that succeeds) on every page it opens. Browser tests reuse it.
 *
 * Under CI=true a missing /usr/bin/chromium fails the test (`.ci/run` installs it); locally the
 * test is skipped with a message saying how to install it.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type CDPSession, type Page } from 'playwright-core';

export const chromiumPath = '/usr/bin/chromium';

const flags = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** undefined when the browser can run here; else why not (a skip reason locally, a failure under CI). */
export function browserUnavailable(): string | undefined {
  if (existsSync(chromiumPath)) return undefined;
  const why = `${chromiumPath} is missing (apt-get install -y chromium)`;
  if (process.env.CI === 'true') throw new Error(`browser tests never skip under CI=true: ${why}`);
  return why;
}

export interface AuthenticatorPage {
  page: Page;
  cdp: CDPSession;
  authenticatorId: string;
  /** Credentials the virtual authenticator holds (WebAuthn.getCredentials). */
  credentials(): Promise<{ credentialId: string; signCount: number; isResidentCredential: boolean }[]>;
}

export interface TestBrowser {
  browser: Browser;
  /** A new page (its own context: no shared storage) with a virtual passkey authenticator. */
  pageWithAuthenticator(): Promise<AuthenticatorPage>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  const browser = await chromium.launch({ executablePath: chromiumPath, args: flags, headless: true });
  return {
    browser,
    async pageWithAuthenticator() {
      const context = await browser.newContext();
      const page = await context.newPage();
      const cdp = await context.newCDPSession(page);
      await cdp.send('WebAuthn.enable');
      const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
        options: {
          protocol: 'ctap2',
          transport: 'internal',
          hasResidentKey: true,
          hasUserVerification: true,
          isUserVerified: true,
          automaticPresenceSimulation: true,
        },
      });
      return {
        page,
        cdp,
        authenticatorId,
        credentials: async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials,
      };
    },
    close: () => browser.close(),
  };
}
