/*
 * navigator.credentials for the staff page, written here rather than loaded from a CDN or from
 * a development-only package: PublicKeyCredential*OptionsJSON in (as @simplewebauthn/server
 * produces it), RegistrationResponseJSON / AuthenticationResponseJSON out (base64url fields).
 */
'use strict';
(function () {
  function toBytes(b64u) {
    const b64 = b64u.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((b64u.length + 3) % 4);
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }
  function toB64u(buf) {
    const bytes = new Uint8Array(buf);
    let bin = '';
    for (let i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  const descriptors = (list) => (list || []).map((c) => ({ type: 'public-key', id: toBytes(c.id), transports: c.transports }));

  async function startRegistration(o) {
    const publicKey = Object.assign({}, o, {
      challenge: toBytes(o.challenge),
      user: Object.assign({}, o.user, { id: toBytes(o.user.id) }),
      excludeCredentials: descriptors(o.excludeCredentials),
    });
    const cred = await navigator.credentials.create({ publicKey });
    const r = cred.response;
    return {
      id: cred.id, rawId: toB64u(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: toB64u(r.clientDataJSON), attestationObject: toB64u(r.attestationObject),
        transports: typeof r.getTransports === 'function' ? r.getTransports() : undefined,
      },
      clientExtensionResults: cred.getClientExtensionResults(),
      authenticatorAttachment: cred.authenticatorAttachment || undefined,
    };
  }

  async function startAuthentication(o) {
    const publicKey = Object.assign({}, o, { challenge: toBytes(o.challenge), allowCredentials: descriptors(o.allowCredentials) });
    const cred = await navigator.credentials.get({ publicKey });
    const r = cred.response;
    return {
      id: cred.id, rawId: toB64u(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: toB64u(r.clientDataJSON), authenticatorData: toB64u(r.authenticatorData), signature: toB64u(r.signature),
        userHandle: r.userHandle ? toB64u(r.userHandle) : undefined,
      },
      clientExtensionResults: cred.getClientExtensionResults(),
      authenticatorAttachment: cred.authenticatorAttachment || undefined,
    };
  }

  const supported = () => typeof window.PublicKeyCredential === 'function' && !!navigator.credentials;
  window.StaffWebAuthn = { startRegistration, startAuthentication, supported };
})();
