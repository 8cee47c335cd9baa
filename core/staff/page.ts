/**
 * The staff sign-in page (issue 16 item 3), served by core with no CDN: an HTML page, its script,
 * its WebAuthn helper and its stylesheet, all from core/staff/page/. The Content-Security-Policy
 * allows scripts and styles from this origin only (no inline script), no framing, and fetches to
 * this origin only, so an injected string cannot run or leak the access token elsewhere.
 */
import { readFileSync } from 'node:fs';
import { Type } from '@sinclair/typebox';
import { AppError } from '../../shared/errors.ts';
import { defineRoute, type RouteSpec } from '../http/route.ts';
import { staffPagePath } from './enrolment.ts';
import { declared } from '../http/declared.ts';

const pageDir = new URL('./page/', import.meta.url);
const read = (name: string): Buffer => readFileSync(new URL(name, pageDir));

export const staffPageCsp =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const security = {
  'content-security-policy': staffPageCsp,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
};

const assets: Record<string, { type: string; data: Buffer }> = {
  'app.js': { type: 'text/javascript; charset=utf-8', data: read('app.js') },
  'webauthn.js': { type: 'text/javascript; charset=utf-8', data: read('webauthn.js') },
  'app.css': { type: 'text/css; charset=utf-8', data: read('app.css') },
};
const page = read('index.html');

export function staffPageRoutes(): RouteSpec[] {
  const tags = ['staff-auth'];
  return [
    defineRoute({
      ...declared('GET', staffPagePath),
      operationId: 'staffPage',
      summary: 'Staff sign-in page (passkeys)',
      tags,
      responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
      handler: async () => ({
        status: 200,
        headers: security,
        raw: { contentType: 'text/html; charset=utf-8', data: page },
      }),
    }),
    defineRoute({
      ...declared('GET', `${staffPagePath}/assets/{asset}`),
      operationId: 'staffPageAsset',
      summary: 'Staff page assets',
      tags,
      hidden: true,
      params: Type.Object({ asset: Type.String({ maxLength: 64 }) }),
      // Scripts and the stylesheet: each asset's own media type.
      responses: {
        200: {
          description: 'Script or stylesheet',
          contentType: 'text/javascript',
          alternatives: ['text/css'],
        },
      },
      handler: async ({ params }) => {
        // Own properties only: `__proto__` or `constructor` name no asset.
        const a = Object.hasOwn(assets, params.asset) ? assets[params.asset] : undefined;
        if (!a) throw new AppError('NOT_FOUND', 'no such asset');
        return { status: 200, headers: security, raw: { contentType: a.type, data: a.data } };
      },
    }),
  ];
}
