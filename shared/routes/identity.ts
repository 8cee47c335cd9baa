/**
 * Customer identity (SPEC 4.2; issue 3): unauthenticated routes are public and rate limited.
 * Staff sign-in and tokens (SPEC 4.4; issues 14, 16) are public at the edge like customer
 * sign-in; routes acting for a signed-in person (passkeys, sessions, sign-out, step-up) carry the
 * staff access token, which core verifies itself (core/staff/auth.ts).
 */
import { type Credential, operationalPurpose, type RouteDeclaration } from './types.ts';

const identity = (
  method: string,
  template: string,
  action: string,
  credential: Credential,
): RouteDeclaration => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'customer_auth',
  action,
  credential,
});

const staffAuth = (method: string, template: string, action: string): RouteDeclaration => ({
  method,
  template,
  purpose: operationalPurpose,
  resource: 'staff_auth',
  action,
  credential: 'public',
});

export const identityRoutes: RouteDeclaration[] = [
  identity('POST', '/customers/auth/otp/send', 'auth.otp_send', 'public'),
  identity('POST', '/customers/auth/otp/verify', 'auth.otp_verify', 'public'),
  identity('POST', '/customers/auth/pin/set', 'auth.pin_set', 'public'),
  identity('POST', '/customers/auth/login', 'auth.login', 'public'),
  identity('POST', '/customers/auth/token/refresh', 'auth.refresh', 'public'),
  identity('GET', '/.well-known/jwks.json', 'auth.jwks', 'public'),
  identity('POST', '/customers/auth/logout', 'auth.logout', 'customer'),
  identity('POST', '/customers/auth/stepup/otp', 'auth.stepup_otp', 'customer'),
  identity('POST', '/customers/auth/stepup/complete', 'auth.stepup', 'customer'),
  identity('POST', '/auth/stepup/complete', 'auth.stepup', 'customer'),
  identity('GET', '/customers/sessions', 'session.list', 'customer'),
  identity('DELETE', '/customers/sessions/{id}', 'session.revoke', 'customer'),
  identity('POST', '/customers/devices', 'device.register', 'customer'),
  identity('GET', '/customers/devices', 'device.list', 'customer'),
  identity('DELETE', '/customers/devices/{id}', 'device.revoke', 'customer'),
];

export const staffAuthRoutes: RouteDeclaration[] = [
  // staff sign-in and tokens (SPEC 4.4; issue 14 items 2-3)
  staffAuth('POST', '/auth/login', 'auth.staff_login'),
  staffAuth('GET', '/auth/callback', 'auth.staff_callback'),
  staffAuth('POST', '/auth/token', 'auth.staff_token'),
  // staff passkeys, enrolment and step-up (issue 16); the sign-in page and its assets
  staffAuth('POST', '/auth/enrolment/begin', 'staff.enrol'),
  staffAuth('POST', '/auth/enrolment/finish', 'staff.enrol'),
  staffAuth('GET', '/auth/passkeys', 'staff.passkeys'),
  staffAuth('PATCH', '/auth/passkeys/{id}', 'staff.passkeys'),
  staffAuth('DELETE', '/auth/passkeys/{id}', 'staff.passkeys'),
  staffAuth('GET', '/auth/sessions', 'staff.sessions'),
  staffAuth('POST', '/auth/logout', 'staff.logout'),
  staffAuth('POST', '/auth/mfa/challenge', 'staff.mfa_challenge'),
  staffAuth('POST', '/auth/mfa/complete', 'staff.mfa_complete'),
  staffAuth('GET', '/staff', 'staff.page'),
  staffAuth('GET', '/staff/assets/{asset}', 'staff.page'),
];
